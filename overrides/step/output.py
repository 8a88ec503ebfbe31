"""`--step`'s output: the step table, the op table, the call sites, the closure and the batch
sweep as text for people, and the `torch-function-overhead/step/1` JSON with every sample (its records: stepfile.py).

The figures are worded with overrides/figures.py and laid out with overrides/tables.py, as
every other table of this tool; the wording of a spread warning is run_notes.spread_reason's.
"""

from __future__ import annotations

import dataclasses
import math
import re

from overrides.figures import json_figure, signed, whole
from overrides.clock.speed import SpeedCheck
from overrides.run_notes import SLOW_MARK, speed_said, spread_reason
from overrides.step.closure import CLOSED_WITHIN, Closure
from overrides.step.compiled_output import compiled_dict, compiled_lines
from overrides.step.compiling import EagerAndCompiled
from overrides.step.device import DeviceStepTiming
from overrides.step.hooks import Captured, shown_operands
from overrides.step.kernels import LOCALLY
from overrides.step.optable import OpRow, by_site
from overrides.step.stepfile import SCHEMA, OpFigures, TimingFigures
from overrides.step.timing import NEGLIGIBLE_SHARE, StepTiming, falls_under
from overrides.tables import align, ruled

# GPU work your subclass adds a step, as a share of the plain step's, above which it is said (the
# low end of its interval): a hook that runs tensor ops queues kernels; one that only wraps, none.
GPU_WORK_SHARE = 0.02


@dataclasses.dataclass(frozen=True)
class StepReport:
    """One `--step` run: the timings (one per batch size), and op by op at the first of them."""

    spec: str
    description: str
    timings: tuple[StepTiming, ...]
    captured: Captured | None  # None with --compiled: op by op and the closure are eager-only
    rows: tuple[OpRow, ...]
    closure: Closure | None
    compiled: EagerAndCompiled | None = None  # --compiled: the four figures
    # On a CUDA device: each batch's host, synced and GPU figures (timings holds the synced).
    on_device: tuple[DeviceStepTiming, ...] = ()
    # The run's speed reference, sampled between the steps' rounds, against this machine's earlier
    # runs (clock/speed.py). None: not checked (on a GPU, or --compiled).
    speed: SpeedCheck | None = None


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value * 100:+.1f}%"


def _range(low: float, high: float, percent: bool = False) -> str:
    shown = _pct if percent else signed
    return f"{shown(low)}..{shown(high)}"


def step_table(timing: StepTiming) -> list[str]:
    plain_steps, steps = timing.steps_per_sample
    return ruled([["step", "per step ns", "overhead ns", "95% CI ns", "share", "95% CI", "samples"],
                  ["plain twin", whole(timing.plain_step_ns), "", "", "", "", f"{len(timing.plain_ns)}x{plain_steps}"],
                  ["yours", whole(timing.subclass_step_ns), signed(timing.overhead_ns),
                   _range(*timing.overhead_ci_ns), _pct(timing.share), _range(*timing.share_ci, percent=True),
                   f"{len(timing.subclass_ns)}x{steps}"]]) + [interval_basis(timing)]


# A slow run's step figures: what reads high when the whole run was slowed (clock/speed.py).
_STEPS_READ_HIGH = "both steps' figures read high, and the overhead and its share may too"


def speed_line(check: SpeedCheck | None) -> list[str]:
    """The run's speed against this machine's earlier runs, under the step table; marked when slow."""
    if check is None:
        return []
    said = speed_said(check, "the steps", _STEPS_READ_HIGH)
    return [f"{SLOW_MARK} {said}" if check.slow else f"speed: {said}"]


def interval_basis(timing: StepTiming) -> str:
    """Where the overhead and its interval come from, in words: a reviewer reads how sure it is."""
    built = len(timing.stretch_overheads_ns)
    why = f"; {timing.incomplete}" if timing.incomplete else ""
    if timing.stretched:
        return (f"overhead: the median of {built} builds' (both steps built afresh), its 95% CI over them: "
                f"what differs between builds is inside it{why}")
    if built:
        return (f"overhead: from the samples of {built} builds only, its 95% CI the samples': what differs "
                f"between builds is not in it{why or '; a later build could not run'}")
    return "overhead: one build's samples, its 95% CI theirs"


