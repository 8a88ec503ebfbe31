"""An op's four figures, eager and compiled, each on plain tensors and on the subclass: what
`torch.compile` removed of the subclass's overhead, and what stays per call.

Why it is built this way:
- One function per kind of operand, `def op(x, y): return STMT`, run as it is (eager) and
  under `torch.compile` (compiled); the Timer core times the statement `op(x, y)` for all four,
  so the only difference between a row's eager and compiled figures is compile.
- The plain figures are the case's baseline (plain Tensor, or your case's plain twin): the
  same figures `bench.py` quotes an overhead against.
- Compiling happens before timing and is reported apart (overrides/compiled/dynamo.py): its
  seconds never enter a per-call figure. The first call compiles and a few more follow, so a
  recompile on the second call is compiled, recorded, and out of the timing too; a compile that
  still happens while timing is counted and said.
- The four are timed round-robin in one run of the Timer core (overrides/clock/timer.py), so the
  machine's drift falls on all four alike; each (case, op) is a run of its own, with Dynamo reset
  before it, so no earlier compile weighs on it.
- Overheads and what compile removed are differences of headlines, with intervals from the
  project's statistics (clock/stats.headline_difference).
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Callable, Sequence

from overrides.cases.casenames import Case
from overrides.cases.ops import Op, not_applicable_reason
from overrides.clock import stats
from overrides.clock.timer import Target, TimerConfig, time_targets
from overrides.compiled import dynamo
from overrides.environment import Environment
from overrides.results import CaseResult

KINDS = ("eager plain", "eager subclass", "compiled plain", "compiled subclass")
# Two targets of the same code in one round-robin still differ by more than their samples say:
# plain Tensor against a second copy of itself (benchmarks/compiled_aa.py, Inductor) read -8..+6 ns
# on ~1,170 ns eager (up to 0.7%) and -136..+15 ns on ~14,200 ns compiled (up to 0.95%: the
# second compiled copy ran faster in 27 of 28 runs, whichever place it took in the round-robin),
# the intervals from the samples alone excluding zero in most runs. This share of each figure
# joins every interval here (stats.headline_difference), so an A/A holds zero.
SAME_CODE_SPREAD = 0.008
STATEMENT = "op(x, y)"  # what the Timer core times for all four: the function, eager or compiled


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A difference of headlines (ns a call) and its 95% interval."""

    value_ns: float
    low_ns: float
    high_ns: float

    @classmethod
    def of(cls, plus: Sequence[CaseResult], minus: Sequence[CaseResult]) -> "Estimate | None":
        if not all(r.ok for r in (*plus, *minus)):
            return None
        value, (low, high) = stats.headline_difference([r.samples_ns for r in plus], [r.samples_ns for r in minus],
                                                       SAME_CODE_SPREAD)
        return cls(value, low, high)

    @property
    def covers_zero(self) -> bool:
        return not math.isnan(self.low_ns) and self.low_ns <= 0 <= self.high_ns


@dataclasses.dataclass(frozen=True)
class CompiledOp:
    """One case and op: its four figures (CaseResults: every sample kept), and what compile did
    with the plain function and with the subclass's."""

    case: str
    op: str
    stmt: str
    baseline: str
    eager_plain: CaseResult | None = None
    eager_subclass: CaseResult | None = None
    compiled_plain: CaseResult | None = None
    compiled_subclass: CaseResult | None = None
    plain_compile: dynamo.CompileRecord | None = None
    subclass_compile: dynamo.CompileRecord | None = None
    not_applicable: str | None = None
    compiled_while_timing: int = 0  # frame compiles during the timing: those figures hold compile time
    interrupted: bool = False  # Ctrl-C during its timing: the figures hold what was sampled

    def figures(self) -> tuple[CaseResult | None, ...]:
        return self.eager_plain, self.eager_subclass, self.compiled_plain, self.compiled_subclass

    def _estimate(self, plus, minus) -> Estimate | None:
        if any(r is None for r in (*plus, *minus)):
            return None
        return Estimate.of(plus, minus)

    @property
    def eager_overhead(self) -> Estimate | None:
        """What the subclass adds to a call, eager."""
        return self._estimate((self.eager_subclass,), (self.eager_plain,))

    @property
    def compiled_overhead(self) -> Estimate | None:
        """What the subclass still adds to a call once both are compiled: what stays."""
        return self._estimate((self.compiled_subclass,), (self.compiled_plain,))

    @property
    def removed(self) -> Estimate | None:
        """What compile removed of the subclass's overhead: eager overhead less compiled."""
        return self._estimate((self.eager_subclass, self.compiled_plain), (self.eager_plain, self.compiled_subclass))


