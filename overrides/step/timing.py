"""Both steps timed in one process, in alternation, and paired by position.

Why this way:
- One process, both steps built once: a step's cost depends on its model, data and optimizer
  state, which a second process would build anew (another layout, another warm-up).
- Alternation (plain, yours, yours, plain, ... the order reversed every other round, as the
  Timer core's round-robin does): the machine's slow spells, seconds long, land on both alike.
- Paired by position: a round's two samples ran side by side, so both steps' samples cover the
  same stretch of the machine's time. Each step's figure is the project's headline (the low
  quantile: the undisturbed cost, clock/stats.py), and the overhead is their difference, its
  interval the widest the two headlines' 95% intervals allow (yours' low less plain's high, and
  the reverse), as the op table's. The median of the paired ratios (the first version) read a
  spin of 2.0 ms a step as 1.8 ms: a 0.2-ms plain sample is jittered by more than its headline,
  and the ratio carried that jitter into the overhead.
- Each step its own steps a sample, calibrated to SAMPLE_NS from its fastest warm step, so both
  steps' samples last alike and reach their floor alike. ~1 ms, as the Timer core's: with ~3 ms
  (the first version) a sample on a loaded 2-CPU machine was never undisturbed, and a known
  380-us wait a step read 1.10-1.19x; with 1 ms, 1.06-1.08x (benchmarks/step_validation.py).
- In STRETCHES stretches, both steps built afresh for each (factory.rebuilt), the overhead the
  median of the stretches' own and its interval the median's distribution-free one over them,
  as `--compare --step` judges a change: what differs from one build of a step to the next
  (where its tensors lie, the optimizer's state) and from one stretch of the machine's time to
  another is in no one build's samples. One build (the first version) read a DTensor MLP's share
  +16..+35% over five runs, each with a 95% interval of +-2-7 points that held none of the others
  (benchmarks/README.md, "Real libraries, priced").
- The Timer core's clock and its collector handling (clock.timer.clock_ns, paused_gc), its
  thread setting. A step is milliseconds, so the clock's own cost (tens of ns a read) is left in, not removed.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence, TypeVar

import torch

from overrides.clock import stats
from overrides.clock.timer import Sampler, clock_ns, paused_gc
from overrides.errors import UsageError
from overrides.step import drift
from overrides.step.factory import StepPair, rebuilt

SAMPLE_NS = 1_000_000  # a sample of ~1 ms, as the Timer core's: steps of 0.1-10 ms, a few a sample
MAX_STEPS_PER_SAMPLE = 1_000
CALIBRATION_STEPS = 5  # the fastest of these (each step, after the probe's warm-up) sizes a sample
DEFAULT_TIME_S = 3.0  # of timing per step, both steps alternating: 6 s a batch size
MIN_PAIRS = stats.MIN_TRUSTED_SAMPLES  # fewer and no interval means anything
PROGRESS_EVERY_NS = 1_000_000_000
# Builds a timing is split into, time_s shared among them: ten, the fewest whose median's 95%
# interval leaves out the lowest and the highest stretch (stats.median_ci: the 2nd to the 9th), so
# one disturbed stretch does not set an end. Fewer finished (a later build raised): from
# MIN_STRETCHES_CI the median's interval still, below it the samples' (one build's), said so.
STRETCHES = 10
MIN_STRETCHES_CI = 6  # the fewest values stats.median_ci gives a 95% interval for
# Steps each rebuilt step runs, untimed, before its stretch: its first steps build the optimizer's
# state and the allocator's caches (the first build's warm-up is the drift probe's).
STRETCH_WARM_STEPS = 10
# Eager and compiled steps taking turns (--step --compiled): the first step after the other
# kind ran is slower, and not alike on both sides: an A/A of the same plain step four ways read
# its second copy 1-3% faster eager and 1-4% compiled, in every run, whatever the order; with one
# untimed step before each sample, within about 1%. Two eager steps alone need none (A/A +-0.4%).
LEAD_STEP = True
# So also eager steps, with --step and --compare --step alike: each sample follows one untimed
# step of its own, as each step of a training loop follows one of its own. Without it, three
# steps in turn (--compare) never ran a step after itself, and the plain twin, run after the
# DTensor steps, read colder than under --step (two in turn, each after itself half the time):
# a DTensor MLP's share read 1.06-1.08x in --compare against 1.19-1.23x in --step, one process;
# with it, 1.25x (benchmarks/README.md, "Real libraries, priced").
EAGER_LEAD = True
# Two versions of your step compared (--compare A B --step): the first step of a sample, after
# another step ran, is slower than the ones after it, so a step sampled 2 at a time reads faster
# a step than one sampled alone. With each its own count, a version that waits 20 us a call more
# (1 step a sample against the base's 2) read its change 1.08-1.11x its calls x 20 us, 1.05x with
# the same count for all (benchmarks/README.md, "Two versions of your step").
# So also the plain twin and yours of one factory (--step): a known 383-us wait a step read
# 1.06-1.08x with each its own count (the plain twin 2 steps a sample, the waiting step 1) and
# 1.03x with the same, the A/A +1.7 against -0.3 us (benchmarks/step_validation.py 5, each way).
SAME_COUNT = True
# The run's speed reference (clock/speed.py), when one is given, takes a sample every this many
# rounds of the steps, so that it covers the run as the steps do: ~0.6 ms a sample against ~4 ms
# a round of two steps and their lead steps, ~4% of the time. Its samples, among the steps', read
# 0.95-1.03x its samples back to back (the Timer core's way, against which the machine's earlier
# runs were kept), a steps:mlp step at load ~3.
REFERENCE_EVERY_ROUNDS = 4


@dataclasses.dataclass(frozen=True)
class StepTiming:
    """What one factory's two steps cost at one batch size, per step, sample by sample."""

    spec: str
    batch: int | None
    steps_per_sample: tuple[int, int]  # plain, yours
    plain_ns: tuple[float, ...]  # per step, sample by sample; pairs by position with subclass_ns
    subclass_ns: tuple[float, ...]
    drift: tuple[str, ...]  # one line per way a step drifted (drift.py); empty: neither did
    threads: int
    wall_s: float
    # Which quantile of the samples is each step's figure: the headline's (the undisturbed cost)
    # on a CPU; the median on a GPU's host, whose jitter is no one-sided disturbance (device.py).
    quantile: float = stats.HEADLINE_QUANTILE
    # Each stretch's overhead (yours' figure less the plain twin's, ns a step), both steps built
    # afresh for each: from MIN_STRETCHES_CI on, the overhead is their median and its interval
    # the median's (the module docstring says why). Empty: one build (a GPU's timing).
    stretch_overheads_ns: tuple[float, ...] = ()
    # Why the builds ended before STRETCHES (a later build or step that raised), in words; the
    # builds finished stand. Empty: all ran.
    incomplete: str = ""

    @property
    def plain_step_ns(self) -> float:
        return stats.quantile(self.plain_ns, self.quantile)

    @property
    def subclass_step_ns(self) -> float:
        return stats.quantile(self.subclass_ns, self.quantile)

    @property
    def stretched(self) -> bool:
        """Whether the overhead and its interval come from the stretches, not one build's samples."""
        return len(self.stretch_overheads_ns) >= MIN_STRETCHES_CI

    @property
    def overhead_ns(self) -> float:
        if self.stretched:
            return stats.median(self.stretch_overheads_ns)
        return self.subclass_step_ns - self.plain_step_ns

    @property
    def overhead_ci_ns(self) -> tuple[float, float]:
        if self.stretched:
            return stats.median_ci(self.stretch_overheads_ns)
        mine_low, mine_high = stats.quantile_ci95(self.subclass_ns, self.quantile)
        plain_low, plain_high = stats.quantile_ci95(self.plain_ns, self.quantile)
        return mine_low - plain_high, mine_high - plain_low

    @property
    def share(self) -> float:
        """The subclass's share: its overhead as a fraction of the plain step."""
        return self.overhead_ns / self.plain_step_ns if self.plain_step_ns > 0 else math.nan

    @property
    def share_ci(self) -> tuple[float, float]:
        low, high = self.overhead_ci_ns
        return (low / self.plain_step_ns, high / self.plain_step_ns) if self.plain_step_ns > 0 else (math.nan, math.nan)

    def too_spread(self) -> list[tuple[str, tuple[float, ...]]]:
        """(which step, its samples) for each step whose samples are too spread to trust (the
        headline's checks; a median's spread is in its interval)."""
        if self.quantile != stats.HEADLINE_QUANTILE:
            return []
        return [(which, samples) for which, samples in (("plain", self.plain_ns), ("subclass", self.subclass_ns))
                if stats.too_spread(samples)]


