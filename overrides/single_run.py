"""One run in this process: cases x ops timed by the Timer core (or counted by Callgrind),
returned as a `RunResult` (what `bench.py` without --compare prints).

Kept apart from the CLI so that tests and the A/B workers build runs the same way: `target_for`
is the one place a (case, op) becomes a Timer target (the case's own statement, its mode).
Whether an op makes sense for a case at all is decided before timing, by
`overrides/cases/ops.py`'s `not_applicable_reason` (pyspybench and the counts ask it too).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from overrides import environment
from overrides.cases.casenames import Case
from overrides.cases.ops import Op, not_applicable_reason
from overrides.clock import speed, stats
from overrides.clock.timer import MIN_SAMPLES, TARGET_SAMPLE_NS, Target, TimerConfig, time_targets
from overrides.results import CaseResult, RunResult
from overrides.run_settings import COUNTED, RunSettings

# Whole-run time budget when the user did not pick --min-time: the default 3 s per target is
# kept up to 20 targets (the seed's four cases take 12 s); a matrix (`--cases all --op all`, ~40
# timed targets) is scaled down to fit this, so it prints in about a minute and a half. The floor
# keeps ~500 samples of ~1 ms per target: ~10 under the p2 headline, enough for it and its interval.
DEFAULT_RUN_BUDGET_S = 60.0
MIN_SCALED_TIME_S = max(0.5, 2 * MIN_SAMPLES * TARGET_SAMPLE_NS / 1e9)


def target_for(case: Case, op: Op) -> Target:
    """The Timer target for `op` on `case`: the case's own statement if it has one, its mode."""
    return Target(f"{case.name} [{op.name}]", case.stmt_for(op), case.make_operands, case.context)


def scaled_min_time_s(targets: int, per_target_s: float,
                      run_budget_s: float = DEFAULT_RUN_BUDGET_S) -> float:
    """Per-target time so that `targets` targets fit `run_budget_s` (never above `per_target_s`)."""
    if targets * per_target_s <= run_budget_s:
        return per_target_s
    return max(MIN_SCALED_TIME_S, run_budget_s / targets)


def run_benchmark(
    cases: Sequence[Case],
    ops: Sequence[Op],
    config: TimerConfig,
    progress: Callable[[str], None] | None = None,
    *,
    run_budget_s: float | None = None,
    speed_cache: str | None = None,
) -> RunResult:
    """Time every case under every op in one round-robin, and record it.

    Ops that make no sense for a case are recorded as not applicable, untimed. With
    `run_budget_s` (the CLI passes it when --min-time is not given), `config.min_time_s` is
    scaled down so that all timed targets fit that budget. With `speed_cache` (a path: the CLI
    passes speed.cache_path()), a reference loop is timed beside the cases and the run's speed
    judged against this machine's earlier runs kept there (overrides/clock/speed.py).
    """
    pairs = [(case, op) for op in ops for case in cases]
    reasons = [not_applicable_reason(case, op) for case, op in pairs]
    timed_pairs = [pair for pair, reason in zip(pairs, reasons) if reason is None]
    scaled_from = None
    if run_budget_s is not None and config.samples is None:
        # The budget bounds the run's longest time: the cap under a stopping rule.
        per_target_s = scaled_min_time_s(len(timed_pairs), config.cap_s(), run_budget_s)
        if per_target_s < config.cap_s():
            scaled_from = config.cap_s()
            config = dataclasses.replace(config, min_time_s=min(config.min_time_s, per_target_s),
                                         max_time_s=per_target_s if config.precision else None)
    reference = speed.reference_target() if speed_cache and timed_pairs else None
    timing = time_targets([target_for(case, op) for case, op in timed_pairs], config, progress,
                          reference=reference)
    timed_in_order = iter(timing.targets)  # one per applicable pair, in pair order
    results = []
    for (case, op), reason in zip(pairs, reasons):
        common = dict(case=case.name, op=op.name, stmt=case.stmt_for(op),
                      description=case.description, baseline=case.baseline, warning=case.warning or None)
        if reason is not None:
            results.append(CaseResult(calls_per_sample=0, samples_ns=(), loop_overhead_ns=0.0,
                                      not_applicable=reason, **common))
            continue
        timed = next(timed_in_order)
        results.append(CaseResult(calls_per_sample=timed.calls_per_sample,
                                  samples_ns=timed.samples_ns,
                                  loop_overhead_ns=timed.loop_overhead_ns, error=timed.error,
                                  device=timed.device, device_ns=timed.device_ns, **common))
    results = tuple(results)
    settings = RunSettings(
        min_time_s=config.min_time_s, max_time_s=config.cap_s() if config.precision else None,
        precision=config.precision, stopped=timing.stopped, min_time_scaled_from_s=scaled_from,
        calls_per_sample=config.calls_per_sample, samples=config.samples, threads=config.threads,
        rounds=timing.rounds, recalibrated=tuple(timing.recalibrated),  # calibrated during a slow spell
        method=f"round-robin, unrolled loop, empty-loop cost ({stats.headline_label()} of its "
               "samples) removed, GC off")
    env = environment.collect(config.threads)
    run = RunResult(env, settings, results, interrupted=timing.interrupted, wall_s=timing.wall_s)
    if timing.reference is not None and not timing.interrupted:
        checked = speed.judge(timing.reference.samples_ns, timing.reference.calls_per_sample,
                              env.machine_key(), speed_cache, run.created)
        run = dataclasses.replace(run, speed=checked)
    return run


