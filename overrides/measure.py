"""Glue from the catalog to the Timer core: time cases x ops, and return a `RunResult`.

Kept apart from the CLI so that tests, pyspybench and the A/B workers build runs the same way.
"""

from __future__ import annotations

from typing import Callable, Sequence

from overrides import environment
from overrides.cases import Case
from overrides.ops import Op
from overrides.results import CaseResult, RunResult
from overrides.timer import Target, TimerConfig, time_targets


def run_benchmark(
    cases: Sequence[Case],
    ops: Sequence[Op],
    config: TimerConfig,
    progress: Callable[[str], None] | None = None,
) -> RunResult:
    """Time every case under every op in one round-robin, and record it."""
    pairs = [(case, op) for op in ops for case in cases]
    targets = [Target(f"{case.name} [{op.name}]", op.stmt, case.make_operands)
               for case, op in pairs]
    timing = time_targets(targets, config, progress)
    results = tuple(
        CaseResult(
            case=case.name, op=op.name, stmt=op.stmt, description=case.description,
            calls_per_sample=timed.calls_per_sample, samples_ns=timed.samples_ns,
            loop_overhead_ns=timed.loop_overhead_ns, error=timed.error,
        )
        for (case, op), timed in zip(pairs, timing.targets)
    )
    settings = {
        "min_time_s": config.min_time_s,
        "calls_per_sample": config.calls_per_sample,
        "samples": config.samples,
        "threads": config.threads,
        "rounds": timing.rounds,
        "method": "round-robin, unrolled loop, empty-loop cost removed, GC off",
    }
    return RunResult(environment.collect(config.threads), settings, results,
                     interrupted=timing.interrupted, wall_s=timing.wall_s)