def _sample(step: Callable, steps: int, lead: bool = False) -> float:
    if lead:
        step()  # untimed: refills what the step before it (another kind of step) evicted
    started = clock_ns()
    for _ in range(steps):
        step()
    return (clock_ns() - started) / steps


def steps_per_sample(step: Callable) -> int:
    """Steps a sample so that one takes about SAMPLE_NS, from the fastest of a few steps."""
    fastest = min(_sample(step, 1) for _ in range(CALIBRATION_STEPS))
    return max(1, min(MAX_STEPS_PER_SAMPLE, round(SAMPLE_NS / max(fastest, 1.0))))


def check_drift(pair: StepPair) -> list[str]:
    """The plain twin, then yours, each run alone for drift.PROBE_STEPS (drift.check)."""
    return drift.check(("plain", pair.plain), ("subclass", pair.subclass))


def balanced_orders(count: int) -> tuple[tuple[int, ...], ...]:
    """The orders of `count` steps' rounds, in turn, so that no step is favoured by its place.

    Two steps: plain, yours, then yours, plain (each runs twice in a row at a round's turn, both
    alike). More: a Williams design (a Latin square in which each step follows each other step
    equally often; its mirror added for an odd count, the rounds in an order that never runs a
    step twice in a row: _no_step_twice), since reversing the order of four steps
    every other round runs the outer two twice in a row at the turns and the inner two never:
    the same plain step at both ends read a 4-5% "overhead" (an A/A, Inductor, steps:mlp_plain)."""
    if count <= 2:
        return tuple(range(count)), tuple(reversed(range(count)))
    first, low, high = [0], 1, count - 1
    while len(first) < count:
        first.append(low)
        low += 1
        if len(first) < count:
            first.append(high)
            high -= 1
    rows = [tuple((place + shift) % count for place in first) for shift in range(count)]
    if count % 2 == 0:
        return tuple(rows)
    return _no_step_twice(rows + [row[::-1] for row in rows])


