"""Which modes combine (overrides/modes.py): every declared rule refuses through bench.py's real
parser, in one line naming the clashing flag, and the command lines the README shows pass."""

from __future__ import annotations

import pytest

from overrides import modes
from overrides.cli import build_parser

# A value for each flag that takes one, as a user would write it.
_VALUES = {"--compare": ["base/bin/python", "branch/bin/python"], "--load": ["run.json"],
           "--write-budget": ["budget.json"], "--check-budget": ["budget.json"], "--history": ["a", "b"],
           "--cases": ["Tensor"], "--op": ["torch.add"], "-n": ["5"], "-m": ["5"], "--min-time": ["0.5"],
           "--json": ["out.json"], "--threshold-pct": ["1.5"], "--pairs": ["3"], "--seeds": ["1", "2"], "--compile-backend": ["aot_eager"], "--cells": ["ratio"],
           "--plot": ["sweep.png"], "--step": ["steps:mlp"], "--batch": ["8", "32"],
           "--shape": ["64x64"], "--dtype": ["float64"], "--device": ["meta"], "--format": ["markdown"]}


# The two forms of --step, told apart in modes.py, as a user writes them.
_FORMS = {"--step FACTORY": ["--step", "steps:mlp"], "--step without a factory": ["--step"],
          "--compare --step": ["--compare", "steps:mlp", "steps:mlp_fast", "--step"]}


def _args(*flags: str):
    argv = []
    for flag in flags:
        argv += _FORMS.get(flag) or [flag] + _VALUES.get(flag, [])
    return build_parser().parse_args(argv)


@pytest.mark.parametrize("mode", modes.MODES, ids=lambda m: f"{m.flag} {'/'.join(m.refuses)}")
def test_each_mode_refuses_each_flag_it_declares(mode):
    for flag in mode.refuses:
        said = modes.refusal(_args(mode.flag, flag, *([mode.beside] if mode.beside else [])))
        assert said is not None and flag in said and "\n" not in said, (mode.flag, flag, said)


@pytest.mark.parametrize("rule", modes.NEEDS_MODE, ids=lambda r: r.flag)
def test_a_flag_without_its_mode_is_refused_and_passes_beside_it(rule):
    said = modes.refusal(_args(rule.flag))
    assert said is not None and said.startswith(rule.flag) and "add " in said
    for mode in rule.modes:
        assert modes.refusal(_args(rule.flag, mode)) is None, (rule.flag, mode)


@pytest.mark.parametrize("flags", [(), ("--cases", "--op", "--json"), ("--instructions", "--seeds", "--cases"),
                                   ("--compare", "--seeds", "--cases", "--min-time"), ("--load",),
                                   ("--write-budget", "--seeds", "--cases", "--op"), ("--check-budget",),
                                   ("--history", "--cases", "--seeds"), ("--compare", "--no-instructions"),
                                   ("--compiled", "--cases", "--op", "--json", "--compile-backend", "--min-time"),
                                   ("--step", "--batch", "-m", "--min-time", "--json"),
                                   ("--step", "--instructions", "--seeds", "--json"),
                                   ("--step", "--write-budget", "--seeds"), ("--step", "--check-budget", "--json"),
                                   ("--step", "--compiled", "--compile-backend", "-m", "--json"),
                                   ("--compare --step", "--min-time", "--json", "--threshold-pct")])
def test_the_commands_people_run_pass(flags):
    assert modes.refusal(_args(*flags)) is None


def test_bench_py_says_the_refusal_in_one_line_with_exit_2(bench):
    out = bench("--instructions", "-n", "5")
    assert out.returncode == 2 and out.stderr.strip() == \
        "bench.py: error: --instructions counts a fixed loop; drop -n"
