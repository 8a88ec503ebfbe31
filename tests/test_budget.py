"""An overhead budget for CI: written once, checked on every change (overrides/budget.py).

The rules (margins, verdicts, what a rewrite keeps, what a budget holds for) are checked on
records made here; the commands run for real under Callgrind, in this interpreter and in a
shim environment that adds a Python call to every Tensor subclass's __torch_function__.
"""

import dataclasses
import json
import os
import shutil
import sys
import textwrap

import pytest

from conftest import ROOT
from overrides import budget
from overrides.ab import shimenv
from overrides.counts.records import CaseCounts, CountRun
from overrides.environment import Fingerprint
from overrides.errors import UsageError


def _runs(counts: dict) -> list:
    """CountRuns from {seed: {case: per call}}."""
    return [CountRun(seed, tuple(CaseCounts(case, "torch.add", v, (v, v), {"f [lib]": v / 2})
                                 for case, v in per_case.items()), {}, 1.0)
            for seed, per_case in counts.items()]


def test_a_rows_margin_is_half_its_spread_over_seeds_within_the_comparisons_threshold():
    rows = {r.case: r for r in budget.rows_from(_runs({1: {"A": 9_482.0, "B": 39_697.0, "C": 400_000.0},
                                                      2: {"A": 9_482.0, "B": 39_559.0, "C": 410_000.0},
                                                      3: {"A": 9_482.0, "B": 39_987.0, "C": 400_000.0}}), (1, 2, 3))}
    assert rows["A"].margin == budget.MARGIN_FLOOR  # exact over seeds: the floor
    assert rows["B"].margin == pytest.approx((39_987 - 39_559) / 2)  # layout's reach, halved
    assert rows["C"].margin == pytest.approx(0.0075 * 403_333.33, rel=1e-6)  # never looser than --compare


def test_a_check_is_seed_by_seed_and_says_over_under_missing_and_unbudgeted():
    written = budget.Budget(Fingerprint(), (1, 2), tuple(budget.rows_from(
        _runs({1: {"A": 1000.0, "B": 2000.0, "C": 3000.0}, 2: {"A": 1100.0, "B": 2000.0, "C": 3000.0}}), (1, 2))))
    # A: +60 on each seed (its own seeds, not the mean of another's), B: -80, C not measured, D new
    now = budget.rows_from(_runs({1: {"A": 1060.0, "B": 1920.0, "D": 5.0}, 2: {"A": 1160.0, "B": 1920.0, "D": 5.0}}),
                           (1, 2))
    checked = {c.case: c for c in budget.check(written, now)}
    assert (checked["A"].verdict, checked["A"].delta) == (budget.OVER, 60.0)
    assert checked["B"].verdict == budget.UNDER and checked["C"].verdict == budget.MISSING
    assert checked["D"].verdict == "no row in the budget" and budget.failed(checked.values())
    assert not budget.failed(budget.check(written, written.rows))
    text = budget.text(list(checked.values()), "b.json", written)
    assert "python bench.py --write-budget b.json" in text and "over budget" in text


def test_a_check_asks_for_no_row_where_the_op_does_not_apply():
    # The seed cases over three ops: WithTorchFunction has no x.add, so the budget has no row for
    # it; a check of the unchanged budget exited 1 on "no row in the budget" for it.
    from overrides.results import CaseResult

    results = [CaseResult(case, op, "", "", 0, (), 0.0, not_applicable=reason)
               for case, op, reason in (("A", "torch.add", None), ("W", "torch.add", None),
                                        ("W", "x.add", "W has no .add method"))]
    assert budget.asked(results) == [("A", "torch.add"), ("W", "torch.add")]
    written = budget.Budget(Fingerprint(), (1, 2), tuple(budget.rows_from(
        _runs({1: {"A": 1000.0, "W": 2000.0}, 2: {"A": 1000.0, "W": 2000.0}}), (1, 2))))
    assert not budget.failed(budget.check(written, written.rows, budget.asked(results)))
    assert budget.failed(budget.check(written, written.rows, [(r.case, r.op) for r in results]))


