"""The differential view: where the branch spent its time, against base, function by function.

It answers "where did the branch spend its extra time?" in nanoseconds per call: a function's
share of the hot loop's samples times the case's per-call time, base against branch. Shares
alone mislead: a branch that adds a frame lowers every other frame's share. It ranks functions
by their own (self) time, which adds up to the whole call's change, so a wrapper the branch
inserts shows its own cost rather than everything it wraps. Each delta comes with an error,
because with ~1000 samples a function's share moves by a percent or two by chance, which on a 7
us call is as large as the regressions this tool looks for, and layout luck lands on single
functions in one process and not the next. The error is py-spy's sampling error widened by the
spread two processes of one build show on average (PROCESS_DISPERSION), and with two recordings
(two processes) per side, each function's own spread between them where that is larger: a
function that moved in one recording only is within it, however far it moved.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Collection, Mapping, Sequence

from overrides.flame import flamesvg
from overrides.flame.stacks import Stacks, frame_samples, hot_loop_stacks, merged

# A frame's change counts when it is this many errors from zero: a hot loop has hundreds of
# frames, and at 2 errors one in twenty would "change" by chance.
SIGNIFICANT_Z = 3.0
# Two processes of the same build differ per function by more than sampling does: each has its
# own layout, and layout luck lands on particular functions (one process spent 34 of 600
# samples in at::_ops::alias::call, others almost none). Between six recordings of one build
# (15 pairs, 279 frames above 100 ns) the binomial z-scores had sd 2.06, and 14% passed 3;
# errors are therefore the binomial ones times this factor, which left none past 3. Used only
# where a side has one recording; with two, each function's spread is measured (RECORDINGS).
PROCESS_DISPERSION = 2.1
# Recordings per side in a report, each a separate process, all at once for the report's
# --seconds (flamegraph.record_case): the
# average dispersion above is no guard against one process's luck on one function (a report
# listed `is_tensor_and_append_overloaded` +659 ns and `add_Tensor` -592 ns, same instructions,
# above the real +231 ns cause); the spread between two processes is, as a move seen in one of
# them only is within it.
RECORDINGS = 2
# ... and when a function the Python-call counts name (the cause, listed first whatever its
# time) reads further apart between a side's two recordings than this many times the usual
# process-to-process error, each side gets one more recording and the figures are the medians of
# three: in a newcomer's report one of two processes put 93 samples of ~1,200 on the new
# helper's call site where the other put 34 (+271 +- 153 ns listed for a +100 ns change); four
# more single recordings of that branch read 82-159 ns.
DISAGREE_FACTOR = 1.5


@dataclasses.dataclass(frozen=True)
class FrameDelta:
    """One frame's time per call in base and branch: its own (self) time, which is what the
    ranking uses, and its inclusive time (with what it calls), for context."""

    frame: str
    base_self_ns: float
    branch_self_ns: float
    error_ns: float  # one standard error of the self-time delta (see `differential`)
    base_ns: float  # inclusive
    branch_ns: float
    inclusive_error_ns: float  # one standard error of the inclusive delta
    # the self-time delta's spread between processes, measured from two or more recordings a
    # side (None: one recording a side; the error is then the sampling error widened)
    spread_ns: float | None = None
    # the sampling error widened by PROCESS_DISPERSION: what the spread is on average
    usual_error_ns: float | None = None

    @property
    def delta_ns(self) -> float:
        """Change of the frame's own time per call. Over all frames these add up to the change
        of the whole call; an inserted wrapper shows its own cost, not what it wraps."""
        return self.branch_self_ns - self.base_self_ns

    @property
    def new(self) -> bool:
        return self.base_ns == 0 and self.branch_ns > 0

    @property
    def z(self) -> float:
        return self.delta_ns / self.error_ns if self.error_ns > 0 else 0.0

    @property
    def new_in_path(self) -> bool:
        """Never sampled in base, and in the branch's path more often than noise explains: a
        function the change put into the call (a wrapper, a new check), worth naming even when
        its own time is too small to measure."""
        return (self.new and self.inclusive_error_ns > 0
                and self.branch_ns / self.inclusive_error_ns >= SIGNIFICANT_Z)

    @property
    def recordings_disagree(self) -> bool:
        """A side's recordings (processes) differ on this frame far beyond the usual spread:
        one of them is an outlier, and a third recording a side can outvote it."""
        return (self.spread_ns is not None and self.usual_error_ns is not None
                and self.spread_ns > DISAGREE_FACTOR * self.usual_error_ns)

    @property
    def significant(self) -> bool:
        return abs(self.z) >= SIGNIFICANT_Z or self.new_in_path

    def to_dict(self) -> dict:
        return {"function": self.frame, "base_self": round(self.base_self_ns, 1),
                "branch_self": round(self.branch_self_ns, 1), "delta_self": round(self.delta_ns, 1),
                "error_self": round(self.error_ns, 1),
                "spread_self": None if self.spread_ns is None else round(self.spread_ns, 1),
                "base_inclusive": round(self.base_ns, 1),
                "branch_inclusive": round(self.branch_ns, 1), "new_in_path": self.new_in_path}


def _share_error(count: int, total: int, dispersion: float = PROCESS_DISPERSION) -> float:
    """Standard error of a frame's share of `total` samples: the binomial error (at least half a
    sample's, so a frame never seen still has one) times `dispersion` (by default
    PROCESS_DISPERSION: from one process to another)."""
    p = max(count, 0.5) / total
    return dispersion * math.sqrt(p * (1 - p) / total)


def _delta_error(base_count: int, base_total: int, base_per_call_ns: float,
                 branch_count: int, branch_total: int, branch_per_call_ns: float,
                 dispersion: float = PROCESS_DISPERSION) -> float:
    """One standard error, in ns per call, of the change of a frame's time between two profiles."""
    return math.hypot(_share_error(base_count, base_total, dispersion) * base_per_call_ns,
                      _share_error(branch_count, branch_total, dispersion) * branch_per_call_ns)


