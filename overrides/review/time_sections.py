"""The report's "Where the time went" section: each chosen case's flamegraphs from both sides,
their screenshots, and the differential view (red where the branch spends more time, blue
less) with its table of the functions whose own time changed.

It reads an `Evidence` (`measuring.py`: the counts name functions exactly, py-spy's samples
place the time); only the flamegraphs themselves are recorded here, through
`measuring.record_flamegraphs`, since a case's recording is needed only once it is chosen.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Sequence

from overrides import children
from overrides.files import write_text_atomic
from overrides.figures import json_figure, signed, signed_count
from overrides.review.markdown import in_details
from overrides.review.measuring import record_flamegraphs
from overrides.review.pack import Pack
from overrides.review.sides import ROLES, Side
from overrides.tables import pipe_table
from overrides.verdicts import CLOCK_MOVED

if TYPE_CHECKING:
    from overrides.counts.attribution import SoleChange

DIFF_ROWS = 12  # frames listed per direction (grew, shrank) in a case's differential table


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
    `record_sections`, or recorded now), their screenshots, and the differential view of where
    the branch's time went (`differential_section`). One markdown text a case."""
    from overrides.flame import hotloop, screenshot
    from overrides.review.runs import file_stem

    browser = screenshot.find_browser()
    if browser is None:
        pack.notes.append(f"Screenshots were skipped: no Chromium on this machine; {screenshot.INSTALL_HINT}.")
    if recorded is None:
        recorded = record_sections(evidence, sides, comparisons, seconds, op, pack, runs_dir)
    more = _one_more_recording(sides, op, seconds or hotloop.DEFAULT_SECONDS, pack)
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
            if browser:
                pack.shoot(svg, f"{name}.png", browser)
        section = [case_heading(comparison), ""]
        for role in ROLES:
            if any(f.name == f"{role}-{stem}.png" for f in pack.files):
                section.append(f"{role}: ![{role}-{stem}]({role}-{stem}.png)")
        section.append("")
        if len(folded) == 2:
            section += differential_section(evidence, comparison, folded, stem, browser, pack, more)
        else:
            section.append("No differential view: a flamegraph is missing on one side (see notes).")
        sections.append("\n".join(section))
    return sections


