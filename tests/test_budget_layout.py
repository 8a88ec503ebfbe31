"""A budget row moves only when its case's code moves (overrides/counts/isolated.py, the layout
variants of overrides/budget.py): a sibling module's edit leaves a row exact, and a row's margin
covers what an unused function in its own module does."""

import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from overrides import budget
from overrides.counts import isolated, statfinder
from overrides.counts.records import CaseCounts, CountRun
from overrides.environment import Fingerprint

USERLIB = os.path.join(ROOT, "benchmarks", "userlib")
UNUSED = "\n\ndef _added_later(x):\n    return [x, x + 1, {'added': x}]\n"


def _runs(counts: dict) -> list:
    return [CountRun(seed, tuple(CaseCounts(case, "torch.add", v, (v, v), {}) for case, v in per_case.items()), {}, 1.0)
            for seed, per_case in counts.items()]


def test_each_module_of_yours_is_counted_apart_with_its_twin_and_the_built_in_cases_together():
    targets = [("Tensor", "x.t()"), ("units:pair@plain", "x.t()"), ("units:pair", "x.t()"),
               ("pkg.units_fast:pair", "x.t()"), ("SubTensor", "x.t()"), ("units:pair64", "torch.add"),
               ("scaled:pair256@plain", "x.t()")]
    assert isolated.groups(targets) == [
        [("Tensor", "x.t()"), ("SubTensor", "x.t()")],
        [("units:pair@plain", "x.t()"), ("units:pair", "x.t()"), ("units:pair64", "torch.add")],
        [("pkg.units_fast:pair", "x.t()")], [("scaled:pair256@plain", "x.t()")]]


def test_a_margin_covers_the_largest_move_of_a_layout_variant_within_the_ceiling(tmp_path):
    base = _runs({1: {"A": 40_000.0, "B": 40_000.0, "C": 9_000.0}, 2: {"A": 40_010.0, "B": 40_000.0, "C": 9_000.0}})
    variants = _runs({1: {"A": 40_120.0, "B": 39_000.0, "C": 9_000.0}, 2: {"A": 39_950.0, "B": 40_000.0, "C": 9_000.0}})
    rows = {r.case: r for r in budget.rows_from(base, (1, 2), variants)}
    assert rows["A"].margin == pytest.approx(budget.LAYOUT_SHARE * 120) and rows["A"].layout_moved == 120
    assert rows["B"].margin == pytest.approx(0.0075 * 40_000)  # never looser than --compare
    assert rows["C"].margin == budget.MARGIN_FLOOR and rows["C"].layout_moved == 0
    (tmp_path / "b.json").write_text(budget.dumps(budget.Budget(Fingerprint(), (1, 2), tuple(rows.values()))))
    again = budget.load(str(tmp_path / "b.json"))
    assert again.get("A", "torch.add").layout_moved == 120


def test_a_layout_variant_compiles_unused_functions_onto_your_sources(tmp_path, monkeypatch):
    (tmp_path / "layout_variant_mod.py").write_text("VALUE = 1")  # no newline at the end
    loader = statfinder.SourceOnlyLoader("layout_variant_mod", str(tmp_path / "layout_variant_mod.py"))
    monkeypatch.setenv(statfinder.LAYOUT_VARIANT_VARIABLE, "3")
    names = loader.get_code("layout_variant_mod").co_names
    assert [n for n in names if n.startswith("_overrides_layout_variant_")] == [
        "_overrides_layout_variant_0", "_overrides_layout_variant_1", "_overrides_layout_variant_2"]
    monkeypatch.delenv(statfinder.LAYOUT_VARIANT_VARIABLE)
    assert loader.get_code("layout_variant_mod").co_names == ("VALUE",)


