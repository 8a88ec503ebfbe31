"""The one Timer core: every wall-clock figure this project prints comes from here.

How it times, and why:
- The statement is pasted `UNROLL` times into a generated function, inside a `for` loop, so
  the loop's own cost is spread over many calls; the operands and `torch` are fast locals.
- The clock is `time.perf_counter_ns` (integer nanoseconds; a read is far from free in a VM,
  but it is paid once per sample of ~1 ms, so it is lost in the noise after the empty-loop
  subtraction; figures: benchmarks/history.md, 'Docstring figures').
- The same generated function with an empty body is timed alongside, and its undisturbed cost
  (loop turns plus the two clock reads: the same low quantile of the empty samples as the
  headline takes of the real ones) is removed from every sample; the output says so.
- Targets are timed round-robin: one sample of each target in turn, over and over, the order
  reversed every other round. On a shared machine the speed drifts by tens of percent for
  seconds at a time; round-robin puts that drift on every target alike, instead of on
  whichever target happened to run during a slow spell.
- GC is off while timing, `torch.set_num_threads` is set (1 by default), every target is warmed
  up before it is calibrated, and every per-call sample is kept.
- Calibration sizes samples from the fastest of probes spread over tens of milliseconds, and is
  checked once against the run's own samples: noise only adds time, so samples that run well
  faster than calibration measured prove a slow spell fooled it; those targets are resized and
  the rounds start over.
- A target may name a context (a `TorchFunctionMode`, a `TorchDispatchMode`, ...) that must be
  active while its statement runs. It is entered around each sample and exited after it,
  outside the clock reads, because round-robin moves to another target after every sample.
- A reference target (overrides/clock/speed.py: the run's own speed) may be sampled beside the
  targets, every REFERENCE_EVERY rounds, in the same rotation; or on demand (Sampler).
- A target that raises is recorded as failed and dropped from the rotation; the others go on.
  Ctrl-C stops the rounds and returns what was measured so far, marked interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import time
from typing import Callable, ContextManager, Sequence

from overrides.clock import cuda, stats
# The generated loops (and the constants they are made with) are loops.py's; named here too,
# where the counting, the flamegraph and the tests have always imported them.
from overrides.clock.loops import UNROLL, WARM_CALLS, clock_ns, compile_hot_loop, compile_loop  # noqa: F401
from overrides.progress import counted

TARGET_SAMPLE_NS = 1_000_000  # ~1 ms a sample: far above clock cost, far below the slow spells
WARMUP_NS = 50_000_000  # 50 ms per target: the 3.11 interpreter specialises within a few calls
# Calibration times the warm probe (UNROLL calls) and an empty probe in CALIBRATION_BURSTS bursts
# of CALIBRATION_PROBES each, CALIBRATION_GAP_S apart, and sizes samples from the fastest of each:
# noise only adds time, so the fastest is the undisturbed cost. Compiling a fresh loop per trial
# (the first version) timed cold code and gave SubTensor 50 calls in one run and 150 in the next;
# 30 probes back to back (the second, their 10th percentile) lasted ~3 ms, and one slow spell
# covering them sized Tensor at 250 calls a sample (0.39 ms instead of ~1 ms). Spread over ~60 ms,
# a spell has to cover all four bursts. A burst stops early once it has lasted CALIBRATION_BURST_NS
# (after two probes): WrapperDispatchTensor's probes take 1.3 ms each, and its calibration took
# 101-116 ms with six of them a burst. Now 61-91 ms a target over the catalog (torch.add, x.shape,
# x+y), quiet or with a CPU hog on each core.
CALIBRATION_BURSTS = 4
CALIBRATION_PROBES = 6  # per burst: the first after a gap runs cold, the rest are warm
CALIBRATION_BURST_NS = 3_000_000
CALIBRATION_GAP_S = 0.02
# Slow spells can last seconds, longer than calibration can wait. Once, after RECALIBRATE_AT of
# the run's floor (and at least RECALIBRATE_MIN_ROUNDS rounds), each calibrated target's fastest sample
# is checked against its calibration: per call (both with the loop's cost removed) below
# RECALIBRATE_BELOW of what calibration measured means calibration ran in a slow spell. Such a
# target is resized from that sample, and every target's samples so far are dropped (round-robin
# is fair only while all targets cover the same stretch of time): the run gets RECALIBRATE_AT
# longer, and only when calibration was fooled. Samples slower than calibration are left alone:
# that is the run's own slow spell, not a wrong calibration. Of the floor (min_time_s), not of
# the cap (the first version): a run that stops near its floor (the drift rule, DEFAULT_PRECISION)
# lost 30% of it to a check at a tenth of the cap, 1.2 s of bench.py's 4.
RECALIBRATE_AT = 0.1  # of the run's floor (or of its fixed samples)
RECALIBRATE_MIN_ROUNDS = 10
# Fastest sample / calibration over the catalog: 0.87-1.05, quiet or beside CPU hogs; below 0.7 no jitter.
RECALIBRATE_BELOW = 0.7
MAX_CALLS_PER_SAMPLE = 10_000_000
# The empty-loop cost removed from every sample: the same low quantile of the empty samples as the
# headline takes of the real ones, the undisturbed cost an undisturbed sample carries. The median
# (the first version) carried the disturbed and the cold empty samples too (each runs once, right
# after another loop) and removed too much: over the seed cases, 2.2-3.5x the 2nd percentile,
# 0.3-1.3 ns a call quiet, 0.4-2.3 beside a CPU hog a core, up to ~10 ns where the clock is slower.
EMPTY_LOOP_QUANTILE = stats.HEADLINE_QUANTILE
MIN_SAMPLES = 20  # fewer than this and no spread or interval means anything
DEFAULT_MIN_TIME_S = 3.0  # per target, when no precision is asked for (TimerConfig.precision)
# The stopping rule bench.py uses: rounds go on for at least STOP_FLOOR_S per target, then stop
# as soon as every target's headline is known to within DEFAULT_PRECISION (half its 95%
# interval, relative to it), and at the latest after DEFAULT_MAX_TIME_S per target. A quiet
# machine finishes early; a busy one, whose samples spread, keeps sampling up to the cap.
# Chosen in benchmarks/seed_vs_bench.py (see benchmarks/README.md).
# Before the cap, rounds also stop once more samples no longer narrow what the figures can say
# (TimerConfig.drift_max_width, stopped "drift"): the headlines moved between the first and second
# half of the run by more than sampling explains (stats.drift, all targets together, as the
# machine moves them) and every target's interval is already within that move and within
# DRIFT_MAX_WIDTH. The 95% interval covers sampling alone, as if the machine kept one speed;
# more samples narrow it, not the machine's move, which is the larger part once it is the
# wider. Where no case reached +-0.2%, every run sampled to the cap, and a headline known to
# +-0.2% moved by several percent when the machine changed speed; runs cut where this rule
# stops spread a little more across runs than runs sampled to the cap, and less than the seed
# method's (figures: benchmarks/README.md ("bench.py within a third of the seed method's time").
DEFAULT_PRECISION = 0.002
# Most of bench.py's time once the drift rule stops near it: 0.75 s a case keeps the run within
# a third of the seed method's time where the seed takes ~21 s (1 s did not, by turns); runs cut
# at 0.75 and 1 s spread alike across runs (benchmarks/stop_replay.py, the section above).
STOP_FLOOR_S = 0.75
DEFAULT_MAX_TIME_S = 3.0
# The widest interval (half of it, relative) a drift stop leaves on a figure: within the 1-2% two
# runs of one build agree to (docs/timing.md). A run whose halves straddle a change of the
# machine's speed by 60% saw a move that large and read +-8-34% at its floor; it samples on.
DRIFT_MAX_WIDTH = 0.01
PRECISION_CHECK_EVERY_NS = 200_000_000  # sorting every target's samples costs ~1 ms
PROGRESS_EVERY_NS = 1_000_000_000  # progress callback cadence
# A reference target (overrides/clock/speed.py: the run's speed) takes one sample every this many
# rounds, in the same round-robin, so it covers the whole run as the cases do: ~1 ms per two
# rounds, about 12% more time beside four cases. Every fourth round (the first version) left it
# ~150 samples in a 12-s run, its 2nd percentile on the 3rd fastest, and a run beside another tenant
# read it 10% high while the cases' figures were not.
REFERENCE_EVERY = 2

_clock = clock_ns  # loops.py's: the one clock


@contextlib.contextmanager
def paused_gc():
    """The collector as time_targets' rounds have it: collected once, off, then back as it was."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable() if was_enabled else None


