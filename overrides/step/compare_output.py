"""`--compare BASE BRANCH --step`'s output: the three steps, the change a step with its interval
and verdict, and the op table of both versions side by side, as text for people and as the
`torch-function-overhead/step-compare/3` JSON with every sample and each stretch's change.

Apart from output.py (one step's tables) so that each stays one screen; figures are worded with
overrides/figures.py, laid out with overrides/tables.py, and the verdict's rule in
comparison_report's words, as every other table and verdict of this tool.
"""

from __future__ import annotations

import dataclasses
import math

from overrides.comparison_report import verdict_rule
from overrides.figures import json_figure, signed, whole
from overrides.sides import Sides
from overrides.step.comparing import OpChange, StepComparison, ops_change
from overrides.step.hooks import Captured, shown_operands
from overrides.step.optable import OpRow
from overrides.step.output import timing_warnings as step_warnings
from overrides.step.timing import StepTiming
from overrides.tables import ruled
from overrides.verdicts import NO_CHANGE_CONFIDENCE

# 2: the change is the mean of the stretches' (each of fresh builds), its interval Student's t
# over them, and `change.stretches_ns` lists them; 1 took both from one build's samples.
SCHEMA = "torch-function-overhead/step-compare/3"  # /3: base, branch and plain are each version's --step timing (/2: the stretches')


@dataclasses.dataclass(frozen=True)
class StepCompareReport:
    """One `--compare BASE BRANCH --step` run: the timing, and both versions' ops joined."""

    comparison: StepComparison
    descriptions: tuple[str, str]  # base, branch: each factory's first docstring line
    ops: tuple[OpChange, ...]
    captured: tuple[Captured, Captured]  # base, branch: every hook call of one step each


def _pct(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value * 100:+.1f}%"


def _range(ends: tuple[float, float], percent: bool = False) -> str:
    if not all(math.isfinite(v) for v in ends):
        return "-"
    shown = _pct if percent else signed
    return f"{shown(ends[0])}..{shown(ends[1])}"


def step_table(c: StepComparison) -> list[str]:
    plain = c.timings.base  # the plain twin as each version was timed beside it
    body = [["step", "per step ns", "overhead ns", "95% CI ns", "share", "95% CI", "samples"],
            ["plain twin (base's)", whole(plain.plain_step_ns), "", "", "", "",
             f"{len(plain.plain_ns)}x{plain.steps_per_sample[0]}"]]
    for which, t in c.timings.roles():
        body.append([f"{which}: {t.spec}", whole(t.subclass_step_ns), signed(t.overhead_ns), _range(t.overhead_ci_ns),
                     _pct(t.share), _range(t.share_ci, percent=True), f"{len(t.subclass_ns)}x{t.steps_per_sample[1]}"])
    return ruled(body)


def change_line(c: StepComparison) -> str:
    return (f"change a step, branch less base: {signed(c.change_ns)} ns ({_pct(c.change_share)} of the base's step), "
            f"95% CI {_range(c.change_ci_ns())}: {c.verdict}")


def stretches_line(c: StepComparison) -> str:
    stretches = len(c.stretch_changes_ns)
    versions = ("each version's overhead and share timed as --step times it, over builds of its own" if c.versions
                else "each version's overhead and share likewise")
    return (f"(the change: the median of {stretches} stretch{'es' if stretches != 1 else ''}, each of the three steps "
            f"built afresh; the interval from their spread, so a build's luck is inside it; {versions})")


def _calls(change: OpChange) -> str:
    calls = [str(row.calls) if row is not None else "0" for row in (change.base, change.branch)]
    return calls[0] if calls[0] == calls[1] else " -> ".join(calls)


def _overhead(row: OpRow | None) -> str:
    if row is None:
        return "not called"
    if row.nested:
        return "in its caller's"
    return "n/a" if row.not_applicable else signed(row.overhead_ns)


def op_table(changes: tuple[OpChange, ...]) -> list[str]:
    body = [["op", "operands", "calls", "base ns/call", "branch ns/call", "change ns/call", "95% CI ns",
             "change ns/step"]]
    for change in changes:
        row = change.row
        body.append([row.op, shown_operands(row.signature), _calls(change), _overhead(change.base), _overhead(change.branch),
                     signed(change.change_ns) if math.isfinite(change.change_ns) else "-",
                     _range(change.change_ci_ns),
                     signed(change.step_change_ns) if math.isfinite(change.step_change_ns) else "n/a"])
    return ruled(body)


def ops_line(report: StepCompareReport) -> str:
    total, ends = ops_change(report.ops)
    c = report.comparison
    explained = total / c.change_ns if c.change_ns else math.nan
    return (f"the ops' changes: {signed(total)} ns a step ({_range(ends)}), against the step's measured change of "
            f"{signed(c.change_ns)} ns ({_range(c.change_ci_ns())})"
            + (f": they account for {explained:.0%} of it" if math.isfinite(explained) and abs(c.change_ns) > c.threshold
               else ""))


def not_priced(changes: tuple[OpChange, ...]) -> list[str]:
    reasons: dict[str, list[str]] = {}
    for change in changes:
        for row in (change.base, change.branch):
            if row is not None and row.not_applicable and row.op not in reasons.setdefault(row.not_applicable, []):
                reasons[row.not_applicable].append(row.op)
    return [f"  not priced: {', '.join(ops)} ({why}): their change is in the step's, not in the sum"
            for why, ops in reasons.items()]


