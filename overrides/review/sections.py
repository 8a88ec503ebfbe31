"""The report's sections from the counts: where the Python calls went (`python_call_sections`,
overrides/counts/pycalls.py) and where the instructions went (`count_sections`,
overrides/counts/calltree.py).

Each reads an `Evidence` (`measuring.py`) and returns markdown lines; the figures it draws and
the entries it fills for differential.json go into the `Pack`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

from overrides.files import write_text_atomic
from overrides.figures import signed, signed_count
from overrides.review.markdown import in_details
from overrides.review.pack import Pack
from overrides.sides import Sides
from overrides.tables import pipe_table
from overrides.verdicts import CHANGED, CLOCK_ONLY


def counted_elsewhere(case: str, base, branch, user_modules: Sides | None) -> str:
    """Why the Python calls of your case `case` cannot be set against its clock, or '': they
    must have been counted in the file of yours each side's clock ran (`user_modules`, by side).
    Counts of one file on both sides where the clocks ran two would read "the same Python
    functions ran" exactly where your Python code is what changed."""
    if ":" not in case or not user_modules:
        return ""
    for (side, files), calls in zip(user_modules.roles(), (base, branch)):
        clock = (files or {}).get(case)
        if clock and calls.module_file and calls.module_file != clock:
            return (f"The Python calls of {case} were counted in {calls.module_file} on the {side} side, "
                    f"where its clock ran {clock}: the counts are not of the code that was timed, "
                    "so they are not compared here.")
    return ""


def python_call_sections(evidence, comparisons, all_cases: bool, pack: Pack) -> list[str]:
    """Per case whose Python calls changed (and every changed or --all case, in a line when
    they did not): which Python functions run more, less, or for the first time."""
    from overrides.counts import pycalls
    from overrides.review import count_tables

    if not evidence.python_calls:
        return []
    parts: list[str] = []
    same: list[str] = []
    same_calls_only: list[str] = []  # where bytecodes were not counted: the same calls, no more
    for c in comparisons:
        calls = evidence.calls_of(c.case, c.op)
        if calls is None:
            continue
        base, branch = calls
        mismatch = counted_elsewhere(c.case, base, branch, evidence.settings.user_modules)
        if mismatch:
            parts += [f"### {c.case}: Python calls not compared", "", mismatch, ""]
            continue
        rows = pycalls.compare(base, branch)
        counted = base.bytecodes_counted and branch.bytecodes_counted
        (base_calls, base_codes), (branch_calls, branch_codes) = base.totals(), branch.totals()
        pack.differential_entry(c)["python_calls"] = {
            "source": f"sys.setprofile + {base.bytecode_counter or 'bytecodes not counted'}",
            "calls_counted": base.calls, "bytecodes_counted": counted,
            "unit": "calls and own bytecodes per call of the case",
            **Sides((base_calls, base_codes), (branch_calls, branch_codes)).to_dict(lambda figures: {
                "calls": round(figures[0], 3), "bytecodes": round(figures[1], 3) if counted else None}),
            "functions": [row.to_dict() for row in rows]}
        if not rows:
            if all_cases or c.verdict in (*CHANGED, CLOCK_ONLY):
                (same if counted else same_calls_only).append(f"{c.case} ({c.verdict})")
            continue
        calls = signed_count(branch_calls - base_calls)
        codes = (f"{signed_count(branch_codes - base_codes)} bytecodes" if counted
                 else "bytecodes not counted")
        parts += [f"### {c.case}: {calls} Python call{'' if calls in ('+1', '-1') else 's'}, "
                  f"{codes} per call ({c.verdict})", ""]
        parts += count_tables.python_calls_table(rows, base, branch) + [""]
    if same:
        parts += ["The same Python functions ran, as often and with the same bytecodes, in: "
                  f"{', '.join(same)}: what changed there is below Python (C++, the interpreter, "
                  "or where code sits in memory).", ""]
    if same_calls_only:
        parts += ["The same Python functions ran, as often (their bytecodes were not counted on "
                  f"this Python), in: {', '.join(same_calls_only)}.", ""]
    if not parts:
        return []
    intro = ["## Where the Python calls went", ""] + in_details("How the Python calls were counted", [
             f"Counted, not sampled: each case's call run {pycalls.CALLS:,} times under the "
             "interpreter's profiler hook and its bytecode counter, in a process of its own per side (never "
             "the timed one). The same build gives the same counts, so each row is a real "
             "difference in the Python code that runs, however little time it takes: read "
             "these first, `new` rows (functions the base never calls) before the rest. "
             "Calls: calls per call of the case; bytecodes: the function's own bytecodes "
             "executed per call of the case, not counting what it calls (`[C]`: a C function "
             "called from Python, counted by its calls). Order: new first, then by the change "
             "of calls times the function's bytecodes per call. Line numbers are the "
             "branch's."])
    return intro + parts


def count_sections(evidence, comparisons, all_cases: bool, pack: Pack,
                   after_python_calls: bool = False) -> list[str]:
    """Per regressed case (every case with --all; every case whose counts changed): where
    the instructions went, by function and as a differential flamegraph of the call tree
    (overrides/counts/calltree.py). Counts recorded without call paths get the older per-function
    table of one seed. `after_python_calls`: the Python calls' section comes first, so this one
    points at it."""
    return count_sections_later(evidence, comparisons, all_cases, pack)(after_python_calls)