@dataclasses.dataclass(frozen=True)
class Target:
    """One thing to time: a statement over operands `x`, `y`."""

    name: str
    stmt: str
    make_operands: Callable[[], tuple]
    # A fresh context manager to hold active while the statement runs (None: nothing). Entered
    # per sample, outside the clock reads, so it adds no per-call cost.
    context: Callable[[], ContextManager] | None = None
    # More names the statement may use, as fast locals like torch and F (a compiled function:
    # overrides/compiled/measure.py times `op(x, y)` eager and compiled in one core).
    names: tuple[tuple[str, object], ...] = ()

    def active(self) -> ContextManager:
        return self.context() if self.context is not None else contextlib.nullcontext()


@dataclasses.dataclass(frozen=True)
class TimerConfig:
    # Per target, when `samples` is not fixed: the time to sample for (precision None), or the
    # floor before the precision is checked.
    min_time_s: float = DEFAULT_MIN_TIME_S
    calls_per_sample: int | None = None  # None: calibrate to ~TARGET_SAMPLE_NS
    samples: int | None = None  # None: as many rounds as the time budget allows
    threads: int = 1
    # Stop once every target's headline is this precise (half its 95% interval, relative),
    # after min_time_s and at the latest after max_time_s per target. None: no such rule.
    precision: float | None = None
    max_time_s: float | None = None
    # With a precision: also stop before the cap once the machine's own move, not sampling,
    # limits every figure, each interval within this (see DEFAULT_PRECISION, DRIFT_MAX_WIDTH);
    # None samples on to the precision or the cap.
    drift_max_width: float | None = DRIFT_MAX_WIDTH
    # On a CUDA device, also time the synchronized cost and the GPU's own per call (each sample,
    # beside the host's: overrides/clock/cuda.py). The A/B workers judge on the host's alone.
    device_figures: bool = True

    def cap_s(self) -> float:
        return max(self.min_time_s, self.max_time_s or 0.0) if self.precision else self.min_time_s


