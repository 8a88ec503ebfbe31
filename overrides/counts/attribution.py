"""The two counts together: whose work an instruction change is, when the Python code says.

Callgrind counts instructions exactly but sees Python code only as the interpreter's own
functions (`_PyEval_EvalFrameDefault`, `_PyFrame_Push`, ...); the Python-call counts name the
Python functions but count calls and bytecodes, not cost. Where the Python-call counts found one
function whose work changed and nothing else, but the line that calls it, the change of the
interpreter's own instructions is that function's work (with the call), exactly. The report
prices such a function with it, where py-spy's samples put the bare shim's `_shim`, and a small
helper's call site, anywhere within a range several times the true cost (figures:
benchmarks/history.md, 'Docstring figures').
"""

from __future__ import annotations

import dataclasses

from overrides.counts import calltree, callsites, pycalls

# A line that calls a function, as the Python-call counts see its caller: a call statement
# with a few arguments runs 5-10 bytecodes in 3.11 (`_check_types_extra(types)`: 5). A caller
# whose own bytecodes moved by no more than this per call of the function changed only that line.
CALL_LINE_BYTECODES = 12


@dataclasses.dataclass(frozen=True)
class SoleChange:
    """The one Python function whose work changed, and the interpreter's instructions for it."""

    function: str  # as the Python-call counts name it
    instructions: float  # the interpreter's own change per call of the case, mean over the seeds
    callers: tuple  # (caller, its bytecode change per call of the case): the lines that call it

    def ns(self, ns_per_instruction: float) -> float:
        """What that work costs at a given ns per instruction (the case's: an estimate)."""
        return self.instructions * ns_per_instruction


def sole_change(base: pycalls.CaseCalls, branch: pycalls.CaseCalls, own_deltas: dict[str, float],
                rows: list | None = None, sites: list | None = None) -> SoleChange | None:
    """The one Python function whose work changed in this case, where the Python-call counts
    (`base`, `branch`) found nothing else: no other Python function called differently, and no
    other function's bytecodes moved but its callers' by a call line (CALL_LINE_BYTECODES per
    call of it). C functions called more or less often are then called from that work.
    `own_deltas`: the case's `calltree.own_deltas`; `rows`, `sites`: `pycalls.compare` and
    `callsites.call_sites` of the two, where the caller has them already. None otherwise."""
    rows = pycalls.compare(base, branch) if rows is None else rows
    python = [row for row in rows if not row.is_c]
    called = [row for row in python if row.delta_calls]
    if len(python) == 1:
        (changed,) = python
    elif len(called) == 1:
        (changed,) = called
    else:
        return None
    sites = callsites.call_sites(base, branch, rows) if sites is None else sites
    callers = {site.caller for site in sites if site.function == changed.function}
    others = [row for row in python if row is not changed]
    if any(row.function not in callers or row.delta_calls
           or abs(row.delta_bytecodes) > CALL_LINE_BYTECODES * abs(changed.delta_calls) for row in others):
        return None
    return SoleChange(changed.function, calltree.interpreter_delta(own_deltas),
                      tuple((row.function, row.delta_bytecodes) for row in others))
