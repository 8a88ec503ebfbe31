"""What a case's differential flamegraph says, worked out once: both sides' recordings set
against each other (with each function the counts name timed at its call sites), which rows a
reviewer is shown and in what order, which the counts price exactly, and which moved where the
counts found the same work. `review/time_sections.py` draws, packs and words it.

Decided here, from the counts and the samples together: the functions the Python-call counts
found called differently come first, whatever their sampled time (the counts are exact, ~1,000
samples are not); then the largest significant changes of own time, at most DIFF_ROWS each way;
where the two recordings of a side disagree on a function the counts name, one more recording
of each side is asked for (`more`), unless the counts already price that function exactly.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Sequence

from overrides.review.sides import ROLES
from overrides.sides import Sides
from overrides.verdicts import CLOCK_MOVED

if TYPE_CHECKING:
    from overrides.counts.attribution import SoleChange

DIFF_ROWS = 12  # frames listed per direction (grew, shrank) in a case's differential table


@dataclasses.dataclass(frozen=True)
class TimeAnalysis:
    """One case's differential, analysed: the recordings, every function's change, and what is
    listed (`listed`: the counted functions, then what grew and what shrank)."""

    base_runs: list
    branch_runs: list
    deltas: list  # flame.differential.FrameDelta, every function
    sites: list  # counts.callsites: where the counted functions are called
    sites_of: dict  # a call-site frame -> its sites
    counted: dict  # py-spy frame -> the Python-call counts' row, for each function they name
    row_of: dict  # a listed frame (a call site's where it has one) -> the counts' row naming it
    instructions: dict  # frame -> its own instruction change per call (None: not counted)
    same_work: frozenset  # significant time moves where the counts found the same work
    listed: tuple
    priced: "Priced | None"  # the listed row the counts price exactly
    changed: bool  # the case's time moved (by the clock or with the counts): rows are listed
    clock_sized: bool  # the clock's delta is the change's size (else the counts')
    size: float  # the case's change per call, ns
    outliers: tuple = ()  # counted frames whose recordings disagreed, when a third was made

    def is_priced(self, delta) -> bool:
        return self.priced is not None and delta.frame == self.priced.frame

    def at_counts(self, delta) -> bool:
        """Where the counts sized the change (the clock could not), the row they price is read
        at their price too: rows and change on one scale."""
        return self.is_priced(delta) and not self.clock_sized

    def row_ns(self, delta) -> float:
        return self.priced.ns if self.at_counts(delta) else delta.delta_ns

    @property
    def explained(self) -> float:
        return sum(self.row_ns(d) for d in self.listed)

    @property
    def spread_measured(self) -> bool:
        """Each function's error is its spread between recordings (two or more a side)."""
        return self.deltas[0].spread_ns is not None

    @property
    def counted_instructions(self) -> bool:
        return bool(self.instructions) or self.priced is not None