@dataclasses.dataclass(frozen=True)
class TimedTarget:
    """What the core measured for one target: per-call samples, loop cost already removed."""

    name: str
    stmt: str
    calls_per_sample: int
    samples_ns: tuple[float, ...]
    loop_overhead_ns: float  # per call, already subtracted from every sample
    error: str | None = None
    device: str = "cpu"  # "cuda": samples_ns are the host's cost per call (overrides/clock/cuda.py)
    # On CUDA: ("synced", per-call samples), ("gpu", per-call samples), their empty bursts removed.
    device_ns: tuple[tuple[str, tuple[float, ...]], ...] = ()


@dataclasses.dataclass(frozen=True)
class TimingRun:
    targets: tuple[TimedTarget, ...]
    config: TimerConfig
    rounds: int
    wall_s: float
    interrupted: bool
    # Why sampling stopped: "precision" (every headline precise enough), "drift" (the machine's
    # movement, not sampling, limits every headline: see DEFAULT_PRECISION), "time cap", "time"
    # (min_time_s, no precision asked), "samples given" (-m), "interrupted", "nothing to time".
    stopped: str = "time"
    # The reference target's samples, when one was given (see REFERENCE_EVERY).
    reference: TimedTarget | None = None
    # The targets whose calibration a slow spell fooled, resized from their samples (see
    # RECALIBRATE_BELOW): the run calibrated during a slow spell, and says so.
    recalibrated: tuple[str, ...] = ()


def calls_for(per_call_ns: float, target_ns: int = TARGET_SAMPLE_NS) -> int:
    """Calls per sample (a multiple of UNROLL) so that a sample takes about `target_ns`."""
    calls = round(target_ns / max(per_call_ns, 1e-3) / UNROLL) * UNROLL
    return min(MAX_CALLS_PER_SAMPLE, max(UNROLL, calls))


