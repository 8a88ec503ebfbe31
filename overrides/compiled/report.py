"""`bench.py --compiled` for people and for programs: the four figures a call per case and op,
what compile removed and what stays, compile's seconds apart, and in the notes what compile
did (failures in one line, graph breaks with their place, recompiles); and the JSON.

Nothing here measures; tables are laid out by overrides/tables.py and the JSON written through
overrides/files.py, as every output of this tool.
"""

from __future__ import annotations

import math

from overrides import environment
from overrides.clock import stats
from overrides.compiled.dynamo import CompileRecord
from overrides.compiled.measure import KINDS, CompiledOp, CompiledRun, Estimate
from overrides.figures import json_figure, whole
from overrides.tables import pipe_table, ruled

SCHEMA = "torch-function-overhead/compiled/1"
HEADER = ("case", "eager: plain", "subclass", "overhead", "compiled: plain", "subclass", "stays",
          "95% CI", "removed", "95% CI", "compile s")
CACHED_MARK = "c"  # after a compile's seconds: served from Inductor's or AOTAutograd's local cache


def _interval(estimate: Estimate | None) -> str:
    if estimate is None or math.isnan(estimate.low_ns):
        return "-"
    return f"{whole(estimate.low_ns, signed=True)}..{whole(estimate.high_ns, signed=True)}"


def _seconds(record: CompileRecord | None) -> str:
    if record is None or math.isnan(record.compile_s):
        return "-"
    return f"{record.compile_s:.2f}" + (CACHED_MARK if record.cache_hits else "")


def _name(result: CompiledOp, multi_op: bool) -> str:
    return f"{result.case} [{result.op}]" if multi_op else result.case


def _figure(result, keys: dict, key_of) -> str:
    if result is None:
        return "-"
    if result.ok:
        return whole(result.per_call_ns) + (" !" if result.too_spread else "")
    return f"failed [{keys.setdefault(key_of(result), len(keys) + 1)}]"


def _rows(run: CompiledRun) -> tuple[list[list[str]], dict]:
    multi = len({r.op for r in run.results}) > 1
    keys: dict[str, int] = {}
    rows = []
    for r in run.results:
        if r.not_applicable:
            rows.append([_name(r, multi), f"n/a: {r.not_applicable}"] + [""] * (len(HEADER) - 2))
            continue
        cells = [_figure(f, keys, lambda f, r=r: f"{r.case} [{r.op}] {f.description}: "
                         + ((f.error or "").strip().splitlines() or ["no figure"])[0])  # one line, never a traceback
                 for f in r.figures()]
        eager, stays, removed = r.eager_overhead, r.compiled_overhead, r.removed
        rows.append([_name(r, multi), cells[0], cells[1], whole(eager.value_ns if eager else None, signed=True),
                     cells[2], cells[3], whole(stays.value_ns if stays else None, signed=True), _interval(stays),
                     whole(removed.value_ns if removed else None, signed=True), _interval(removed),
                     f"{_seconds(r.plain_compile)} / {_seconds(r.subclass_compile)}"])
    return rows, keys


def notes(run: CompiledRun, keys: dict) -> list[str]:
    """What the columns are, then what compile did, case by case, a line each."""
    out = [f"ns a call ({stats.headline_label()} of per-call samples) of `op(x, y)`, a function running the op: "
           "eager as it is, compiled with torch.compile(backend=" + repr(run.backend) + "); plain = the case's "
           "baseline (plain tensors like its own). overhead = subclass less plain, eager; stays = the same, "
           "compiled; removed = overhead less stays (what compile took away); 95% CI from each figure's own. "
           "compile s = the first call's seconds, plain / subclass, never in a per-call figure"
           f" ({CACHED_MARK}: served from the compile cache); docs/compiled.md says how to read them."]
    out += [f"[{key}] {text}" for text, key in keys.items()]
    for r in run.results:
        for kind, record in (("plain", r.plain_compile), ("subclass", r.subclass_compile)):
            if record is None:
                continue
            said = record.lines()[1:] if record.failure else record.lines()  # a failure is its cell's [k]
            out += [f"{r.case} [{r.op}] {kind}: {line}" for line in said]
        if r.compiled_while_timing:
            out.append(f"{r.case} [{r.op}]: compiled {r.compiled_while_timing} frame(s) again while timing: "
                       "its compiled figures hold compile time")
    if any(f is not None and f.ok and f.too_spread for r in run.results for f in r.figures()):
        out.append("!: too spread to trust (docs/timing.md)")
    if run.interrupted:
        out.append("interrupted: the rows above are what was measured before Ctrl-C")
    return out


def text(run: CompiledRun) -> str:
    rows, keys = _rows(run)
    lines = ruled([list(HEADER)] + rows) if rows else ["(nothing measured)"]
    return "\n".join(lines + [""] + notes(run, keys) + [environment.one_line(run.environment)])


def markdown(run: CompiledRun) -> str:
    rows, keys = _rows(run)
    lines = pipe_table(HEADER, rows, right_from=1)
    return "\n".join(lines + [""] + [f"- {note}" for note in notes(run, keys)]
                     + [f"- {environment.one_line(run.environment)}"])


def render(run: CompiledRun, fmt: str) -> str:
    return markdown(run) if fmt == "markdown" else text(run)


def _estimate(estimate: Estimate | None) -> dict | None:
    if estimate is None:
        return None
    return {"ns": json_figure(estimate.value_ns), "ci95_ns": [json_figure(estimate.low_ns), json_figure(estimate.high_ns)]}


def _figure_dict(result) -> dict | None:
    if result is None:
        return None
    low, high = result.ci95_ns if result.ok else (math.nan, math.nan)
    return {"per_call_ns": json_figure(result.per_call_ns) if result.ok else None,
            "per_call_ci95_ns": [json_figure(low), json_figure(high)], "too_spread": result.too_spread if result.ok else None,
            "calls_per_sample": result.calls_per_sample, "loop_overhead_ns": json_figure(result.loop_overhead_ns),
            "samples_ns": [round(s, 3) for s in result.samples_ns], "error": result.error}


def payload(run: CompiledRun) -> dict:
    """The run as JSON (SCHEMA): every sample of every figure, and each compile's record."""
    return {
        "schema": SCHEMA, "created": run.created, "environment": run.environment.to_dict(), "backend": run.backend,
        "settings": {"min_time_s": run.config.min_time_s, "max_time_s": run.config.max_time_s,
                     "precision": run.config.precision, "threads": run.config.threads,
                     "per_call_statistic": f"p{round(stats.HEADLINE_QUANTILE * 100)} of per-call samples"},
        "wall_s": json_figure(run.wall_s), "interrupted": run.interrupted,
        "results": [{"case": r.case, "op": r.op, "stmt": r.stmt, "baseline": r.baseline,
                     "not_applicable": r.not_applicable,
                     "figures": {kind: _figure_dict(f) for kind, f in zip(KINDS, r.figures())},
                     "eager_overhead": _estimate(r.eager_overhead), "stays": _estimate(r.compiled_overhead),
                     "removed": _estimate(r.removed),
                     "compile": {kind: record.to_dict() if record else None
                                 for kind, record in (("plain", r.plain_compile), ("subclass", r.subclass_compile))},
                     "compiled_while_timing": r.compiled_while_timing} for r in run.results],
    }