def test_a_row_off_with_the_same_python_calls_says_layout_and_what_to_do():
    from overrides.counts import pycalls

    row = budget.Row("units:pair", "x.t()", {1: 38_000.0}, 50.0, {}, {"f (units.py)": [1.0, 12.0]})
    same = pycalls.CaseCalls("units:pair", "x.t()", 1000, {"f (units.py)": (1000, 12000, None)})
    more = pycalls.CaseCalls("units:pair", "x.t()", 1000, {"f (units.py)": (1000, 12000, None),
                                                           "_note (units.py)": (1000, 4000, None)})
    assert budget.calls_unchanged(row, same) and not budget.calls_unchanged(row, more)
    checked = [budget.Checked("units:pair", "x.t()", 38_000.0, 37_900.0, 50.0, budget.UNDER,
                              functions=(("_PyType_Lookup [python]", 900.0, 800.0),), layout_only=True)]
    text = budget.text(checked, "b.json", budget.Budget(Fingerprint(), (1,), (row,)))
    assert "no Python call changed (likely memory layout)" in text
    assert "most likely moved with memory layout" in text and "--write-budget b.json" in text


def test_a_row_within_its_margin_whose_python_calls_changed_is_off_all_the_same():
    """A margin sized for layout (±300 on units:pair here) must not hide a new Python call: the
    bare shim added +295..+409 instructions and one call to units:pair, and read 'within'."""
    from overrides.counts import pycalls

    row = budget.Row("units:pair", "torch.add", {1: 40_895.0}, 307.0, {}, {"f (units.py)": [1.0, 12.0]})
    plan = budget.Budget(Fingerprint(), (1,), (row,))
    same = pycalls.CaseCalls("units:pair", "torch.add", 1000, {"f (units.py)": (1000, 12000, None)})
    more = pycalls.CaseCalls("units:pair", "torch.add", 1000, {"f (units.py)": (1000, 12000, None),
                                                               "_shim (_overrides_shim.py)": (1000, 4000, None)})
    within = [budget.Checked("units:pair", "torch.add", 40_895.0, 41_190.0, 307.0, budget.WITHIN)]
    kept = budget.with_calls(within, plan, lambda c: same)
    assert kept[0].verdict == budget.WITHIN and not kept[0].by_calls and not budget.failed(kept)
    off = budget.with_calls(within, plan, lambda c: more)
    assert off[0].verdict == budget.OVER and off[0].by_calls and budget.failed(off)
    assert any("_shim" in " ".join(cells) for cells in off[0].python_calls)
    text = budget.text(off, "b.json", plan)
    assert "within the instruction margin, but off all the same: its Python calls changed" in text


@pytest.mark.slow
def test_an_unused_function_in_a_sibling_module_moves_no_other_row(tmp_path):
    """units_fast.py byte for byte the same, units.py with a function added: units_fast's rows
    and Tensor's count the same to the instruction (one process counted them all, and they
    moved: +38 on units_fast:pair [torch.add], -15 on Tensor)."""
    folders = []
    for name, edit in (("before", ""), ("after-a-sibling-was-edited", UNUSED)):
        folder = tmp_path / name
        folder.mkdir()
        for module in ("units.py", "units_fast.py"):
            shutil.copy(os.path.join(USERLIB, module), folder)
        with open(folder / "units.py", "a") as out:
            out.write(edit)
        folders.append(folder)
    code = ("import json, sys; from overrides.cases import ops, registry; "
            "from overrides.counts import records; from overrides.single_run import count_benchmark; "
            "run = count_benchmark(registry.resolve_cases(['Tensor', 'units:pair', 'units_fast:pair']), "
            "ops.resolve_ops(['torch.add', 'x.t()']), [1]); "
            "print(json.dumps({f'{c.case} [{c.op}]': c.per_call for c in run.instructions[0].cases}))")
    counts = []
    for folder in folders:
        done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=1200,
                              env=dict(os.environ, PYTHONPATH=ROOT))
        assert done.returncode == 0, done.stderr[-2000:]
        counts.append(__import__("json").loads(done.stdout.strip().splitlines()[-1]))
    before, after = counts
    moved = {row: after[row] - before[row] for row in before if not row.startswith("units:")}
    assert moved and not any(moved.values()), moved
