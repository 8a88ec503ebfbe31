"""Two versions of your step (`bench.py --compare BASE BRANCH --step`): did my change help there?

Both factories are built in this process, and three steps are timed in one alternation
(timing.alternate, its balanced order): the base's plain twin, the base's step with your
subclass and the branch's. The change is the branch's step less the base's, a step, paired by
position, and judged by the project's one rule (verdicts.judge, the thresholds of `--compare`);
each version's overhead and share is against the base's plain twin, as `--step` shows it.
Then each version's ops are priced in its step's order, all sequences in turn (optable.price_versions), and joined op
by op: which ops the change helped, and by how much a call.

Why this way:
- One process and one alternation, not two runs: two runs of one step differ by more than a
  small change (the machine's slow spells, seconds long), and the same stretch of time must
  land on both versions alike.
- The same steps a sample for all three (timing.SAME_COUNT): a step's first step in a sample
  runs after another step and is slower, and with a count of its own each version would carry
  a different share of it.
- In stretches, each with all three steps built afresh (their tensors, optimizer and graph
  where the allocator puts them this time), and the change is the median of the stretches' own
  changes, its interval the median's distribution-free one over them: as `--compare` of two
  builds takes a fresh worker pair, another memory layout, for each of its estimates. The first version timed one
  build of each and took the interval from the samples of that one run (the two headlines'
  intervals combined): an A/A read "no change" 10/10, 5/10 and 9/10, and once +1.02%
  "regression" 99% sure, because what differs from one build to the next, and from one stretch
  of the machine's time to another, is in no run's samples (benchmarks/README.md, "Two versions
  of your step").
- At least MIN_STRETCHES, then more while the change is undecided at 99% (verdicts.judge, as
  `--compare` stops early), up to MAX_STRETCHES: a clear change stops at the least, an A/A gets
  the time its "no change" needs.
- One plain twin, the base's: the branch is a new version of your subclass, not of your model,
  so both overheads are against one baseline, and a third step fewer keeps the samples many.
- Each version's overhead and share, then, timed as `--step` times a step (timing.time_steps:
  two steps in turn over ten fresh builds, the branch's beside the base's plain twin), not read
  off the stretches: in three steps taking turns the plain twin only ever follows a subclass
  step, and its share read below `--step`'s in 28 of 30 rounds at loads 1-6, 5 of 6 at load ~1
  (a DTensor MLP 1.22-1.25 against 1.32-1.35), where the change (two subclass steps in the same
  places) is not moved (benchmarks/README.md, "Real libraries, priced"). ~10-30 s more.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

from overrides.clock import stats
from overrides.clock.timer import clock_ns
from overrides.step import drift
from overrides.step.factory import StepPair, rebuilt
from overrides.step.optable import OpRow
from overrides.step.timing import (DEFAULT_TIME_S, EAGER_LEAD, SAME_COUNT, StepTiming, alternate, failure_said,
                                    in_stretches, step_label, time_steps)
from overrides.figures import signed, whole
from overrides.sides import BASE, BRANCH, Sides
from overrides.verdicts import (DECIDED, DEFAULT_THRESHOLD_NS, DEFAULT_THRESHOLD_PCT, NO_CHANGE_CONFIDENCE, judge,
                                threshold_for)

# Stretches, each of all three steps built afresh and timed STRETCH_S a step: at least
# MIN_STRETCHES, the fewest whose median has a 99% interval (stats.median_ci: the lowest to the
# highest of 8), more while the change is undecided, up to MAX_STRETCHES (24: the 6th lowest to
# the 6th highest). A stretch of 1 s now and then reads an A/A 1-3% off (a disturbed stretch, or a
# build's luck), about one in ten on a quiet machine: the mean with Student's t (the first
# version of this) let one such stretch leave an A/A inconclusive after 16, and the median up to
# 16 stretches (the 3rd to the 14th) still left 1 A/A in 10 inconclusive where three of its 16 read
# -1%. Measured with benchmarks/step_compare_validation.py (benchmarks/README.md, "Two versions
# of your step").
MIN_STRETCHES = 8
MAX_STRETCHES = 24
# 3 s a step: a library's step of 1-3 ms gets ~1,000 samples a stretch, and the headline of each
# stretch steadies. With 1 s, A/As of a DTensor and a torchao MLP step (1.4-1.6 ms) read "no
# change" 1 in 8 at load ~1, the stretches' changes spread (IQR) 1.0% and 2.35% of the step and
# the 99% interval reached past the 0.75% threshold; with 3 s, "no change" 10 in 10 (5 each), IQR
# 0.45-1.05%, in 77-225 s a run against ~100 (benchmarks/README.md, "Real libraries, priced").
STRETCH_S = 3.0


@dataclasses.dataclass(frozen=True)
class StepComparison:
    """Two versions of a step timed in one alternation with the base's plain twin, sample by
    sample (paired by position), and the thresholds they are judged by."""

    base: str  # pkg.module:factory
    branch: str
    batch: int | None
    steps_per_sample: tuple[int, int, int]  # plain twin, base, branch
    plain_ns: tuple[float, ...]  # per step, sample by sample
    base_ns: tuple[float, ...]
    branch_ns: tuple[float, ...]
    drift: tuple[str, ...]  # one line per way a step drifted (drift.py); empty: none did
    threads: int
    wall_s: float
    # Each stretch's change, its branch's headline less its base's (ns a step), each stretch of
    # steps built afresh: the change and its interval come from these (see the module docstring).
    stretch_changes_ns: tuple[float, ...] = ()
    threshold_ns: float = DEFAULT_THRESHOLD_NS
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    # Why the stretches ended before the stop rule (a rebuild or a step that raised), in words;
    # the stretches finished are kept and judged. Empty: they ran to the rule.
    incomplete: str = ""
    # Each stretch's overheads (the base's and the branch's figure less the plain twin's): each
    # version's overhead and share where `versions` could not be timed (timing.StepTiming, stretched).
    stretch_overheads_ns: tuple[tuple[float, float], ...] = ()
    # Each version timed as `--step` times a step (timing.time_steps: ten fresh builds, two steps
    # in turn), the branch against the base's plain twin: each version's overhead and share (see
    # the module docstring). Empty: from the stretches.
    versions: tuple[StepTiming, ...] = ()

    @property
    def base_step_ns(self) -> float:
        return stats.headline(self.base_ns)

    @property
    def branch_step_ns(self) -> float:
        return stats.headline(self.branch_ns)

    @property
    def change_ns(self) -> float:
        """The branch's step less the base's, ns a step: the median of the stretches' changes."""
        return stats.median(self.stretch_changes_ns) if self.stretch_changes_ns else math.nan

    def change_ci_ns(self, confidence: float = 0.95) -> tuple[float, float]:
        """The median's distribution-free interval over the stretches (stats.median_ci): as wide
        as what differs from one build and one stretch of time to the next, and a disturbed
        stretch moves it by one place (NaN below 6 stretches at 95%, 8 at 99%)."""
        return stats.median_ci(self.stretch_changes_ns, confidence)

    @property
    def change_share(self) -> float:
        """The change as a fraction of the base's step."""
        return self.change_ns / self.base_step_ns if self.base_step_ns > 0 else math.nan

    @property
    def threshold(self) -> float:
        return threshold_for(self.base_step_ns, self.threshold_ns, self.threshold_pct)

    @property
    def verdict(self) -> str:
        return judge(self.change_ns, self.change_ci_ns(), self.threshold, self.change_ci_ns(NO_CHANGE_CONFIDENCE))

    @property
    def decided_early(self) -> bool:
        """Decided as sure as an early stop of `--compare` must be: a regression or improvement
        at 99%, as "no change" always is (checking after each stretch would otherwise find a
        change by chance more often than the 95% interval says), after MIN_STRETCHES."""
        if len(self.stretch_changes_ns) < MIN_STRETCHES:
            return False
        ci99 = self.change_ci_ns(NO_CHANGE_CONFIDENCE)
        return judge(self.change_ns, ci99, self.threshold, ci99) in DECIDED

    @property
    def timings(self) -> Sides[StepTiming]:
        """Base and branch each against the plain twin, as `--step` shows a step: its overhead and share."""
        if self.versions:
            return Sides.of(list(self.versions))
        return Sides.of([StepTiming(spec, self.batch, (self.steps_per_sample[0], count), self.plain_ns, samples,
                                    self.drift, self.threads, self.wall_s,
                                    stretch_overheads_ns=tuple(pair[side] for pair in self.stretch_overheads_ns))
                         for side, (samples, spec, count) in enumerate(((self.base_ns, self.base, self.steps_per_sample[1]),
                                                                        (self.branch_ns, self.branch, self.steps_per_sample[2])))])