def op_table(rows: tuple[OpRow, ...], step_overhead_ns: float) -> list[str]:
    body = [["op", "operands", "calls", "overhead ns/call", "95% CI ns", "ns/step", "of step overhead"]]
    for row in rows:
        if row.nested:
            cost, share = "in its caller's", ""
        elif row.not_applicable:
            cost, share = "n/a", ""
        else:
            cost = signed(row.cost_ns)
            share = _pct(row.cost_ns / step_overhead_ns) if step_overhead_ns > 0 else "-"
        body.append([row.op, shown_operands(row.signature), str(row.calls), signed(row.overhead_ns) if not row.not_applicable else "n/a",
                     _range(*row.overhead_ci_ns) if not row.not_applicable else "", cost, share])
    return ruled(body)


def kernel_lines(rows: tuple[OpRow, ...]) -> list[str]:
    """Where the overhead goes, for the ops whose dispatch runs aten work of its own (kernels.py):
    its own kernels apart from the dispatch; and the ops that redistribute."""
    split = [r for r in rows if r.kernels and not math.isnan(r.own_kernels_ns)]
    lines = []
    if split:
        body = [["op", "operands", "overhead ns/call", "own kernels ns/call", "95% CI ns", "dispatch ns/call",
                 "95% CI ns", "kernels: yours against the twin's"]]
        for r in split:
            body.append([r.op, shown_operands(r.signature), signed(r.overhead_ns), signed(r.own_kernels_ns),
                         _range(*r.own_kernels_ci_ns), signed(r.dispatch_ns), _range(*r.dispatch_ci_ns), r.kernels])
        lines += ["", "where the overhead goes, for ops whose dispatch runs aten work other than the twin's: your "
                  "subclass's own kernels (that work less the twin's op; forward, grad off) apart from dispatch (the "
                  "rest: Python, the library's logic, wrapping)"] + ruled(body)
    priced = [r for r in rows if not math.isnan(r.cost_ns) and not math.isnan(r.own_kernels_ns)]
    if priced:
        kernels_ns = sum(r.calls * r.own_kernels_ns for r in priced)
        total = sum(r.cost_ns for r in priced)
        lines.append(f"  of these {len(priced)} op{'s' if len(priced) > 1 else ''}' {signed(total)} ns a step: dispatch "
                     f"{signed(total - kernels_ns)}, your subclass's own kernels {signed(kernels_ns)}"
                     + ("" if split else " (each ran its twin's own aten ops: all of it is dispatch)"))
    alone = [r for r in rows if r.mine_only and math.isfinite(r.dispatch_ns) and not r.nested]
    if alone:
        body = [["op", "operands", "calls", "yours ns/call", "its kernels ns/call", "dispatch ns/call", "95% CI ns",
                 "dispatch ns/step"]]
        for r in alone:
            body.append([r.op, shown_operands(r.signature), str(r.calls), whole(r.subclass_ns), whole(r.kernels_ns),
                         signed(r.dispatch_ns), _range(*r.dispatch_ci_ns), signed(r.calls * r.dispatch_ns)])
        total = sum(r.calls * r.dispatch_ns for r in alone)
        lines += ["", f"ops with no plain twin ({alone[0].not_applicable.split(': ', 1)[-1]}): their overhead over plain "
                  "tensors is unknown, but their dispatch is not: your op less the aten work its dispatch runs"]
        lines += ruled(body) + [f"  their dispatch alone: {signed(total)} ns a step, beyond the priced ops above "
                                "(a lower bound of their overhead: it leaves out what their kernels cost beyond a "
                                "twin's)"]
    for r in rows:
        if r.redistributes:
            how = ("locally (its local tensor sliced, no collective)" if r.redistributes == (LOCALLY,)
                   else f"with {', '.join(r.redistributes)}")
            lines.append(f"  {r.op} [{shown_operands(r.signature)}] redistributes its operands {how}: its cost is the "
                         "library's placement logic and the communication, not the twin's kernel")
    return lines


def twin_lines(rows: tuple[OpRow, ...]) -> list[str]:
    """Which plain tensors a wrapper subclass's ops were priced against: not its inner ones."""
    ops: dict[str, list[str]] = {}
    for row in rows:
        if row.twin:  # one line for every shape: each row's operands say it (the JSON has each twin)
            twin = re.sub(r" \([\d, ]*\)(, strides \([\d, ]*\))?", "", row.twin)
            if row.op not in ops.setdefault(twin, []):
                ops[twin].append(row.op)
    return [f"  {', '.join(names)}: against plain twins of your wrapper's operands, of the shapes and strides "
            f"above ({twin})" for twin, names in ops.items()]


