"""`bench.py --compare BASE BRANCH --step`: two versions of your step, the change a step judged,
and both versions' ops side by side.

Real torch and real steps: the known truth is a version whose `__torch_function__` busy-waits a
known time a call (benchmarks/userlib's steps:mlp_wait, 20 us, and a small step here waiting
WAIT_NS), so its change is its calls a step times the wait, and each op's change a call is the
wait; two builds of one step are the A/A."""

from __future__ import annotations

import json
import math
import sys

import pytest

from conftest import as_users_folder, bench_in, tiny_steps, user_library

WAIT_NS = 50_000  # each __torch_function__ call of Waiting busy-waits this long

STEPS_MODULE = tiny_steps(
    {"Quiet": "",
     "Waiting": "        end = time.perf_counter_ns() + WAIT_NS\n        while time.perf_counter_ns() < end:\n"
                "            pass\n"},
    {"quiet": ("Quiet", "a small step, its weight a bare subclass"),
     "waiting": ("Waiting", "the same step waiting WAIT_NS a call")},
    prelude=f"WAIT_NS = {WAIT_NS}\n", rest='''

def twinless(plain=False):
    """the waiting step, whose plain twin raises once built: only the base's twin may be timed"""
    step = waiting(plain)
    if not plain:
        return step
    ran = []

    def once():
        ran.append(1)
        if len(ran) > 1:
            raise RuntimeError("the branch's own plain twin ran")
        step()

    return once
''')


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """benchmarks/userlib and this test's steps (comparetest.py), in a folder of the user's own."""
    folder = tmp_path / "lib"
    user_library(folder, comparetest=STEPS_MODULE)
    as_users_folder(monkeypatch, folder)
    monkeypatch.syspath_prepend(str(folder))
    return folder


def _calls(spec: str) -> int:
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step

    pair = build_steps(spec)
    return len([c for c in capture_step(pair.subclass, pair.user_dir).calls if not c.nested])


def test_the_known_wait_reads_its_calls_times_the_wait_and_is_a_regression(user_folder):
    from overrides.step.comparing import compare_steps
    from overrides.step.factory import build_steps
    from overrides.verdicts import REGRESSION

    known = _calls("steps:mlp_wait") * 20_000
    result = compare_steps(build_steps("steps:mlp"), build_steps("steps:mlp_wait"), time_s=0.5)
    assert not result.drift
    # 20 us a call is large against the ~300-us step; the wait is wall time, which a busy machine
    # lengthens (a spin preempted past its end), never shortens: a loose top, a firm bottom
    assert 0.7 * known <= result.change_ns <= 1.5 * known, (result.change_ns, known)
    assert result.verdict == REGRESSION
    low, high = result.change_ci_ns()
    assert low <= result.change_ns <= high
    assert result.steps_per_sample[0] == result.steps_per_sample[1] == result.steps_per_sample[2]
    assert result.timings.branch.overhead_ns > result.timings.base.overhead_ns > 0


@pytest.mark.slow  # up to 24 stretches of three steps: ~60 s
def test_an_a_a_of_two_builds_of_one_step_is_not_called_a_change(user_folder):
    from overrides.step.comparing import compare_steps
    from overrides.step.factory import build_steps
    from overrides.verdicts import MOVED

    result = compare_steps(build_steps("steps:mlp"), build_steps("steps:mlp"), time_s=0.5)
    assert result.verdict not in MOVED, (result.change_ns, result.change_ci_ns(), result.threshold)
    assert abs(result.change_share) < 0.05, result.change_share


def test_three_steps_take_turns_without_a_step_running_twice_in_a_row():
    from overrides.step.timing import balanced_orders

    for count in (3, 4, 5):
        orders = balanced_orders(count)
        sequence = [step for order in orders for step in order]
        turns = list(zip(sequence, sequence[1:] + sequence[:1]))  # the last round leads to the first
        assert all(a != b for a, b in turns), (count, orders)
        assert all(sorted(order) == list(range(count)) for order in orders)
        # each step follows each other step equally often, over a whole cycle
        follows = {(a, b): turns.count((a, b)) for a in range(count) for b in range(count) if a != b}
        assert max(follows.values()) - min(follows.values()) <= (0 if count == 3 else 1), follows


