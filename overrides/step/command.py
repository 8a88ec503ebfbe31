"""`bench.py --step pkg.module:factory [--batch N ...] [--compiled]`: its flags, and the run:
both steps built, timed in alternation (at each batch size; on a CUDA device three ways:
device.py), then op by op and the closure at the first; with --compiled, eager and compiled
timed together instead (compiling.py); and `--compare BASE BRANCH --step`, two versions of
your step (comparing.py).

Everything runs in this process: a step's model, data and optimizer live where its factory
built them. Nothing here imports torch at module level (cli.py reads these flags before torch). The flags that do not go with --step are refused in overrides/modes.py.
"""

from __future__ import annotations

import argparse
import sys

from overrides.errors import UsageError, incomplete
from overrides.files import write_json_atomic
from overrides.modes import STEP_FROM_COMPARE
from overrides.progress import stderr_progress


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


def run_step(args) -> int:
    """The whole of `--step`: exit 0, or 1 where a step drifts (its figures mix steps)."""
    from overrides.step.factory import later_calls_said

    say = stderr_progress(args.quiet)
    if args.instructions:
        return _run_counts(args, say)
    with later_calls_said(args.step):
        if args.compiled:
            return _run_compiled(args, say)
        return _run_eager(args, say)


def _run_eager(args, say) -> int:
    """`--step` without --compiled: the timings, op by op, the closure (run_step's docstring)."""
    from overrides.step import output
    from overrides.step.closure import close
    from overrides.step.factory import build_steps, find_factory
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_step
    from overrides.clock import speed
    from overrides.clock.timer import Sampler
    from overrides.step.timing import DEFAULT_TIME_S, time_steps

    batches = list(dict.fromkeys(args.batch)) if args.batch else [None]
    device = _device(args)
    find_factory(args.step, batches=args.batch is not None, device=device)  # refused before anything runs
    timings, on_device, first, reference = [], [], None, None
    for batch in batches:
        pair = build_steps(args.step, batch, device)
        if first is None and say:
            say(f"{args.step}: {_estimate(pair, args.min_time or DEFAULT_TIME_S, len(batches), args.threads)}")
        first = first or pair
        if device is not None and device.startswith("cuda"):
            from overrides.step.device import time_on_device

            on_device.append(time_on_device(pair, device, args.min_time or DEFAULT_TIME_S, args.threads,
                                            args.nrepreps, say))
            timings.append(on_device[-1].synced)  # the step's cost: what a training loop pays
        else:
            reference = reference or Sampler(speed.reference_target())  # one for the run: its samples pooled
            timings.append(time_steps(pair, args.min_time or DEFAULT_TIME_S, args.threads, args.nrepreps, say,
                                      reference=reference))
    say and say(f"{args.step}: one step under the hooks, then each op timed on its operands")
    captured = capture_step(first.subclass, first.user_dir)
    priced = price_step(captured, threads=args.threads, progress=say)
    rows = priced.rows
    against = output.op_table_baseline(tuple(timings), tuple(on_device))
    closure = close(against.overhead_ns, against.overhead_ci_ns, rows, first.plain, first.subclass,
                    (priced.in_order_ns, priced.in_order_ci_ns))
    checked = _speed(reference, args.threads) if reference is not None else None
    _show(args, output.StepReport(args.step, first.description, tuple(timings), captured, rows, closure,
                                  on_device=tuple(on_device), speed=checked))
    return 1 if any(t.drift for t in timings) else 0


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


def _run_counts(args, say) -> int:
    """`--step --instructions`: instructions and your functions a step (count_report.py)."""
    from overrides.step.count_report import run_counts

    return run_counts(args.step, args.seeds, args.json, say)


def _device(args) -> str | None:
    """--device checked as for cases (cuda where this machine has none: one line, exit 2)."""
    if not args.device:
        return None
    from overrides.cases.casenames import check_device
    from overrides.errors import UsageError

    if args.device.partition(":")[0] == "meta":  # steps:cnn: 8.4 ms a step on meta, 3.8 ms on the CPU
        raise UsageError(f"--step --device {args.device}: a step on meta tensors runs torch's Python meta "
                         "kernels, slower than the CPU's real ones, so it times them, not your step; use "
                         "--device cpu or cuda")
    return check_device(args.device, no_cuda_hint="time the step on the CPU (drop --device) or on a machine with a GPU")


def _run_compiled(args, say) -> int:
    """`--step --compiled`: the four figures (overrides/step/compiling.py); exit 0 where a
    compile fails (a finding, said in one line), 1 where an eager step drifts."""
    from overrides.compiled.command import check
    from overrides.step import output
    from overrides.step.compiling import time_eager_and_compiled
    from overrides.step.factory import build_steps
    from overrides.step.timing import DEFAULT_TIME_S

    backend = check(args)
    eager = build_steps(args.step)
    result = time_eager_and_compiled(eager, build_steps(args.step), backend, args.min_time or DEFAULT_TIME_S,
                                     args.threads, args.nrepreps, say)
    _show(args, output.StepReport(args.step, eager.description, (result.eager,), None, (), None, result))
    return 1 if result.eager.drift else 0


def _show(args, report, output=None) -> None:
    """A step's report: its warnings on stderr, its table on stdout, its JSON where asked; each
    by `output`'s warnings, render and payload (overrides/step/output.py's by default)."""
    from overrides import environment

    if output is None:
        from overrides.step import output
    for line in output.warnings(report):
        print(line, file=sys.stderr)
    print(output.render(report), flush=True)
    if args.json:
        write_json_atomic(args.json, output.payload(report, environment.collect(args.threads).to_dict()),
                          what="--json")
        print(f"results written to {args.json}", file=sys.stderr)



def run_step_compare(args) -> int:
    """`--compare BASE BRANCH --step`: two versions of your step timed together and op by op
    (overrides/step/comparing.py); exit 0, 1 where the branch regressed or a step drifts, or 3 where a
    later stretch could not run (its rebuild or a step raised: the stretches finished are shown)."""
    from overrides.cases.casenames import SPEC_FORM, is_user_spec
    from overrides.step.factory import later_calls_said

    not_steps = [name for name in args.compare if not is_user_spec(name)]
    if not_steps:
        raise UsageError(f"--compare {' '.join(args.compare)} --step: {not_steps[0]!r} is not a step factory; "
                         f"name two ({SPEC_FORM}), each called with plain= (docs/step.md)")
    say = stderr_progress(args.quiet)
    with later_calls_said(args.compare[0]), later_calls_said(args.compare[1]):
        return _compare(args, say)


def _compare(args, say) -> int:
    """run_step_compare's work, once its factories are known."""
    from overrides.step import compare_output
    from overrides.step.comparing import STRETCH_S, compare_steps, join_ops
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_versions
    from overrides.verdicts import REGRESSION

    base, branch = (build_steps(spec) for spec in args.compare)
    result = compare_steps(base, branch, args.min_time or STRETCH_S, args.threads, None, say,
                           args.threshold_ns, args.threshold_pct)
    say and say(f"{base.spec}, {branch.spec}: one step each under the hooks, then each op timed on its operands")
    captured = (capture_step(base.subclass, base.user_dir), capture_step(branch.subclass, branch.user_dir))
    base_rows, branch_rows = price_versions(captured, threads=args.threads, progress=say)
    report = compare_output.StepCompareReport(result, (base.description, branch.description),
                                              join_ops(base_rows, branch_rows), captured)
    _show(args, report, compare_output)
    if result.incomplete:  # a verdict on part of the stretches gates nothing
        return incomplete(result.incomplete, args.json)
    return 1 if result.drift or result.verdict == REGRESSION else 0
