"""No sentence the data did not check (issue 45, item 7): a note says what moved only where a
verdict found a move, a run's time aim beside the time it took, and a busy machine only where
the samples show one."""

import dataclasses
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT, run_tool
from overrides import comparison_report, results, run_notes, run_report
from overrides.case_comparison import Comparison
from overrides.clock import stats
from overrides.environment import Environment
from overrides.verdicts import NO_CHANGE, REGRESSION
from overrides.run_settings import RunSettings
from overrides.sides import Sides

FILE = "/u/units.py"
MODULES = Sides({"units:pair": FILE}, {"units:pair": FILE})


def compared(clock_verdict: str, delta_ns: float) -> Comparison:
    return Comparison("units:pair", "torch.add", 5_000.0, 5_000.0 + delta_ns, delta_ns,
                      (delta_ns - 10, delta_ns + 10), clock_verdict, paired=True)


def test_one_file_on_both_sides_says_what_moved_only_where_something_did():
    still = comparison_report.user_module_notes(MODULES, [compared(NO_CHANGE, 1.0)])
    assert still == [f"units:pair: both sides ran one file of yours, {FILE}: your code is the same on both, "
                     "and no verdict found a change."]
    moved = comparison_report.user_module_notes(MODULES, [compared(REGRESSION, 300.0)])
    assert "so what moved (regression) is the build, not your code" in moved[0]  # two interpreters
    aa = comparison_report.user_module_notes(MODULES, [compared(REGRESSION, 300.0)],
                                             Sides("units:pair", "units:pair"))
    assert "in one interpreter: nothing differed between the sides" in aa[0] and "the build" not in aa[0]
    # one file holding two factories is not one code
    two = comparison_report.user_module_notes(MODULES, [compared(REGRESSION, 300.0)],
                                              Sides("units:pair", "units:pair64"))
    assert "each side its own code" in two[0]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("notes") / "run.json"
    done = run_tool("bench.py", "--cases", "Tensor", "SubTensor", "-n", "20", "-m", "30", "-q", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    return results.load(str(out))


def test_a_scaled_run_says_its_aim_beside_the_time_it_took(small_run):
    long_run = dataclasses.replace(small_run, wall_s=270.0, settings=dataclasses.replace(
        small_run.settings, min_time_scaled_from_s=3.0, max_time_s=0.5))
    text = run_report.table(long_run)
    assert "to fit the run in" not in text
    assert "scaled down from 3 s to aim the sampling at ~60 s; the run took 270 s" in text
    unknown = dataclasses.replace(long_run, wall_s=math.nan)  # an old file without it says only the aim
    assert "aim the sampling at ~60 s; --min-time" in run_report.table(unknown)


def test_a_time_cap_blames_a_busy_machine_only_where_the_samples_show_one(small_run):
    capped = dataclasses.replace(small_run, settings=dataclasses.replace(small_run.settings, stopped="time cap",
                                                                          max_time_s=3.0, precision=0.002))
    busy = [r for r in capped.results if stats.contended(r.samples_ns) or stats.busy(r.samples_ns)]
    text = run_report.table(capped)
    if busy:
        assert f"the machine was busy ({len(busy)} of 2 figures show it" in text
    else:
        assert "the machine was busy" not in text and "the samples stayed spread wider than that" in text
    quiet = dataclasses.replace(capped, results=tuple(dataclasses.replace(r, samples_ns=(1000.0,) * 40)
                                                       for r in capped.results))
    assert "the machine was busy" not in run_report.table(quiet)


def test_a_run_stopped_by_the_machines_move_says_how_far_it_moved(small_run):
    # The move is read again from the samples kept: here the second half of every case's 400
    # samples 5% slower than the first.
    samples = tuple(1000.0 + i % 7 if i < 200 else 1050.0 + i % 7 for i in range(400))
    moved = tuple(dataclasses.replace(r, samples_ns=samples) for r in small_run.results)
    drifted = dataclasses.replace(small_run, results=moved, settings=dataclasses.replace(
        small_run.settings, stopped="drift", max_time_s=3.0, precision=0.002))
    text = run_report.table(drifted)
    assert ("sampling stopped before every figure was known to +-0.2%: the figures moved together by "
            "+5.0% between the first and second half of the run") in text
    assert "sampling stopped" not in run_report.table(small_run)  # -m 30: no rule, no such note


@pytest.mark.slow
def test_an_a_a_of_your_case_does_not_say_the_build_moved(tmp_path):
    with open(f"{ROOT}/benchmarks/userlib/units.py") as source:
        (tmp_path / "units.py").write_text(source.read())
    out = tmp_path / "aa.json"
    done = subprocess.run([sys.executable, f"{ROOT}/bench.py", "--compare", "units:pair", "units:pair",
                           "--no-instructions", "--pairs", "2", "--pair-seconds", "0.5", "-q", "--json", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert "the same code on both sides (an A/A)" in done.stdout
    verdict = json.loads(out.read_text())["comparisons"][0]["verdict"]
    if verdict not in (REGRESSION, "improvement", "disagree", "clock only"):
        assert "what moved" not in done.stdout and "no verdict found a change" in done.stdout
    else:
        assert "is a false alarm of the method" in done.stdout


def test_the_differential_says_how_many_samples_it_had_not_a_typical_figure():
    from types import SimpleNamespace

    from overrides.flame.stacks import HOT_LOOP_PREFIX
    from overrides.review import time_sections

    def recording(samples):  # py-spy's collapsed stacks: the import before the loop is not counted
        return {("<module>", "import torch"): 5000, ("<module>", f"{HOT_LOOP_PREFIX}SubTensor", "add"): samples}

    found = SimpleNamespace(base_runs=[recording(412)], branch_runs=[recording(380)])
    assert time_sections._samples(found) == "380-412 samples a recording"


def test_counts_say_how_far_their_own_seeds_moved_not_a_typical_figure():
    from overrides.counts.records import CaseCounts, CountRun

    def counted(*per_seed):
        runs = [CountRun(seed, (CaseCounts("SubTensor", "torch.add", n, (n, n), {}, None, {}),), {}, 1.0)
                for seed, n in enumerate(per_seed, 1)]
        return results.RunResult(Environment(), RunSettings(), (), instructions=tuple(runs))

    assert "here by up to 0.50% between hash seeds" in run_notes.layout_note(counted(40_000.0, 40_200.0))
    one = run_notes.layout_note(counted(40_000.0))
    assert "which one hash seed cannot show" in one and "~1%" not in one
