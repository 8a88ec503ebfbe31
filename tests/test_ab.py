"""Paired A/B: real workers, real torch, a branch with a known injected cost."""

import argparse
import math
import random
import sys

import pytest

from conftest import run_tool
from overrides.ab import shimenv
from overrides.ab.config import MIN_PAIRS, ABConfig
from overrides.ab.estimates import PairEstimate, decided, summarise
from overrides.ab.paired import run_ab
from overrides.builds import interpreters
from overrides.cases import seedcases
from overrides.cases.ops import DEFAULT_OP
from overrides.clock import stats
from overrides.errors import UsageError

QUICK = ABConfig(pairs=4, seconds_per_pair=1.0)  # behaviour, not precision
AFFECTED = {"SubTensor", "SubWithTorchFunction"}  # the only cases that reach the shim


@pytest.fixture(scope="module")
def slow_compare(tmp_path_factory, torch_python):
    """One `bench.py --compare` against a virtualenv over the same packages whose
    Tensor.__torch_function__ spins ~1 us: the four seed cases in four 1-s pairs, clock only.
    Returns (the finished process, its JSON)."""
    import json

    folder = tmp_path_factory.mktemp("slow")
    slow = shimenv.make_shim_env(torch_python, str(folder / "slow"), "sleep1us").python
    path = folder / "cmp.json"
    out = run_tool("bench.py", "--compare", torch_python, slow, "--pairs", str(QUICK.pairs),
                   "--pair-seconds", str(QUICK.seconds_per_pair), "--json", str(path),
                   "--no-instructions", timeout=600)
    return out, json.loads(path.read_text()) if path.exists() else None


def verdicts(comparisons):
    return {c["case"]: c["verdict"] for c in comparisons}


def test_a_a_flags_nothing(a_a_compare):
    # Four 1-s pairs leave a wide interval (t with 3 degrees of freedom); the false-positive
    # rate at the default threshold is measured by benchmarks/ab_validation.py, not here. What
    # must hold every time: the same interpreter on both sides is never called 2% slower.
    _, out, data = a_a_compare
    assert [c["case"] for c in data["comparisons"]] == [c.name for c in seedcases.SEED_CASES]
    assert not {case for case, v in verdicts(data["comparisons"]).items() if v in ("regression", "improvement")}
    assert out.returncode == 0, out.stderr
    assert data["settings"]["pairs"] == 4 and data["settings"]["threshold_pct"] == 2.0
    assert data["paired"] and all(c["paired"] and c["ci95_ns"] is not None for c in data["comparisons"])


def test_a_large_injected_cost_flags_exactly_the_affected_cases(slow_compare):
    out, data = slow_compare
    assert data is not None, out.stderr
    flagged = {case for case, v in verdicts(data["comparisons"]).items() if v == "regression"}
    assert flagged == AFFECTED, verdicts(data["comparisons"])
    by_case = {c["case"]: c for c in data["comparisons"]}
    for name in AFFECTED:  # the spin is >= 1 us, plus the Python call around it
        assert by_case[name]["delta_ns"] > 800 and by_case[name]["ci95_ns"][0] > 0
        # Both sides' pooled samples come back as ordinary figures, for reports.
        assert by_case[name]["branch_ns"] > by_case[name]["base_ns"]


def test_counts_made_first_end_the_clock_once_every_case_is_decided(copies_counted_first):
    # Two copies of one torch on both sides: the counts are equal to the instruction, "no change"
    # on every case, so the clock needs no more than its minimum of pairs, however generous the
    # time cap. (The clock alone rarely says "no change", 99% sure, on SubTensor in five short
    # pairs.) Against a shim, Tensor's counts moved by layout alone (-5 [-40..+30] once), too
    # unsure to decide, so a test built on that would depend on layout luck.
    outcome = copies_counted_first
    assert outcome.settings.instructions.settled_by_counts == ("SubTensor torch.add", "Tensor torch.add")
    assert outcome.settings.stopped == "decided" and outcome.settings.pairs == MIN_PAIRS
    # and only checked by the clock, its pairs sampled for the shorter time (conftest: 1 s -> 0.3 s)
    assert outcome.settings.seconds_per_pair == 0.3
    assert not {c.case for c in outcome.comparisons if c.verdict in ("regression", "improvement")}