def count_sections_later(evidence, comparisons, all_cases: bool,
                         pack: Pack) -> Callable[[bool], list[str]]:
    """`count_sections` in two steps: its tables and pictures now (their PNGs start),
    its text once it is known whether the Python calls' section comes first (the report counts
    those while py-spy records)."""
    from overrides.counts import calltree
    from overrides.review import count_tables
    from overrides.review.runs import file_stem

    chosen = [c for c in comparisons
              if all_cases or c.verdict in CHANGED]
    if not chosen:
        return lambda after_python_calls: []

    def intro(after_python_calls: bool) -> list[str]:
        return ["## Where the instructions went", ""] + in_details("How to read these tables", [
                "Instructions per call by function (Callgrind: deterministic, so this is the view "
                "to read first). Own: the function's own instructions; with callees: including "
                "what it calls. Listed: a change of at least "
                f"{calltree.FUNCTION_FLOOR:g} a call, consistent over the hash seeds; the rows and "
                "\"everything else\" add up to the case's change. Callgrind sees C functions: "
                "Python code shows as the interpreter's (`_PyEval_EvalFrameDefault`, calls, "
                "attribute look-ups)" + ("; the Python functions themselves are named under "
                                         "\"Where the Python calls went\" above."
                                         if after_python_calls else ".")])

    parts: list[str] = []
    unchanged = []  # "case delta (verdict)": one line for all of them, not a table each
    moved_any = False  # whether any of them moved at all: only then is "what moved" a thing to place
    for c in chosen:
        went = calltree.where_it_went(evidence.counts[0], evidence.counts[1], c.case, c.op)
        if went is None:
            parts += _count_section_without_paths(evidence, c)
            continue
        counted_change = c.verdict in CHANGED
        if not counted_change:  # nothing to explain: every function's move is layout noise
            went = dataclasses.replace(went, rows=(), unlisted_functions=went.unlisted_functions + len(went.rows))
        pack.differential_entry(c)["instructions"] = dict(went.to_dict(), listed=counted_change)
        if not counted_change:
            unchanged.append(f"{c.case} {signed(went.total_delta)} ({c.verdict})")
            moved_any = moved_any or round(went.total_delta) != 0
            continue
        parts += [f"### {c.case}: {signed(went.total_delta)} instructions per call ({c.verdict})", ""]
        parts.append((c, count_tables.instructions_table(went)))  # in view, or folded: see below
        stem = f"counts-diff-{file_stem(c.case, c.op)}"
        svg = os.path.join(pack.workdir, f"{stem}.svg")
        write_text_atomic(svg, calltree.differential_svg(
            evidence.counts[0], evidence.counts[1], c.case, c.op,
            f"{c.case} · {c.op}: branch against base, instructions per call by call path"))
        pack.add(f"{stem}.svg", svg)
        if pack.picture(svg, f"{stem}.png"):
            parts += [f"Call tree of the branch, coloured by change (red: more, blue: less): "
                      f"![{stem}]({stem}.png)", ""]
        else:
            parts += [f"Call tree of the branch, coloured by change: `{stem}.svg`.", ""]
    if unchanged:
        why = "what moved is within the hash seeds' layout noise" if moved_any else "nothing moved"
        parts += [f"No function is named where the verdict is not a change ({why}); instructions per "
                  f"call: {'; '.join(unchanged)}.", ""]
    explained = len(unchanged) < len(chosen)

    def table(c, lines: list[str]) -> list[str]:
        """A case's instruction table: folded where the Python-call counts name what changed (that
        table is the cause, read first), in view where the change is below Python."""
        from overrides.counts import pycalls

        calls = evidence.calls_of(c.case, c.op)
        if calls is not None and pycalls.compare(*calls):
            return in_details("Functions whose own instructions moved (the interpreter's work for "
                              "the Python calls above)", lines)
        return lines + [""]

    def section(after_python_calls: bool) -> list[str]:
        # the Python calls are counted after this is made: they decide what is folded
        head = intro(after_python_calls) if explained else intro(after_python_calls)[:2]  # nothing listed: the line alone
        return head + [line for part in parts
                       for line in (table(*part) if isinstance(part, tuple) else [part])]

    return section


def _count_section_without_paths(evidence, c) -> list[str]:
    from overrides.counts import judge

    rows = judge.function_deltas(evidence.counts[0], evidence.counts[1], c.case, c.op)
    parts = [f"### {c.case}: {signed(c.delta_instructions)} instructions per call", "",
             "Counted without call paths (`record.sh --instructions` of an older version): self "
             "instructions per call by function, first shared hash seed.", ""]
    if not rows:
        return parts + ["No function changed by half an instruction per call or more.", ""]
    table = [["function", "base", "branch", "delta"]]
    table += [[f"`{name}`", f"{a:,.1f}", f"{b:,.1f}", f"{b - a:+,.1f}"] for name, a, b in rows]
    return parts + pipe_table(table[0], table[1:], right_from=1) + [""]
