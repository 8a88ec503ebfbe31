"""The results format: immutable records of a run, and their versioned JSON.

This file format is the contract between runs: `bench.py --json` writes it, `--load`,
`report.sh` and the comparisons read it. Only raw facts are stored as truth (every per-call
sample, calls per sample, the loop cost removed); the statistics are properties derived from
the samples. They are also written into the JSON for readers without this package, but
`load` recomputes them, so a file can never disagree with itself.

A result converts to a `torch.utils.benchmark.Measurement`, so `Compare` and pickling work.
"""

from __future__ import annotations

import dataclasses
import datetime
import math

from overrides.cases.casenames import BASELINE_CASE
from overrides.clock import speed as speed_check
from overrides.clock import stats
from overrides.counts import records
from overrides.environment import Environment
from overrides.errors import UsageError
from overrides.files import read_json, versioned, write_json_atomic
from overrides.run_settings import RunSettings

SCHEMA = "torch-function-overhead/results/2"
# Version 2 added `speed` (overrides/clock/speed.py: the run's reference loop against this
# machine's earlier runs, and whether the run was slowed as a whole). A reader that skipped it
# would show a slow run's figures unmarked, hence a new version rather than an extra key; a
# version-1 file still loads, as a run whose speed was not checked.
READABLE_SCHEMAS = (SCHEMA, "torch-function-overhead/results/1")


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """Everything measured for one case and op."""

    case: str
    op: str
    stmt: str
    description: str
    calls_per_sample: int
    samples_ns: tuple[float, ...]
    loop_overhead_ns: float  # per call, already removed from every sample
    error: str | None = None
    # Why the op makes no sense for this case (not timed, not a failure), e.g. x.shape on a
    # tensor-like that is not a Tensor.
    not_applicable: str | None = None
    # The case whose figure for the same op the overhead is quoted against.
    baseline: str = BASELINE_CASE
    # "cuda": samples_ns are the host's cost per call, and device_ns holds ("synced", samples) and
    # ("gpu", samples) beside it (overrides/clock/cuda.py).
    device: str = "cpu"
    device_ns: tuple[tuple[str, tuple[float, ...]], ...] = ()
    # Where the case is a plain twin unlike its case's operands (dtype, shape): what differs.
    warning: str | None = None

    def device_figure(self, mode: str) -> float | None:
        """The headline of the CUDA figure `mode` ("synced", "gpu"), if it was timed."""
        samples = dict(self.device_ns).get(mode)
        return stats.headline(samples) if samples else None

    @property
    def ok(self) -> bool:
        return bool(self.samples_ns)

    @property
    def per_call_ns(self) -> float:
        return stats.headline(self.samples_ns)

    @property
    def median_ns(self) -> float:
        return stats.median(self.samples_ns)

    @property
    def min_ns(self) -> float:
        return min(self.samples_ns) if self.samples_ns else math.nan

    @property
    def iqr_ns(self) -> float:
        return stats.iqr(self.samples_ns)

    @property
    def stdev_ns(self) -> float:
        return stats.stdev(self.samples_ns)

    @property
    def ci95_ns(self) -> tuple[float, float]:
        return stats.quantile_ci95(self.samples_ns)

    @property
    def too_spread(self) -> bool:
        return stats.too_spread(self.samples_ns)

    @property
    def contended(self) -> bool:
        return stats.contended(self.samples_ns)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One invocation of the benchmark: where it ran, how, and each case's result."""

    environment: Environment
    settings: RunSettings
    results: tuple[CaseResult, ...]
    created: str = dataclasses.field(
        default_factory=lambda: datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"))
    interrupted: bool = False
    wall_s: float = math.nan
    # Callgrind's counts, one record per hash seed, when the run counted instructions (read
    # once, as its file is loaded; written as records.to_dict's JSON).
    instructions: tuple[records.CountRun, ...] | None = None
    # The run's speed against this machine's earlier runs (None: not checked, as in a counting
    # run, a version-1 file or a run given its samples).
    speed: speed_check.SpeedCheck | None = None

    @property
    def slow(self) -> bool:
        """True when the machine ran slower for the whole run (overrides/clock/speed.py)."""
        return self.speed is not None and self.speed.slow

    def instructions_per_call(self, result: CaseResult) -> float | None:
        """The case's instructions per call, the mean over hash seeds, if counted."""
        if not self.instructions:
            return None
        values = records.per_call_by_case(self.instructions).get(
            (result.case, result.op))
        return sum(values) / len(values) if values else None

    def baseline(self, op: str, case: str = BASELINE_CASE) -> CaseResult | None:
        for result in self.results:
            if result.case == case and result.op == op and result.ok:
                return result
        return None

    def overhead_ns(self, result: CaseResult) -> float | None:
        """Headline figure minus its baseline's (plain Tensor unless the case names another)
        for the same op, if the baseline ran."""
        base = self.baseline(result.op, result.baseline)
        if base is None or not result.ok:
            return None
        return result.per_call_ns - base.per_call_ns

    def overhead_ratio(self, result: CaseResult) -> float | None:
        base = self.baseline(result.op, result.baseline)
        if base is None or not result.ok or base.per_call_ns <= 0:
            return None
        return result.per_call_ns / base.per_call_ns


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 3)