def _no_step_twice(rows: list[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """`rows` in an order (the first kept) in which no round ends with the step the next round
    starts with, the last round leading back to the first, and no such turn comes twice where
    the rounds allow it. A step run twice in a row is warmer the second time, and the low
    quantile takes its floor from those samples: with the mirrors in Williams' own order, three
    steps ran the first two twice in a row once a cycle and the third never, and an A/A of two
    copies of one step read the third slower (benchmarks/README.md, "Two versions of your step")."""
    turns_allowed = -(-len(rows) // (len(rows[0]) * (len(rows[0]) - 1)))  # ceil: each turn alike

    def extend(order: list, left: list, turns: dict):
        if not left:
            closing = (order[-1][-1], order[0][0])
            return order if closing[0] != closing[1] and turns.get(closing, 0) < turns_allowed else None
        for row in left:
            turn = (order[-1][-1], row[0])
            if turn[0] == turn[1] or turns.get(turn, 0) >= turns_allowed:
                continue
            found = extend(order + [row], [r for r in left if r is not row], {**turns, turn: turns.get(turn, 0) + 1})
            if found:
                return found
        return None

    return tuple(extend([rows[0]], rows[1:], {}) or rows)


def alternate(steps: Sequence[Callable], time_s: float = DEFAULT_TIME_S, pairs: int | None = None,
              progress: Callable[[str], None] | None = None, label: str = "",
              what: str = "the plain step and yours",
              lead: bool = False, same_count: bool = False,
              counts: tuple[int, ...] | None = None,
              reference: Sampler | None = None) -> tuple[tuple[int, ...], tuple[tuple[float, ...], ...]]:
    """`steps` timed in alternation (in the orders of balanced_orders, in turn), `time_s` each or
    `pairs` rounds: (steps a sample of each, each one's samples, per step), paired by position.
    The caller has warmed them up and set the threads; see the module docstring for the method.
    With `lead`, each sample follows one untimed step of its own (LEAD_STEP says why); with
    `same_count`, every step takes the fewest steps a sample any of them was calibrated to
    (SAME_COUNT says why); `counts` given: these steps a sample, not calibrated (more rounds
    to pool with earlier ones); `reference` given, it takes a sample every REFERENCE_EVERY_ROUNDS
    rounds, between them."""
    say = progress or (lambda message: None)
    counts = counts or tuple(steps_per_sample(step) for step in steps)
    if same_count:
        counts = (min(counts),) * len(counts)
    samples: list[list[float]] = [[] for _ in steps]
    budget_ns = int(len(steps) * time_s * 1e9)
    orders = balanced_orders(len(steps))
    with paused_gc():
        rounds_start = next_report = clock_ns()
        while True:
            for index in orders[len(samples[0]) % len(orders)]:
                samples[index].append(_sample(steps[index], counts[index], lead))
            if reference is not None and len(samples[0]) % REFERENCE_EVERY_ROUNDS == 0:
                reference.sample()
            now = clock_ns()
            done = (len(samples[0]) >= pairs if pairs is not None
                    else now - rounds_start >= budget_ns and len(samples[0]) >= MIN_PAIRS)
            if done or now >= next_report:
                say(f"{label}: timing {what} in alternation, {' and '.join(map(str, counts))} steps a sample: "
                    f"{len(samples[0])} rounds")
                next_report = now + PROGRESS_EVERY_NS
            if done:
                return counts, tuple(tuple(s) for s in samples)


def warm(steps: Sequence[Callable]) -> None:
    """Each of a stretch's freshly built `steps` run STRETCH_WARM_STEPS times, untimed."""
    for step in steps:
        for _ in range(STRETCH_WARM_STEPS):
            step()


Timed = TypeVar("Timed")


def failure_said(exc: BaseException) -> str:
    """Why a later build or step could not run, in one line: a UsageError's own words (already
    worded for the user), else the exception's type and message."""
    return str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"


def in_stretches(first: Sequence[StepPair], stretches: int, rebuild: Callable[[StepPair], StepPair],
                 steps_of: Callable[[tuple[StepPair, ...]], tuple[Callable, ...]],
                 time_one: Callable[[int, tuple[Callable, ...]], Timed],
                 take: Callable[[int, Timed], bool]) -> str:
    """The one loop of --step's and --compare --step's stretches: `time_one(index, steps)` times
    the `steps_of` the `first` builds, then of each later stretch's, every pair built afresh by
    `rebuild` (in turns, the order reversed every other stretch, as they are sampled: none always
    built second) and warmed (`warm`); `take(index, timed)` keeps each stretch's figures and says
    whether to stop. Returns '' once they ran, else why a later build or step could not run (the
    stretches taken stand); the first stretch's failure is raised."""
    for index in range(stretches):
        try:
            if index:
                built: dict[int, StepPair] = {}
                steps = None  # the last stretch's steps freed before the next are built
                for place in (reversed(range(len(first))) if index % 2 else range(len(first))):
                    built[place] = rebuild(first[place])
                steps = steps_of(tuple(built[place] for place in range(len(first))))
                warm(steps)
            else:
                steps = steps_of(tuple(first))
            timed = time_one(index, steps)
        except Exception as exc:
            if not index:
                raise
            return f"stretch {index + 1} could not run: {failure_said(exc)}"
        if take(index, timed):
            return ""
    return ""


def time_steps(pair: StepPair, time_s: float = DEFAULT_TIME_S, threads: int = 1,
               pairs: int | None = None, progress: Callable[[str], None] | None = None,
               stretches: int = STRETCHES, rebuild: Callable[[StepPair], StepPair] = rebuilt,
               reference: Sampler | None = None) -> StepTiming:
    """Time both steps of `pair` in alternation for `time_s` each (or `pairs` rounds), after
    the drift probe, in `stretches` stretches that share that time, each after the first on both
    steps built afresh by `rebuild`; see the module docstring for the method. A later build or
    step that raises ends the stretches: those finished stand, and the progress says why. The
    speed `reference`, given, is sampled between the rounds (alternate)."""
    say = progress or (lambda message: None)
    label = step_label(pair)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = clock_ns()
    if pairs is not None:  # `pairs` rounds in all (-m), as even among the stretches as they go
        stretches = max(1, min(stretches, pairs))
    counts, samples, overheads = None, ((), ()), ()

    def time_one(index: int, steps: tuple[Callable, ...]):
        rounds = None if pairs is None else pairs // stretches + (index < pairs % stretches)
        return alternate(steps, time_s / stretches, rounds, say, f"{label}, stretch {index + 1} of {stretches}",
                         lead=EAGER_LEAD, same_count=SAME_COUNT, counts=counts, reference=reference)

    def take(index: int, timed) -> bool:
        nonlocal counts, samples, overheads
        counts, more = timed
        samples = tuple(old + new for old, new in zip(samples, more))
        overheads += (stats.headline(more[1]) - stats.headline(more[0]),)
        return False

    try:
        say(f"{label}: warming up both steps and looking for drift ({drift.PROBE_STEPS} steps each)")
        drifts = check_drift(pair)
        for line in drifts:
            say(line)
        incomplete = in_stretches((pair,), stretches, rebuild, lambda built: (built[0].plain, built[0].subclass),
                                  time_one, take)
        if incomplete:
            say(f"{label}: {incomplete}; keeping the {len(overheads)} finished")
    finally:
        torch.set_num_threads(previous_threads)
    return StepTiming(pair.spec, pair.batch, counts, *samples, tuple(drifts), threads,
                      (clock_ns() - started) / 1e9, stretch_overheads_ns=overheads, incomplete=incomplete)


def step_label(pair: StepPair) -> str:
    return pair.spec + (f" at batch {pair.batch}" if pair.batch is not None else "")


# The share under which a subclass no longer matters to a step (fastai's question, issue 48).
NEGLIGIBLE_SHARE = 0.05


def falls_under(timings: list[StepTiming], share: float = NEGLIGIBLE_SHARE) -> int | None:
    """The smallest batch from which the subclass's share stays under `share` at every larger
    batch tried; None where it never does."""
    found = None
    for timing in sorted(timings, key=lambda t: t.batch or 0, reverse=True):
        if not timing.share < share:
            break
        found = timing.batch
    return found
