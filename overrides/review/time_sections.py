"""The report's "Where the time went" section: each chosen case's flamegraphs from both sides,
their PNGs, and the differential view (red where the branch spends more time, blue
less) with its table of the functions whose own time changed.

It reads an `Evidence` (`measuring.py`: the counts name functions exactly, py-spy's samples
place the time); only the flamegraphs themselves are recorded here, through
`measuring.record_flamegraphs`, since a case's recording is needed only once it is chosen.
"""

from __future__ import annotations

import os
from typing import Sequence

from overrides import children
from overrides.files import write_text_atomic
from overrides.flame.stacks import hot_loop_stacks
from overrides.figures import json_figure, signed, signed_count
from overrides.review.markdown import in_details
from overrides.review.measuring import record_flamegraphs
from overrides.review import time_analysis
from overrides.review.pack import Pack
from overrides.review.sides import ROLES, Side
from overrides.sides import Sides
from overrides.tables import pipe_table



def record_sections(evidence, sides: Sequence[Side], comparisons, seconds: float | None,
                    op: str | None, pack: Pack, runs_dir: str) -> dict:
    """Both sides' py-spy recordings of the chosen cases (`measuring.record_flamegraphs`), for
    `flamegraph_sections`: role -> case -> (svg, collapsed stacks) or None. Both sides at once,
    every chosen case in one process per recording and each side's recordings at once: a profile
    is shares of samples, which other processes' work does not skew. Ctrl-C kills every py-spy
    process at once (overrides/children.py)."""
    from overrides.flame import hotloop

    cases = list(dict.fromkeys(comparison.case for comparison in comparisons))
    return dict(zip((side.role for side in sides), children.parallel(lambda side: record_flamegraphs(
        evidence, side, cases, op, seconds or hotloop.DEFAULT_SECONDS, runs_dir, pack.workdir,
        pack.say), sides, len(sides))))


def flamegraph_sections(evidence, sides: Sequence[Side], comparisons, seconds: float | None,
                        op: str | None, pack: Pack, runs_dir: str, recorded: dict | None = None) -> list[str]:
    """"Where the time went": per comparison, both sides' flamegraphs (`recorded` by
    `record_sections`, or recorded now), their PNGs, and the differential view of where
    the branch's time went (`differential_section`). One markdown text a case."""
    from overrides.flame import hotloop
    from overrides.review.runs import file_stem

    if recorded is None:
        recorded = record_sections(evidence, sides, comparisons, seconds, op, pack, runs_dir)
    more = _one_more_recording(evidence, sides, op, seconds or hotloop.DEFAULT_SECONDS, pack)
    sections = []
    for comparison in comparisons:
        stem = file_stem(comparison.case, op)
        folded: dict[str, list[str]] = {}  # role -> its recordings' collapsed stacks
        for side in sides:
            paths = recorded[side.role].get(comparison.case)
            if paths is None:
                continue
            svg, folded[side.role] = paths
            name = f"{side.role}-{stem}"
            pack.add(f"{name}.svg", svg)
            pack.picture(svg, f"{name}.png")
        section = [case_heading(comparison), ""]
        for role in ROLES:
            if any(f.name == f"{role}-{stem}.png" for f in pack.files):
                section.append(f"{role}: ![{role}-{stem}]({role}-{stem}.png)")
        section.append("")
        if len(folded) == 2:
            section += differential_section(evidence, comparison, folded, stem, pack, more)
        else:
            section.append("No differential view: a flamegraph is missing on one side (see notes).")
        sections.append("\n".join(section))
    return sections


def differential_section(evidence, comparison, folded: dict, stem: str, pack: Pack,
                         more=None) -> list[str]:
    """The differential flamegraph of one case (base against branch, from both sides' collapsed
    stacks `folded`) and its table: what the Python-call counts name first, then the functions
    whose own time moved beyond their error; differential.json's `wall_clock` entry too.
    `more(case)`: one more recording of each side ({role: collapsed stacks}, or None), asked
    for when the two recordings of a side disagree on a function the counts name."""
    found = time_analysis.analyse(evidence, comparison, folded, more)
    if found is None:
        return ["No differential view: no samples inside the hot loop on one side."]
    lines = [_picture(found, comparison, stem, pack)]
    pack.differential_entry(comparison)["wall_clock"] = _json_entry(found, comparison)
    if not found.changed:
        verdicts = " / ".join(sorted({comparison.verdict, comparison.clock_verdict}))
        return lines + ["", f"No function is named: the case itself did not change beyond noise "
                        f"({verdicts}), and a function's share of {_samples(found)} moves by chance.", ""]
    lines += [""] + in_details("How to read this table", _method(found, comparison))
    table = _table(found)
    if not table:
        return lines + ["No function's own time changed by more than its error allows: the "
                        f"case's change ({signed(found.size)} ns) is spread too thin "
                        "over its functions for py-spy's samples to place it.", ""]
    lines += table
    over = _overshoot(found)
    if over:
        lines += ["", over]
    if found.priced:
        sampled = next(d for d in found.listed if found.is_priced(d))
        lines += ["", _counts_price_sentence(found.priced.change, found.priced.ns, sampled, comparison, _samples(found))]
    return lines + [""]