def differential_section(evidence, comparison, folded: dict, stem: str, browser: str | None,
                         pack: Pack, more=None) -> list[str]:
    """The differential flamegraph of one case (base against branch, from both sides' collapsed
    stacks `folded`) and its table: what the Python-call counts name first, then the functions
    whose own time moved beyond their error; differential.json's `wall_clock` entry too.
    `more(case)`: one more recording of each side ({role: collapsed stacks}, or None), asked
    for when the two recordings of a side disagree on a function the counts name."""
    from overrides.counts import callsites, calltree, pycalls
    from overrides.flame import differential

    # A function the counts found called more or less often is timed at the lines that call it
    # (the call itself with all it runs), so the listed rows add up to the change.
    calls = evidence.calls_of(comparison.case, comparison.op)  # (base, branch) Python calls
    own = evidence.own_instruction_deltas(comparison.case, comparison.op)
    # What the Python-call counts found changed, compared once for every use below.
    python_rows = pycalls.compare(*calls) if calls else []
    sites = callsites.call_sites(*calls, python_rows) if calls else []
    base_runs, branch_runs, deltas = _deltas(folded, sites, comparison)
    lines = []
    if not deltas:
        return ["No differential view: no samples inside the hot loop on one side."]
    at_site = {pycalls.pyspy_frame(site.function): site_frame(site.function) for site in sites}
    counted_rows = _counted_frames(python_rows)
    verdicts = {comparison.verdict, comparison.clock_verdict}
    changed = comparison.verdict in CLOCK_MOVED or comparison.clock_verdict in CLOCK_MOVED
    by_frame = {d.frame: d for d in deltas}
    # Where one Python function's work is all that changed, the counts price it exactly, and a
    # third recording a side (~9 s) would only refine its sampled figure: not asked for.
    priced = _priced_by_counts(calls, python_rows, sites, own, comparison, at_site)
    outliers = [frame for frame in counted_rows if at_site.get(frame, frame) in by_frame
                and by_frame[at_site.get(frame, frame)].recordings_disagree
                and not (priced and priced.frame == at_site.get(frame, frame))]
    third = None
    if changed and outliers and more is not None:
        extra = more(comparison.case)  # one more recording a side, or None where it cannot run
        if extra:
            folded = {role: list(folded[role]) + [extra[role]] for role in ROLES}
            base_runs, branch_runs, deltas = _deltas(folded, sites, comparison)
            by_frame = {d.frame: d for d in deltas}
            third = (f"The two recordings of a side disagreed on {', '.join(f'`{f}`' for f in outliers)} "
                     f"beyond {differential.DISAGREE_FACTOR:g}x the usual spread between processes, "
                     f"so each side was recorded a third time and its figures are the medians of "
                     f"its {len(base_runs)} and {len(branch_runs)} recordings.")
    counted = {frame: row for frame, row in counted_rows.items()
               if at_site.get(frame, frame) in by_frame}
    instructions = _instructions_by_frame(own, [d.frame for d in deltas])
    # Significant changes of time where the counts found the same work (the same
    # instructions, or the same Python calls and bytecodes): drawn amber, never listed.
    same_python = _same_python_work(calls, python_rows)
    same_work = {d.frame for d in deltas if d.significant and d.frame not in counted
                 and d.frame not in at_site.values() and (
                     _same_instructions(instructions.get(d.frame)) or d.frame in same_python)}
    diff_svg = os.path.join(pack.workdir, f"diff-{stem}.svg")
    write_text_atomic(diff_svg, differential.differential_svg(
        base_runs, branch_runs, comparison.base_ns, comparison.branch_ns,
        f"{comparison.case}: branch against base, ns per call by call path", same_work,
        {frame: 1 if row.delta_calls > 0 else -1 for frame, row in counted.items()}))
    pack.add(f"diff-{stem}.svg", diff_svg)
    legend = "red: more time than base, blue: less" + (
        ", amber: time moved where the counts found the same work" if same_work else "") + (
        ", labelled whatever their width: the functions the Python-call counts found new or "
        "changed" if counted else "")
    if browser and pack.shoot(diff_svg, f"diff-{stem}.png", browser):
        lines.append(f"Differential flamegraph ({legend}): ![diff-{stem}](diff-{stem}.png)")
    else:
        lines.append(f"Differential flamegraph: `diff-{stem}.svg` ({legend}).")
    # The functions the Python-call counts name come first, whatever their sampled time:
    # the counts are exact, the samples are not. Then what moved beyond its spread.
    first = [by_frame[at_site.get(frame, frame)] for frame in counted] if changed else []
    row_of = {at_site.get(frame, frame): row for frame, row in counted.items()}
    sites_of = {site_frame(site.function): [s for s in sites if s.function == site.function]
                for site in sites}
    grew, shrank = (differential.top_changes(
        [d for d in deltas if d.frame not in counted and d.frame not in same_work
         and d.frame not in at_site.values()], DIFF_ROWS)
        if changed else ([], []))
    listed = first + grew + shrank
    priced = priced if priced and changed and priced.frame in {d.frame for d in listed} else None

    def is_priced(d) -> bool:
        return priced is not None and d.frame == priced.frame

    def at_counts(d) -> bool:
        """Where the counts sized the change (the clock could not), the row they price is read
        at their price too: rows and change on one scale."""
        return is_priced(d) and not comparison.clock_sized

    def row_ns(d) -> float:
        return priced.ns if at_counts(d) else d.delta_ns
    spread_measured = deltas[0].spread_ns is not None
    size = comparison.change_ns  # the clock's delta, or the counts' where it could not size it
    pack.differential_entry(comparison)["wall_clock"] = {
        "source": "py-spy", "unit": "ns per call", "listed": changed,
        "recordings": {"base": len(base_runs), "branch": len(branch_runs)},
        "error": "spread between recordings" if spread_measured else
                 f"sampling error x {differential.PROCESS_DISPERSION:g}",
        "functions": [dict(d.to_dict(), instructions=json_figure(instructions.get(d.frame)),
                           python_calls=row_of[d.frame].tag if d.frame in row_of else None,
                           call_sites=[site.to_dict() for site in sites_of.get(d.frame, ())] or None,
                           **({"counted_instructions": json_figure(priced.instructions),
                               "counted_ns": round(priced.ns, 1)} if is_priced(d) else {}))
                      for d in listed],
        "everything_else": round(size - sum(row_ns(d) for d in listed), 1)
        if changed else None,
        "total_delta": round(size, 1),
        "total_from": "clock" if comparison.clock_sized else "instructions",
        "clock_delta": round(comparison.delta_ns, 1)}
    if not changed:
        return lines + ["", f"No function is named: the case itself did not change beyond noise "
                        f"({' / '.join(sorted(verdicts))}), and a function's share of ~1000 "
                        "samples moves by chance (two installs of one build moved single "
                        "functions by hundreds of ns).", ""]
    explained = sum(row_ns(d) for d in listed)
    if spread_measured:
        error = (f"one error is the function's own spread between the recordings of each side "
                 f"({len(base_runs)} and {len(branch_runs)} processes), or py-spy's sampling "
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
                   f"change (listed: {signed(explained)} of {_change_said(comparison)}). "
                   "With callees: the function's time including what it calls.")
              + (" A function called more or less often is timed at the lines that call it "
                 "(\"at\": the caller and its line, in the branch's file; a line the branch "
                 "inserted has no base time), with everything that runs there: its own time "
                 "leaves out the call itself, which happens on the caller's line." if sites else "")]
    if third:
        method += ["", third]
    counted_instructions = bool(instructions) or bool(priced)
    if counted_instructions:
        method += ["", "Instructions: the same function's own change in the Callgrind counts "
                  "(\"-\": not in them; Python code shows there as the interpreter's)."]
    if same_work:
        method += ["", f"Not listed, whatever their time: {len(same_work)} function(s) whose own "
                  "work the counts found unchanged (instructions moved by less than "
                  f"{calltree.FUNCTION_FLOOR:g} a call, \"same instructions\", or the same "
                  "Python calls and bytecodes). Their time moved, their work did not: one "
                  "process's layout luck, caches, or py-spy placing samples in the "
                  "neighbouring Python frame. They are in \"everything else\" and amber in the "
                  "picture."]
    lines += [""] + in_details("How to read this table", method)
    rows = [["", "function", "own ns: base", "branch", "delta", "±", "with callees: base", "branch"]
            + (["instructions"] if counted_instructions else [])]
    for d in listed:
        change = instructions.get(d.frame)
        tags = ["more" if d.delta_ns > 0 else "less"] if d.significant else ["within ±"]
        tags += ["new"] if d.new and d.significant and not (
            d.frame in row_of and row_of[d.frame].new) else []  # said once
        if d.frame in row_of:
            row = row_of[d.frame]
            tags.insert(0, "Python calls: " + ("new" if row.new else
                                               f"{signed_count(row.delta_calls)} a call"))
        rows.append([", ".join(tags), _row_name(d.frame, row_of, sites_of), f"{d.base_self_ns:,.0f}",
                     f"{d.branch_self_ns:,.0f}", f"{signed(priced.ns)} by the counts (sampled {signed(d.delta_ns)})"
                     if at_counts(d) else signed(d.delta_ns), f"{d.error_ns:,.0f}",
                     f"{d.base_ns:,.0f}", f"{d.branch_ns:,.0f}"]
                    + ([f"{signed(priced.instructions)} (the interpreter's)" if is_priced(d)
                        else signed(change)] if counted_instructions else []))
    if len(rows) == 1:
        return lines + ["No function's own time changed by more than its error allows: the "
                        f"case's change ({signed(size)} ns) is spread too thin "
                        "over its functions for py-spy's samples to place it.", ""]
    rest = len(deltas) - len(listed) - len(same_work)
    rows.append(["", f"everything else ({rest} functions within their error"
                 + (f", {len(same_work)} with the same work" if same_work else "") + ")", "", "",
                 signed(size - explained), "", "", ""]
                + ([""] if counted_instructions else []))
    total = "**total: the case's change" + ("**" if comparison.clock_sized else ", by the counts**")
    rows.append(["", total, "", "", f"**{signed(size)}**",
                 "", "", ""] + ([""] if counted_instructions else []))
    lines += pipe_table(rows[0], rows[1:], right_from=2)
    if priced:
        sampled = next(d for d in listed if is_priced(d))
        lines += ["", _counts_price_sentence(priced.change, priced.ns, sampled, comparison)]
    return lines + [""]


