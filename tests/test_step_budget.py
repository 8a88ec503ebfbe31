"""`bench.py --write-budget FILE --step SPEC` / `--check-budget FILE --step SPEC`: a step's
instruction budget (overrides/step/budget.py).

Fast: the rows, margins, file and verdicts from counts made here (records as Callgrind's), and
the refusals through bench.py (no valgrind). Slow, one module fixture: a tiny step's budget
written, then checked once by real valgrind with a spinning `__torch_function__`: yours over
budget, the spinning function named, and the plain twin (the same code) within."""

from __future__ import annotations

import json
import os

import pytest

from conftest import bench_in, tiny_steps, user_library
from overrides import budget
from overrides.counts.records import CaseCounts, CountRun
from overrides.environment import Fingerprint
from overrides.step import budget as step_budget
from overrides.step.counting import PLAIN, YOURS, FunctionCalls, StepCounts

SPEC = "steps:mlp"
HOOK = "UnitTensor.__torch_function__ (units.py)"


def _runs(per_seed: dict) -> tuple:
    """CountRuns from {seed: (plain, yours)} instructions a step."""
    return tuple(CountRun(seed, (CaseCounts(SPEC, PLAIN, p, (p, p), {"f [lib]": p / 2}),
                                 CaseCounts(SPEC, YOURS, y, (y, y), {"f [lib]": y / 2})), {}, 1.0)
                 for seed, (p, y) in per_seed.items())


def _counts(per_seed: dict, hook_calls: float = 19.0, variants: dict | None = None) -> StepCounts:
    functions = (FunctionCalls(HOOK, 0.0, hook_calls), FunctionCalls("step (steps.py)", 1.0, 1.0))
    return StepCounts(SPEC, _runs(per_seed), functions, 3, 10, 1.0, _runs(variants or {}))


WRITTEN = {1: (1_963_833.0, 2_627_684.0), 2: (1_963_900.0, 2_627_400.0), 3: (1_963_833.0, 2_627_684.0)}
ENV = Fingerprint(torch_version="2.13.0", torch_git_hash="a", python="3.11.7", machine="x86_64",
                  valgrind="valgrind-3.19.0")


def _written(variants: dict | None = None) -> step_budget.StepBudget:
    return step_budget.made(_counts(WRITTEN, variants=variants), (1, 2, 3), ENV,
                            _counts(variants or {}).runs)


def test_a_step_budget_has_yours_then_plain_with_the_op_budgets_margins_and_reads_back(tmp_path):
    written = _written()
    assert [r.op for r in written.rows] == [YOURS, PLAIN]
    yours = written.get(SPEC, YOURS)
    assert yours.margin == pytest.approx(0.5 * (2_627_684 - 2_627_400))  # half the spread over seeds
    assert written.get(SPEC, PLAIN).margin == budget.MARGIN_FLOOR  # 67 over seeds: half is under the floor
    # a layout variant's move widens the margin, up to 0.75% of the count
    widened = _written({1: (1_963_833.0, 2_628_684.0)}).get(SPEC, YOURS)
    assert widened.margin == pytest.approx(1000.0) and widened.layout_moved == pytest.approx(1000.0)
    path = tmp_path / "step-budget.json"
    path.write_text(step_budget.dumps(written))
    assert json.loads(path.read_text())["schema"] == step_budget.STEP_SCHEMA
    assert len(path.read_text().splitlines()) < 40  # one line a row and a function: a diff per change
    read = step_budget.load(str(path), SPEC)
    assert step_budget.dumps(read) == path.read_text() and read.functions == written.functions


def test_a_check_is_within_on_the_same_counts_and_over_with_the_yours_row_named():
    written = _written()
    checked, changes = step_budget.check(written, _counts(WRITTEN))
    assert [c.verdict for c in checked] == [budget.WITHIN, budget.WITHIN] and not changes
    spun = {s: (p, y + 50_000) for s, (p, y) in WRITTEN.items()}
    checked, changes = step_budget.check(written, _counts(spun))
    assert [(c.op, c.verdict) for c in checked] == [(YOURS, budget.OVER), (PLAIN, budget.WITHIN)]
    said = step_budget.text(checked, changes, "b.json", written)
    assert "over budget" in said and "the change is in your code" in said
    assert f"python bench.py --write-budget b.json --step {SPEC}" in said


def test_a_function_of_yours_called_more_puts_yours_off_within_its_margin_and_is_named():
    written = _written()
    checked, changes = step_budget.check(written, _counts(WRITTEN, hook_calls=20.0))
    yours = checked[0]
    assert yours.verdict == budget.OVER and yours.by_calls and yours.delta == 0
    assert [(c.function, c.side, c.budget, c.now) for c in changes] == [(HOOK, YOURS, 19.0, 20.0)]
    said = step_budget.text(checked, changes, "b.json", written)
    assert f"`{HOOK}`" in said and "+1" in said
    assert step_budget.markdown(checked, changes, "b.json", written).startswith(f"**Step budget of `{SPEC}`: 1 of 2")


def test_a_plain_row_off_says_torch_moved():
    spun = {s: (p + 40_000, y + 40_000) for s, (p, y) in WRITTEN.items()}
    checked, changes = step_budget.check(_written(), _counts(spun))
    assert all(c.verdict == budget.OVER for c in checked)
    assert "the plain twin moved" in step_budget.text(checked, changes, "b.json", _written())