@dataclasses.dataclass(frozen=True)
class CompiledRun:
    """`bench.py --compiled`: every case and op, the backend, how it was timed, where."""

    environment: Environment
    backend: str
    config: TimerConfig
    results: tuple[CompiledOp, ...]
    wall_s: float = math.nan
    interrupted: bool = False
    created: str = dataclasses.field(default_factory=lambda: datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"))


def _result(case: Case, op: Op, kind: str, timed=None, error: str | None = None) -> CaseResult:
    common = dict(case=case.name, op=op.name, stmt=f"{kind}: {case.stmt_for(op)}", description=kind,
                  baseline=case.baseline)
    if timed is None:
        return CaseResult(calls_per_sample=0, samples_ns=(), loop_overhead_ns=0.0, error=error, **common)
    return CaseResult(calls_per_sample=timed.calls_per_sample, samples_ns=timed.samples_ns,
                      loop_overhead_ns=timed.loop_overhead_ns, error=timed.error, **common)


def _threads(count: int):
    import contextlib

    import torch

    @contextlib.contextmanager
    def held():
        before = torch.get_num_threads()
        torch.set_num_threads(count)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    return held()


def measure_op(case: Case, baseline: Case, op: Op, config: TimerConfig, backend: str = dynamo.DEFAULT_BACKEND,
               progress: Callable[[str], None] | None = None) -> CompiledOp:
    """The four figures of `op` on `case` and on its `baseline` (plain tensors), each compiled
    first (Dynamo reset before the plain one), then timed round-robin in one run."""
    say = progress or (lambda message: None)
    head = dict(case=case.name, op=op.name, stmt=case.stmt_for(op), baseline=baseline.name)
    reason = not_applicable_reason(case, op) or not_applicable_reason(baseline, op)
    if reason:
        return CompiledOp(**head, not_applicable=reason)
    try:
        plain_operands = tuple(baseline.make_operands())
        subclass_operands = tuple(case.make_operands())
    except Exception as exc:  # a failed case must not sink the others; said in one line
        said = f"building operands: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        return CompiledOp(**head, eager_plain=_result(baseline, op, KINDS[0], error=said),
                          eager_subclass=_result(case, op, KINDS[1], error=said))
    calls, records = {}, {}
    with _threads(config.threads):
        for kind, source, operands, first in (("plain", baseline, plain_operands, True),
                                              ("subclass", case, subclass_operands, False)):
            say(f"compiling {case.name} [{op.name}] {kind} with {backend}")
            with source.active():
                compiled = dynamo.compile_call(dynamo.op_function(source.stmt_for(op)), operands, backend, reset=first)
            calls[kind], records[kind] = compiled.call, compiled.record
    targets, kinds = [], []
    for kind, source, operands, function in (
            ("eager plain", baseline, plain_operands, dynamo.op_function(baseline.stmt_for(op))),
            ("eager subclass", case, subclass_operands, dynamo.op_function(case.stmt_for(op))),
            ("compiled plain", baseline, plain_operands, calls["plain"]),
            ("compiled subclass", case, subclass_operands, calls["subclass"])):
        if function is not None:
            targets.append(Target(f"{case.name} [{op.name}] {kind}", STATEMENT, lambda o=operands: o,
                                  source.context, names=(("op", function),)))
            kinds.append(kind)
    before = dynamo.compilations()
    timing = time_targets(targets, config, progress)
    compiled_while = dynamo.compilations() - before
    timed = dict(zip(kinds, timing.targets))
    failed = {"compiled plain": records["plain"].failure, "compiled subclass": records["subclass"].failure}
    figures = [_result(case if "subclass" in kind else baseline, op, kind, timed.get(kind),
                       error=None if kind in timed else f"compile failed: {failed[kind].line()}") for kind in KINDS]
    return CompiledOp(**head, eager_plain=figures[0], eager_subclass=figures[1], compiled_plain=figures[2],
                      compiled_subclass=figures[3], plain_compile=records["plain"],
                      subclass_compile=records["subclass"], compiled_while_timing=compiled_while,
                      interrupted=timing.interrupted)


def run_compiled(cases: Sequence[Case], ops: Sequence[Op], config: TimerConfig,
                 backend: str = dynamo.DEFAULT_BACKEND, progress: Callable[[str], None] | None = None,
                 baseline_of: Callable[[Case], Case] | None = None) -> CompiledRun:
    """Every case under every op (`measure_op`), one after another; `baseline_of` finds a case's
    plain baseline (default: the registry's case of its name). Ctrl-C keeps what was measured."""
    import time

    from overrides import environment

    if baseline_of is None:
        from overrides.cases import registry

        baseline_of = lambda case: registry.get_case(case.baseline)  # noqa: E731
    started = time.perf_counter()
    out, interrupted = [], False
    for op in ops:
        for case in cases:
            try:
                measured = measure_op(case, baseline_of(case), op, config, backend, progress)
            except KeyboardInterrupt:  # while compiling: the Timer core keeps its own samples
                interrupted = True
            else:
                out.append(measured)
                interrupted = measured.interrupted
            if interrupted:
                break
        if interrupted:
            break
    return CompiledRun(environment.collect(config.threads), backend, config, tuple(out),
                       wall_s=time.perf_counter() - started, interrupted=interrupted)