def compare_steps(base: StepPair, branch: StepPair, time_s: float = STRETCH_S, threads: int = 1,
                  pairs: int | None = None, progress: Callable[[str], None] | None = None,
                  threshold_ns: float = DEFAULT_THRESHOLD_NS, threshold_pct: float = DEFAULT_THRESHOLD_PCT,
                  rebuild: Callable[[StepPair], StepPair] = rebuilt) -> StepComparison:
    """The base's plain twin, the base's step and the branch's, timed in alternation in
    stretches of `time_s` a step (or `pairs` rounds), each stretch's steps built afresh by
    `rebuild` (the first's are `base` and `branch`, after the drift probe); see the module
    docstring."""
    say = progress or (lambda message: None)
    label = f"{step_label(base)} against {branch.spec}"
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = clock_ns()
    try:
        say(f"{label}: warming up the three steps and looking for drift ({drift.PROBE_STEPS} steps each)")
        drifts = drift.check(("plain", base.plain), (BASE, base.subclass), (BRANCH, branch.subclass))
        for line in drifts:
            say(line)
        counts, samples, changes, overheads = None, ((), (), ()), (), ()
        result: StepComparison | None = None  # each finished stretch's judgement, the last kept

        def time_one(index: int, steps: tuple):
            return alternate(steps, time_s, pairs, say, f"{label}, stretch {index + 1}",
                             what="the plain twin, the base and the branch",
                             lead=EAGER_LEAD, same_count=SAME_COUNT, counts=counts)

        def take(index: int, timed) -> bool:
            nonlocal counts, samples, changes, overheads, result
            counts, more = timed
            samples = tuple(old + new for old, new in zip(samples, more))
            plain, mine, theirs = (stats.headline(m) for m in more)
            changes += (theirs - mine,)
            overheads += ((mine - plain, theirs - plain),)
            result = StepComparison(base.spec, branch.spec, base.batch, counts, *samples, tuple(drifts), threads,
                                    (clock_ns() - started) / 1e9, changes, threshold_ns, threshold_pct,
                                    stretch_overheads_ns=overheads)
            if result.decided_early:
                return True
            if MIN_STRETCHES <= index + 1 < MAX_STRETCHES:
                low, high = result.change_ci_ns(NO_CHANGE_CONFIDENCE)
                say(f"{label}: the change is not decided yet ({signed(result.change_ns)} ns a step, 99% CI "
                    f"{signed(low)}..{signed(high)}, threshold {whole(result.threshold)}): another stretch")
            return False

        incomplete = in_stretches((base, branch), MAX_STRETCHES, rebuild,
                                  lambda built: (built[0].plain, built[0].subclass, built[1].subclass), time_one, take)
        if incomplete:
            result = dataclasses.replace(result, incomplete=incomplete)
            say(f"{label}: {incomplete}; keeping the {len(changes)} stretches finished")
        result = dataclasses.replace(result, versions=_as_step_times(base, branch, time_s, threads, pairs, say, rebuild))
    finally:
        torch.set_num_threads(previous_threads)
    return result