def test_a_rewrite_keeps_rows_that_barely_moved_and_the_file_reads_back():
    old = budget.Budget(Fingerprint(torch_version="x"), (1, 2), tuple(budget.rows_from(
        _runs({1: {"A": 1000.0, "B": 2000.0}, 2: {"A": 1000.0, "B": 2000.0}}), (1, 2))))
    new = budget.Budget(Fingerprint(torch_version="x"), (1, 2), tuple(budget.rows_from(
        _runs({1: {"A": 1010.0, "B": 2100.0}, 2: {"A": 1010.0, "B": 2100.0}}), (1, 2))))
    final, changed = budget.rewritten(old, new)
    assert final.get("A", "torch.add") is old.get("A", "torch.add") and changed == ["B [torch.add]"]
    text = budget.dumps(final)
    assert len(text.splitlines()) < 20  # a row a line: a rewrite's diff is a line per changed row
    assert json.loads(text)["schema"] == budget.SCHEMA


def test_a_budget_of_another_environment_or_no_budget_is_one_line(tmp_path):
    old = budget.Budget(Fingerprint(torch_version="2.13.0", torch_git_hash="a", python="3.11.7",
                                    machine="x86_64", valgrind="valgrind-3.19.0"), (1, 2), ())
    here = dataclasses.replace(old.environment, torch_version="2.14.1", torch_git_hash="b")
    why = budget.refusal(old, here)
    assert "torch_version '2.13.0' -> '2.14.1'" in why and "python" not in why
    assert budget.refusal(old, dataclasses.replace(old.environment, cpu="Intel")) == ""  # the CPU alone is not refused
    (tmp_path / "bad.json").write_text('{"schema": "something/else"}')
    with pytest.raises(UsageError, match="is not a budget file"):
        budget.load(str(tmp_path / "bad.json"))
    with pytest.raises(UsageError, match="no budget at"):
        budget.load(str(tmp_path / "none.json"))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A budget of two seed cases and a user case (`units:pair`, from the folder it is run in)."""
    import subprocess

    folder = tmp_path_factory.mktemp("budget")
    (folder / "units.py").write_text(textwrap.dedent('''
        import torch

        class UnitTensor(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return super().__torch_function__(func, types, args, kwargs or {})

        def pair():
            return torch.ones(1).as_subclass(UnitTensor), torch.ones(1).as_subclass(UnitTensor)
    '''))

    def bench(python, *args):
        return subprocess.run([python, os.path.join(ROOT, "bench.py"), *args], cwd=folder, capture_output=True,
                              text=True, timeout=900)

    done = bench(sys.executable, "--write-budget", "budget.json", "--cases", "Tensor", "SubTensor", "units:pair",
                 "--seeds", "1", "2", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, bench


@pytest.mark.slow
def test_a_budget_passes_where_it_was_written_and_names_the_shim_where_it_is_added(written, tmp_path):
    folder, bench = written
    data = json.loads((folder / "budget.json").read_text())
    assert [r["case"] for r in data["rows"]] == ["Tensor", "SubTensor", "units:pair"]
    # A file that was not there when it was written (as in a CI checkout): the folder's listing
    # moved these counts by up to 119 instructions a call before counts/statfinder.py.
    (folder / "a-file-written-after-the-budget-was.json").write_text("{}")
    same = bench(sys.executable, "--check-budget", "budget.json", "--json", "check.json", "-q")
    assert same.returncode == 0, same.stdout + same.stderr[-2000:]
    assert json.loads((folder / "check.json").read_text())["passed"] is True
    shim = shimenv.make_shim_env(sys.executable, str(tmp_path / "bare"), "bare")
    summary = tmp_path / "summary.md"
    import subprocess

    shimmed = subprocess.run([shim.python, os.path.join(ROOT, "bench.py"), "--check-budget", "budget.json", "-q"],
                             cwd=folder, capture_output=True, text=True, timeout=900,
                             env=dict(os.environ, GITHUB_STEP_SUMMARY=str(summary)))
    assert shimmed.returncode == 1, shimmed.stdout + shimmed.stderr[-2000:]
    lines = {line.split()[0]: line for line in shimmed.stdout.splitlines()[2:5]}
    assert "over budget" in lines["SubTensor"] and "over budget" in lines["units:pair"]
    assert "within" in lines["Tensor"]
    assert "_shim (_overrides_shim.py)" in shimmed.stdout  # the Python call it added, by name
    assert "python bench.py --write-budget budget.json" in shimmed.stdout
    assert summary.read_text().startswith("**Overhead budget: 2 of 3 rows off**")


def test_a_budget_of_another_torch_is_refused_in_one_line_before_anything_is_counted(tmp_path):
    import subprocess

    other = budget.Budget(Fingerprint(torch_version="2.12.1+cu130", torch_git_hash="abc", python="3.11.7",
                                      machine="x86_64", valgrind="valgrind-3.19.0"), (1, 2), tuple(budget.rows_from(
                               _runs({1: {"Tensor": 9_000.0}, 2: {"Tensor": 9_000.0}}), (1, 2))))
    (tmp_path / "b.json").write_text(budget.dumps(other))
    started = __import__("time").monotonic()
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--check-budget", "b.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "torch_version '2.12.1+cu130' -> " in done.stderr and not done.stdout
    assert __import__("time").monotonic() - started < 60  # refused before valgrind ran (counting takes ~a minute)


def test_a_budget_holds_for_the_tools_own_code_it_was_written_with(tmp_path):
    """The counting process runs this tool's code beside yours: another version of it moves every
    row, so a budget written by one version is refused by another, in one line, as another torch is."""
    from overrides import environment

    copy = tmp_path / "tool"
    shutil.copytree(os.path.join(ROOT, "overrides"), copy / "overrides",
                    ignore=shutil.ignore_patterns("__pycache__"))
    same = environment.tool_code(str(copy))
    assert same == environment.tool_code()  # the same code at another path: the same version
    with open(copy / "overrides" / "tables.py", "a", encoding="utf-8") as out:
        out.write("\n\ndef _unused():\n    return None\n")
    edited = environment.tool_code(str(copy))
    assert edited != same
    old = budget.Budget(Fingerprint(torch_version="2.13.0", python="3.11.7", tool_code=same), (1, 2), ())
    why = budget.refusal(old, dataclasses.replace(old.environment, tool_code=edited))
    assert f"tool_code '{same}' -> '{edited}'" in why and "\n" not in why
    assert budget.refusal(old, dataclasses.replace(old.environment)) == ""


def test_a_budget_written_by_7e31db8_is_refused_in_one_line_saying_how_its_counts_were_made(tmp_path):
    """7e31db8 and before counted each job in a process of its own, which lays the cases out
    otherwise than a forked child of one import a seed: such a budget (no `counted_by` in its
    environment) would read that as changes, so it is refused before anything is counted."""
    import subprocess

    from overrides import environment
    from overrides.counts.valgrind import valgrind_version

    here = environment.collect(1).fingerprint(valgrind_version(shutil.which("valgrind") or "valgrind"))
    data = budget.Budget(here, (1, 2), tuple(budget.rows_from(
        _runs({1: {"Tensor": 9_482.0}, 2: {"Tensor": 9_482.0}}), (1, 2)))).to_dict()
    del data["environment"]["counted_by"]  # as 7e31db8 wrote it: its environment knew no such key
    (tmp_path / "b.json").write_text(budget.row_per_line(data, ("rows",)))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--check-budget", "b.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "counted_by None -> 'forked/1'" in done.stderr and "a process a job" in done.stderr, done.stderr
    assert "rewrite it here with --write-budget" in done.stderr and not done.stdout


def test_op_and_step_budgets_have_one_reader_of_rows_and_one_writer(tmp_path):
    """A row is read by budget.Row.from_dict and a file written by budget.row_per_line, for op and
    step budgets alike: a budget written by an earlier version reads and writes back to the byte."""
    from overrides.step import budget as step_budget

    text = open(os.path.join(ROOT, "tests", "old_files", "budget1.json"), encoding="utf-8").read()
    assert budget.dumps(budget.load(os.path.join(ROOT, "tests", "old_files", "budget1.json"))) == text
    row = budget.load(os.path.join(ROOT, "tests", "old_files", "budget1.json")).rows[0]
    assert budget.Row.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    step = step_budget.StepBudget(Fingerprint(torch_version="2.13.0"), (1, 2), "steps:mlp", (row,), (), 3, 10)
    written = step_budget.dumps(step)
    assert written == budget.row_per_line(step.to_dict(), ("rows", "functions"))
    assert "  " + json.dumps(row.to_dict()) in written.splitlines()  # a row, one line
    (tmp_path / "s.json").write_text(written)
    assert step_budget.dumps(step_budget.load(str(tmp_path / "s.json"), "steps:mlp")) == written
