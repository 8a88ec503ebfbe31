"""Statistics: checked against numpy and against known distributions."""

import numpy as np
import pytest

from overrides.clock import stats


@pytest.mark.parametrize("q", [0.0, 0.1, 0.25, 0.5, 0.9, 1.0])
def test_quantile_matches_numpy(q):
    values = list(np.random.default_rng(0).normal(1000, 50, 999))
    assert stats.quantile(values, q) == pytest.approx(np.quantile(values, q))


@pytest.mark.parametrize("q, z", [(0.10, -1.2815515655446004), (0.02, -2.053748910631823)])
def test_quantile_interval_covers_the_true_quantile_about_95_percent_of_the_time(q, z):
    rng = np.random.default_rng(1)
    true_q = 1000 + 50 * z
    hits = sum(lo <= true_q <= hi for lo, hi in
               (stats.quantile_ci95(list(rng.normal(1000, 50, 2000)), q) for _ in range(400)))
    assert 0.90 <= hits / 400 <= 0.99


def test_too_spread_flags_wide_and_short_samples():
    # A tight fast core with a heavy slow tail is fine: that is every run on a shared machine.
    assert not stats.too_spread([1000.0 + i % 10 for i in range(70)] + [1300.0] * 30)
    assert stats.too_spread([1000.0 + 10 * i for i in range(100)])  # p1..p5 spans ~4%
    assert stats.too_spread([1000.0] * 5)
    busy = [1000.0] + [1500.0 + i % 10 for i in range(199)]  # narrow core, all of it slow
    assert stats.core_width(busy) < stats.CORE_WIDTH_WARN_FRACTION and stats.too_spread(busy)
    assert stats.contended(busy) and stats.contention(busy) > 0.4
    assert not stats.contended([1000.0 + i % 10 for i in range(100)])


def test_headline_label_reads_as_english():
    assert stats.headline_label() == f"{round(stats.HEADLINE_QUANTILE * 100)}" + {
        1: "st", 2: "nd", 3: "rd", 5: "th", 10: "th"}[round(stats.HEADLINE_QUANTILE * 100)] + " percentile"


def test_headline_ignores_a_slow_spell():
    fast = [1000.0 + i % 7 for i in range(600)]
    slow = [1500.0 + i % 7 for i in range(400)]  # 40% of the run 50% slower
    assert stats.headline(fast + slow) < 1010


def test_median_interval_is_exact_for_a_few_values_and_covers_as_said():
    import math

    # the binomial order statistics: 8 values' 99% interval is their range, 16's the 3rd to the 14th
    assert stats.median_ci(list(range(8)), 0.99) == (0, 7)
    assert stats.median_ci(list(range(16)), 0.99) == (2, 13)
    assert all(math.isnan(v) for v in stats.median_ci(list(range(7)), 0.99))
    assert all(math.isnan(v) for v in stats.median_ci(list(range(5)), 0.95))
    rng = np.random.default_rng(7)
    for n, confidence in ((8, 0.99), (12, 0.95), (16, 0.99)):
        draws = rng.standard_cauchy((4000, n))  # heavy tails: a t-interval's assumption fails, this one's holds
        covered = np.mean([low <= 0 <= high for low, high in (stats.median_ci(list(d), confidence) for d in draws)])
        assert confidence - 0.01 <= covered <= 1.0, (n, confidence, covered)


def test_drift_sees_the_halves_of_a_run_move_together_and_not_sampling_noise():
    rng = np.random.default_rng(3)

    def run(n, shift=0.0):  # a fast floor with a slow tail, as a case's samples are here
        samples = 1000 * (1 + rng.exponential(0.05, n)) + np.where(rng.random(n) < 0.3, 500, 0)
        samples[n // 2:] *= 1 + shift
        return list(samples)

    moved = stats.drift([run(800, 0.03), run(800, 0.03), run(800, 0.02)])
    assert moved.seen and moved.shift == pytest.approx(0.027, abs=0.01), moved
    assert stats.drift([run(800, -0.03)]).shift < 0
    # Samples of one speed throughout: the move is sampling noise, seen about 5% of the time.
    seen = sum(stats.drift([run(800), run(800)]).seen for _ in range(300))
    assert seen / 300 <= 0.12, seen
    assert stats.drift([run(30)]) is None  # halves too short for an interval
    assert stats.drift([]) is None