def _against_base_twin(base: StepPair, branch: StepPair) -> StepPair:
    """The branch's step beside the base's plain twin: one baseline for both versions."""
    return dataclasses.replace(branch, plain=base.plain)


def _as_step_times(base: StepPair, branch: StepPair, time_s: float, threads: int, pairs: int | None,
                   say: Callable[[str], None], rebuild: Callable[[StepPair], StepPair]) -> tuple[StepTiming, ...]:
    """Each version timed as `--step` times it (timing.time_steps, for a time scaled as the
    stretches were: timing.DEFAULT_TIME_S at STRETCH_S), each on builds of its own; () where a
    build or step raised (said), and the stretches' own overheads stand."""
    version_time_s = DEFAULT_TIME_S * time_s / STRETCH_S
    try:
        say(f"{step_label(base)} against {branch.spec}: each version's overhead and share, timed as --step times it")
        mine = time_steps(rebuild(base), version_time_s, threads, pairs, say, rebuild=rebuild)
        both = lambda _: _against_base_twin(rebuild(base), rebuild(branch))  # noqa: E731
        theirs = time_steps(both(None), version_time_s, threads, pairs, say, rebuild=both)
    except Exception as exc:
        say(f"{step_label(base)} against {branch.spec}: the versions could not be timed as --step times them "
            f"({failure_said(exc)}); their overheads and shares are the stretches'")
        return ()
    return mine, theirs


