"""What the outputs say, where a newcomer misread them (nothing misleading): a delta in percent
wherever a delta is, what the base and branch columns are, progress that says what comes next,
a busy run flagged, and a report headline that names improvements too."""

from overrides import comparison_report, run_notes
from overrides.ab.countfirst import counts_progress
from overrides.case_comparison import Comparison
from overrides.comparison_settings import ComparisonSettings
from overrides.environment import Environment
from overrides.run_settings import RunSettings


def _counted(delta_instructions: float = 120.0) -> Comparison:
    return Comparison("SubTensor", "torch.add", 5_126.0, 4_800.0, 297.0, (250.0, 340.0), "regression", True,
                      base_instructions=40_000.0, branch_instructions=40_000.0 + delta_instructions,
                      instructions_ci95=(100.0, 140.0), counts_verdict="regression")


def test_the_counted_table_gives_both_deltas_in_percent():
    table = comparison_report.comparison_table([_counted()], ComparisonSettings(pairs=5, threshold_ns=20, threshold_pct=0.75))
    header, _, row = table.splitlines()[:3]
    assert "delta %" in header and "delta instr %" in header
    assert "+5.79%" in row and "+0.30%" in row  # 297 of 5,126 ns; 120 of 40,000 instructions


def test_the_notes_say_the_paired_delta_is_not_the_difference_of_the_columns():
    notes = " ".join(comparison_report.comparison_notes([_counted()], ComparisonSettings(pairs=5)))
    assert "paired estimate, so it need not equal their difference" in notes
    # how long each pair sampled: 1.5 s where the clock only checks the counts, 2.5 s where it judges
    timed = comparison_report.comparison_notes([_counted()], ComparisonSettings(pairs=5, seconds_per_pair=1.5))
    assert "in 5 fresh worker pairs of 1.5 s;" in " ".join(timed)


def test_progress_says_what_the_clock_does_next():
    assert counts_progress(4, 4) == "counts decide all 4 cases; the clock checks them over 5 pairs"
    assert counts_progress(4, 4, 1.5) == "counts decide all 4 cases; the clock checks them over 5 pairs of 1.5 s"
    assert counts_progress(3, 4).endswith("until the other 1 is decided, or its cap")
    assert "case(s)" not in counts_progress(2, 4)


def test_a_run_whose_median_is_many_times_its_figure_is_flagged():
    from overrides.clock import stats
    from overrides.results import CaseResult, RunResult

    floor = [1_150.0 + i % 7 for i in range(60)]  # a narrow fast floor: the old flags stay quiet
    busy = floor + [9_000.0 + 10 * i for i in range(140)]  # then mostly busy: IQR ~ 8x the figure
    assert stats.core_width(busy) < stats.CORE_WIDTH_WARN_FRACTION and not stats.contended(busy)
    assert stats.too_spread(busy) and not stats.too_spread(floor + [2_000.0] * 60)
    run = RunResult(Environment(), RunSettings(), (CaseResult("Tensor", "torch.add", "torch.add(x, y)", "", 100, tuple(busy), 5.0),))
    warning, = run_notes.spread_warnings(run)
    assert "half the samples took over 3x the figure" in warning


def test_the_report_headline_says_what_changed_improvements_too():
    from overrides.review.markdown import _headline

    def case(name, delta, verdict):
        return Comparison(name, "torch.add", 4_500.0, 4_500.0 + delta, delta, (delta - 20, delta + 20),
                          verdict, True, base_instructions=50_000.0,
                          branch_instructions=50_000.0 + delta * 10, instructions_ci95=(0.0, 1.0))

    faster = case("units:pair", -1_431.0, "improvement")
    slower = case("SubTensor", 51.0, "regression")
    same = case("Tensor", 1.0, "no change")
    # a -31.7% improvement under "No regression." read as if nothing had happened
    assert _headline([same, faster]) == ("**No case regressed; 1 improved**: units:pair -1,431 ns "
                                         "(-31.80%) / -14,310 instructions")
    assert _headline([slower, faster, same]).startswith("**1 case regressed**: SubTensor +51 ns (+1.13%)")
    assert "; **1 improved**: units:pair" in _headline([slower, faster])
    assert _headline([same]) == "**No case regressed or improved.**"