def test_ops_of_two_versions_are_joined_and_their_change_summed():
    from overrides.step.comparing import join_ops, ops_change
    from overrides.step.optable import OpRow

    def row(op, calls, mine, ci=(0.0, 0.0), **more):
        return OpRow("__torch_function__", op, "f32[4]", calls, False, (), mine, 100.0,
                     (mine - 100.0 + ci[0], mine - 100.0 + ci[1]), subclass_ci_ns=(mine + ci[0], mine + ci[1]), **more)

    base = (row("add", 2, 300.0, (-10, 10)), row("mul", 1, 200.0), row("gone", 1, 150.0))
    branch = (row("add", 1, 150.0, (-5, 5)), row("mul", 1, 700.0), row("new", 3, 110.0),
              row("wrapped", 1, math.nan, not_applicable="a wrapper subclass"))
    joined = {c.row.op: c for c in join_ops(base, branch)}
    assert joined["add"].change_ns == -150.0 and joined["add"].change_ci_ns == (-165.0, -135.0)
    assert joined["add"].step_change_ns == 50.0 - 400.0
    assert joined["mul"].step_change_ns == 500.0
    assert joined["gone"].step_change_ns == -50.0 and math.isnan(joined["gone"].change_ns)
    assert joined["new"].step_change_ns == 30.0
    assert math.isnan(joined["wrapped"].step_change_ns)
    assert [c.row.op for c in join_ops(base, branch)] == ["mul", "add", "gone", "new", "wrapped"]
    total, (low, high) = ops_change(join_ops(base, branch))
    assert total == -350.0 + 500.0 - 50.0 + 30.0 and low < total < high


def _bench_here(folder, *args, timeout=400):
    return bench_in(folder, *args, timeout=timeout)


@pytest.mark.parametrize("args, said", [
    (("--step", "steps:mlp", "steps:mlp_fast"), "to compare two versions of your step, write --compare steps:mlp "
                                                "steps:mlp_fast --step"),
    (("--step", "steps:mlp", "--compare", "steps:mlp", "steps:mlp_fast"), "write --compare BASE BRANCH --step"),
    (("--step",), "--step without a factory compares the two step factories of --compare; name one"),
    (("--compare", "steps:mlp", "steps:mlp_fast", "--step", "--batch", "8"), "drop --batch"),
    (("--compare", "steps:mlp", "steps:mlp_fast", "--step", "--compiled"), "drop --compiled"),
    (("--compare", sys.executable, "steps:mlp", "--step"), "is not a step factory; name two"),
    (("--compare", "steps:mlp", "units:pair", "--step"), "pair() takes no `plain` keyword"),
])
def test_two_steps_asked_wrong_are_refused_in_one_line_with_exit_2(user_folder, args, said):
    out = _bench_here(user_folder, *args)
    assert out.returncode == 2 and said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.slow
