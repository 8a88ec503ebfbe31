"""Verdicts on instruction counts: base against branch, per case, over matched hash seeds.

Counts see no machine noise, but memory layout moves them: each hash seed is a layout, so a
comparison's deltas are taken seed by seed (the same seeds on both sides), pooled with layout's
known spread into an interval, and judged by the one verdict rule (`overrides/verdicts.py`)
against the clock's own threshold fraction. How many seeds to count is `rounds.py`'s question.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from overrides.builds import samepath
from overrides.clock import stats
from overrides.counts.records import CountRun, same_seeds
from overrides.verdicts import judge, threshold_for

# Verdicts on counts. One layout decides nothing unless the counts are exact (EXACT_INSTRUCTIONS):
# the bare shim's untouched WithTorchFunction read +309 instructions a call (+1.39%) under one
# seed of ~250, -5..-39 under the others, and was called a regression on that seed alone when a
# change on one seed needed only 1% of the count. Two seeds that disagree so much have a spread
# beyond LAYOUT_SPREAD_TRUSTED times the known one, and their own t-interval leaves them
# undecided.
# The threshold is the clock's own fraction of the base (verdicts.DEFAULT_THRESHOLD_PCT, or the
# user's --threshold-pct), so a verdict means one size of change in both views: at ~0.12 ns an
# instruction 0.75% of a case's instructions is 0.75% of its time. It was 0.25% until the bare
# shim's untouched WithTorchFunction, whose per-seed deltas move -94..+39 by layout (0.12% sd),
# stayed undecided in 4 of 20 comparisons: a third of the clock's threshold no count could reach.
DEFAULT_THRESHOLD_INSTRUCTIONS = 50.0
DEFAULT_THRESHOLD_INSTRUCTIONS_PCT = 0.75
# How far layout moves a per-seed delta, known before a comparison starts: the standard deviation
# of the bare shim's per-seed deltas over 26 comparisons (199 seeds) was 0.12% of the count on
# Tensor and WithTorchFunction and 0.22% on SubTensor and SubWithTorchFunction. The interval of
# a comparison's seeds pools this prior, weighted as LAYOUT_SPREAD_WEIGHT seeds, with their own
# spread (the moderated t of empirical Bayes): two or three seeds alone give t-intervals of
# +-12.7 and +-4.3 standard errors, so wide that the bare shim's SubTensor (+1.2%) read
# "regression" on two seeds only 56% of the time and its untouched cases needed three to six.
# With the prior both are decided on one or two seeds (replayed over the 199 seed deltas: 1.1
# and 1.6 rounds on average, no wrong verdict). A comparison whose own spread exceeds the prior
# LAYOUT_SPREAD_TRUSTED times is not the kind the prior was measured on: its own t-interval
# alone judges it.
LAYOUT_SPREAD_PCT = 0.25
LAYOUT_SPREAD_WEIGHT = 4
LAYOUT_SPREAD_TRUSTED = 2.0
# Beyond this many times the known spread, the seeds are not moved by layout alone: the two sides
# do not count alike (a start-up that differs, a process that does other work), and the mean of
# such deltas is an offset of the pair of sides, not a change, whatever its interval says. On a
# 16-CPU machine whose Python was a virtualenv's, an untouched Tensor read -632 instructions a
# call over 8 seeds with a per-seed standard deviation of 523 (~5% of the count, 20x the known
# spread) and was called an improvement. The bare shim's seeds spread 0.12-0.22% (1-2x), so 4x is
# room for twice the widest seen. Such a case is "inconclusive", with the reason, and the clock
# judges it; unless every seed alone is past the threshold in one direction.
LAYOUT_SPREAD_UNTRUSTED = 4.0
# Counts made from one path on both sides (overrides/builds/samepath.py) are deterministic: two installs
# or copies of one build counted 0.0 apart on every case and seed in every A/A comparison so far
# (benchmarks/history.md, "One path for both sides"), while any change of code a case runs moved
# its count at every seed (the bare shim's untouched Tensor: 0 on some seeds, -4..-19 on others).
# So a case whose delta stays within this many instructions on every seed is "no change", from
# its first seed on: the same instructions ran.
EXACT_INSTRUCTIONS = 2.0
# "no change" on counts: the 95% interval of the per-seed deltas inside the threshold, where the
# clock asks 99% (verdicts.NO_CHANGE_CONFIDENCE). The clock's margin guards its threshold against
# a sample whose noise is the machine's; the counts' noise is layout's, measured (above) and
# pooled into the interval. At 99% the bare shim's untouched Tensor (-19..0 over seeds) took
# five seeds, ~17 s each on two CPUs; at 95% it takes two or three.
COUNTS_NO_CHANGE_CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class CountComparison:
    case: str
    op: str
    base: float  # mean per-call count over seeds
    branch: float
    delta: float
    ci95: tuple[float, float] | None  # over matched seeds; None with one seed
    verdict: str
    seeds: int
    spread: float | None = None  # standard deviation of the per-seed deltas (two seeds or more)
    limit: float | None = None  # the threshold this case was judged against, in instructions
    exact: bool = False  # every seed's delta within EXACT_INSTRUCTIONS, counted from one path
    why: str = ""  # why an "inconclusive" is not for want of seeds (untrusted_spread)


def compare_counts(base_runs: Sequence[CountRun], branch_runs: Sequence[CountRun],
                   threshold: float = DEFAULT_THRESHOLD_INSTRUCTIONS,
                   threshold_pct: float = DEFAULT_THRESHOLD_INSTRUCTIONS_PCT) -> list[CountComparison]:
    """Per (case, op): mean delta over seeds present on both sides, its interval, a verdict.

    The interval pools the matched per-seed deltas' own spread with layout's known one
    (layout_interval). One seed decides nothing: "inconclusive", so a comparison counts another.
    From one path on both sides, a delta within EXACT_INSTRUCTIONS on every seed is "no change"
    however few the seeds. Runs that started from different paths (no private namespace:
    overrides/builds/samepath.py) carry an offset no interval sees, so the threshold is at least
    PATH_ALLOWANCE_INSTRUCTIONS then."""
    one_path = not samepath.paths_differ([run.settings for run in (*base_runs, *branch_runs)])
    if not one_path:
        threshold = max(threshold, samepath.PATH_ALLOWANCE_INSTRUCTIONS)
    deltas: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run, other in same_seeds(base_runs, branch_runs):
        for c in run.cases:
            b = other.get(c.case, c.op)
            if c.error is None and b is not None and b.error is None:
                deltas.setdefault((c.case, c.op), []).append((c.per_call, b.per_call))
    out = []
    for (case, op), pairs in deltas.items():
        base = sum(a for a, _ in pairs) / len(pairs)
        branch = sum(b for _, b in pairs) / len(pairs)
        diffs = [b - a for a, b in pairs]
        delta = sum(diffs) / len(diffs)
        limit = threshold_for(base, threshold, threshold_pct)
        spread = stats.stdev(diffs) if len(diffs) >= 2 else None
        exact = one_path and all(abs(d) <= EXACT_INSTRUCTIONS for d in diffs)
        ci = layout_interval(diffs, base, 0.95)
        no_change_ci = layout_interval(diffs, base, COUNTS_NO_CHANGE_CONFIDENCE)
        why = "" if exact else untrusted_spread(diffs, base, limit)
        # One layout is no evidence either way (see above), nor are seeds that spread as no
        # layout moves them (untrusted_spread).
        verdict = judge(delta, ci, limit, no_change_ci, exact=exact, undecidable=len(diffs) == 1 or bool(why))
        out.append(CountComparison(case, op, base, branch, delta,
                                   (min(diffs), max(diffs)) if exact else ci if len(diffs) >= 2 else None,
                                   verdict, len(diffs), spread, limit, exact, why))
    return out


def untrusted_spread(diffs: Sequence[float], base: float, limit: float) -> str:
    """'' where the per-seed deltas `diffs` spread as layout moves them, else why they are not
    judged (LAYOUT_SPREAD_UNTRUSTED): their spread against layout's known one."""
    if len(diffs) < 2:
        return ""
    own, known = stats.stdev(diffs), LAYOUT_SPREAD_PCT / 100 * abs(base)
    if own <= LAYOUT_SPREAD_UNTRUSTED * known:
        return ""
    if all(d >= limit for d in diffs) or all(d <= -limit for d in diffs):
        return ""  # every layout alone says the same change
    return (f"its seeds spread {own:,.0f} instructions a call ({own / abs(base) * 100:.1f}% of the "
            f"count), {own / known:.0f}x what layout moves: the two sides do not count alike")