def _overshoot(found: time_analysis.TimeAnalysis) -> str:
    """Why the listed rows add up to more than the case's change, where they do: each is a
    sample with its own error, and "everything else" takes up the difference."""
    explained, size = found.explained, found.size
    if abs(explained) <= abs(size) or explained * size < 0:
        return ""
    errors = max((d.error_ns for d in found.listed), default=0.0)
    return (f"The listed rows add up to {signed(explained)} ns, more than the case's {signed(size)}: each "
            f"is py-spy's sampled time with its own error (up to ±{errors:,.0f} ns here), and "
            f"\"everything else\" ({signed(size - explained)}) takes up the difference. Read a row's "
            "size with its ±; where the counts price it, theirs is the exact one.")


def _picture(found: time_analysis.TimeAnalysis, comparison, stem: str, pack: Pack) -> str:
    """The differential flamegraph drawn into the pack, SVG and PNG (where this interpreter
    can draw one): the line of report.md that shows or names it, with its legend."""
    from overrides.flame import differential

    diff_svg = os.path.join(pack.workdir, f"diff-{stem}.svg")
    write_text_atomic(diff_svg, differential.differential_svg(
        found.base_runs, found.branch_runs, comparison.base_ns, comparison.branch_ns,
        f"{comparison.case} · {comparison.op}: branch against base, ns per call by call path", found.same_work,
        {frame: 1 if row.delta_calls > 0 else -1 for frame, row in found.counted.items()}))
    pack.add(f"diff-{stem}.svg", diff_svg)
    legend = "red: more time than base, blue: less" + (
        ", amber: time moved where the counts found the same work" if found.same_work else "") + (
        ", labelled whatever their width: the functions the Python-call counts found new or "
        "changed" if found.counted else "")
    if pack.picture(diff_svg, f"diff-{stem}.png"):
        return f"Differential flamegraph ({legend}): ![diff-{stem}](diff-{stem}.png)"
    return f"Differential flamegraph: `diff-{stem}.svg` ({legend})."


def _json_entry(found: time_analysis.TimeAnalysis, comparison) -> dict:
    """differential.json's `wall_clock` entry of the case: every listed row with its error,
    counts and call sites, and what they leave to "everything else"."""
    from overrides.flame import differential

    priced = found.priced
    return {
        "source": "py-spy", "unit": "ns per call", "listed": found.changed,
        "recordings": Sides(len(found.base_runs), len(found.branch_runs)).to_dict(),
        "error": "spread between recordings" if found.spread_measured else
                 f"sampling error x {differential.PROCESS_DISPERSION:g}",
        "functions": [dict(d.to_dict(), instructions=json_figure(found.instructions.get(d.frame)),
                           python_calls=found.row_of[d.frame].tag if d.frame in found.row_of else None,
                           call_sites=[site.to_dict() for site in found.sites_of.get(d.frame, ())] or None,
                           **({"counted_instructions": json_figure(priced.instructions),
                               "counted_ns": json_figure(priced.ns)} if found.is_priced(d) else {}))
                      for d in found.listed],
        "everything_else": json_figure(found.size - found.explained) if found.changed else None,
        "total_delta": json_figure(found.size),
        "total_from": "clock" if found.clock_sized else "instructions",
        "clock_delta": json_figure(comparison.delta_ns)}