def site_table(rows: tuple[OpRow, ...], captured: Captured) -> list[str]:
    lines = align([["call site (your code)", "hook calls", "ops"]]
                  + [[site, str(calls), ops] for site, calls, ops in by_site(rows, captured)], right=(1,))
    return [lines[0], "-" * len(lines[0]), *lines[1:]]


# What the op table is closed against: the step's overhead, or on a GPU the host's (each op row is
# the host's time a call, a low quantile, where the host's step figure is a median: device.py)
STEP_OVERHEAD = "step's measured overhead"
HOST_OVERHEAD = "host's overhead a step (the median; each op row is a low quantile)"


def op_table_baseline(timings: tuple, on_device: tuple):
    """The StepTiming the op table's shares and closure are of: the step's, or on a GPU the host's
    (the op rows are the host's time a call)."""
    return on_device[0].host if on_device else timings[0]


def closure_lines(closure: Closure, against: str = STEP_OVERHEAD) -> list[str]:
    lines = [f"the ops above: {signed(closure.table_ns)} ns a step ({_range(*closure.table_ci_ns)}), against the "
             f"{against} of "
             f"{signed(closure.step_overhead_ns)} ns ({_range(*closure.step_overhead_ci_ns)}): they explain "
             f"{'-' if math.isnan(closure.explained) else f'{closure.explained:.0%}'}; unexplained "
             f"{signed(closure.unexplained_ns)} ns"]
    reasons: dict[str, dict[str, int]] = {}
    for op, calls, why in closure.not_priced:
        ops = reasons.setdefault(why, {})
        ops[op] = ops.get(op, 0) + calls
    for why, ops in reasons.items():
        lines.append(f"  not priced: {', '.join(f'{op} x{n}' for op, n in ops.items())} a step ({why}): "
                     "their overhead is in the unexplained part")
    if math.isfinite(closure.dispatch_alone_ns) and closure.step_overhead_ns > 0:
        lines.append(f"  of those, the ops with no plain twin run {signed(closure.dispatch_alone_ns)} ns a step of "
                     f"dispatch alone (their table above), {closure.dispatch_alone_ns / closure.step_overhead_ns:.0%} "
                     "of the step's overhead: the unexplained part is mostly theirs")
    if math.isfinite(closure.in_order_ns) and closure.step_overhead_ns > 0:
        lines.append(f"  the same calls run back to back in your step's order, whole: {signed(closure.in_order_ns)} ns "
                     f"a step ({_range(*closure.in_order_ci_ns)}), {closure.in_order_ns / closure.step_overhead_ns:.0%} "
                     f"of the step's overhead (the rows add each call's undisturbed cost); the rest, "
                     f"{signed(closure.step_overhead_ns - closure.in_order_ns)} ns, is what they cost more among the "
                     "step's other work (their code and data colder), or work outside them")
    if closure.extra_nodes or closure.extra_ops:
        named = [f"{name} {n:+d}" for name, n in closure.extra_nodes] + [f"{name} {n:+d}" for name, n in closure.extra_ops]
        lines.append("  your step against its plain twin, a step (autograd nodes backward ran, outermost aten ops): "
                     + ", ".join(named) + "; each op above is timed with its backward, so the nodes it adds are in its row")
    if not closure.closed and closure.unexplained_ns < 0:  # the ops sum to more than the step pays
        lines.append(f"  the table sums to more than the step's overhead, by over {CLOSED_WITHIN:.0%} of it: an op "
                     "timed alone paid more than it does inside the step, or a row is noisy (read its interval); "
                     "re-run on a quieter machine, or with a longer --min-time")
    elif not closure.closed:
        lines.append(f"  the table leaves more than {CLOSED_WITHIN:.0%} of the step's overhead unexplained: "
                     "the part above (ops not priced, the nodes and ops named) is where it goes")
    return lines