def render(report: StepCompareReport) -> str:
    c = report.comparison
    at = f", batch {c.batch}" if c.batch is not None else ""
    described = [f"{which} {spec}" + (f" ({text})" if text else "")
                 for (which, spec), text in zip(Sides(c.base, c.branch).roles(), report.descriptions)]
    lines = [f"two versions of your step: {described[0]} against {described[1]}{at}, "
             f"{c.threads} thread{'s' if c.threads > 1 else ''}"]
    lines += [f"drift: {line}" for line in c.drift]
    lines += step_table(c) + [change_line(c), stretches_line(c)]
    if c.incomplete:
        lines.append(f"incomplete: {c.incomplete}; the {len(c.stretch_changes_ns)} finished are judged above")
    lines += [verdict_rule(c.threshold_ns, c.threshold_pct),
              f"(threshold here: {whole(c.threshold)} ns a step; 99% CI {_range(c.change_ci_ns(NO_CHANGE_CONFIDENCE))})"]
    lines += ["", "op by op: each op of either version's __torch_function__ / __torch_dispatch__ in one step, timed "
              "on the step's own operands in its step's order, beside its plain twins; overhead a call of each, and the "
              "change"]
    if report.ops:
        lines += op_table(report.ops) + [ops_line(report)] + not_priced(report.ops)
    else:
        lines.append("  none: neither step called a __torch_function__ or __torch_dispatch__ of a Tensor subclass")
    return "\n".join(lines)


def warnings(report: StepCompareReport) -> list[str]:
    """Drift (once) and each step's spread, one line each, for stderr."""
    c = report.comparison
    # each named by its side: an A/A's two are the same factory
    base, branch = (dataclasses.replace(timing, spec=f"{which} {timing.spec}") for which, timing in c.timings.roles())
    out = step_warnings((base,))
    plain_spread = any(which == "plain" for which, _ in base.too_spread())
    out += [line for line in step_warnings((dataclasses.replace(branch, drift=()),))
            if not (plain_spread and "[plain step]" in line)]
    return out


def _row_dict(row: OpRow | None) -> dict | None:
    if row is None:
        return None
    return {"calls": row.calls, "nested": row.nested, "sites": list(row.sites),
            "subclass_ns": json_figure(row.subclass_ns), "plain_ns": json_figure(row.plain_ns),
            "overhead_ns": json_figure(row.overhead_ns), "overhead_ci_ns": [json_figure(v) for v in row.overhead_ci_ns],
            "cost_ns": json_figure(row.cost_ns), "not_applicable": row.not_applicable or None}


def _version_dict(t: StepTiming) -> dict:
    return {"spec": t.spec, "step_ns": json_figure(t.subclass_step_ns), "overhead_ns": json_figure(t.overhead_ns),
            "overhead_ci_ns": [json_figure(v) for v in t.overhead_ci_ns], "share": json_figure(t.share, 4),
            "share_ci": [json_figure(v, 4) for v in t.share_ci], "steps_per_sample": t.steps_per_sample[1],
            "samples_ns": [json_figure(v) for v in t.subclass_ns]}


def payload(report: StepCompareReport, environment: dict) -> dict:
    c = report.comparison
    total, ends = ops_change(report.ops)
    return {"schema": SCHEMA, **c.timings.to_dict(_version_dict),
            "descriptions": list(report.descriptions), "batch": c.batch, "threads": c.threads,
            "wall_s": json_figure(c.wall_s), "drift": list(c.drift), "incomplete": c.incomplete or None,
            "plain": {"step_ns": json_figure(c.timings.base.plain_step_ns),
                      "steps_per_sample": c.timings.base.steps_per_sample[0],
                      "samples_ns": [json_figure(v) for v in c.timings.base.plain_ns]},
            "change": {"ns": json_figure(c.change_ns), "share": json_figure(c.change_share, 4),
                       "ci95_ns": [json_figure(v) for v in c.change_ci_ns()],
                       "ci99_ns": [json_figure(v) for v in c.change_ci_ns(NO_CHANGE_CONFIDENCE)],
                       "threshold_ns": json_figure(c.threshold), "verdict": c.verdict,
                       "stretches_ns": [json_figure(v) for v in c.stretch_changes_ns]},
            "settings": {"threshold_ns": c.threshold_ns, "threshold_pct": c.threshold_pct},
            "ops": [{"kind": ch.row.kind, "op": ch.row.op, "operands": ch.row.signature,
                     **Sides(ch.base, ch.branch).to_dict(_row_dict),
                     "change_ns": json_figure(ch.change_ns), "change_ci_ns": [json_figure(v) for v in ch.change_ci_ns],
                     "step_change_ns": json_figure(ch.step_change_ns),
                     "step_change_ci_ns": [json_figure(v) for v in ch.step_change_ci_ns]} for ch in report.ops],
            "ops_change": {"ns": json_figure(total), "ci_ns": [json_figure(v) for v in ends]},
            # none where the step was never captured (a rebuild that raised before)
            "calls": Sides.of(report.captured).to_dict(lambda captured: [dataclasses.asdict(call)
                                                                         for call in captured.calls])
            if report.captured else {},
            "environment": environment}