def case_heading(comparison) -> str:
    """A case's heading in "where the time went": its change per call and verdict, with the
    source of the size where the clock could not give it (a "+24 ns ... (regression)" beside
    "-24 ns ... (regression)" for one shim told a reviewer nothing)."""
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
    interval (the change is itself measured: +26 ns could be +4 or +51), or the counts' size
    where the clock's interval was too wide to give one."""
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


def _one_more_recording(sides: Sequence[Side], op: str | None, seconds: float, pack: Pack):
    """`more(case)` for differential_section: one more py-spy recording of the case on each side,
    both at once, into the report's folder; {role: collapsed stacks}, or None (with a note)
    where a side cannot run (a label kept no copy, its interpreter is gone) or py-spy fails."""
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
        except UsageError as exc:
            pack.notes.append(f"No third recording of {case} where its two disagreed: {exc}")
            return None
        return {side.role: path for side, path in zip(sides, paths)}

    return more


def _deltas(folded: dict, sites, comparison) -> tuple[list, list, list]:
    """(base runs, branch runs, the differential) of one case's recordings: the runs as recorded
    (for the picture), the differential with each counted function's call sites cut out."""
    from overrides.flame import differential, stacks

    raw = {role: [stacks.read_folded(path, keep_lines=True) for path in folded[role]] for role in ROLES}
    base_runs, branch_runs = ([stacks.at_call_sites(run, {}) for run in raw[role]] for role in ROLES)
    cut = {role: [stacks.at_call_sites(run, _site_frames(sites, role)) for run in raw[role]]
           for role in ROLES}
    return base_runs, branch_runs, differential.differential(
        cut["base"], cut["branch"], comparison.base_ns, comparison.branch_ns)


