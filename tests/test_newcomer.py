"""What a newcomer met (issue: nothing lost, nothing misleading): a delta in percent wherever a
delta is, what the base and branch columns are, progress that says what comes next, a busy run
flagged, and a system interpreter refused with what to do instead."""

import pytest

from overrides import run_report, comparison_report
from overrides.ab.countfirst import counts_progress
from overrides.case_comparison import Comparison
from overrides.comparison_settings import ComparisonSettings
from overrides.environment import Environment


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


def test_progress_says_what_the_clock_does_next():
    assert counts_progress(4, 4) == "counts decide all 4 cases; the clock checks them over 5 pairs"
    assert counts_progress(3, 4).endswith("until the other 1 is decided, or its cap")
    assert "case(s)" not in counts_progress(2, 4)


def test_a_run_whose_median_is_many_times_its_figure_is_flagged():
    from overrides.clock import stats
    from overrides.results import CaseResult, RunResult

    floor = [1_150.0 + i % 7 for i in range(60)]  # a narrow fast floor: the old flags stay quiet
    busy = floor + [9_000.0 + 10 * i for i in range(140)]  # then mostly busy: IQR ~ 8x the figure
    assert stats.core_width(busy) < stats.CORE_WIDTH_WARN_FRACTION and not stats.contended(busy)
    assert stats.too_spread(busy) and not stats.too_spread(floor + [2_000.0] * 60)
    run = RunResult(Environment(), {}, (CaseResult("Tensor", "torch.add", "torch.add(x, y)", "", 100, tuple(busy), 5.0),))
    warning, = run_report.spread_warnings(run)
    assert "half the samples took over 3x the figure" in warning


@pytest.mark.slow
def test_make_bench_never_installs_into_an_interpreter_without_torch(tmp_path):
    """An interpreter without torch (Debian's system one here) gets nothing installed: torch goes
    into the checkout's own virtualenv, made from it, whose interpreter is printed for make to run;
    a second run reuses it. The torch installed is a hand-made wheel (OVERRIDES_TORCH_PIN): what
    is checked is where it goes, in seconds, not torch."""
    import os
    import subprocess

    import pytest

    from conftest import ROOT, make_wheel, python_without_torch

    python = python_without_torch()
    if python is None:
        pytest.skip("needs an interpreter without torch at /usr/bin/python3")
    pin = f"torch @ file://{make_wheel(str(tmp_path), 'torch', '1.99.0', {'torch/__init__.py': ''})}"
    venv = tmp_path / "checkout-venv"
    env = dict(os.environ, OVERRIDES_VENV=str(venv), OVERRIDES_TORCH_PIN=pin)
    script = os.path.join(ROOT, "scripts", "install_deps.sh")
    made = subprocess.run(["bash", script, python], capture_output=True, text=True, timeout=300, env=env)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == str(venv / "bin" / "python")
    assert f"nothing is installed into {python}" in made.stderr
    assert (venv / "bin" / "python").exists() and python_without_torch() == python  # untouched
    again = subprocess.run(["bash", script, python], capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0 and again.stdout.strip() == str(venv / "bin" / "python")
    assert "using this checkout's virtualenv" in again.stderr and "making" not in again.stderr
    # An interpreter that has torch is used as it is, and nothing is made.
    mine = subprocess.run(["bash", script, str(venv / "bin" / "python")], capture_output=True, text=True,
                          timeout=120, env=dict(env, OVERRIDES_VENV=str(tmp_path / "not-made")))
    assert mine.returncode == 0 and mine.stdout.strip() == str(venv / "bin" / "python")
    assert not (tmp_path / "not-made").exists()


@pytest.mark.slow
def test_a_torch_that_will_not_install_is_one_line_and_leaves_no_half_made_virtualenv(tmp_path):
    import os
    import subprocess

    import pytest

    from conftest import ROOT, python_without_torch

    python = python_without_torch()
    if python is None:
        pytest.skip("needs an interpreter without torch at /usr/bin/python3")
    venv = tmp_path / "checkout-venv"
    env = dict(os.environ, OVERRIDES_VENV=str(venv), OVERRIDES_TORCH_PIN="torch==0.0.0.1")
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install_deps.sh"), python],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert "pip could not install torch==0.0.0.1" in last and "OVERRIDES_TORCH_PIN" in last
    assert not venv.exists()


def test_pip_install_of_the_checkout_says_it_runs_from_there_and_installs_nothing(tmp_path):
    # The package is named `overrides`, as PyPI's is: an install would replace that one, and the
    # commands run from the checkout anyway. pip stops with the reason (scripts/checkout_only.py).
    import os
    import subprocess
    import sys

    from conftest import ROOT

    target = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(target), ROOT],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "is not installed with pip: it runs from this checkout" in out.stdout + out.stderr
    assert not (target / "overrides").exists() and "Traceback" not in out.stdout + out.stderr
    assert os.path.isfile(os.path.join(ROOT, "bench.py"))


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


def test_the_matrix_refuses_a_version_it_cannot_read_and_says_when_it_tested_nothing():
    import subprocess

    from conftest import ROOT

    def matrix(*versions, **env):
        import os

        # MATRIX_REQUIRED as each call says, not as the run of this test was started (CI sets 1)
        return subprocess.run(["bash", "scripts/matrix.sh", *versions], cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, **{"MATRIX_REQUIRED": "0", **env}))

    out = matrix("abc")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a Python version like 3.12" in out.stderr
    out = matrix("3.99")
    assert out.returncode == 2 and "no Python 3.99 here" in out.stderr and "nothing was tested" in out.stderr
    out = matrix("3.99", MATRIX_REQUIRED="1")  # CI: a supported version missing is a failure
    assert out.returncode == 1 and "failed on Python 3.99 (missing)" in out.stderr


@pytest.mark.slow
def test_make_test_installs_no_browser_on_a_machine_without_one(tmp_path):
    """scripts/install_deps.sh --test, as `make test` runs it, where no Chromium is found: it asks
    apt-get for nothing but valgrind (where that is missing), never a browser. apt-get is a
    stand-in that notes what it was asked for; Chromium is hidden (conftest.without_chromium)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, without_chromium

    asked = tmp_path / "apt-get-asked"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {asked}\n')
    (fake / "apt-get").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    env.pop("CHROMIUM", None)
    (tmp_path / "bin-underneath").mkdir()
    done = subprocess.run(without_chromium(["bash", os.path.join(ROOT, "scripts", "install_deps.sh"), "--test",
                                            sys.executable], str(tmp_path / "bin-underneath")),
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == sys.executable
    said = asked.read_text() if asked.exists() else ""
    assert "chromium" not in said.lower() and "chromium" not in done.stderr.lower(), said + done.stderr
