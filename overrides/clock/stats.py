"""Statistics over per-call samples: the headline figure, spread, intervals, trust flags.

Pure functions over sequences of floats, no torch and no numpy, so results files can be
read and judged anywhere and the choices here are easy to test.

Why the headline is a low quantile, not the median or the minimum
------------------------------------------------------------------
Noise on this kind of machine only ever adds time: interrupts, another tenant on the core,
and slow spells in which everything runs far slower for seconds at a time. The median moves
with however much of the run fell into slow spells (on the issue's machine, by a large part of
itself for the same code across invocations), so it says more about the neighbours than about
the code. The minimum is the right idea (the least disturbed sample) but rests on one sample.

Which quantile: the undisturbed samples form a floor just above the minimum, and even in a
quiet second of a run only a minority of the samples land near the minimum: the rest are hit by
something smaller than a slow spell. Over whole busy runs the floor still held more than the 2%
of the samples p2 needs, in every run (six runs kept by `benchmarks/headline_stats.py`). The
10th percentile, the first choice, sits on the edge of that floor: in some of those runs it slid
off it, and its spread across the runs was wider than the 2nd percentile's (figures:
benchmarks/history.md, 'Docstring figures'). p2 stays on the floor while at least 2% of samples
are undisturbed, and with the ~2,000 samples a case gets it still rests on ~40 of them, not one.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

HEADLINE_QUANTILE = 0.02  # see the module docstring and benchmarks/headline_stats.py
# Trust flag. The seed-style test, IQR above 10% of the median, fires on every run here: slow
# spells fatten the upper tail. What threatens the headline is a floor too thin to stand on:
# (p5 - p1) / p2 was 0.4-1.3% in the six busy runs above (p10 alone slid 6% off in two of them).
# Above 3%, fewer than ~one sample in twenty was undisturbed and p2 is on a slope.
CORE_WIDTH_WARN_FRACTION = 0.03
# Second trust flag: the headline far above the fastest sample means the floor was (nearly)
# never reached: the machine was busy for the whole run, so the headline is its busy speed,
# however narrow its core. p2 sat 0.5-1.4% above the minimum in the six busy runs above; a run
# recorded while another tenant loaded the machine read its p10 90% above it (Tensor 3,063 ns
# against a 1,603 ns fastest sample).
CONTENDED_FRACTION = 0.05
# Third trust flag: most samples far above the headline. On this machine the median of a normal
# run sits ~1.9x the headline (slow spells; the README's example table: 1.91-1.92x); a run
# recorded under load showed an IQR of 9,021 ns on a 1,150 ns figure and raised no flag, as its
# fastest few percent still formed a narrow floor. Past 3x, more than half the run was that busy.
BUSY_MEDIAN_RATIO = 3.0
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

    It covers sampling noise within one run only, as if the samples were independent: the
    machine's speed drifts over seconds (benchmarks/drift_probe.py) and memory layout differs
    from build to build, both moving the figure further (see docs/timing.md, "How sure is a number").
    """
    return quantile_ci(values, q, 0.95)


def quantile_ci(values: Sequence[float], q: float = HEADLINE_QUANTILE,
                confidence: float = 0.95) -> tuple[float, float]:
    """quantile_ci95 at `confidence` (0.95 or 0.99: the 99% one is what "no change" needs)."""
    n = len(values)
    if n < MIN_TRUSTED_SAMPLES:
        return (math.nan, math.nan)
    ordered = sorted(values)
    half_width = _TABLES[confidence][1] * math.sqrt(n * q * (1 - q))
    low = max(0, math.floor(n * q - half_width))
    high = min(n - 1, math.ceil(n * q + half_width))
    return (ordered[low], ordered[high])


@dataclasses.dataclass(frozen=True)
class Drift:
    """How far the headlines moved between the first and the second half of a run, all its
    targets together: each headline's move relative to it (second half less first), averaged,
    signed, because the machine's speed moves every case of a round-robin run alike; and the 95%
    margin that sampling alone leaves on that average (each half's quantile_ci95, combined in
    quadrature as for independent estimates)."""

    shift: float
    margin: float

    @property
    def seen(self) -> bool:
        """The headlines moved by more than sampling explains: the machine's speed moved them."""
        return abs(self.shift) > self.margin