def probe_per_call_ns(probe: Callable[[tuple], int], operands: tuple, mode: str = "cpu") -> float:
    """The undisturbed per-call cost of the statement in `probe`, a warmed-up
    `compile_loop(stmt, UNROLL, mode=mode)`: the fastest probe minus the fastest empty probe (its
    loop turn and clock reads), from bursts spread in time; see CALIBRATION_BURSTS for why."""
    empty = compile_loop("", UNROLL, mode=mode)
    fastest = fastest_empty = None
    for burst in range(CALIBRATION_BURSTS):
        if burst:
            time.sleep(CALIBRATION_GAP_S)
        burst_ends = _clock() + CALIBRATION_BURST_NS
        for probe_index in range(CALIBRATION_PROBES):
            took, empty_took = probe(operands), empty(operands)
            fastest = took if fastest is None else min(fastest, took)
            fastest_empty = empty_took if fastest_empty is None else min(fastest_empty, empty_took)
            if probe_index >= 1 and _clock() > burst_ends:
                break
    return max(fastest - fastest_empty, 1) / UNROLL


def calibrate_calls(probe: Callable[[tuple], int], operands: tuple,
                    target_ns: int = TARGET_SAMPLE_NS) -> int:
    """Calls per sample so that an undisturbed sample takes about `target_ns`."""
    return calls_for(probe_per_call_ns(probe, operands), target_ns)


class _Slot:
    """Mutable bookkeeping for one target during a run (never leaves this module)."""

    def __init__(self, target: Target):
        self.target = target
        self.operands: tuple = ()
        self.loop: Callable | None = None
        self.empty_loop: Callable | None = None
        self.calls = 0
        # The per-call cost calibration measured (None: calls were given), for the check of
        # RECALIBRATE_BELOW.
        self.calibrated_ns: float | None = None
        self.raw_ns: list[int] = []
        self.empty_ns: list[int] = []
        self.error: str | None = None
        self.device = "cpu"
        self.device_figures = False  # time the synced and GPU figures too (CUDA only)
        # On CUDA: mode -> (loop, empty loop, raw ns, empty ns) of the synced and GPU figures.
        self.extra: dict[str, tuple[Callable, Callable, list[int], list[int]]] = {}

    @property
    def mode(self) -> str:
        """How the headline loop reads the clock: "cpu", or "host" on a CUDA device."""
        return "host" if self.device == "cuda" else "cpu"

    def fail(self, exc: BaseException, when: str) -> None:
        self.error = f"{when}: {type(exc).__name__}: {exc}"

    def prepare(self, config: TimerConfig) -> None:
        try:
            self.operands = tuple(self.target.make_operands())
        except Exception as exc:  # a failed case must not sink the others
            self.fail(exc, "building operands")
            return
        try:
            self.device = cuda.device_of(self.operands)
            self.device_figures = self.device == "cuda" and config.device_figures
            probe = compile_loop(self.target.stmt, UNROLL, mode=self.mode, names=self.target.names)
            with self.target.active():
                deadline = _clock() + WARMUP_NS
                while _clock() < deadline:
                    probe(self.operands)
                if config.calls_per_sample:
                    self.calls = config.calls_per_sample
                else:
                    self.calibrated_ns = probe_per_call_ns(probe, self.operands, self.mode)
                    self.calls = calls_for(self.calibrated_ns)
            if self.device == "cuda":
                self.calls = cuda.capped_calls(self.calls, UNROLL)
            self.resize(self.calls)
        except Exception as exc:
            self.fail(exc, "warm-up")

    def resize(self, calls: int) -> None:
        """Time `calls` calls a sample from now on; the samples taken so far are dropped."""
        self.calls = calls
        self.loop = compile_loop(self.target.stmt, calls, mode=self.mode, names=self.target.names)
        self.empty_loop = compile_loop("", calls, mode=self.mode)
        self.extra = {}
        if self.device_figures:
            for mode in cuda.MODES[1:]:
                self.extra[mode] = (compile_loop(self.target.stmt, calls, mode=mode, names=self.target.names),
                                    compile_loop("", calls, mode=mode), [], [])
            cycles = cuda.sleep_cycles(self.calibrated_ns or cuda.UNCALIBRATED_HOST_NS, calls)
            for loop in self.extra["gpu"][:2]:
                loop.__globals__["_sleep_cycles"][0] = cycles
        self.drop_samples()

    def drop_samples(self) -> None:
        self.raw_ns, self.empty_ns = [], []
        for _, _, raw, empty in self.extra.values():
            raw.clear()
            empty.clear()

    def fastest_per_call_ns(self) -> float:
        """The fastest sample's per-call cost, the fastest empty sample's removed."""
        return (min(self.raw_ns) - min(self.empty_ns)) / self.calls

    def recalibrated_calls(self) -> int | None:
        """New calls per sample when this target's samples ran well faster than calibration
        measured (a slow spell fooled it, see RECALIBRATE_BELOW), else None."""
        if self.calibrated_ns is None or not self.raw_ns or self.error is not None:
            return None
        fastest = self.fastest_per_call_ns()
        if fastest >= RECALIBRATE_BELOW * self.calibrated_ns:
            return None
        calls = calls_for(fastest)
        return calls if calls != self.calls else None

    def sample(self) -> None:
        try:
            with self.target.active():
                raw_ns = self.loop(self.operands)
                extra = [(loop(self.operands), empty(self.operands))
                         for loop, empty, _, _ in self.extra.values()]
        except Exception as exc:
            self.fail(exc, f"sample {len(self.raw_ns) + 1}")
            return
        self.raw_ns.append(raw_ns)
        self.empty_ns.append(self.empty_loop(self.operands))
        for (raw, empty), (_, _, raws, empties) in zip(extra, self.extra.values()):
            raws.append(raw)
            empties.append(empty)

    def precision(self) -> float:
        """Half the 95% interval of this target's headline, relative to it (inf: unknown)."""
        if len(self.raw_ns) < MIN_SAMPLES:
            return math.inf
        low, high = stats.quantile_ci95(self.raw_ns)
        head = stats.headline(self.raw_ns)
        return (high - low) / 2 / head if head > 0 else math.inf

    def result(self) -> TimedTarget:
        if not self.raw_ns or not self.empty_ns:
            return TimedTarget(self.target.name, self.target.stmt, self.calls, (), 0.0,
                               self.error or "no samples taken")
        empty_ns = stats.quantile(self.empty_ns, EMPTY_LOOP_QUANTILE)
        per_call = tuple((raw - empty_ns) / self.calls for raw in self.raw_ns)
        device_ns = tuple((mode, tuple((raw - stats.quantile(empties, EMPTY_LOOP_QUANTILE)) / self.calls
                                       for raw in raws))
                          for mode, (_, _, raws, empties) in self.extra.items() if raws and empties)
        return TimedTarget(self.target.name, self.target.stmt, self.calls, per_call,
                           empty_ns / self.calls, self.error, self.device, device_ns)


