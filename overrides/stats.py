"""Statistics over per-call samples: the headline figure, spread, intervals, trust flags.

Pure functions over sequences of floats, no torch and no numpy, so results files can be
read and judged anywhere and the choices here are easy to test.

Why the headline is a low quantile, not the median or the minimum
------------------------------------------------------------------
Noise on this kind of machine only ever adds time: interrupts, another tenant on the core,
and slow spells in which everything runs 20-60% slower for seconds at a time. The median moves
with however much of the run fell into slow spells (on the issue's machine, 1151-1883 ns for
the same code across six invocations), so it says more about the neighbours than about the
code. The minimum is the right idea (the least disturbed sample) but rests on one sample: one
lucky or unlucky block moves it. A low quantile keeps the idea and averages over many samples:
with ~1000+ samples per case the 10th percentile sits on ~100 samples below it and is immune
to slow spells as long as they cover less than ~90% of the run. `benchmarks/headline_stats.py`
measures the spread of each candidate across invocations; its output is in the README.
"""

from __future__ import annotations

import math
from typing import Sequence

HEADLINE_QUANTILE = 0.10  # see the module docstring and benchmarks/headline_stats.py
# Trust flag. The seed-style test, IQR above 10% of the median, fires on every run here: slow
# spells fatten the upper tail (IQR/median was 13-18% in nine quiet invocations) while p10 moved
# ~1%. What threatens the headline is a wide *fast core*: (p25 - p5) / p10 was 0.9-2.8% in those
# runs. Above 5%, fewer than ~10% of samples were undisturbed and p10 is no longer solid.
CORE_WIDTH_WARN_FRACTION = 0.05
# Second trust flag: the headline far above the fastest sample means slow spells covered more
# than ~90% of the run, so the headline is the busy machine's speed, however narrow its core.
# In quiet runs here p10 sits 1-4% above the minimum; a run recorded while another tenant loaded
# the machine read 90% above it (Tensor 3,063 ns against a 1,603 ns fastest sample).
CONTENDED_FRACTION = 0.10
MIN_TRUSTED_SAMPLES = 20  # below this no interval is meaningful
Z95 = 1.959963984540054  # two-sided 95% normal quantile


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def iqr(values: Sequence[float]) -> float:
    return quantile(values, 0.75) - quantile(values, 0.25)


def headline(values: Sequence[float]) -> float:
    """The per-call figure this project quotes: the HEADLINE_QUANTILE of the samples."""
    return quantile(values, HEADLINE_QUANTILE)


def quantile_ci95(values: Sequence[float], q: float = HEADLINE_QUANTILE) -> tuple[float, float]:
    """Distribution-free 95% interval of a quantile from the binomial order statistics.

    It covers sampling noise within one process only; memory layout differs from process to
    process and moves the figure further (see README, "How sure is a number").
    """
    n = len(values)
    if n < MIN_TRUSTED_SAMPLES:
        return (math.nan, math.nan)
    ordered = sorted(values)
    half_width = Z95 * math.sqrt(n * q * (1 - q))
    low = max(0, math.floor(n * q - half_width))
    high = min(n - 1, math.ceil(n * q + half_width))
    return (ordered[low], ordered[high])


def core_width(values: Sequence[float]) -> float:
    """Width of the fast core, (p25 - p5) / headline: how well the headline is pinned down."""
    head = headline(values)
    if not values or head <= 0:
        return math.inf
    return (quantile(values, 0.25) - quantile(values, 0.05)) / head


def contention(values: Sequence[float]) -> float:
    """How far the headline lies above the fastest sample, as a fraction of the fastest."""
    if not values or min(values) <= 0:
        return math.inf
    return headline(values) / min(values) - 1


def contended(values: Sequence[float]) -> bool:
    """True when the machine was busy for most of the run (see CONTENDED_FRACTION)."""
    return contention(values) > CONTENDED_FRACTION


def too_spread(values: Sequence[float]) -> bool:
    """True when the samples are too spread, too few, or too contended to trust the headline."""
    if len(values) < MIN_TRUSTED_SAMPLES:
        return True
    return core_width(values) > CORE_WIDTH_WARN_FRACTION or contended(values)


def stdev(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return math.nan
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


# Two-sided 95% Student t quantiles by degrees of freedom (beyond 30 the normal is close enough).
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t95(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        return math.inf
    return _T95[df - 1] if df <= len(_T95) else Z95
