"""`bench.py --step pkg.module:factory [--batch N ...] [--compiled]`: its flags, and the run:
both steps built, timed in alternation (at each batch size; on a CUDA device three ways:
device.py), then op by op and the closure at the first; with --compiled, eager and compiled
timed together instead (compiling.py); and `--compare BASE BRANCH --step`, two versions of
your step (comparing.py).

Everything runs in this process: a step's model, data and optimizer live where its factory
built them. Nothing here imports torch at module level (cli.py reads these flags before torch). The flags that do not go with --step are refused in overrides/modes.py.

One entry a mode, as cli.py picks it: `run_step` (`--step`), `run_step_compiled` (`--compiled`),
`run_step_counts` (`--instructions`) and `run_step_compare` (`--compare A B --step`). The flags
stop there: `step_request` and `compare_request` make a typed request of them, and each mode
takes that request, builds, times, prices and reports, and hands back what it shows (`Shown`);
`_show` prints it and writes its JSON, last and once.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
from typing import Callable

from overrides.errors import UsageError, incomplete
from overrides.files import write_json_atomic
from overrides.modes import STEP_FROM_COMPARE


class _StepFactory(argparse.Action):
    """`--step FACTORY`, or `--step` alone (the two of --compare are steps: modes.STEP_FROM_COMPARE);
    `--step A B` is refused with the form that compares two."""

    def __call__(self, parser, namespace, values, option_string=None):
        if len(values) > 1:
            parser.error(f"--step {' '.join(values)}: --step takes one factory; to compare two versions of your "
                         f"step, write --compare {values[0]} {values[1]} --step")
        setattr(namespace, self.dest, values[0] if values else STEP_FROM_COMPARE)


def add_arguments(parser) -> None:
    from overrides.argtypes import positive_int

    group = parser.add_argument_group("your training step")
    group.add_argument("--step", nargs="*", action=_StepFactory, metavar="pkg.module:factory",
                       help="time one training step of yours against its plain twin, and op by op: the factory "
                            "(found beside you) is called as factory(plain=False) and factory(plain=True) and "
                            "returns a zero-argument function running one step (docs/step.md); without a "
                            "factory, beside --compare BASE BRANCH: two versions of your step compared")
    group.add_argument("--batch", nargs="+", type=positive_int, metavar="N",
                       help="--step: sweep the batch size (the factory's batch= keyword): its share at each, "
                            "and from which batch it falls under 5%%")


@dataclasses.dataclass(frozen=True)
class StepRequest:
    """What `bench.py --step FACTORY ...` asks, made from the flags by `step_request`: nothing below
    the command reads the command line. Which mode (timed, --compiled, --instructions) is cli.py's
    choice of entry, not a field here."""

    spec: str  # --step pkg.module:factory
    batches: tuple[int | None, ...] = (None,)  # --batch, each once in the order given; (None,): the factory's own
    device: str | None = None  # --device, as given (checked by _device, or by --compiled)
    time_s: float | None = None  # --min-time; None: the mode's default
    threads: int = 1  # --threads
    pairs: int | None = None  # --nrepreps
    seeds: tuple[int, ...] = ()  # --seeds (--instructions); empty: count_report.DEFAULT_SEEDS
    backend: str | None = None  # --compile-backend; None: compiled.dynamo.DEFAULT_BACKEND
    json_path: str | None = None  # --json

    @property
    def swept(self) -> bool:
        """Whether --batch asked for batch sizes (the factory must take batch=)."""
        return self.batches != (None,)


@dataclasses.dataclass(frozen=True)
class CompareRequest:
    """What `bench.py --compare BASE BRANCH --step ...` asks, made from the flags by `compare_request`:
    nothing below the command reads the command line."""

    base: str  # the two step factories of --compare
    branch: str
    time_s: float | None  # --min-time; None: comparing.STRETCH_S
    threads: int  # --threads
    threshold_ns: float  # --threshold-ns, --threshold-pct: the verdict's
    threshold_pct: float
    json_path: str | None  # --json


def step_request(args) -> StepRequest:
    """The flags of `--step FACTORY` as one typed request."""
    return StepRequest(args.step, batches=tuple(dict.fromkeys(args.batch)) if args.batch else (None,),
                       device=args.device or None, time_s=args.min_time or None, threads=args.threads,
                       pairs=args.nrepreps, seeds=tuple(args.seeds or ()), backend=args.compile_backend,
                       json_path=args.json)


def compare_request(args) -> CompareRequest:
    """The flags of `--compare BASE BRANCH --step` as one typed request; a UsageError where either
    of the two is no step factory."""
    from overrides.cases.casenames import SPEC_FORM, is_user_spec

    not_steps = [name for name in args.compare if not is_user_spec(name)]
    if not_steps:
        raise UsageError(f"--compare {' '.join(args.compare)} --step: {not_steps[0]!r} is not a step factory; "
                         f"name two ({SPEC_FORM}), each called with plain= (docs/step.md)")
    base, branch = args.compare
    return CompareRequest(base, branch, time_s=args.min_time or None, threads=args.threads,
                          threshold_ns=args.threshold_ns, threshold_pct=args.threshold_pct, json_path=args.json)


@dataclasses.dataclass(frozen=True)
class Shown:
    """What a run shows once it is done: its text on stdout, its warnings on stderr, its JSON (built
    only where --json asks, once the text is out: `payload`), and its exit status; `incomplete`:
    why a comparison ended early (then exit INCOMPLETE_EXIT_STATUS, errors.incomplete)."""

    text: str
    warnings: tuple[str, ...]
    payload: Callable[[dict], dict]  # the JSON, given the environment it was measured in
    status: int
    incomplete: str = ""


def run_step(args, say) -> int:
    """`--step`: both steps timed, op by op, the closure (`say`: its progress, or None): exit 0,
    or 1 where a step drifts (its figures mix steps). cli.py picks this mode's entry, as it picks
    run_step_compiled, run_step_counts and run_step_compare for theirs."""
    from overrides.step.factory import later_calls_said

    request = step_request(args)
    with later_calls_said(request.spec):
        shown = _timed(request, say)
    return _show(shown, request.json_path, request.threads)


def run_step_compiled(args, say) -> int:
    """`--step --compiled`: eager and compiled timed together (run_step's exit statuses)."""
    from overrides.step.factory import later_calls_said

    request = step_request(args)
    with later_calls_said(request.spec):
        shown = _compiled(request, say)
    return _show(shown, request.json_path, request.threads)


def run_step_counts(args, say) -> int:
    """`--step --instructions`: both steps counted under Callgrind, your functions a step."""
    request = step_request(args)
    return _show(_counted(request, say), request.json_path, request.threads)


def _timed(request: StepRequest, say) -> Shown:
    """`--step` without --compiled: the timings, op by op, the closure (run_step's docstring)."""
    from overrides.clock import speed
    from overrides.clock.timer import Sampler
    from overrides.step import output
    from overrides.step.closure import close
    from overrides.step.factory import build_steps, find_factory
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_step
    from overrides.step.timing import DEFAULT_TIME_S, time_steps

    spec, threads, time_s = request.spec, request.threads, request.time_s or DEFAULT_TIME_S
    device = _device(request.device)
    find_factory(spec, batches=request.swept, device=device)  # refused before anything runs
    timings, on_device, first, reference = [], [], None, None
    for batch in request.batches:
        pair = build_steps(spec, batch, device)
        if first is None and say:
            say(f"{spec}: {_estimate(pair, time_s, len(request.batches), threads)}")
        first = first or pair
        if device is not None and device.startswith("cuda"):
            from overrides.step.device import time_on_device

            on_device.append(time_on_device(pair, device, time_s, threads, request.pairs, say))
            timings.append(on_device[-1].synced)  # the step's cost: what a training loop pays
        else:
            reference = reference or Sampler(speed.reference_target())  # one for the run: its samples pooled
            timings.append(time_steps(pair, time_s, threads, request.pairs, say, reference=reference))
    say and say(f"{spec}: one step under the hooks, then each op timed on its operands")
    captured = capture_step(first.subclass, first.user_dir)
    priced = price_step(captured, threads=threads, progress=say)
    rows = priced.rows
    against = output.op_table_baseline(tuple(timings), tuple(on_device))
    closure = close(against.overhead_ns, against.overhead_ci_ns, rows, first.plain, first.subclass,
                    (priced.in_order_ns, priced.in_order_ci_ns))
    checked = _speed(reference, threads) if reference is not None else None
    report = output.StepReport(spec, first.description, tuple(timings), captured, rows, closure,
                               on_device=tuple(on_device), speed=checked)
    return Shown(output.render(report), tuple(output.warnings(report)),
                 functools.partial(output.payload, report), 1 if any(t.drift for t in timings) else 0)


def _speed(reference, threads: int):
    """The run's speed reference, sampled between the steps' rounds, judged against this machine's
    earlier runs and kept beside them (clock/speed.py), as a cases run's is."""
    import datetime

    from overrides import environment
    from overrides.clock import speed

    timed = reference.result()
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return speed.judge(timed.samples_ns, timed.calls_per_sample, environment.collect(threads).machine_key(),
                       speed.cache_path(), created)


# What a run costs beside its steps: the drift probe's collections, the capture and its replays'
# copies, the profiler's start for the closure (~5-7 s on a DTensor MLP, whose steps take 2 ms)
ESTIMATE_FIXED_S = 6.0


def _estimate(pair, time_s: float, batches: int, threads: int) -> str:
    """How long the run will take, from the fastest of three steps of each timed now: the drift probe's steps, the
    timing (each sample after a step of its own), the ops in order and the closure's two steps."""
    from overrides.clock.timer import clock_ns
    from overrides.step import drift
    from overrides.step.optable import DEFAULT_SEQUENCE_S
    from overrides.step.timing import STRETCH_WARM_STEPS, STRETCHES

    import torch

    rounds, previous = [], torch.get_num_threads()
    torch.set_num_threads(threads)  # as timed: two threads on a busy 2-CPU machine ran a step 100x slower
    try:
        for _ in range(3):  # the fastest of three: a library's first steps fill its caches
            started = clock_ns()
            pair.plain()
            pair.subclass()
            rounds.append((clock_ns() - started) / 1e9)
    finally:
        torch.set_num_threads(previous)
    both_s = min(rounds)
    rewarm_s = (STRETCHES - 1) * STRETCH_WARM_STEPS * both_s  # each stretch's fresh build warmed (not its build)
    total_s = (batches * (drift.PROBE_STEPS * both_s + 2 * time_s + rewarm_s) + 2 * DEFAULT_SEQUENCE_S + 3 * both_s
               + ESTIMATE_FIXED_S)
    return (f"a step takes {both_s * 1e3:,.1f} ms plain and yours together: about {total_s:,.0f} s in all "
            f"(its warm-up and drift probe, {2 * time_s:g} s of timing on {STRETCHES} fresh builds{f' at each of {batches} batches' if batches > 1 else ''}, "
            "then op by op)")


def _counted(request: StepRequest, say) -> Shown:
    """`--step --instructions`: instructions and your functions a step (counting.py, count_report.py);
    exit 1 where a seed's process died."""
    from overrides.step import count_report
    from overrides.step.counting import count_step
    from overrides.step.factory import find_factory

    find_factory(request.spec)  # refused before valgrind starts
    seeds = tuple(dict.fromkeys(request.seeds or count_report.DEFAULT_SEEDS))
    say and say(f"{request.spec}: counting both steps under Callgrind, seeds {', '.join(map(str, seeds))}")
    counts = count_step(request.spec, seeds, say)
    return Shown(count_report.render(counts), (), lambda environment: count_report.payload(counts),  # none in it
                 1 if counts.died else 0)


def _device(device: str | None) -> str | None:
    """--device checked as for cases (cuda where this machine has none: one line, exit 2)."""
    if not device:
        return None
    from overrides.cases.casenames import check_device

    if device.partition(":")[0] == "meta":  # steps:cnn: 8.4 ms a step on meta, 3.8 ms on the CPU
        raise UsageError(f"--step --device {device}: a step on meta tensors runs torch's Python meta "
                         "kernels, slower than the CPU's real ones, so it times them, not your step; use "
                         "--device cpu or cuda")
    return check_device(device, no_cuda_hint="time the step on the CPU (drop --device) or on a machine with a GPU")


def _compiled(request: StepRequest, say) -> Shown:
    """`--step --compiled`: the four figures (overrides/step/compiling.py); exit 0 where a
    compile fails (a finding, said in one line), 1 where an eager step drifts."""
    from overrides.compiled.command import checked_backend
    from overrides.step import output
    from overrides.step.compiling import time_eager_and_compiled
    from overrides.step.factory import build_steps
    from overrides.step.timing import DEFAULT_TIME_S

    backend = checked_backend(request.backend, request.device)
    eager = build_steps(request.spec)
    result = time_eager_and_compiled(eager, build_steps(request.spec), backend, request.time_s or DEFAULT_TIME_S,
                                     request.threads, request.pairs, say)
    report = output.StepReport(request.spec, eager.description, (result.eager,), None, (), None, result)
    return Shown(output.render(report), tuple(output.warnings(report)),
                 functools.partial(output.payload, report), 1 if result.eager.drift else 0)


def _environment(threads: int) -> dict:
    """What was measured on, as a report's JSON holds it."""
    from overrides import environment

    return environment.collect(threads).to_dict()


def _show(shown: Shown, json_path: str | None, threads: int) -> int:
    """A run's warnings on stderr, its text on stdout, its JSON where asked (with the environment
    of this process, run with `threads`); its exit status."""
    for line in shown.warnings:
        print(line, file=sys.stderr)
    print(shown.text, flush=True)
    if json_path:
        environment = _environment(threads)  # collected once the run is done (a CUDA device is named once used)
        write_json_atomic(json_path, shown.payload(environment), what="--json")
        print(f"results written to {json_path}", file=sys.stderr)
    if shown.incomplete:  # a verdict on part of the stretches gates nothing
        return incomplete(shown.incomplete, json_path)
    return shown.status


def run_step_compare(args, say) -> int:
    """`--compare BASE BRANCH --step`: two versions of your step timed together and op by op
    (overrides/step/comparing.py); exit 0, 1 where the branch regressed or a step drifts, or 3 where a
    later stretch could not run (its rebuild or a step raised: the stretches finished are shown)."""
    from overrides.step.factory import later_calls_said

    request = compare_request(args)
    with later_calls_said(request.base), later_calls_said(request.branch):
        shown = _compared(request, say)
    return _show(shown, request.json_path, request.threads)


def _compared(request: CompareRequest, say) -> Shown:
    """run_step_compare's work, once its factories are known."""
    from overrides.step import compare_output
    from overrides.step.comparing import STRETCH_S, compare_steps, join_ops
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_versions
    from overrides.verdicts import REGRESSION

    base, branch = build_steps(request.base), build_steps(request.branch)
    result = compare_steps(base, branch, request.time_s or STRETCH_S, request.threads, None, say,
                           request.threshold_ns, request.threshold_pct)
    say and say(f"{base.spec}, {branch.spec}: one step each under the hooks, then each op timed on its operands")
    captured = (capture_step(base.subclass, base.user_dir), capture_step(branch.subclass, branch.user_dir))
    base_rows, branch_rows = price_versions(captured, threads=request.threads, progress=say)
    report = compare_output.StepCompareReport(result, (base.description, branch.description),
                                              join_ops(base_rows, branch_rows), captured)
    return Shown(compare_output.render(report), tuple(compare_output.warnings(report)),
                 functools.partial(compare_output.payload, report),
                 1 if result.drift or result.verdict == REGRESSION else 0, result.incomplete)