def sweep_lines(timings: tuple[StepTiming, ...]) -> list[str]:
    body = [["batch", "plain step ns", "overhead ns", "95% CI ns", "share", "95% CI"]]
    for t in sorted(timings, key=lambda t: t.batch or 0):
        body.append([str(t.batch), whole(t.plain_step_ns), signed(t.overhead_ns), _range(*t.overhead_ci_ns),
                     _pct(t.share), _range(*t.share_ci, percent=True)])
    tried = ", ".join(str(t.batch) for t in sorted(timings, key=lambda t: t.batch or 0))
    under = falls_under(list(timings))
    there = next((t for t in timings if t.batch == under), None)
    sentence = (f"your subclass's share of the step falls under {NEGLIGIBLE_SHARE:.0%} from batch {under} on "
                f"(there {_pct(there.share)}, 95% CI {_range(*there.share_ci, percent=True)}; batches tried: {tried})"
                if there is not None else
                f"your subclass's share of the step stays at {NEGLIGIBLE_SHARE:.0%} or more: not within the "
                f"batches tried ({tried})")
    return ruled(body) + [sentence]


def _us(ns: float) -> str:
    return f"{ns / 1e3:,.1f}"


def device_lines(on_device: tuple[DeviceStepTiming, ...]) -> list[str]:
    """The three figures a step on the GPU, per batch, and what they say: host- or GPU-bound,
    the GPU's idle share, and from which batch the GPU hides your subclass."""
    first = on_device[0]
    body = [["batch", "host plain us", "host yours", "+host", "gpu plain", "gpu yours", "synced plain",
             "synced yours", "+synced", "share", "GPU idle (yours)", "bound (yours)"]]
    for d in sorted(on_device, key=lambda d: d.batch or 0):
        body.append([str(d.batch) if d.batch is not None else "-", _us(d.host.plain_step_ns), _us(d.host.subclass_step_ns),
                     ("+" if d.host.overhead_ns >= 0 else "") + _us(d.host.overhead_ns), _us(d.gpu.plain_step_ns),
                     _us(d.gpu.subclass_step_ns), _us(d.synced.plain_step_ns), _us(d.synced.subclass_step_ns),
                     ("+" if d.synced.overhead_ns >= 0 else "") + _us(d.synced.overhead_ns), _pct(d.synced.share),
                     f"{d.gpu_idle('subclass'):.0%}", d.bound("subclass")])
    lines = [f"on {first.device} ({first.device_name}), a step, each figure the median of its samples: host = the Python thread's time to queue it, gpu = "
             "the GPU's own work, synced = what a training loop pays (the figure above)"]
    lines += ruled(body)
    for d in on_device:
        low, high = d.gpu.overhead_ci_ns
        if low > GPU_WORK_SHARE * d.gpu.plain_step_ns:
            at = f"at batch {d.batch}" if d.batch is not None else "here"
            lines.append(f"  {at}: your subclass adds GPU work, {signed(d.gpu.overhead_ns)} ns a step "
                         f"({_range(low, high)}): its hooks queue kernels of their own")
    if len(on_device) > 1:
        under = falls_under([d.synced for d in on_device])
        tried = ", ".join(str(d.batch) for d in sorted(on_device, key=lambda d: d.batch or 0))
        lines.append(f"the GPU hides your subclass (under {NEGLIGIBLE_SHARE:.0%} of the synced step) from batch {under} on; "
                     f"batches tried: {tried}" if under is not None else
                     f"the GPU hides your subclass at no batch tried ({tried}): it adds {NEGLIGIBLE_SHARE:.0%} or more "
                     "of the synced step at each")
    elif first.bound("subclass") == "host":
        lines.append(f"the step is host-bound: the GPU idles {first.gpu_idle('subclass'):.0%} of it; your subclass "
                     f"adds {signed(first.host.overhead_ns)} ns to the host and {signed(first.synced.overhead_ns)} ns "
                     "to what a loop pays (synced); --batch finds from which batch the GPU hides it")
    elif first.synced.overhead_ci_ns[0] <= 0 <= first.synced.overhead_ci_ns[1]:
        lines.append("the step is GPU-bound: the GPU's work hides the host's, your subclass's cost with it (the "
                     "synced overhead's interval holds zero)")
    else:
        lines.append(f"the step is GPU-bound, yet your subclass still adds {signed(first.synced.overhead_ns)} ns a "
                     "synced step (its interval excludes zero): the GPU hides only part of it")
    return lines


def warnings(report: StepReport) -> list[str]:
    """Drift, spread and a slow run of a step's report, one line each, for stderr."""
    slow = report.speed is not None and report.speed.slow
    return timing_warnings(report.timings) + (
        [f"warning: {report.spec}: {speed_said(report.speed, 'the steps', _STEPS_READ_HIGH)}"] if slow else [])