def case_to_dict(run: RunResult, result: CaseResult) -> dict:
    low, high = result.ci95_ns if result.ok else (math.nan, math.nan)
    return {
        "case": result.case,
        "op": result.op,
        "stmt": result.stmt,
        "description": result.description,
        "unit": "ns",
        "per_call_ns": _finite(result.per_call_ns) if result.ok else None,
        "per_call_statistic": f"p{round(stats.HEADLINE_QUANTILE * 100)} of per-call samples",
        "per_call_ci95_ns": [_finite(low), _finite(high)],
        "median_ns": _finite(result.median_ns) if result.ok else None,
        "min_ns": _finite(result.min_ns) if result.ok else None,
        "iqr_ns": _finite(result.iqr_ns) if result.ok else None,
        "overhead_ns": _finite(run.overhead_ns(result)),
        "too_spread": result.too_spread if result.ok else None,
        "contended": result.contended if result.ok else None,
        "calls_per_sample": result.calls_per_sample,
        "loop_overhead_ns": _finite(result.loop_overhead_ns),
        "samples_ns": [round(s, 3) for s in result.samples_ns],
        "error": result.error,
        "not_applicable": result.not_applicable,
        "baseline": result.baseline,
        "warning": result.warning,
        "instructions_per_call": _finite(run.instructions_per_call(result)),
        "device": result.device,
        **{f"{mode}_per_call_ns": _finite(stats.headline(samples)) for mode, samples in result.device_ns},
        **{f"{mode}_per_call_ci95_ns": [_finite(v) for v in stats.quantile_ci95(samples)]
           for mode, samples in result.device_ns},
        **({"device_samples_ns": {mode: [round(v, 3) for v in samples] for mode, samples in result.device_ns}}
           if result.device_ns else {}),
    }


def to_dict(run: RunResult) -> dict:
    return {
        "schema": SCHEMA,
        "created": run.created,
        "environment": run.environment.to_dict(),
        "settings": run.settings.to_dict(),
        "interrupted": run.interrupted,
        "wall_s": _finite(run.wall_s),
        "results": [case_to_dict(run, r) for r in run.results],
        "instructions": records.to_dict(run.instructions) if run.instructions else None,
        "speed": run.speed.to_dict() if run.speed is not None else None,
    }


def from_dict(data: dict, source: str = "results") -> RunResult:
    versioned(data, READABLE_SCHEMAS, source, "a results file", "write one with `python bench.py --json PATH`")
    try:
        results = tuple(
            CaseResult(
                case=r["case"], op=r["op"], stmt=r.get("stmt", ""),
                description=r.get("description", ""),
                calls_per_sample=int(r["calls_per_sample"]),
                samples_ns=tuple(float(s) for s in r["samples_ns"]),
                loop_overhead_ns=float(r.get("loop_overhead_ns") or 0.0),
                error=r.get("error"),
                not_applicable=r.get("not_applicable"),
                baseline=r.get("baseline") or BASELINE_CASE,
                warning=r.get("warning"),
                device=r.get("device") or "cpu",
                device_ns=tuple((mode, tuple(float(v) for v in samples))
                                for mode, samples in (r.get("device_samples_ns") or {}).items()),
            )
            for r in data["results"]
        )
        speed = speed_check.from_dict(data["speed"]) if data.get("speed") else None
        environment = Environment.from_dict(data.get("environment", {}))
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{source} is damaged ({type(exc).__name__}: {exc}); "
                         "re-run `python bench.py --json PATH`") from None
    # read now, so that damage names this file, not a later step
    counts = (tuple(records.from_dict(data["instructions"], source=f"{source} (its instruction counts)"))
              if data.get("instructions") else None)
    return RunResult(
        environment=environment,
        settings=RunSettings.from_dict(data.get("settings") or {}),
        results=results,
        created=data.get("created", ""),
        interrupted=bool(data.get("interrupted", False)),
        wall_s=float(data.get("wall_s") or math.nan),
        instructions=counts,
        speed=speed,
    )


def save(run: RunResult, path: str, what: str = "") -> None:
    write_json_atomic(path, to_dict(run), what)


def load(path: str) -> RunResult:
    data = read_json(path, "results file", f"write one with `python bench.py --json {path}`")
    return from_dict(data, source=path)


def to_measurements(run: RunResult, env: str | None = None) -> list:
    """The run as `torch.utils.benchmark.Measurement`s, for `Compare`, pickling and friends."""
    from torch.utils.benchmark import Measurement
    from torch.utils.benchmark.utils.common import TaskSpec

    threads = int(run.environment.threads or 1)
    measurements = []
    for result in run.results:
        if not result.ok:
            continue
        spec = TaskSpec(stmt=result.stmt, setup=f"x, y = <{result.case} operands>",
                        label=result.op, sub_label=result.case,
                        description=result.description, env=env, num_threads=threads)
        seconds_per_run = [s * result.calls_per_sample * 1e-9 for s in result.samples_ns]
        measurements.append(Measurement(result.calls_per_sample, seconds_per_run, spec,
                                        metadata={"per_call_ns": result.per_call_ns}))
    return measurements