class Sampler:
    """One target sampled on demand by the core's loops: a step's speed reference (step/timing.py)."""

    def __init__(self, target: Target, config: TimerConfig | None = None):
        self._slot = _Slot(target)
        self._slot.prepare(dataclasses.replace(config or TimerConfig(), calls_per_sample=None))

    def sample(self) -> None:  # none once the target raised: result() says why
        if self._slot.error is None:
            self._slot.sample()

    def result(self) -> TimedTarget:
        return self._slot.result()


def _why_stop(live: list[_Slot], config: TimerConfig) -> str | None:
    """"precision" when every headline is within config.precision, "drift" when the machine's
    move between the run's halves is seen and every interval lies within it and within
    config.drift_max_width (see DEFAULT_PRECISION), else None: more samples still narrow what the
    figures say."""
    widths = [slot.precision() for slot in live]
    if all(width <= config.precision for width in widths):
        return "precision"
    if config.drift_max_width is not None:
        moved = stats.drift([slot.raw_ns for slot in live])
        limit = min(abs(moved.shift), config.drift_max_width) if moved is not None else 0.0
        if moved is not None and moved.seen and all(width <= limit for width in widths):
            return "drift"
    return None


def _recalibrate(live: list[_Slot], say: Callable[[str], None]) -> tuple[str, ...]:
    """Resize every target whose calibration a slow spell fooled (see RECALIBRATE_BELOW) and
    drop every target's samples, so the rounds start over; their names (none: nothing touched)."""
    resized = {slot: calls for slot in live if (calls := slot.recalibrated_calls())}
    if not resized:
        return ()
    for slot in live:
        if slot in resized:
            say(f"recalibrating {slot.target.name}: its fastest sample ran "
                f"{slot.fastest_per_call_ns():,.0f} ns a call, calibration measured "
                f"{slot.calibrated_ns:,.0f} (slowed); {slot.calls} -> {resized[slot]} calls a "
                "sample, rounds start over")
            slot.resize(resized[slot])
        else:
            slot.drop_samples()  # the same code keeps running: no fresh, unspecialised loop
    return tuple(slot.target.name for slot in resized)


