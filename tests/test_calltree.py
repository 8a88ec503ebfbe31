"""The call-tree differential on hand-made counts: what is listed, what adds up, what is drawn."""

import dataclasses
import xml.etree.ElementTree as ElementTree

import pytest

from overrides.counts import calltree
from overrides.review import count_tables
from overrides.counts.callgrind import CaseCounts, CountRun
from overrides.comparison_settings import ComparisonSettings

LOOP = "PyObject_Vectorcall"  # where Callgrind's view of the stack begins


def _runs(per_seed_stacks):
    runs = []
    for seed, stacks in per_seed_stacks.items():
        total = sum(stacks.values())
        runs.append(CountRun(seed, (CaseCounts("C", "op", total, (total, total), {}, None, stacks),), {}, 1.0))
    return runs


def test_rows_and_everything_else_add_up_to_the_case_change():
    base = _runs({s: {(LOOP, "add"): 1000.0, (LOOP, "add", "kernel"): 500.0, (LOOP, "eval"): 300.0}
                  for s in (1, 2, 3)})
    branch = _runs({s: {(LOOP, "add"): 1000.0, (LOOP, "add", "kernel"): 500.0,
                        (LOOP, "eval"): 300.0 + 200.0, (LOOP, "eval", "tiny"): 2.0 + s}
                    for s in (1, 2, 3)})
    went = calltree.where_it_went(base, branch, "C", "op")
    assert [r.function for r in went.rows] == ["eval"]  # "tiny" moved by < FUNCTION_FLOOR
    (row,) = went.rows
    assert row.delta_self == pytest.approx(200.0) and row.base_inclusive == 300.0
    assert row.branch_inclusive == pytest.approx(504.0)  # with its new callee (3, 4, 5 over the seeds)
    assert went.total_delta == pytest.approx(204.0) and went.everything_else == pytest.approx(4.0)
    table = "\n".join(count_tables.instructions_table(went))
    assert "`eval`" in table and "+204.0" in table and "everything else (1 function " in table


def test_a_change_that_flips_sign_between_seeds_is_not_listed():
    base = _runs({s: {(LOOP, "a"): 100.0, (LOOP, "b"): 100.0} for s in (1, 2, 3)})
    branch = _runs({1: {(LOOP, "a"): 130.0, (LOOP, "b"): 100.0},
                    2: {(LOOP, "a"): 70.0, (LOOP, "b"): 100.0},
                    3: {(LOOP, "a"): 110.0, (LOOP, "b"): 100.0}})
    went = calltree.where_it_went(base, branch, "C", "op")
    assert went.rows == () and went.unlisted_functions == 1


def test_the_differential_flamegraph_is_rooted_at_the_loop_and_coloured_by_change():
    base = _runs({1: {(LOOP, "add"): 100.0, (LOOP, "old"): 50.0}})
    branch = _runs({1: {(LOOP, "add"): 100.0, (LOOP, "add", "new"): 80.0}})
    svg = calltree.differential_svg(base, branch, "C", "op", "C: test")
    root = ElementTree.fromstring(svg)
    tips = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert tips[0] == "C: test"
    assert any(t.startswith(calltree.LOOP_ROOT) for t in tips)
    new = next(g for g in root.iter("{http://www.w3.org/2000/svg}g")
               if g.find("{http://www.w3.org/2000/svg}title").text.startswith("new:"))
    assert new.find("{http://www.w3.org/2000/svg}rect").get("fill").startswith("rgb(235,")  # red


def test_own_deltas_give_every_function_its_mean_change_for_the_py_spy_table():
    base = _runs({s: {(LOOP, "f [lib.so]"): 100.0, (LOOP, "g [lib.so]"): 50.0} for s in (1, 2)})
    branch = _runs({1: {(LOOP, "f [lib.so]"): 110.0, (LOOP, "g [lib.so]"): 50.0, (LOOP, "h [x.so]"): 4.0},
                    2: {(LOOP, "f [lib.so]"): 130.0, (LOOP, "g [lib.so]"): 50.0}})
    deltas = calltree.own_deltas(base, branch, "C", "op")
    assert deltas["f [lib.so]"] == pytest.approx(20.0)  # +10 and +30 over the two seeds
    assert deltas["g [lib.so]"] == 0.0 and deltas["h [x.so]"] == pytest.approx(2.0)
    plain = [CountRun(1, (CaseCounts("C", "op", 10.0, (10.0,), {}, None),), {}, 1.0)]
    assert calltree.own_deltas(plain, plain, "C", "op") is None  # no call paths: nothing to set against


def test_py_spy_and_callgrind_names_of_one_function_share_a_key():
    assert (calltree.function_key("pybind11::tuple::tuple (libtorch_python.so)")
            == calltree.function_key("pybind11::tuple::tuple [libtorch_python.so]")
            == ("pybind11::tuple::tuple", "libtorch_python.so"))
    assert (calltree.function_key("at::(anonymous namespace)::wrap (libtorch_cpu.so)")
            == calltree.function_key("at::{anonymous}::wrap [libtorch_cpu.so]"))
    assert calltree.function_key("f (a.so)") != calltree.function_key("f [b.so]")
    assert calltree.function_key("_shim (_overrides_shim.py)") == ("_shim", "_overrides_shim.py")


def test_no_call_paths_no_table():
    plain = [CountRun(1, (CaseCounts("C", "op", 10.0, (10.0,), {}, None),), {}, 1.0)]
    assert calltree.where_it_went(plain, plain, "C", "op") is None


def test_a_report_of_unchanged_counts_says_so_in_one_line(tmp_path):
    from types import SimpleNamespace

    from overrides.review import sections
    from overrides.review.measuring import Evidence
    from overrides.review.pack import Pack

    def named(runs):  # the report names its files after a real case
        return [CountRun(r.seed, tuple(dataclasses.replace(c, case="SubTensor", op="torch.add") for c in r.cases),
                         r.settings, r.wall_s) for r in runs]

    same = named(_runs({s: {(LOOP, "add"): 1000.0} for s in (1, 2, 3)}))
    # the presenting half of the report alone, on made-up evidence: nothing measured
    pack = Pack(str(tmp_path), lambda message: None, [])
    parts = sections.count_sections(Evidence([], {}, ComparisonSettings(), counts=[same, same]),
                                    [SimpleNamespace(case="SubTensor", op="torch.add", verdict="no change")],
                                    True, pack)
    assert parts[0] == "## Where the instructions went" and "### " not in "\n".join(parts)
    assert [p for p in parts if p][1:] == [
        "No function is named where the verdict is not a change (nothing moved); instructions per "
        "call: SubTensor +0 (no change)."]  # "what moved" only where something did (issue 45)
    # a changed case gets its own section, with the key to the table
    grown = named(_runs({s: {(LOOP, "add"): 1000.0, (LOOP, "add", "shim"): 400.0} for s in (1, 2, 3)}))
    parts = sections.count_sections(Evidence([], {}, ComparisonSettings(), counts=[same, grown]),
                                    [SimpleNamespace(case="SubTensor", op="torch.add", verdict="regression")],
                                    True, pack)
    text = "\n".join(parts)
    assert "### SubTensor: +400 instructions per call (regression)" in text and "Own: " in text and "`shim`" in text