def _spread(base_values: Sequence[float], branch_values: Sequence[float]) -> float:
    """One standard error of the difference of the two sides' means, from the spread of the
    per-recording values (each recording a process): the within-side variances pooled, as one
    build's processes spread alike on either side."""
    squares = sum((v - sum(vs) / len(vs)) ** 2 for vs in (base_values, branch_values) for v in vs)
    freedom = len(base_values) + len(branch_values) - 2
    return math.sqrt(squares / freedom * (1 / len(base_values) + 1 / len(branch_values)))


def _recordings(stacks: "Stacks | Sequence[Stacks]") -> list[dict[tuple[str, ...], int]]:
    """The hot loops of one side's recordings (one Mapping, or several), those with samples."""
    given = [stacks] if isinstance(stacks, Mapping) else list(stacks)
    loops = [hot_loop_stacks(s) for s in given]
    return [loop for loop in loops if sum(loop.values())]


def differential(base: "Stacks | Sequence[Stacks]", branch: "Stacks | Sequence[Stacks]",
                 base_per_call_ns: float, branch_per_call_ns: float) -> list[FrameDelta]:
    """Every frame of either hot loop, as ns per call in base and branch, the most significant
    change of its own time first. Each side is one recording's stacks or a list of recordings
    (separate processes). The figures are from all of a side's samples together, or where a
    side has three recordings or more, the median of its recordings' figures (one process's
    outlier is outvoted, DISAGREE_FACTOR); the error is the sampling error of all of them
    widened by PROCESS_DISPERSION (how far one build's processes spread on average), or, with at
    least two recordings on both sides, the frame's own spread between them where that is
    larger: a spread estimated from two processes a side can come out small by chance, the
    average one cannot."""
    base_runs, branch_runs = _recordings(base), _recordings(branch)
    if not base_runs or not branch_runs:
        return []
    base_loop, branch_loop = merged(base_runs), merged(branch_runs)
    base_total, branch_total = sum(base_loop.values()), sum(branch_loop.values())
    (base_inc, base_own), (branch_inc, branch_own) = frame_samples(base_loop), frame_samples(branch_loop)
    measured = len(base_runs) >= 2 and len(branch_runs) >= 2
    per_run = [(frame_samples(run), sum(run.values()), per_call)
               for runs, per_call in ((base_runs, base_per_call_ns), (branch_runs, branch_per_call_ns))
               for run in runs] if measured else []

    def measure(frame: str, which: int, b: int, r: int) -> tuple[float, float, float, float | None, float]:
        """(base, branch, error, measured spread, usual error) of the frame's self (which=1) or
        inclusive (0) ns per call: the figures pooled, or each side's median of its recordings
        where it has three or more."""
        figures = [b / base_total * base_per_call_ns, r / branch_total * branch_per_call_ns]
        usual = _delta_error(b, base_total, base_per_call_ns, r, branch_total, branch_per_call_ns)
        if not measured:
            return figures[0], figures[1], usual, None, usual
        found = [samples[which].get(frame, 0) / total * per_call for samples, total, per_call in per_run]
        by_side = found[:len(base_runs)], found[len(base_runs):]
        for side, values in enumerate(by_side):
            if len(values) >= 3:
                figures[side] = statistics.median(values)
        spread = _spread(*by_side)
        return figures[0], figures[1], max(spread, usual), spread, usual

    deltas = []
    for frame in set(base_inc) | set(branch_inc):
        base_self, branch_self, self_error, spread, usual = measure(
            frame, 1, base_own.get(frame, 0), branch_own.get(frame, 0))
        base_with, branch_with, with_error, _, _ = measure(
            frame, 0, base_inc.get(frame, 0), branch_inc.get(frame, 0))
        deltas.append(FrameDelta(frame, base_self, branch_self, self_error, base_with, branch_with,
                                 with_error, spread, usual))
    deltas.sort(key=lambda d: (-abs(d.z), -abs(d.delta_ns), d.frame))
    return deltas