def _method(found: time_analysis.TimeAnalysis, comparison) -> list[str]:
    """How to read the table: which functions are listed and why, what an error is, and what
    was left out."""
    from overrides.counts import calltree
    from overrides.flame import differential

    if found.spread_measured:
        error = (f"one error is the function's own spread between the recordings of each side "
                 f"({len(found.base_runs)} and {len(found.branch_runs)} processes), or py-spy's sampling "
                 f"error widened {differential.PROCESS_DISPERSION:g}x (the spread of one build's "
                 "processes on average) where that is larger: a function that moved in one "
                 "process only stays within it and goes to \"everything else\", however far "
                 "it moved")
    else:
        error = (f"one error is py-spy's sampling error widened {differential.PROCESS_DISPERSION:g}x "
                 "for the process-to-process spread of one build's profile (a side recorded "
                 "once: the spread of each function was not measured)")
    method = [(f"Functions the Python-call counts found new or called more or less often "
               "first (\"Python calls\"), whatever their sampled time; then functions "
               f"whose own time per call changed by more than {differential.SIGNIFICANT_Z:g} "
               f"errors, where {error}; and functions new in the call path (\"new\": never "
               "sampled in base, significant with callees). Own time does not count what a "
               "function calls, so the rows and \"everything else\" add up to the case's "
               f"change (listed: {signed(found.explained)} of {_change_said(comparison)}). "
               "With callees: the function's time including what it calls.")
              + (" A function called more or less often is timed at the lines that call it "
                 "(\"at\": the caller and its line, in the branch's file; a line the branch "
                 "inserted has no base time), with everything that runs there: its own time "
                 "leaves out the call itself, which happens on the caller's line." if found.sites else "")]
    if found.outliers:
        method += ["", f"The two recordings of a side disagreed on {', '.join(f'`{f}`' for f in found.outliers)} "
                   f"beyond {differential.DISAGREE_FACTOR:g}x the usual spread between processes, "
                   f"so each side was recorded a third time and its figures are the medians of "
                   f"its {len(found.base_runs)} and {len(found.branch_runs)} recordings."]
    if found.counted_instructions:
        method += ["", "Instructions: the same function's own change in the Callgrind counts "
                   "(\"-\": not in them; Python code shows there as the interpreter's)."]
    if found.same_work:
        method += ["", f"Not listed, whatever their time: {len(found.same_work)} function(s) whose own "
                   "work the counts found unchanged (instructions moved by less than "
                   f"{calltree.FUNCTION_FLOOR:g} a call, \"same instructions\", or the same "
                   "Python calls and bytecodes). Their time moved, their work did not: one "
                   "process's layout luck, caches, or py-spy placing samples in the "
                   "neighbouring Python frame. They are in \"everything else\" and amber in the "
                   "picture."]
    return method


def _table(found: time_analysis.TimeAnalysis) -> list[str]:
    """The listed rows, "everything else" and the case's total, as a Markdown table; [] when
    nothing is listed."""
    if not found.listed:
        return []
    priced, extra = found.priced, found.counted_instructions
    rows = []
    for d in found.listed:
        tags = ["more" if d.delta_ns > 0 else "less"] if d.significant else ["within ±"]
        tags += ["new"] if d.new and d.significant and not (
            d.frame in found.row_of and found.row_of[d.frame].new) else []  # said once
        if d.frame in found.row_of:
            row = found.row_of[d.frame]
            tags.insert(0, "Python calls: " + ("new" if row.new else f"{signed_count(row.delta_calls)} a call"))
        delta = (f"{signed(priced.ns)} by the counts (sampled {signed(d.delta_ns)})" if found.at_counts(d)
                 else signed(d.delta_ns))
        rows.append([", ".join(tags), _row_name(d.frame, found.row_of, found.sites_of), f"{d.base_self_ns:,.0f}",
                     f"{d.branch_self_ns:,.0f}", delta, f"{d.error_ns:,.0f}", f"{d.base_ns:,.0f}",
                     f"{d.branch_ns:,.0f}"]
                    + ([f"{signed(priced.instructions)} (the interpreter's)" if found.is_priced(d)
                        else signed(found.instructions.get(d.frame))] if extra else []))
    rest = len(found.deltas) - len(found.listed) - len(found.same_work)
    rows.append(["", f"everything else ({rest} functions within their error"
                 + (f", {len(found.same_work)} with the same work" if found.same_work else "") + ")", "", "",
                 signed(found.size - found.explained), "", "", ""] + ([""] if extra else []))
    total = "**total: the case's change" + ("**" if found.clock_sized else ", by the counts**")
    rows.append(["", total, "", "", f"**{signed(found.size)}**", "", "", ""] + ([""] if extra else []))
    header = (["", "function", "own ns: base", "branch", "delta", "±", "with callees: base", "branch"]
              + (["instructions"] if extra else []))
    return pipe_table(header, rows, right_from=2)


def case_heading(comparison) -> str:
    """A case's heading in "where the time went": its change per call and verdict, with the
    source of the size where the clock could not give it (for one shim, two headings of
    opposite sign, both "(regression)", told a reviewer nothing; figures: benchmarks/history.md,
    'Docstring figures')."""
    if comparison.clock_sized:
        return f"### {comparison.case}: {signed(comparison.delta_ns)} ns per call ({comparison.verdict})"
    return (f"### {comparison.case}: about {signed(comparison.change_ns)} ns per call by the counts "
            f"({signed(comparison.delta_instructions)} instructions; {comparison.verdict}); the "
            f"clock: {signed(comparison.delta_ns)} ns{_interval(comparison)}")


def _interval(comparison) -> str:
    if comparison.ci95_ns is None:
        return ""
    low, high = comparison.ci95_ns
    return f", {signed(low)}..{signed(high)} at 95%"