def count_benchmark(cases: Sequence[Case], ops: Sequence[Op], seeds: Sequence[int],
                    python: str | None = None,
                    progress: Callable[[str], None] | None = None, variants: Sequence[int] = ()) -> RunResult:
    """Count instructions per call of every case under every op with Callgrind (a forked child
    per hash seed and module of cases: counts/isolated.py), and record it as a results file with
    no timings. `variants`: a budget's layout variants, one per seed: then the runs are those
    (count_with_variants counts both at once)."""
    if variants:
        counted, variant_runs = count_with_variants(cases, ops, seeds, variants, python, progress, plain=False)
        return dataclasses.replace(counted, instructions=tuple(variant_runs))
    return count_with_variants(cases, ops, seeds, (), python, progress)[0]


def count_with_variants(cases: Sequence[Case], ops: Sequence[Op], seeds: Sequence[int], variants: Sequence[int],
                        python: str | None = None, progress: Callable[[str], None] | None = None,
                        plain: bool = True) -> tuple[RunResult, list]:
    """count_benchmark's record (with `plain`), and your cases counted again under `variants`
    (one a seed), by the same servers, one import of torch a seed (isolated.count_with_variants):
    (the record, the variants' runs; none died)."""
    import sys

    from overrides.counts import isolated, records

    pairs = [(case, op) for op in ops for case in cases]
    reasons = [not_applicable_reason(case, op) for case, op in pairs]
    targets = [(case.name, op.name) for (case, op), reason in zip(pairs, reasons) if reason is None]
    python = python or sys.executable
    runs, variant_runs = isolated.count_with_variants(python, targets, seeds, variants, say=progress, plain=plain)
    results = tuple(CaseResult(case=case.name, op=op.name, stmt=case.stmt_for(op),
                               description=case.description, calls_per_sample=0, samples_ns=(),
                               loop_overhead_ns=0.0, not_applicable=reason, baseline=case.baseline,
                               warning=case.warning or None)
                    for (case, op), reason in zip(pairs, reasons))
    settings = RunSettings(method=COUNTED, seeds=tuple(seeds))
    return (RunResult(environment.collect(1), settings, results,
                      wall_s=sum(run.wall_s for run in runs), instructions=records.as_saved(runs)),
            [run for run in variant_runs if not run.died])
