"""What changed in the cases a comparison found moved, by name: the Python functions each side's
case runs, counted in that side's own interpreter with its own code (`counts/pycalls.py`, the
counts `--check-budget` and report.sh name functions with), base against branch.

The clock and the instructions say that a case moved, not where: `--compare units:pair
units_tiny:pair` called a regression and left the reader to find the edit. The Python-call
counts name it, exactly (a helper added is a new function with its calls and
bytecodes, however little time it takes), in a few seconds a side. Only the cases that moved
are counted and named; with the instruction counts off (`--no-instructions`, no valgrind) the
names are not looked for either, and every row says so.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from overrides import children
from overrides.ab.config import ABConfig, side_env
from overrides.builds.interpreters import Interpreter
from overrides.counts import pycalls
from overrides.errors import UsageError
from overrides.sides import Sides
from overrides.verdicts import DISAGREE, IMPROVEMENT, REGRESSION

# The verdicts of a case whose work changed, by the clock and the counts or by one of them:
# those get their functions named. "clock only" is not one (the counts rule out a change).
NAMED_VERDICTS = (REGRESSION, IMPROVEMENT, DISAGREE)
COUNTS_OFF = ("the Python calls are counted only with the instructions, which this comparison did "
              "not count (--no-instructions, no valgrind, or cases on CUDA)")


def with_names(comparisons: Sequence, base: Interpreter, branch: Interpreter, config: ABConfig,
               counts_off: str | None, say: Callable[[str], None]) -> tuple:
    """`comparisons`, each case that moved (NAMED_VERDICTS) with its `changed_functions`:
    `pycalls.NamedChanges` of both sides' counts, each side counted in its interpreter, its kept
    torch first on its path and its own version of your code (`side_env`). `counts_off`: None
    where the instructions were counted, else why not ('': not known here); every case then
    carries that the names were not looked for."""
    if counts_off is not None:
        why = f"{COUNTS_OFF} ({counts_off})" if counts_off else COUNTS_OFF
        return tuple(dataclasses.replace(c, changed_functions=pycalls.NamedChanges(not_looked_for=why))
                     for c in comparisons)
    moved = [c for c in comparisons if c.verdict in NAMED_VERDICTS]
    if not moved:
        return tuple(comparisons)
    targets = list(dict.fromkeys((c.case, c.op) for c in moved))
    say(f"naming what changed: counting Python calls of {len(targets)} case(s) that moved, both sides")
    sides = Sides(base, branch).roles()
    try:
        counted = children.parallel(
            lambda side: pycalls.count_build(side[1].executable, targets, import_path=side[1].torch_root,
                                             own_env=side_env(config, side[0])), sides, len(sides))
    except UsageError as exc:
        failed = pycalls.NamedChanges(not_looked_for=f"counting the Python calls failed: {exc}")
        return tuple(dataclasses.replace(c, changed_functions=failed) if c.verdict in NAMED_VERDICTS else c
                     for c in comparisons)
    out = []
    for c in comparisons:
        if c.verdict not in NAMED_VERDICTS:
            out.append(c)
            continue
        found = [pycalls.find(runs, c.case, c.op) for runs in counted]
        if None in found:
            error = next((r.error for runs in counted for r in runs if (r.case, r.op) == (c.case, c.op) and r.error),
                         "no count came back")
            named = pycalls.NamedChanges(not_looked_for=f"counting its Python calls failed: {error}")
        else:
            named = pycalls.NamedChanges.of(*found)
        out.append(dataclasses.replace(c, changed_functions=named))
    return tuple(out)