def analyse(evidence, comparison, folded: dict, more: Callable | None = None) -> TimeAnalysis | None:
    """The differential of one case from both sides' collapsed stacks `folded` ({role: paths}),
    read with the counts in `evidence`; None where a side has no samples inside the hot loop.
    `more(case)`: one more recording of each side ({role: path}, or None), asked for when the
    two recordings of a side disagree on a function the counts name."""
    from overrides.counts import callsites, pycalls

    # A function the counts found called more or less often is timed at the lines that call it
    # (the call itself with all it runs), so the listed rows add up to the change.
    calls = evidence.calls_of(comparison.case, comparison.op)  # (base, branch) Python calls
    own = evidence.own_instruction_deltas(comparison.case, comparison.op)
    python_rows = pycalls.compare(*calls) if calls else []
    sites = callsites.call_sites(*calls, python_rows) if calls else []
    base_runs, branch_runs, deltas = _deltas(folded, sites, comparison)
    if not deltas:
        return None
    at_site = {pycalls.pyspy_frame(site.function): site_frame(site.function) for site in sites}
    counted_rows = _counted_frames(python_rows)
    changed = comparison.verdict in CLOCK_MOVED or comparison.clock_verdict in CLOCK_MOVED
    by_frame = {d.frame: d for d in deltas}
    # Where one Python function's work is all that changed, the counts price it exactly, and a
    # third recording a side (~9 s) would only refine its sampled figure: not asked for.
    priced = _priced_by_counts(calls, python_rows, sites, own, comparison, at_site)
    outliers = tuple(frame for frame in counted_rows if at_site.get(frame, frame) in by_frame
                     and by_frame[at_site.get(frame, frame)].recordings_disagree
                     and not (priced and priced.frame == at_site.get(frame, frame)))
    third = False
    if changed and outliers and more is not None:
        extra = more(comparison.case)  # one more recording a side, or None where it cannot run
        if extra:
            folded = {role: list(folded[role]) + [extra[role]] for role in ROLES}
            base_runs, branch_runs, deltas = _deltas(folded, sites, comparison)
            by_frame = {d.frame: d for d in deltas}
            third = True
    counted = {frame: row for frame, row in counted_rows.items() if at_site.get(frame, frame) in by_frame}
    instructions = _instructions_by_frame(own, [d.frame for d in deltas])
    # Significant changes of time where the counts found the same work (the same
    # instructions, or the same Python calls and bytecodes): drawn amber, never listed.
    same_python = _same_python_work(calls, python_rows)
    same_work = frozenset(d.frame for d in deltas if d.significant and d.frame not in counted
                          and d.frame not in at_site.values() and (
                              _same_instructions(instructions.get(d.frame)) or d.frame in same_python))
    first = [by_frame[at_site.get(frame, frame)] for frame in counted] if changed else []
    row_of = {at_site.get(frame, frame): row for frame, row in counted.items()}
    sites_of = {site_frame(site.function): [s for s in sites if s.function == site.function]
                for site in sites}
    from overrides.flame import differential

    grew, shrank = (differential.top_changes(
        [d for d in deltas if d.frame not in counted and d.frame not in same_work
         and d.frame not in at_site.values()], DIFF_ROWS)
        if changed else ([], []))
    listed = tuple(first + grew + shrank)
    priced = priced if priced and changed and priced.frame in {d.frame for d in listed} else None
    return TimeAnalysis(base_runs, branch_runs, deltas, sites, sites_of, counted, row_of, instructions,
                        same_work,
                        listed, priced, changed, comparison.clock_sized, comparison.change_ns,
                        outliers if third else ())


def _deltas(folded: dict, sites, comparison) -> tuple[list, list, list]:
    """(base runs, branch runs, the differential) of one case's recordings: the runs as recorded
    (for the picture), the differential with each counted function's call sites cut out."""
    from overrides.flame import differential, stacks

    raw = Sides.of([[stacks.read_folded(path, keep_lines=True) for path in folded[role]] for role in ROLES])
    base_runs, branch_runs = raw.map(lambda runs: [stacks.at_call_sites(run, {}) for run in runs])
    cut = Sides.of([[stacks.at_call_sites(run, _site_frames(sites, role)) for run in runs] for role, runs in raw.roles()])
    return base_runs, branch_runs, differential.differential(cut.base, cut.branch, comparison.base_ns,
                                                             comparison.branch_ns)


def site_frame(function: str) -> str:
    """The name under which a counted function's call sites are timed (`stacks.at_call_sites`):
    no frame py-spy writes looks like it."""
    from overrides.counts import pycalls

    return f"calls of {pycalls.pyspy_frame(function)}"



def _site_frames(sites, role: str) -> dict[tuple[str, int], str]:
    """(py-spy caller frame, line) -> the name its time goes to, for one side's stacks."""
    from overrides.counts import pycalls

    return {(pycalls.pyspy_frame(site.caller), line): site_frame(site.function)
            for site in sites for line in Sides(site.base_lines, site.branch_lines).side(role)}


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
class Priced:
    """A table row the counts price: its frame, the change (`attribution.SoleChange`), and that
    at the case's ns per instruction."""

    frame: str
    change: SoleChange
    ns: float

    @property
    def instructions(self) -> float:
        return self.change.instructions


def _priced_by_counts(calls: tuple | None, rows: list, sites: list, own: dict | None, comparison,
                      at_site: dict) -> Priced | None:
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
    return Priced(at_site.get(frame, frame), change, change.ns(comparison.ns_per_instruction))



def _instructions_by_frame(own: dict | None, frames: Sequence[str]) -> dict[str, float | None]:
    """Each py-spy frame -> its function's own instruction change per call in this case's
    counted call paths (`own`: `Evidence.own_instruction_deltas`; None where they do not name
    it: Python code, an unresolved `?`, a function only one tool saw); empty where there are no
    call paths to set py-spy against.
    The hot loop's frame is the counted loop (`calltree.LOOP_ROOT`): the same statement on both
    sides, whose own time py-spy moved by more than the whole change in one report of an added
    helper (the interpreter's samples it could not place deeper) while its instructions moved by
    none (figures: benchmarks/history.md, 'Docstring figures')."""
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
