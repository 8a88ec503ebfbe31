"""`--step --compiled`: your step eager and under `torch.compile`, each plain and with your
subclass, four figures from one alternating run: what compile removed of the subclass's
overhead a step, and what stays (timed here; its Python calls counted by owner: stays.py).

Why it is built this way:
- The compiled steps are a second build of your factory (`factory(plain=...)` once more), so
  the eager and the compiled step of a side never share a model or an optimizer: each keeps
  its own state, as two programs would.
- Each side is compiled after `torch._dynamo.reset()`, so its CompileRecord (seconds, graph
  breaks, recompiles, failure: overrides/compiled/dynamo.py) is what your program alone would
  see. Both sides' steps share code (the factory's inner function, the optimizer's methods), so
  the side compiled second would otherwise read the first side's cache entries as recompiles
  ("expected type of 'w1' to be a tensor type"). The plain side, whose entries the second reset
  dropped, is compiled again afterwards for the timing; that record is not reported.
- Compile time is reported apart and kept out of the figures: the first call compiles, a few
  more follow (a recompile on the second call is compiled then), COMPILED_WARM_STEPS more warm
  the compiled steps, and any frame compiled while timing is counted and said.
- The four are timed together by overrides/step/timing.py's alternation, the eager drift probe
  (hooks on your leaf tensors) first; the compiled steps are not probed: a hook on a leaf would
  enter the compiled graph. Each sample follows one untimed step of its own (timing.LEAD_STEP).
  Differences of headlines carry intervals from the project's
  statistics, widened as `--compiled`'s are (overrides/compiled/measure.py), by a share of each
  figure measured on an A/A step (STEP_SAME_CODE_SPREAD).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import torch

from overrides.clock import stats
from overrides.clock.timer import clock_ns
from overrides.compiled import dynamo
from overrides.compiled.measure import Estimate
from overrides.step import drift
from overrides.step.factory import StepPair
from overrides.step.stays import COUNTED_STEPS, Stays, count_stays
from overrides.step.timing import DEFAULT_TIME_S, LEAD_STEP, StepTiming, alternate, check_drift, step_label

KINDS = ("eager plain", "eager yours", "compiled plain", "compiled yours")
# Two copies of the same plain step taking turns with the other two still differ by more than
# their samples say: an A/A (steps:mlp_plain four ways, Inductor, benchmarks/step_compiled_aa.py)
# read the second compiled copy 0.7-2.5% faster in 9 of 10 runs (the eager copy 0.3-1.4% in 9),
# whichever copy was compiled again and whatever the order; --compiled's SAME_CODE_SPREAD (0.8%,
# measured on single ops) held zero in 7 of 10. With this share of each figure joining every
# interval here (and timing.LEAD_STEP), 10 of 10 eager and 9 of 10 compiled, at load ~6.
STEP_SAME_CODE_SPREAD = 0.015
# Steps of each compiled step after its compile's calls, before timing: the eager steps get the
# drift probe's steps as their warm-up; these get a few (a compiled step is warm once its guards
# pass, and steps_per_sample's calibration runs a few more).
COMPILED_WARM_STEPS = 10


@dataclasses.dataclass(frozen=True)
class CompiledPair:
    """Both steps of a second build under torch.compile, ready (None where compile failed), and
    what compiling each did."""

    plain: Callable | None
    subclass: Callable | None
    plain_compile: dynamo.CompileRecord
    subclass_compile: dynamo.CompileRecord


@dataclasses.dataclass(frozen=True)
class EagerAndCompiled:
    """One step's four figures, sample by sample, from one alternating run, and each side's
    CompileRecord."""

    eager: StepTiming  # eager plain and yours, with the eager drift probe's findings
    backend: str
    compiled_steps_per_sample: tuple[int, int]  # plain, yours (0: not timed, compile failed)
    compiled_plain_ns: tuple[float, ...]  # empty where that side's compile failed
    compiled_subclass_ns: tuple[float, ...]
    plain_compile: dynamo.CompileRecord
    subclass_compile: dynamo.CompileRecord
    compiled_while_timing: int = 0  # frames compiled while timing: the compiled figures hold compile time
    counted: Stays | None = None  # what stays, named: both compiled steps' Python calls (stays.py)

    def samples(self, kind: str) -> tuple[float, ...]:
        return dict(zip(KINDS, (self.eager.plain_ns, self.eager.subclass_ns, self.compiled_plain_ns,
                                self.compiled_subclass_ns)))[kind]

    def step_ns(self, kind: str) -> float:
        """The headline of one of the four (ns a step); NaN where it was not timed."""
        samples = self.samples(kind)
        return stats.headline(samples) if samples else math.nan

    def step_ci_ns(self, kind: str) -> tuple[float, float]:
        samples = self.samples(kind)
        return stats.quantile_ci95(samples) if samples else (math.nan, math.nan)

    def _difference(self, plus: Sequence[str], minus: Sequence[str]) -> Estimate | None:
        if not all(self.samples(kind) for kind in (*plus, *minus)):
            return None
        value, (low, high) = stats.headline_difference([self.samples(k) for k in plus],
                                                       [self.samples(k) for k in minus], STEP_SAME_CODE_SPREAD)
        return Estimate(value, low, high)

    @property
    def eager_overhead(self) -> Estimate | None:
        """What your subclass adds to a step, eager."""
        return self._difference(("eager yours",), ("eager plain",))

    @property
    def stays(self) -> Estimate | None:
        """What it still adds once both steps are compiled."""
        return self._difference(("compiled yours",), ("compiled plain",))

    @property
    def removed(self) -> Estimate | None:
        """What compile removed of the overhead: the eager overhead less what stays."""
        return self._difference(("eager yours", "compiled plain"), ("eager plain", "compiled yours"))

    @property
    def compile_gain(self) -> Estimate | None:
        """What compile saves of the plain step: eager plain less compiled plain."""
        return self._difference(("eager plain",), ("compiled plain",))


def compile_pair(pair: StepPair, backend: str = dynamo.DEFAULT_BACKEND,
                 progress: Callable[[str], None] | None = None) -> CompiledPair:
    """Both steps of `pair` compiled, each after a Dynamo reset (its record its own), then the
    plain one compiled again for the timing (see the module docstring)."""
    say = progress or (lambda message: None)
    label = step_label(pair)
    say(f"{label}: compiling the plain step with {backend}")
    plain = dynamo.compile_call(pair.plain, (), backend, reset=True)
    say(f"{label}: compiling your step with {backend}")
    subclass = dynamo.compile_call(pair.subclass, (), backend, reset=True)
    plain_call = plain.call
    if plain_call is not None:
        say(f"{label}: compiling the plain step again beside yours, for the timing")
        plain_call = dynamo.compile_call(pair.plain, (), backend, reset=False).call
    return CompiledPair(plain_call, subclass.call, plain.record, subclass.record)


def time_eager_and_compiled(eager: StepPair, compiled_build: StepPair, backend: str = dynamo.DEFAULT_BACKEND,
                            time_s: float = DEFAULT_TIME_S, threads: int = 1, pairs: int | None = None,
                            progress: Callable[[str], None] | None = None) -> EagerAndCompiled:
    """`eager`'s two steps as they are and `compiled_build`'s (a second build of the same
    factory) under torch.compile, timed together; compile first, apart."""
    say = progress or (lambda message: None)
    label = step_label(eager)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)  # Inductor bakes the thread count into its kernels: compile under it too
    started = clock_ns()
    try:
        say(f"{label}: warming up the eager steps and looking for drift ({drift.PROBE_STEPS} steps each)")
        drifts = check_drift(eager)  # before compiling: what a compile leaves alive is not the step's
        compiled = compile_pair(compiled_build, backend, say)
        live = [step for step in (compiled.plain, compiled.subclass) if step is not None]
        before = dynamo.compilations()
        for step in live:
            for _ in range(COMPILED_WARM_STEPS):
                step()
        timed = [eager.plain, eager.subclass] + live
        counts, samples = alternate(timed, time_s, pairs, say, label,
                                    what="the four steps" if len(timed) == 4 else f"{len(timed)} steps",
                                    lead=LEAD_STEP)
        compiled_while = dynamo.compilations() - before
        counted = None
        if compiled.plain is not None and compiled.subclass is not None:
            say(f"{label}: counting both compiled steps' Python calls ({COUNTED_STEPS} steps each)")
            counted = count_stays(compiled.plain, compiled.subclass, eager.user_dir)
    finally:
        torch.set_num_threads(previous_threads)
    wall_s = (clock_ns() - started) / 1e9
    timing = StepTiming(eager.spec, eager.batch, counts[:2], samples[0], samples[1], tuple(drifts), threads, wall_s)
    rest = iter(zip(counts[2:], samples[2:]))
    plain_count, plain_ns = next(rest) if compiled.plain is not None else (0, ())
    subclass_count, subclass_ns = next(rest) if compiled.subclass is not None else (0, ())
    return EagerAndCompiled(timing, backend, (plain_count, subclass_count), plain_ns, subclass_ns,
                            compiled.plain_compile, compiled.subclass_compile, compiled_while, counted)