def time_targets(
    targets: Sequence[Target],
    config: TimerConfig = TimerConfig(),
    progress: Callable[[str], None] | None = None,
    reference: Target | None = None,
) -> TimingRun:
    """Time every target round-robin; see the module docstring for the method. A `reference`
    target is sampled every REFERENCE_EVERY rounds beside them (always calibrated, never part of
    the stopping rule), and returned apart."""
    import torch  # here, not at the top: bench.py reads this module's defaults before torch

    say = progress or (lambda message: None)
    slots = [_Slot(t) for t in targets]
    reference_slot = _Slot(reference) if reference is not None else None
    previous_threads = torch.get_num_threads()
    started = _clock()
    rounds = 0
    interrupted = False
    stopped = "nothing to time"
    recalibrated: tuple[str, ...] = ()
    torch.set_num_threads(config.threads)
    try:
        for index, slot in enumerate(slots, 1):
            say(f"warming up and calibrating {slot.target.name} ({index}/{len(slots)})")
            slot.prepare(config)
        if reference_slot is not None:
            say(f"warming up and calibrating the {reference_slot.target.name}")
            reference_slot.prepare(dataclasses.replace(config, calls_per_sample=None))
            if reference_slot.error is not None:
                reference_slot = None
        with paused_gc():
            live = [s for s in slots if s.error is None]
            budget_ns = int(config.min_time_s * 1e9) * len(live)
            cap_ns = int(config.cap_s() * 1e9) * len(live)
            rounds_start = next_report = next_check = _clock()
            checked = config.calls_per_sample is not None  # given calls: nothing to recalibrate
            while live:
                order = live if rounds % 2 == 0 else live[::-1]
                for slot in order:
                    slot.sample()
                if reference_slot is not None and rounds % REFERENCE_EVERY == 0:
                    reference_slot.sample()
                rounds += 1
                live = [s for s in live if s.error is None]
                now = _clock()
                if config.samples is not None:
                    done = rounds >= config.samples
                    fraction = into_floor = rounds / config.samples
                    stopped = "samples given"
                else:
                    elapsed = now - rounds_start
                    done = False
                    if elapsed >= budget_ns and rounds >= MIN_SAMPLES:
                        if config.precision is None:
                            done, stopped = True, "time"
                        elif elapsed >= cap_ns:
                            done, stopped = True, "time cap"
                        elif now >= next_check:
                            next_check = now + PRECISION_CHECK_EVERY_NS
                            why = _why_stop(live, config)
                            if why is not None:
                                done, stopped = True, why
                    fraction = 1.0 if done else min(1.0, elapsed / max(cap_ns, 1))
                    into_floor = elapsed / max(budget_ns, 1)
                if done or now >= next_report:
                    say(f"timing {counted(len(live), 'case')} round-robin: {fraction:4.0%} "
                        f"(round {rounds})")
                    next_report = now + PROGRESS_EVERY_NS
                if done:
                    break
                if not checked and rounds >= RECALIBRATE_MIN_ROUNDS and into_floor >= RECALIBRATE_AT:
                    checked = True
                    recalibrated = _recalibrate(live, say)
                    if recalibrated:
                        if reference_slot is not None:
                            reference_slot.drop_samples()
                        rounds = 0
                        rounds_start = next_report = _clock()
    except KeyboardInterrupt:
        interrupted = True
        stopped = "interrupted"
        say(f"interrupted after {counted(rounds, 'round')}; keeping what was measured")
    finally:
        torch.set_num_threads(previous_threads)
    wall_s = (_clock() - started) / 1e9
    return TimingRun(tuple(s.result() for s in slots), config, rounds, wall_s, interrupted, stopped,
                     reference_slot.result() if reference_slot is not None else None, recalibrated)
