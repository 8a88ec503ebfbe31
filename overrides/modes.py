"""Which of bench.py's modes combine, declared once: each mode's flag, the flags that do not go
with it and why, and the flags that mean nothing without a mode.

bench.py has one parser and several modes (time, count, compare, load, budget, history). Which
flags each refuses was checked by hand in a dozen places in `cli.py` and `history/command.py`,
each with its own wording, and one mode's new flag was refused in some of them only. Here the
rules are data: `refusal(args)` is the first rule a command line breaks, said in one line with
the fix; the tests check every rule against the real parser.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

# `--step` given without a factory (`--compare BASE BRANCH --step`): the two of --compare are steps.
STEP_FROM_COMPARE = "<the two factories of --compare>"

# A flag as the user writes it -> whether the parsed arguments hold it. `--step FACTORY`, `--step
# without a factory` and `--compare --step` tell the two forms of --step apart.
_GIVEN: dict[str, Callable] = {
    "--compare": lambda a: bool(a.compare),
    "--load": lambda a: bool(a.load),
    "--instructions": lambda a: a.instructions,
    "--no-instructions": lambda a: a.no_instructions,
    "--write-budget": lambda a: bool(a.write_budget),
    "--check-budget": lambda a: bool(a.check_budget),
    "--history": lambda a: a.history is not None,
    "--cases": lambda a: bool(a.cases),
    "--op": lambda a: bool(a.op),
    "-n": lambda a: a.nreps is not None,
    "-m": lambda a: a.nrepreps is not None,
    "--min-time": lambda a: a.min_time is not None,
    "--json": lambda a: bool(a.json),
    "--seeds": lambda a: bool(a.seeds),
    "--fresh": lambda a: a.fresh,
    "--compiled": lambda a: a.compiled,
    "--compile-backend": lambda a: a.compile_backend is not None,
    "--cells": lambda a: a.cells is not None,
    "--plot": lambda a: bool(a.plot),
    "--step": lambda a: bool(a.step),
    "--step FACTORY": lambda a: bool(a.step) and a.step != STEP_FROM_COMPARE,
    "--step without a factory": lambda a: a.step == STEP_FROM_COMPARE,
    "--compare --step": lambda a: bool(a.compare) and a.step == STEP_FROM_COMPARE,
    "--pairs": lambda a: a.pairs is not None,
    "--batch": lambda a: bool(a.batch),
    "--shape": lambda a: bool(a.shape),
    "--dtype": lambda a: bool(a.dtype),
    "--device": lambda a: bool(a.device),
    "--format": lambda a: a.format != "table",
}


@dataclasses.dataclass(frozen=True)
class Mode:
    """A mode (`flag`) and the flags it refuses, `because` (said first), with `fix` (said after;
    default: drop them)."""

    flag: str
    refuses: tuple[str, ...]
    because: str
    fix: str = ""
    beside: str = ""  # where given, the rule holds only when this flag is given too


# In the order they are checked: the first rule broken is the one said.
MODES = (
    Mode("--step FACTORY", ("--compare",), "--step FACTORY times one factory, and --compare names two",
         "to compare two versions of your step, write --compare BASE BRANCH --step (--step without a factory)"),
    Mode("--step", ("--load", "--history", "--cases", "--op", "-n", "--shape", "--dtype", "--format"),
         "--step runs your own step, built by your factory, as text (other modes take steps later)"),
    Mode("--compare --step", ("--batch", "--compiled", "--instructions", "--no-instructions", "--seeds", "--pairs",
                               "-m", "--device"),
         "--compare BASE BRANCH --step times two versions of your step in this process, eager, on the CPU, at one "
         "batch size, by the clock, for --min-time each", "drop {flags}"),
    Mode("--instructions", ("--batch", "--device"),
         "--step --instructions counts one step with Callgrind, at the factory's own batch size, on the CPU", "",
         "--step"),
    Mode("--instructions", ("--no-instructions",), "--instructions and --no-instructions contradict each other",
         "keep one"),
    Mode("--write-budget", ("--check-budget",), "--write-budget and --check-budget: one at a time", "keep one"),
    Mode("--write-budget", ("--batch", "--device"),
         "a step's budget counts one step with Callgrind, at the factory's own batch size, on the CPU", "",
         "--step"),
    Mode("--check-budget", ("--batch", "--device"),
         "a step's budget counts one step with Callgrind, at the factory's own batch size, on the CPU", "",
         "--step"),
    Mode("--write-budget", ("--compare", "--load", "--history", "-n", "-m", "--min-time", "--no-instructions"),
         "a budget is counted by itself"),
    Mode("--check-budget", ("--compare", "--load", "--history", "-n", "-m", "--min-time", "--no-instructions"),
         "a budget is counted by itself"),
    Mode("--history", ("--compare", "--load", "-n", "-m", "--no-instructions", "--min-time"),
         "--history counts instructions in each build"),
    Mode("--compare", ("--load", "-n", "-m"), "--compare calibrates its own samples"),
    Mode("--load", ("--cases", "--op", "-n", "-m", "--json"), "--load prints a saved file",
         "drop {flags}, or drop --load to measure"),
    Mode("--instructions", ("-n", "-m", "--min-time"), "--instructions counts a fixed loop"),
    Mode("--compiled", ("--batch",), "--step --compiled times one batch size (each would compile anew)",
         "drop {flags}, or --compiled"),
    Mode("--compiled", ("--compare", "--load", "--instructions", "--no-instructions", "--write-budget",
                        "--check-budget", "--history", "--cells", "--plot"),
         "--compiled times eager and compiled in this process, on the CPU, one table"),
)


@dataclasses.dataclass(frozen=True)
class NeedsMode:
    """A flag that means something only beside one of `modes`."""

    flag: str
    modes: tuple[str, ...]
    does: str  # what it does there
    fix: str = ""  # said after; default: add one of `modes` or drop the flag


NEEDS_MODE = (
    NeedsMode("--batch", ("--step",), "sweeps your step's batch size"),
    NeedsMode("--no-instructions", ("--compare",), "turns off --compare's counts"),
    NeedsMode("--seeds", ("--instructions", "--compare", "--write-budget", "--check-budget", "--history"),
              "chooses layouts for counting"),
    NeedsMode("--fresh", ("--instructions", "--compare", "--write-budget", "--check-budget", "--history"),
              "counts anew instead of reusing kept counts"),
    NeedsMode("--compile-backend", ("--compiled",), "chooses torch.compile's backend"),
    NeedsMode("--step without a factory", ("--compare",), "compares the two step factories of --compare",
              "name one (--step pkg.module:factory), or add --compare BASE BRANCH"),
)


def given(flag: str, args) -> bool:
    return _GIVEN[flag](args)


def refusal(args) -> str | None:
    """The first rule above that `args` breaks, in one line with its fix; None when none is."""
    for mode in MODES:
        if not given(mode.flag, args) or (mode.beside and not given(mode.beside, args)):
            continue
        clash = [flag for flag in mode.refuses if given(flag, args)]
        if clash:
            flags = "/".join(clash)
            return f"{mode.because}; {(mode.fix or 'drop {flags}').format(flags=flags)}"
    for rule in NEEDS_MODE:
        if given(rule.flag, args) and not any(given(mode, args) for mode in rule.modes):
            fix = rule.fix or f"add {' or '.join(rule.modes[:2])} or drop {rule.flag}"
            return f"{rule.flag} {rule.does}; {fix}"
    return None