def timing_warnings(timings: tuple[StepTiming, ...]) -> list[str]:
    """Drift and spread, one line each, for stderr (the drift is said in the output too)."""
    out = []
    for timing in timings:
        at = f" at batch {timing.batch}" if timing.batch is not None else ""
        out += [f"warning: {timing.spec}{at}: {line}" for line in timing.drift]
        out += [f"warning: {timing.spec}{at} [{which} step]: {spread_reason(samples)}"
                for which, samples in timing.too_spread()]
    return out


def render(report: StepReport) -> str:
    first = report.timings[0]
    at = f", batch {first.batch}" if first.batch is not None else ""
    lines = [f"your step: {report.spec}{' (' + report.description + ')' if report.description else ''}{at}, "
             f"{first.threads} thread{'s' if first.threads > 1 else ''}"]
    lines += [f"drift: {line}" for t in report.timings for line in t.drift]
    if report.compiled is not None:
        return "\n".join(lines + compiled_lines(report.compiled))
    lines += step_table(first) + speed_line(report.speed)
    if report.on_device:
        lines += [""] + device_lines(report.on_device)
    lines += ["", "op by op: every call of your subclass's __torch_function__ / __torch_dispatch__ in one step, "
              "timed on the step's own operands as yours and as plain tensors"]
    lines += op_table(report.rows, op_table_baseline(report.timings, report.on_device).overhead_ns) if report.rows else [
        "  none: the step called no __torch_function__ or __torch_dispatch__ of a Tensor subclass"]
    if report.rows:
        lines += twin_lines(report.rows) + kernel_lines(report.rows) + [""] + site_table(report.rows, report.captured)
    lines += [""] + closure_lines(report.closure, HOST_OVERHEAD if report.on_device else STEP_OVERHEAD)
    if len(report.timings) > 1:
        lines += ["", "batch sweep:"] + sweep_lines(report.timings)
    return "\n".join(lines)


def _timing_dict(t: StepTiming) -> dict:
    return TimingFigures.of(t).to_dict()


def _speed_dict(report: StepReport) -> dict | None:
    return report.speed.to_dict() if report.speed is not None else None


def _device_dict(d: DeviceStepTiming) -> dict:
    return {"device": d.device, "device_name": d.device_name, "batch": d.batch,
            "gpu_idle": {which: json_figure(d.gpu_idle(which), 4) for which in ("plain", "subclass")},
            "bound": {which: d.bound(which) for which in ("plain", "subclass")},
            **{mode: _timing_dict(getattr(d, mode)) for mode in ("host", "synced", "gpu")}}


def payload(report: StepReport, environment: dict) -> dict:
    """The `step/1` JSON; `on_device` (host, synced and gpu per batch) is empty off a GPU."""
    return {**_payload(report, environment), "on_device": [_device_dict(d) for d in report.on_device]}


def _payload(report: StepReport, environment: dict) -> dict:
    c = report.closure
    if c is None:
        return {"schema": SCHEMA, "spec": report.spec, "description": report.description, "environment": environment,
                "timings": [_timing_dict(t) for t in report.timings], "speed": _speed_dict(report),
                "ops": [], "calls": [], "closure": None,
                "compiled": compiled_dict(report.compiled) if report.compiled else None}
    return {"schema": SCHEMA, "spec": report.spec, "description": report.description, "environment": environment,
            "timings": [_timing_dict(t) for t in report.timings], "speed": _speed_dict(report),
            "falls_under_batch": falls_under(list(report.timings)) if len(report.timings) > 1 else None,
            "ops": [OpFigures.of(r).to_dict() for r in report.rows],
            "calls": [dataclasses.asdict(call) for call in report.captured.calls],
            "closure": {"step_overhead_ns": json_figure(c.step_overhead_ns), "table_ns": json_figure(c.table_ns),
                        "table_ci_ns": [json_figure(v) for v in c.table_ci_ns],
                        "unexplained_ns": json_figure(c.unexplained_ns), "explained": json_figure(c.explained, 4),
                        "not_priced": [{"op": op, "calls": n, "why": why} for op, n, why in c.not_priced],
                        "extra_autograd_nodes": dict(c.extra_nodes), "extra_aten_ops": dict(c.extra_ops),
                        "in_order_ns": json_figure(c.in_order_ns),
                        "in_order_ci_ns": [json_figure(v) for v in c.in_order_ci_ns],
                        "dispatch_alone_ns": json_figure(c.dispatch_alone_ns)}}