@dataclasses.dataclass(frozen=True)
class OpChange:
    """One op (kind, op, operands) as each version's step calls it; None where a version does not."""

    base: OpRow | None
    branch: OpRow | None

    @property
    def row(self) -> OpRow:
        return self.base or self.branch

    @staticmethod
    def _timed(row: OpRow | None) -> bool:
        return row is not None and not row.not_applicable and not row.nested

    @property
    def change_ns(self) -> float:
        """What a call costs more in the branch (both timed beside one plain twin of the op)."""
        if not (self._timed(self.base) and self._timed(self.branch)):
            return math.nan
        return self.branch.subclass_ns - self.base.subclass_ns

    @property
    def change_ci_ns(self) -> tuple[float, float]:
        """The widest the two headlines' 95% intervals allow, as the op table's overhead."""
        if math.isnan(self.change_ns):
            return (math.nan, math.nan)
        (base_low, base_high), (low, high) = self.base.subclass_ci_ns, self.branch.subclass_ci_ns
        return (low - base_high, high - base_low)

    @property
    def step_change_ns(self) -> float:
        """What the op costs more a step beyond plain tensors in the branch: its calls x overhead
        there less here (an op one version does not call: the other's whole cost)."""
        costs = []
        for row in (self.base, self.branch):
            if row is None:
                costs.append(0.0)
            elif self._timed(row):
                costs.append(row.cost_ns)
            else:
                return math.nan
        return costs[1] - costs[0]

    @property
    def step_change_ci_ns(self) -> tuple[float, float]:
        """step_change_ns's interval: its calls x change_ci_ns where both versions call it as
        often (one plain twin: its error cancels), else each version's calls x its overhead's
        interval, the branch's less the base's."""
        if math.isnan(self.step_change_ns):
            return (math.nan, math.nan)
        if self.base is not None and self.branch is not None and self.base.calls == self.branch.calls:
            return (self.base.calls * self.change_ci_ns[0], self.base.calls * self.change_ci_ns[1])
        low = high = 0.0
        for row, sign in ((self.branch, 1), (self.base, -1)):
            if row is not None:
                ends = sorted((sign * row.calls * row.overhead_ci_ns[0], sign * row.calls * row.overhead_ci_ns[1]))
                low, high = low + ends[0], high + ends[1]
        return (low, high)


def join_ops(base_rows: tuple[OpRow, ...], branch_rows: tuple[OpRow, ...]) -> tuple[OpChange, ...]:
    """Each op of either version beside the other's, the largest change a step first (either
    way), those not priced last."""
    key = lambda row: (row.kind, row.op, row.signature)  # noqa: E731
    theirs = {key(row): row for row in branch_rows}
    joined = [OpChange(row, theirs.pop(key(row), None)) for row in base_rows]
    joined += [OpChange(None, row) for row in theirs.values()]
    return tuple(sorted(joined, key=lambda c: (math.isnan(c.step_change_ns),
                                               -abs(0 if math.isnan(c.step_change_ns) else c.step_change_ns))))


def ops_change(changes: tuple[OpChange, ...]) -> tuple[float, tuple[float, float]]:
    """What the priced ops' changes add up to a step, and its interval (each op's, added: no
    op's error offsets another's, as the op table's sum)."""
    priced = [c for c in changes if not math.isnan(c.step_change_ns)]
    return (sum(c.step_change_ns for c in priced), (sum(c.step_change_ci_ns[0] for c in priced),
                                                    sum(c.step_change_ci_ns[1] for c in priced)))