def site_frame(function: str) -> str:
    """The name under which a counted function's call sites are timed (`stacks.at_call_sites`):
    no frame py-spy writes looks like it."""
    from overrides.counts import pycalls

    return f"calls of {pycalls.pyspy_frame(function)}"


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


def _site_frames(sites, role: str) -> dict[tuple[str, int], str]:
    """(py-spy caller frame, line) -> the name its time goes to, for one side's stacks."""
    from overrides.counts import pycalls

    return {(pycalls.pyspy_frame(site.caller), line): site_frame(site.function)
            for site in sites for line in (site.base_lines if role == "base" else site.branch_lines)}


def _same_python_work(calls: tuple | None, rows: list) -> set[str]:
    """py-spy frame names of the Python functions that ran as often, with as many
    bytecodes, on both sides of this case (by the Python-call counts `calls`, whose changed
    functions are `rows`: `pycalls.compare`)."""
    from overrides.counts import pycalls

    if calls is None:
        return set()
    base, branch = calls
    changed = {pycalls.pyspy_frame(row.function) for row in rows}
    return {pycalls.pyspy_frame(key) for key in set(base.functions) & set(branch.functions)
            if pycalls.pyspy_frame(key)} - changed  # two files can share py-spy's short name


def _counted_frames(rows: list) -> dict:
    """py-spy frame name -> the Python-call counts' row (`rows`: `pycalls.compare`), for the
    Python functions the counts found new or called a different number of times in this case
    (in their order)."""
    from overrides.counts import pycalls

    return {pycalls.pyspy_frame(row.function): row for row in rows
            if row.delta_calls and pycalls.pyspy_frame(row.function)}


@dataclasses.dataclass(frozen=True)
class _Priced:
    """A table row the counts price: its frame, the change (`attribution.SoleChange`), and that
    at the case's ns per instruction."""

    frame: str
    change: SoleChange
    ns: float

    @property
    def instructions(self) -> float:
        return self.change.instructions


def _priced_by_counts(calls: tuple | None, rows: list, sites: list, own: dict | None, comparison,
                      at_site: dict) -> _Priced | None:
    """The row of the one Python function whose work changed where the counts found nothing
    else (`attribution.sole_change` of the Python calls `calls`, their `rows` and call `sites`,
    and the own instruction changes `own`; its call sites where it has some), priced. None
    otherwise."""
    from overrides.counts import attribution, pycalls

    if calls is None or own is None or comparison.ns_per_instruction is None:
        return None
    change = attribution.sole_change(*calls, own, rows=rows, sites=sites)
    frame = pycalls.pyspy_frame(change.function) if change else None
    if frame is None:
        return None
    return _Priced(at_site.get(frame, frame), change, change.ns(comparison.ns_per_instruction))


def _counts_price_sentence(change, ns: float, sampled, comparison) -> str:
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
            "py-spy's ~1,000 samples are not.")


def _instructions_by_frame(own: dict | None, frames: Sequence[str]) -> dict[str, float | None]:
    """Each py-spy frame -> its function's own instruction change per call in this case's
    counted call paths (`own`: `Evidence.own_instruction_deltas`; None where they do not name
    it: Python code, an unresolved `?`, a function only one tool saw); empty where there are no
    call paths to set py-spy against.
    The hot loop's frame is the counted loop (`calltree.LOOP_ROOT`): the same statement on both
    sides, whose own time py-spy moved by +210 +- 61 ns in one report of a +100 ns helper (the
    interpreter's samples it could not place deeper) while its instructions moved by none."""
    from overrides.counts import calltree
    from overrides.flame import stacks

    if own is None:
        return {}
    by_key = {calltree.function_key(name): delta for name, delta in own.items()}
    keys = {frame: calltree.function_key(frame) for frame in frames}
    return {frame: own.get(calltree.LOOP_ROOT) if frame.startswith(stacks.HOT_LOOP_PREFIX)
            else None if key[0] == "?" else by_key.get(key) for frame, key in keys.items()}


def _same_instructions(instructions: float | None) -> bool:
    """The counts name the function and its own instructions moved by less than a listed row's
    floor: whatever its time did, its work did not change."""
    from overrides.counts import calltree

    return instructions is not None and abs(instructions) < calltree.FUNCTION_FLOOR
