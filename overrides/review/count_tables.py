"""The counts as tables for people: where the Python calls went (`python_calls_table`, from
`counts/pycalls.py`'s rows) and where the instructions went (`instructions_table`, from
`counts/calltree.py`'s). The counting wing counts and compares; these word and lay out its rows,
for report.md and for the history's largest step.
"""

from __future__ import annotations

from typing import Sequence

from overrides.counts.calltree import FUNCTION_FLOOR, WhereItWent
from overrides.counts.pycalls import CallDelta, CaseCalls, not_counted_note
from overrides.figures import count as number, signed_count as signed
from overrides.progress import counted
from overrides.tables import pipe_table

PYTHON_CALL_ROWS = 20  # functions listed per case; differential.json lists them all


def python_calls_table(rows: Sequence[CallDelta], base: CaseCalls, branch: CaseCalls,
                       limit: int = PYTHON_CALL_ROWS) -> list[str]:
    """The changed functions as a markdown table, the case's totals last, and a line where
    bytecodes were not counted on a side."""
    cells = []
    for d in rows[:limit]:
        where = d.function if d.line is None or d.is_c else f"{d.function[:-1]}:{d.line})"
        codes = ([number(d.base_bytecodes), number(d.branch_bytecodes), signed(d.delta_bytecodes)]
                 if d.has_bytecodes else ["-", "-", "-"])
        cells.append([d.tag, f"`{where}`", number(d.base_calls), number(d.branch_calls),
                      signed(d.delta_calls), *codes])
    if len(rows) > limit:
        rest = rows[limit:]
        cells.append(["", f"{len(rest)} more functions (differential.json lists them all)", "", "",
                      signed(sum(d.delta_calls for d in rest)), "", "",
                      signed(sum(d.delta_bytecodes for d in rest if not d.is_c))])
    (b_calls, b_codes), (r_calls, r_codes) = base.totals(), branch.totals()
    codes = ([number(b_codes), number(r_codes), f"**{signed(r_codes - b_codes)}**"]
             if base.bytecodes_counted and branch.bytecodes_counted else ["not counted", "", ""])
    cells.append(["", "**all Python functions**", number(b_calls), number(r_calls),
                  f"**{signed(r_calls - b_calls)}**", *codes])
    table = pipe_table(["", "function", "calls: base", "branch", "delta", "bytecodes: base",
                        "branch", "delta"], cells, right_from=2)
    note = not_counted_note(base, branch)
    return table + (["", note] if note else [])


def instructions_table(went: WhereItWent) -> list[str]:
    """The functions whose own instructions moved, the rest, and the case's change, as markdown."""
    cells = []
    for r in went.rows:
        half = r.half_width
        cells.append([f"`{r.function}`", f"{r.base_self:,.1f}", f"{r.branch_self:,.1f}",
                      f"{r.delta_self:+,.1f}", "-" if half is None else f"{half:,.1f}",
                      f"{r.base_inclusive:,.1f}", f"{r.branch_inclusive:,.1f}"])
    functions = counted(went.unlisted_functions, "function")
    cells.append([f"everything else ({functions} that moved by less than {FUNCTION_FLOOR:g} a call "
                  "or not consistently over the seeds, and the empty loop)", "", "",
                  f"{went.everything_else:+,.1f}", "", "", ""])
    cells.append(["**total: the case's change**", "", "", f"**{went.total_delta:+,.1f}**", "", "", ""])
    return pipe_table(["function", "own: base", "branch", "delta", "± (seeds)", "with callees: base",
                       "branch"], cells, right_from=1)