def test_pairs_sample_shorter_only_where_the_counts_decide_every_case():
    from overrides.ab.config import CHECK_SECONDS_PER_PAIR, DEFAULT_SECONDS_PER_PAIR, config_from_arguments
    from overrides.ab.countfirst import Counted, check_seconds
    from overrides.counts.judge import CountComparison

    targets = [(case, DEFAULT_OP) for case in seedcases.SEED_CASES[:2]]

    def counted(*verdicts):
        return Counted(comparisons=tuple(CountComparison(case.name, DEFAULT_OP.name, 1.0, 1.0, 0.0, None, verdict, 1)
                                         for (case, _), verdict in zip(targets, verdicts)))

    every = counted("no change", "regression")
    assert check_seconds(ABConfig(), every, targets) == CHECK_SECONDS_PER_PAIR < DEFAULT_SECONDS_PER_PAIR
    assert check_seconds(ABConfig(), counted("no change", "inconclusive"), targets) is None
    assert check_seconds(ABConfig(), counted("no change"), targets) is None  # one not counted
    assert check_seconds(ABConfig(), None, targets) is None  # no counts: the clock judges alone
    assert check_seconds(ABConfig(seconds_per_pair=0.3), every, targets) == 0.3  # never longer than asked
    # a --pair-seconds of the user's holds for every pair; without it, the check's
    flags = dict(instructions=False, no_instructions=True, seeds=None, pairs=None, max_seconds=60.0,
                 threshold_ns=20.0, threshold_pct=0.75)
    given, _ = config_from_arguments(argparse.Namespace(pair_seconds=4.0, **flags), counts=False)
    assert given.seconds_per_pair == 4.0 and check_seconds(given, every, targets) is None
    default, _ = config_from_arguments(argparse.Namespace(pair_seconds=None, **flags), counts=False)
    assert default.seconds_per_pair == DEFAULT_SECONDS_PER_PAIR
    assert check_seconds(default, every, targets) == CHECK_SECONDS_PER_PAIR


def test_bench_compare_cli_exit_status_and_json(slow_compare):
    out, data = slow_compare
    assert out.returncode == 1, out.stderr  # a regression gates CI
    assert "regression" in out.stdout and "paired A/B" in out.stdout
    assert data["schema"] == "torch-function-overhead/comparison/3" and data["paired"] is True
    sub = next(c for c in data["comparisons"] if c["case"] == "SubTensor")
    assert sub["verdict"] == "regression" and len(sub["ci95_ns"]) == 2
    assert "instructions" not in data["settings"]  # --no-instructions: clock only


def test_counting_flags_that_contradict_are_named(bench):
    out = bench("--compare", sys.executable, sys.executable, "--instructions", "--no-instructions")
    assert out.returncode == 2 and "contradict" in out.stderr
    out = bench("--no-instructions")
    assert out.returncode == 2 and "add --compare" in out.stderr
    out = bench("--compare", sys.executable, sys.executable, "--no-instructions", "--seeds", "1")
    assert out.returncode == 2 and "drop --no-instructions or --seeds" in out.stderr


def test_bad_interpreters_are_named(bench, tmp_path):
    out = bench("--compare", sys.executable, str(tmp_path / "nope" / "python"))
    assert out.returncode == 2 and "no interpreter at" in out.stderr
    out = bench("--compare", sys.executable, str(tmp_path))
    assert out.returncode == 2 and "without bin/python" in out.stderr
    with pytest.raises(UsageError, match="no interpreter 'no-such-python-here' on PATH"):
        interpreters.resolve_interpreter("no-such-python-here")


def test_an_interpreter_without_torch_is_named(tmp_path):
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "bare")
    with pytest.raises(UsageError, match="has no torch"):
        run_ab(sys.executable, str(tmp_path / "bare"), seedcases.SEED_CASES[:1], [DEFAULT_OP], QUICK)


def test_t_interval_over_pairs_covers_95_percent():
    rng = random.Random(3)
    hits = 0
    trials = 2000
    for _ in range(trials):
        logs = [rng.gauss(0.01, 0.02) for _ in range(5)]
        estimates = [PairEstimate(i, "c", "op", v, v, 1000.0, 1000.0, 100) for i, v in enumerate(logs)]
        comparison = summarise(estimates, "c", "op", 1000.0, 1010.0, 0.0, 0.0)
        low, high = comparison.ci95_ns
        hits += low <= 1000.0 * math.expm1(0.01) <= high
    assert 0.93 <= hits / trials <= 0.97


def test_one_pair_is_inconclusive():
    estimates = [PairEstimate(0, "c", "op", 0.5, 0.5, 1000.0, 1500.0, 100)]
    assert summarise(estimates, "c", "op", 1000.0, 1500.0, 20, 0.5).verdict == "inconclusive"
    assert stats.t95(4) == pytest.approx(2.776)


def test_the_counts_end_a_case_unless_the_clock_goes_against_them():
    from overrides.case_comparison import Comparison

    def clock(verdict):
        return Comparison("SubTensor", "torch.add", 4000.0, 4040.0, 40.0, (10.0, 70.0), verdict, paired=True)

    assert decided(clock("inconclusive"), "no change")  # the counts settle it
    assert decided(clock("regression"), "regression")
    assert not decided(clock("regression"), "no change")  # sampled on before "clock only"
    assert not decided(clock("improvement"), "regression")  # ... or "disagree"
    assert not decided(clock("inconclusive"), None)  # no counts: the clock must decide
    assert decided(clock("no change"), None)