def test_bench_py_compares_two_steps_op_by_op_and_writes_the_json(user_folder):
    out = _bench_here(user_folder, "--compare", "comparetest:quiet", "comparetest:waiting", "--step",
                      "--min-time", "0.3", "--json", "compare.json")
    assert out.returncode == 1, out.stderr  # a regression, as --compare says one
    for said in ("plain twin (base's)", "base: comparetest:quiet", "branch: comparetest:waiting",
                 "change a step, branch less base: +", ": regression", "(the change: the median of ", "threshold: max(20.0 ns, 0.75% of base)",
                 "change ns/call", "torch.nn.functional.linear", "the ops' changes: +"):
        assert said in out.stdout, (said, out.stdout)
    with open(user_folder / "compare.json", encoding="utf-8") as src:
        saved = json.load(src)
    assert saved["schema"] == "torch-function-overhead/step-compare/3"
    assert len(saved["change"]["stretches_ns"]) >= 5 and all(v > 0 for v in saved["change"]["stretches_ns"])
    calls = len(saved["calls"]["branch"])
    assert calls == len(saved["calls"]["base"]) and calls >= 5
    assert 0.7 * calls * WAIT_NS <= saved["change"]["ns"] <= 2.5 * calls * WAIT_NS, (saved["change"], calls)
    assert saved["change"]["verdict"] == "regression"
    # each version timed as --step times it: the plain twin's samples are the base's timing's
    assert len(saved["plain"]["samples_ns"]) == len(saved["base"]["samples_ns"]) and saved["branch"]["samples_ns"]
    assert saved["branch"]["overhead_ns"] > saved["base"]["overhead_ns"]
    priced = [op for op in saved["ops"] if op["change_ns"] is not None]
    assert {op["op"] for op in priced} >= {"torch.nn.functional.linear", "torch.Tensor.square", "torch.Tensor.sum"}
    # each op waits once a call more: its change a call is the wait (a busy machine lengthens it)
    assert all(0.75 * WAIT_NS <= op["change_ns"] <= 4 * WAIT_NS for op in priced), \
        [(op["op"], op["change_ns"]) for op in priced]
    assert all(op["base"]["calls"] == op["branch"]["calls"] for op in priced)


def test_the_change_and_its_interval_come_from_stretches_of_fresh_builds():
    """Samples that pin each headline tightly say nothing of what differs from one build to the
    next: stretches whose changes spread as far as the threshold leave the change undecided,
    however tight each stretch's samples."""
    from overrides.step.comparing import MIN_STRETCHES, StepComparison
    from overrides.verdicts import NO_CHANGE

    floor = tuple(100_000.0 + 10 * i for i in range(200))  # p2 ~100,040, known to within a few hundred ns

    def compared(changes):
        return StepComparison("a:f", "b:f", None, (1, 1, 1), floor, floor, floor, (), 1, 1.0, tuple(changes))

    clear = compared([20_000.0, 20_300.0, 19_800.0, 20_100.0, 19_900.0, 20_050.0, 19_950.0, 20_200.0])
    assert clear.decided_early and clear.change_ns == pytest.approx(20_025)
    same = compared([30.0, -40.0, 10.0, -20.0, 25.0, 5.0, -15.0, 0.0])
    assert same.decided_early and same.verdict == NO_CHANGE  # 99% interval well within 0.75% of the step
    moved = compared([900.0, -800.0, 700.0, -900.0, 850.0, -750.0, 800.0, -850.0])  # each build +-0.9%
    assert not moved.decided_early and moved.verdict != NO_CHANGE  # the samples alone cannot see it
    low, high = moved.change_ci_ns(0.99)
    assert low < -moved.threshold and high > moved.threshold
    # one wild stretch of twelve moves the interval one place, not by its size
    wild = compared([3_000.0, 30.0, -40.0, 10.0, -20.0, 25.0, 5.0, -15.0, 0.0, 20.0, -10.0, 15.0])
    assert wild.decided_early and wild.verdict == NO_CHANGE, wild.change_ci_ns(0.99)
    assert not compared([30.0] * (MIN_STRETCHES - 1)).decided_early  # fewer stretches decide nothing
    assert all(math.isnan(v) for v in compared([30.0] * 5).change_ci_ns())


