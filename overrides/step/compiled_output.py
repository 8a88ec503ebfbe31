"""`--step --compiled`'s output: the four figures a step (eager and compiled, plain and yours),
what compile removed of your subclass's overhead and what stays, each side's compile seconds
apart, what compile did (graph breaks with their place, recompiles, a failure in one line),
as text and as the `compiled` part of the step JSON.

Apart from output.py (the eager tables) so that each stays one screen; figures are worded with
overrides/figures.py and laid out with overrides/tables.py, as every table of this tool.
"""

from __future__ import annotations

import dataclasses
import math

from overrides.compiled.dynamo import CompileRecord
from overrides.compiled.measure import Estimate
from overrides.compiled.report import CACHED_MARK
from overrides.figures import json_figure, signed, whole
from overrides.step.compiling import KINDS, STEP_SAME_CODE_SPREAD, EagerAndCompiled
from overrides.step.stays import stays_lines
from overrides.tables import ruled

SKIPPED = ("op by op and the closure: not with --compiled (they time the eager ops of your step); "
           "run --step without --compiled for them")


def _range(low: float, high: float) -> str:
    return "-" if math.isnan(low) else f"{signed(low)}..{signed(high)}"


def _estimate(estimate: Estimate | None) -> tuple[str, str]:
    return ("-", "") if estimate is None else (signed(estimate.value_ns), _range(estimate.low_ns, estimate.high_ns))


def _seconds(record: CompileRecord) -> str:
    if math.isnan(record.compile_s):
        return "-"
    return f"{record.compile_s:.2f}" + (CACHED_MARK if record.cache_hits else "")


def _figure(result: EagerAndCompiled, kind: str) -> tuple[str, str]:
    if not result.samples(kind):
        return "failed", ""
    return whole(result.step_ns(kind)), _range(*result.step_ci_ns(kind))


def four_table(result: EagerAndCompiled) -> list[str]:
    eager_counts, compiled_counts = result.eager.steps_per_sample, result.compiled_steps_per_sample
    body = [["step", "eager ns", "95% CI", "compiled ns", "95% CI", "compile s", "samples"]]
    for which, side, record, index in (("plain twin", "plain", result.plain_compile, 0),
                                       ("yours", "yours", result.subclass_compile, 1)):
        compiled_samples = result.samples(f"compiled {side}")
        samples = f"{len(result.samples(f'eager {side}'))}x{eager_counts[index]}" + (
            f", {len(compiled_samples)}x{compiled_counts[index]}" if compiled_samples else "")
        body.append([which, *_figure(result, f"eager {side}"), *_figure(result, f"compiled {side}"),
                     _seconds(record), samples])
    body.append(["yours - plain", *_estimate(result.eager_overhead), *_estimate(result.stays), "", ""])
    return ruled(body)


def _share(part: Estimate, whole_ns: float) -> str:
    return f"{part.value_ns / whole_ns:.0%}" if whole_ns > 0 else "-"


def verdict(result: EagerAndCompiled) -> str:
    """One sentence: what compile removed of the overhead a step, and what stays."""
    eager, stays, removed = result.eager_overhead, result.stays, result.removed
    if eager is None:
        return "no eager overhead: an eager step failed"
    if stays is None:
        failed = "yours" if not result.compiled_subclass_ns else "the plain twin"
        return (f"compiled, {failed} did not run (below), so what compile removed is unknown: "
                f"the eager overhead, {signed(eager.value_ns)} ns a step, stands")
    return (f"compile removed {signed(removed.value_ns)} ns a step ({_range(removed.low_ns, removed.high_ns)}) of your "
            f"subclass's {signed(eager.value_ns)}-ns eager overhead ({_share(removed, eager.value_ns)}); "
            f"what stays compiled: {signed(stays.value_ns)} ns a step ({_range(stays.low_ns, stays.high_ns)}), "
            f"{_share(stays, result.step_ns('compiled plain'))} of the compiled plain step")


def did_lines(result: EagerAndCompiled) -> list[str]:
    """What compile did, side by side: a failure in one line first, then breaks and recompiles."""
    out = []
    for which, record in (("plain twin", result.plain_compile), ("yours", result.subclass_compile)):
        said = record.lines()
        if record.failure:
            said[0] = said[0].rstrip(":") + "; its eager figures stand"
        out += [f"what compile did, {which}: {line}" for line in said] or [f"what compile did, {which}: one graph, "
                                                                            "no break, no recompile"]
    if result.compiled_while_timing:
        out.append(f"compiled {result.compiled_while_timing} frame(s) again after the compile's calls: "
                   "the compiled figures hold compile time")
    return out


def compiled_lines(result: EagerAndCompiled) -> list[str]:
    """The text of `--step --compiled`, below the run's first line."""
    return ([f"eager against compiled: torch.compile(step, backend={result.backend!r}), each side compiled "
             "and warmed before timing; ns a step"] + four_table(result) + [verdict(result)]
            + ["compile s: each side's first call (tracing, the backend's compile, one step), never in a "
               f"figure ({CACHED_MARK}: served from the compile cache); 95% CIs as --compiled's, widened by "
               f"{STEP_SAME_CODE_SPREAD:.1%} of each figure (docs/step.md)"]
            + did_lines(result) + ([""] + stays_lines(result.counted) if result.counted else []) + [SKIPPED])


def _estimate_dict(estimate: Estimate | None) -> dict | None:
    if estimate is None:
        return None
    return {"ns": json_figure(estimate.value_ns), "ci95_ns": [json_figure(estimate.low_ns), json_figure(estimate.high_ns)]}


def compiled_dict(result: EagerAndCompiled) -> dict:
    """The `compiled` part of the step JSON: the four figures with every sample, the differences,
    and each side's CompileRecord."""
    return {"backend": result.backend,
            "figures": {kind: {"step_ns": json_figure(result.step_ns(kind)),
                               "ci95_ns": [json_figure(v) for v in result.step_ci_ns(kind)],
                               "samples_ns": [json_figure(v) for v in result.samples(kind)]} for kind in KINDS},
            "compiled_steps_per_sample": list(result.compiled_steps_per_sample),
            "eager_overhead": _estimate_dict(result.eager_overhead), "stays": _estimate_dict(result.stays),
            "removed": _estimate_dict(result.removed), "compile_gain": _estimate_dict(result.compile_gain),
            "compile": {"plain": result.plain_compile.to_dict(), "subclass": result.subclass_compile.to_dict()},
            "compiled_while_timing": result.compiled_while_timing,
            "stays_counted": dataclasses.asdict(result.counted) if result.counted else None}