@pytest.fixture
def users_folder(tmp_path):
    """benchmarks/userlib in a folder of the user's own, with an op budget and a step budget."""
    folder = user_library(tmp_path / "lib")
    with open(os.path.join(folder, "ops.json"), "w", encoding="utf-8") as out:
        out.write(budget.dumps(budget.Budget(ENV, (1, 2, 3), ())))
    with open(os.path.join(folder, "step.json"), "w", encoding="utf-8") as out:
        out.write(step_budget.dumps(_written()))
    return folder


def _one_line_exit_2(out, *said: str) -> None:
    message = out.stderr.strip()
    assert out.returncode == 2 and "\n" not in message and "Traceback" not in out.stderr, out.stderr
    for part in said:
        assert part in message, message


def test_an_op_budget_with_step_or_a_step_budget_without_it_is_refused_in_one_line(users_folder):
    _one_line_exit_2(bench_in(users_folder, "--check-budget", "ops.json", "--step", SPEC),
                     "ops.json is an op budget", "without --step")
    _one_line_exit_2(bench_in(users_folder, "--write-budget", "ops.json", "--step", SPEC), "ops.json is an op budget")
    _one_line_exit_2(bench_in(users_folder, "--check-budget", "step.json"),
                     f"step.json is the step budget of {SPEC}", f"--check-budget step.json --step {SPEC}")
    _one_line_exit_2(bench_in(users_folder, "--check-budget", "step.json", "--step", "steps:mlp_fast"),
                     f"step.json is the step budget of {SPEC}, not of steps:mlp_fast")


def test_a_step_budget_of_another_environment_or_seeds_is_refused_before_counting(users_folder):
    _one_line_exit_2(bench_in(users_folder, "--check-budget", "step.json", "--step", SPEC),
                     "the budget holds for another environment")
    _one_line_exit_2(bench_in(users_folder, "--check-budget", "missing.json", "--step", SPEC),
                     f"--write-budget missing.json --step {SPEC}")
    _one_line_exit_2(bench_in(users_folder, "--write-budget", "new.json", "--step", SPEC, "--seeds", "1"),
                     "give --seeds two or more")
    _one_line_exit_2(bench_in(users_folder, "--write-budget", "new.json", "--step", SPEC, "--batch", "8"),
                     "at the factory's own batch size", "drop --batch")
    assert not os.path.exists(os.path.join(users_folder, "new.json"))


# ---------------------------------------------------------------------------------------------
# Slow: real valgrind on a tiny step

SPIN_ITERATIONS = 2000  # a loop in __torch_function__: thousands of instructions a call, a few calls a step
STEP_MODULE = tiny_steps({"Weight": "        for _ in range(SPIN):\n            pass\n"},
                         {"tiny": ("Weight", "a tiny step, its weight spinning SPIN times a call")},
                         prelude="SPIN = %d\n")
# Four valgrind processes importing torch, two at a time (the write's): beside other work
COUNT_TIMEOUT_S = 900


@pytest.fixture(scope="module")
def written_and_checked(tmp_path_factory):
    """A tiny step's budget written (seeds 1 2: two counts and two layout variants), then checked
    once in a copy of the folder whose __torch_function__ spins: (the budget, the check's stdout,
    stderr and exit status). The plain twin runs none of the spin: the same code, checked."""
    folder = user_library(tmp_path_factory.mktemp("stepbudget") / "lib", stepbudgettest=STEP_MODULE % 0)
    wrote = bench_in(folder, "--write-budget", "b.json", "--step", "stepbudgettest:tiny", "--seeds", "1", "2",
                     "-q", timeout=COUNT_TIMEOUT_S)
    assert wrote.returncode == 0, wrote.stderr + wrote.stdout
    spinning = user_library(tmp_path_factory.mktemp("stepbudget") / "lib",
                            stepbudgettest=STEP_MODULE % SPIN_ITERATIONS)
    with open(os.path.join(folder, "b.json"), encoding="utf-8") as handle:
        written = handle.read()
    with open(os.path.join(spinning, "b.json"), "w", encoding="utf-8") as out:
        out.write(written)
    checked = bench_in(spinning, "--check-budget", "b.json", "--step", "stepbudgettest:tiny", "-q",
                       timeout=COUNT_TIMEOUT_S)
    return json.loads(written), checked.stdout, checked.stderr, checked.returncode


def _verdicts(stdout: str) -> dict:
    return {line.split()[1]: line for line in stdout.splitlines() if line.startswith("stepbudgettest:tiny ")}


@pytest.mark.slow
def test_a_step_budget_holds_yours_then_plain_with_layout_variants(written_and_checked):
    written, _, _, _ = written_and_checked
    assert [r["op"] for r in written["rows"]] == [YOURS, PLAIN]
    assert all(r.get("layout_moved") is not None for r in written["rows"])
    assert [f["yours"] for f in written["functions"] if f["function"].startswith("Weight.__torch_function__")] \
        and all(f["plain"] == 0 for f in written["functions"] if f["function"].startswith("Weight."))


@pytest.mark.slow
def test_a_spinning_torch_function_is_over_budget_and_named_and_the_plain_twin_within(written_and_checked):
    _, stdout, stderr, status = written_and_checked
    assert status == 1, stderr + stdout
    verdicts = _verdicts(stdout)
    assert verdicts["yours"].endswith(" over budget") and verdicts["plain"].endswith(" within"), stdout
    # the same calls a step, each running the loop's bytecodes: named, on your side only
    named = [line for line in stdout.splitlines() if "`Weight.__torch_function__ (stepbudgettest.py)`" in line]
    assert named and all(" yours " in line for line in named), stdout
    assert "the change is in your code" in stdout