def test_a_rebuild_that_raises_keeps_the_stretches_finished(user_folder):
    # A factory that raised on its sixth call ended the comparison with exit 2, its finished
    # stretches lost; now they are judged, and the result says why it ended.
    from overrides.step import compare_output
    from overrides.step.comparing import compare_steps
    from overrides.step.factory import build_steps

    calls = []

    def rebuild(pair):
        calls.append(pair.spec)
        if len(calls) == 4:  # stretch 3's base
            raise RuntimeError("the dataset moved")
        return build_steps(pair.spec, pair.batch, pair.device)

    result = compare_steps(build_steps("comparetest:quiet"), build_steps("comparetest:waiting"), time_s=0.2,
                           rebuild=rebuild)
    assert len(result.stretch_changes_ns) == 2 and all(change > 0 for change in result.stretch_changes_ns)
    assert result.incomplete == "stretch 3 could not run: RuntimeError: the dataset moved"
    assert result.verdict == "inconclusive"  # two stretches carry no interval
    report = compare_output.StepCompareReport(result, ("", ""), (), ())
    assert "incomplete: stretch 3 could not run: RuntimeError: the dataset moved" in compare_output.render(report)
    assert compare_output.payload(report, {})["incomplete"] == result.incomplete


def test_each_stretch_times_steps_built_afresh(user_folder):
    from overrides.step.comparing import MIN_STRETCHES, compare_steps
    from overrides.step.factory import build_steps

    built = []

    def rebuild(pair):
        built.append(pair.spec)
        return build_steps(pair.spec, pair.batch, pair.device)

    result = compare_steps(build_steps("comparetest:quiet"), build_steps("comparetest:waiting"), time_s=0.2,
                           rebuild=rebuild)
    stretches = len(result.stretch_changes_ns)
    assert stretches >= MIN_STRETCHES
    # each stretch after the first builds both afresh, in turns: the branch first every other one
    # (then each version is timed as --step times it, on builds of its own)
    assert built[:2 * (stretches - 1)] == [spec for stretch in range(1, stretches)
                     for spec in (("comparetest:waiting", "comparetest:quiet") if stretch % 2
                                  else ("comparetest:quiet", "comparetest:waiting"))]
    assert all(change > 0 for change in result.stretch_changes_ns)  # each stretch sees the wait


def test_each_versions_share_is_timed_as_step_times_it_against_the_base_twin(user_folder):
    """Three steps in turn run the plain twin only ever after a subclass step, and read a
    version's share below --step's; each version's overhead and share come from timing.time_steps
    (ten builds), the branch's step beside the base's plain twin."""
    from overrides.step.comparing import compare_steps
    from overrides.step.factory import build_steps
    from overrides.step.timing import STRETCHES

    from overrides.step import compare_output

    # the branch's own plain twin raises once built: the base's is the one timed beside it
    result = compare_steps(build_steps("comparetest:quiet"), build_steps("comparetest:twinless"), time_s=0.2)
    assert len(result.versions) == 2, "the versions were not timed as --step times them"
    base, branch = result.versions
    assert (base.spec, branch.spec) == ("comparetest:quiet", "comparetest:twinless")
    assert result.timings.base is base and result.timings.branch is branch
    assert len(base.stretch_overheads_ns) == len(branch.stretch_overheads_ns) == STRETCHES
    assert branch.overhead_ns > base.overhead_ns  # the branch waits WAIT_NS a call more
    report = compare_output.StepCompareReport(result, ("", ""), (), ())
    assert "each version's overhead and share timed as --step times it" in compare_output.render(report)


def test_each_warning_names_its_side_in_an_a_a():
    """An A/A compares one factory with itself: a warning naming the factory alone does not say
    which step it is of."""
    from overrides.step.compare_output import StepCompareReport, warnings
    from overrides.step.comparing import StepComparison

    steady = tuple(100_000.0 + i for i in range(200))
    spread = tuple(100_000.0 * (1 + i / 50) for i in range(200))  # p1 to p5 8% of the headline apart: too spread
    compared = StepComparison("lib:mlp", "lib:mlp", None, (1, 1, 1), steady, spread, spread, (), 1, 1.0, (0.0,) * 8)
    said = warnings(StepCompareReport(compared, ("", ""), (), ()))
    assert len(said) == 2 and said[0].startswith("warning: base lib:mlp [subclass step]") and \
        said[1].startswith("warning: branch lib:mlp [subclass step]"), said