def layout_interval(diffs: Sequence[float], base: float, confidence: float) -> tuple[float, float]:
    """The `confidence` interval of the mean of the per-seed deltas `diffs` of a case counting
    `base` instructions a call (see LAYOUT_SPREAD_PCT)."""
    mean = sum(diffs) / len(diffs)
    half = half_width(stats.stdev(diffs) if len(diffs) >= 2 else 0.0, len(diffs), base, confidence)
    return mean - half, mean + half


def half_width(own: float, seeds: int, base: float, confidence: float) -> float:
    """Half the interval of a mean over `seeds` per-seed deltas whose own standard deviation is
    `own`: Student's t on a variance that pools layout's known spread (LAYOUT_SPREAD_PCT of
    `base`, worth LAYOUT_SPREAD_WEIGHT seeds) with their own, or on their own alone once it is
    beyond LAYOUT_SPREAD_TRUSTED times the known one."""
    known = LAYOUT_SPREAD_PCT / 100 * abs(base)
    if own <= LAYOUT_SPREAD_TRUSTED * known:
        df = LAYOUT_SPREAD_WEIGHT + seeds - 1
        variance = (LAYOUT_SPREAD_WEIGHT * known ** 2 + (seeds - 1) * own ** 2) / df
    else:
        df, variance = seeds - 1, own ** 2
    return stats.t_quantile(confidence, df) * math.sqrt(variance / seeds)


def function_deltas(base_runs: Sequence[CountRun], branch_runs: Sequence[CountRun], case: str,
                    op: str, count_: int = 15) -> list[tuple[str, float, float]]:
    """(function, base, branch) self instructions per call, largest |change| first, from the
    first seed present on both sides."""
    for run, other in same_seeds(base_runs, branch_runs):
        a, b = run.get(case, op), other.get(case, op)
        if a and b:
            return largest_changes(a.functions, b.functions, count_, 0.5)
    return []


def largest_changes(before: dict, after: dict, count_: int, floor: float) -> list[tuple[str, float, float]]:
    """(function, before, after) of the `count_` functions whose own count changed most (one
    missing from a side counts 0 there), those that changed by less than `floor` left out."""
    rows = [(n, before.get(n, 0.0), after.get(n, 0.0)) for n in set(before) | set(after)]
    rows.sort(key=lambda r: -abs(r[2] - r[1]))
    return [r for r in rows[:count_] if abs(r[2] - r[1]) >= floor]