def top_changes(deltas: Sequence[FrameDelta], count: int = 12) -> tuple[list[FrameDelta], list[FrameDelta]]:
    """(grew, shrank): the significant changes of own time, largest first, at most `count` each;
    functions new in the call path count as grown."""
    grew = sorted((d for d in deltas if d.significant and (d.delta_ns > 0 or d.new_in_path)),
                  key=lambda d: (-d.new_in_path, -d.delta_ns))
    shrank = sorted((d for d in deltas if d.significant and d.delta_ns < 0), key=lambda d: d.delta_ns)
    return grew[:count], shrank[:count]


def differential_svg(base: "Stacks | Sequence[Stacks]", branch: "Stacks | Sequence[Stacks]",
                     base_per_call_ns: float, branch_per_call_ns: float, title: str,
                     same_work: Collection[str] = (), counted: Mapping[str, int] | None = None,
                     sides: tuple[str, str] = ("base", "branch"), per: str = "call",
                     labelled: Collection[str] = (), labelled_as: str = "") -> str:
    """The branch's hot loop, each frame coloured by how much its function's own time per call
    changed against base (red: more, blue: less, grey: within SIGNIFICANT_Z errors). By
    function, not by call path: a branch that inserts a wrapper moves everything under it to
    new paths, and colouring by path would paint all of that "new" while only the wrapper costs
    anything. Frames in `same_work` (whose own instructions the counts found unchanged) that
    changed significantly are amber instead: time moved, the work did not. Frames in `counted`
    (frame -> +1 or -1: the Python-call counts found it new or called more, or less) are
    coloured that way whatever their sampled time, and always labelled: the counts are exact.
    `sides` names the two profiles (a step's report: "plain twin", "yours"), `per` what a figure
    is per ("step"); `labelled` frames are labelled too, coloured by their own change, and the
    footer names them after `labelled_as` (why they are)."""
    counted = counted or {}
    by_frame = {d.frame: d for d in differential(base, branch, base_per_call_ns, branch_per_call_ns)}
    if not by_frame:
        raise ValueError("no hot-loop samples on one side; nothing to compare")
    loop = merged(_recordings(branch))
    total = sum(loop.values())
    scale = max((abs(d.delta_ns) for d in by_frame.values() if d.significant or d.frame in counted),
                default=0.0) or 1.0

    def colour(path):
        d = by_frame.get(path[-1])
        if path[-1] in counted:  # at least a quarter of the deepest shade: it must be seen
            size = max(abs(d.delta_ns) if d else 0.0, scale / 4)
            return flamesvg.change_colour(counted[path[-1]] * size, scale, True)
        if d is not None and d.significant and path[-1] in same_work:
            return flamesvg.SAME_WORK
        return flamesvg.change_colour(d.delta_ns if d else 0.0, scale, bool(d and d.significant))

    def tooltip(path, weight):
        d = by_frame.get(path[-1])
        tip = f"{path[-1]}: {weight:,.0f} samples on this path"
        if d is not None:
            tip += (f"; own time {d.base_self_ns:,.0f} -> {d.branch_self_ns:,.0f} ns per call "
                    f"({d.delta_ns:+,.0f}, {d.z:+.1f} errors)")
            if path[-1] in same_work:
                tip += "; the same instructions in the counts"
        if path[-1] in counted:
            tip += "; the Python-call counts: " + ("more calls or new" if counted[path[-1]] > 0 else "fewer calls or gone")
        return tip

    amber = ", amber: the same instructions in the counts" if same_work else ""
    shown = sorted({flamesvg.short_name(f) for f in counted if any(f in stack for stack in loop)})
    before, after = sides
    footer = (f"{after}: {total:,} samples at {branch_per_call_ns:,.0f} ns per {per}; {before}: "
              f"{base_per_call_ns:,.0f} ns per {per}")
    if shown:
        footer += ("; always labelled (in bold where the box is too narrow), as the Python-call "
                   "counts found them new or changed: " + ", ".join(shown))
    named_too = sorted({flamesvg.short_name(f) for f in labelled if any(f in stack for stack in loop)})
    if named_too:
        footer += f"; labelled whatever their width, {labelled_as}: " + ", ".join(named_too)
    return flamesvg.render(
        flamesvg.tree_from_stacks(loop), title,
        f"width: share of the {after}'s py-spy samples; colour: change of the function's own time per "
        f"{per} against {before} (red: more, blue: less, grey: within {SIGNIFICANT_Z:g} errors{amber})",
        footer, colour, tooltip, named=lambda path: path[-1] in counted or path[-1] in labelled)