def drift(runs: Sequence[Sequence[float]]) -> Drift | None:
    """The Drift of targets timed together, each's samples in the order taken (one per round);
    None where any has fewer than 2 x MIN_TRUSTED_SAMPLES samples (no halves to compare)."""
    shifts, variances = [], []
    for samples in runs:
        half = len(samples) // 2
        head = headline(samples) if half >= MIN_TRUSTED_SAMPLES else 0.0
        if head <= 0:
            return None
        first, second = samples[:half], samples[half:]
        shifts.append((headline(second) - headline(first)) / head)
        variances.append(sum(((high - low) / 2 / head) ** 2
                             for low, high in (quantile_ci95(first), quantile_ci95(second))))
    if not shifts:
        return None
    return Drift(sum(shifts) / len(shifts), math.sqrt(sum(variances)) / len(shifts))


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval of the median of a few values, exact: the k-th smallest to
    the k-th largest, k the most with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 on each
    side. One wild value (a disturbed stretch of a step comparison) moves it by one place, not
    by its size, as it would a t-interval. NaN where no k is: fewer than 6 values at 95%, 8 at 99%."""
    n = len(values)
    tail, below, k = (1 - confidence) / 2, 0.0, 0
    while k < n:
        below += math.comb(n, k) / 2 ** n  # P(Binomial(n, 1/2) <= k)
        if below > tail:
            break
        k += 1
    if k == 0:
        return (math.nan, math.nan)
    ordered = sorted(values)
    return (ordered[k - 1], ordered[n - k])


def headline_difference(plus: Sequence[Sequence[float]], minus: Sequence[Sequence[float]] = (),
                        relative: float = 0.0, confidence: float = 0.95) -> tuple[float, tuple[float, float]]:
    """The headlines of `plus` summed less those of `minus` (an overhead: a case less its
    baseline; what compile removed: two overheads), and its 95% interval: each headline's own
    (quantile_ci95) combined in quadrature, as for independent estimates, the low side of an
    added headline with the high side of a subtracted one; `relative` of each headline joins
    both sides, for what differs between two targets beyond their samples (the caller's constant
    says what). NaN where any has too few samples. At `confidence` 0.99, each headline's 99%
    interval (quantile_ci) and the 99% share of `relative`, as the normal quantiles scale."""
    value = sum(headline(s) for s in plus) - sum(headline(s) for s in minus)
    below = above = 0.0
    scale = _TABLES[confidence][1] / Z95
    for samples, sign in [(s, 1) for s in plus] + [(s, -1) for s in minus]:
        low, high = quantile_ci(samples, HEADLINE_QUANTILE, confidence)
        head = headline(samples)
        down, up = (head - low, high - head) if sign > 0 else (high - head, head - low)
        below += down ** 2 + (scale * relative * head) ** 2
        above += up ** 2 + (scale * relative * head) ** 2
    return value, (value - math.sqrt(below), value + math.sqrt(above))


def headline_label() -> str:
    """The headline statistic in words, for tables: "2nd percentile"."""
    q = round(HEADLINE_QUANTILE * 100)
    suffix = "th" if 10 <= q % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(q % 10, "th")
    return f"{q}{suffix} percentile"


CORE_LOW, CORE_HIGH = 0.01, 0.05  # the quantiles whose distance is the core width


def core_width(values: Sequence[float]) -> float:
    """Width of the fast core, (p5 - p1) / headline: how well the headline is pinned down."""
    head = headline(values)
    if not values or head <= 0:
        return math.inf
    return (quantile(values, CORE_HIGH) - quantile(values, CORE_LOW)) / head


def contention(values: Sequence[float]) -> float:
    """How far the headline lies above the fastest sample, as a fraction of the fastest."""
    if not values or min(values) <= 0:
        return math.inf
    return headline(values) / min(values) - 1


def contended(values: Sequence[float]) -> bool:
    """True when the machine was busy for most of the run (see CONTENDED_FRACTION)."""
    return contention(values) > CONTENDED_FRACTION


def busy(values: Sequence[float]) -> bool:
    """True when the median lies more than BUSY_MEDIAN_RATIO times above the headline."""
    head = headline(values) if values else 0.0
    return head > 0 and median(values) > BUSY_MEDIAN_RATIO * head


def too_spread(values: Sequence[float]) -> bool:
    """True when the samples are too spread, too few, too contended or too busy to trust the
    headline."""
    if len(values) < MIN_TRUSTED_SAMPLES:
        return True
    return core_width(values) > CORE_WIDTH_WARN_FRACTION or contended(values) or busy(values)


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


# Two-sided 99%: the 99.5% quantiles, likewise.
_T99 = (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169, 3.106, 3.055,
        3.012, 2.977, 2.947, 2.921, 2.898, 2.878, 2.861, 2.845, 2.831, 2.819, 2.807, 2.797,
        2.787, 2.779, 2.771, 2.763, 2.756, 2.750)
Z99 = 2.5758293035489004  # two-sided 99% normal quantile
_TABLES = {0.95: (_T95, Z95), 0.99: (_T99, Z99)}


def t95(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom."""
    return t_quantile(0.95, df)


def t_quantile(confidence: float, df: int) -> float:
    """The two-sided `confidence` (0.95 or 0.99) quantile of Student's t with `df` degrees of
    freedom: tabled up to 30, beyond by the Cornish-Fisher expansion (within 0.001 there)."""
    table, z = _TABLES[confidence]
    if df < 1:
        return math.inf
    if df <= len(table):
        return table[df - 1]
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