def _change_said(comparison) -> str:
    """The change the rows are read against, and how sure it is: the clock's delta with its 95%
    interval (the change is itself measured, and its interval can be as wide as the change;
    figures: benchmarks/history.md, 'Docstring figures'), or the counts' size where the clock's
    interval was too wide to give one."""
    if not comparison.clock_sized:
        return (f"about {signed(comparison.change_ns)} ns: the counts' "
                f"{signed(comparison.delta_instructions)} instructions at this case's "
                f"{comparison.ns_per_instruction:.3f} ns each, as the clock's "
                f"{signed(comparison.delta_ns)} ns{_interval(comparison)} could not size it")
    if comparison.ci95_ns is None:
        return f"{signed(comparison.delta_ns)} ns"
    low, high = comparison.ci95_ns
    return (f"{signed(comparison.delta_ns)} ns; the change itself is {signed(low)}..{signed(high)} "
            "ns at 95%")


def _one_more_recording(evidence, sides: Sequence[Side], op: str | None, seconds: float, pack: Pack):
    """`more(case)` for differential_section: one more py-spy recording of the case on each side,
    both at once, into the report's folder; {role: collapsed stacks}, or None (with a note)
    where a side cannot run (a label kept no copy, its interpreter is gone) or py-spy fails
    (killed: the report is incomplete too, `Evidence.incomplete`)."""
    from overrides.errors import UsageError
    from overrides.flame import flamegraph
    from overrides.review.runs import file_stem

    def more(case: str) -> dict[str, str] | None:
        if any((side.label and side.build is None) or not (side.python and os.access(side.python, os.X_OK))
               for side in sides):
            return None
        stem = file_stem(case, op)
        pack.say(f"report: {case}: the two recordings of a side disagree on what the counts name; "
                 f"one more a side ({seconds:g} s)")

        def record(side: Side) -> str:
            name = os.path.join(pack.workdir, f"{side.role}-{stem}.third")
            return flamegraph.record_case(side.python, case, f"{name}.svg", f"{name}.folded", op=op,
                                          seconds=seconds, import_path=side.torch_root()).folded_path
        try:
            paths = children.parallel(record, sides, len(sides))
        except (UsageError, flamegraph.RecorderDied) as exc:
            pack.notes.append(f"No third recording of {case} where its two disagreed: {exc}")
            if isinstance(exc, flamegraph.RecorderDied):
                evidence.incomplete.append(str(exc))
            return None
        return {side.role: path for side, path in zip(sides, paths)}

    return more


def _row_name(frame: str, row_of: dict, sites_of: dict) -> str:
    """A table row's function: the frame, or for call sites the function and where it is called."""
    from overrides.counts import pycalls

    if frame not in sites_of:
        return f"`{frame}`"
    places = "; ".join(f"`{pycalls.pyspy_frame(site.caller) or site.caller}` line "
                       f"{', '.join(map(str, site.branch_lines or site.base_lines))}"
                       + (" (base only)" if not site.branch_lines else "")
                       + f": `{site.text}`" for site in sites_of[frame])
    return f"`{pycalls.pyspy_frame(row_of[frame].function)}` at {places}"


def _counts_price_sentence(change, ns: float, sampled, comparison, samples: str) -> str:
    """What the counts say of the one Python function whose work changed, under the table."""
    from overrides.counts import pycalls

    name = f"`{pycalls.pyspy_frame(change.function)}`"
    if change.callers:
        lines_too = "; ".join(f"`{pycalls.pyspy_frame(caller) or caller}` {signed_count(codes)} "
                              "bytecodes a call" for caller, codes in change.callers)
        only = (f"{name} is the only Python function called differently in this case, and the "
                f"only other Python change is in the lines that call it ({lines_too}), so the "
                f"interpreter's own instruction change, {signed(change.instructions)} a call, is "
                "the work of those calls")
    else:
        only = (f"{name} is the only Python function whose calls or bytecodes changed in this case, "
                f"so the interpreter's own instruction change, {signed(change.instructions)} a "
                "call, is its work")
    return (f"By the counts: {only}: about {signed(ns)} ns at this case's "
            f"{comparison.ns_per_instruction:.3f} ns per instruction (its sampled "
            f"time: {signed(sampled.delta_ns)} ± {sampled.error_ns:,.0f} ns). The counts are exact; "
            f"py-spy's {samples} are not.")


def _samples(found) -> str:
    """How many samples py-spy took in the hot loop, per recording of a side, as counted here
    (not a typical figure: a busy machine or a short case gives fewer)."""
    totals = [sum(hot_loop_stacks(run).values()) for run in (*found.base_runs, *found.branch_runs)]
    if not totals:
        return "its samples"
    low, high = min(totals), max(totals)
    return f"{low:,} samples a recording" if low == high else f"{low:,}-{high:,} samples a recording"


