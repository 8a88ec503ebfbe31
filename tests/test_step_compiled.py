"""`bench.py --step ... --compiled`: your step eager and under torch.compile, plain and yours.

Real torch.compile on real steps: `steps:mlp_int8` (the int8 wrapper subclass, which compiles),
`steps:mlp` (the metadata subclass, whose compiled step fails inside AOTAutograd), a step whose
`__torch_function__` prints (a graph break at that line), and the same plain step on both sides
(the A/A). Dynamo's records and the timing are the point, so these compile with `aot_eager` (a
second or two a side); Inductor (~35 s a step here) runs in the one slow test.
"""

from __future__ import annotations

import json
import sys

import pytest

from conftest import bench_in, tiny_steps, user_library

BACKEND = "aot_eager"
MODULE = "compiledsteps"  # a name of its own: test_step.py's steptest has other steps
PAIRS = 40  # rounds of the four steps: enough for an interval, a few seconds on a loaded machine

STEPS_MODULE = tiny_steps({"Loud": '        print("calling", func, file=SINK)  # the graph break\n'},
                          {"loud": ("Loud", "a step whose __torch_function__ prints"),
                           "same": (None, "the same plain step on both sides: an A/A")},
                          prelude="SINK = io.StringIO()  # where Loud prints: the print is the graph break, not its text\n")


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """benchmarks/userlib and this test's steps (compiledsteps.py), in a folder of the user's own."""
    folder = tmp_path / "lib"
    user_library(folder, **{MODULE: STEPS_MODULE})
    monkeypatch.chdir(folder)
    # this folder's modules, not a folder's of an earlier test (the tool appends the user's folder to sys.path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in (MODULE, "steps", "units", "units_fast", "scaled"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return folder


def _bench_here(folder, *args, timeout=600):
    return bench_in(folder, *args, timeout=timeout)


def _rows(stdout: str) -> dict[str, list[str]]:
    """The four-figure table's `plain twin` and `yours` rows, split into cells."""
    return {cells[0]: cells for cells in (line.split() for line in stdout.splitlines())
            if cells[:2] == ["plain", "twin"] or (cells[:1] == ["yours"] and cells[1:2] != ["-"])}


# An A/A's rounds: its figures are low quantiles, and beside two CPU hogs 40 rounds (~0.1 s of
# steps) read the eager A/A +96 us of a 433-us step (57..143), a quantile of too few samples
A_A_PAIRS = 300


def _timed(spec: str, pairs: int = PAIRS):
    from overrides.step.compiling import time_eager_and_compiled
    from overrides.step.factory import build_steps

    return time_eager_and_compiled(build_steps(spec), build_steps(spec), BACKEND, pairs=pairs)


@pytest.mark.matrix  # Dynamo differs by version (conftest.MATRIX_RUNS)
def test_a_step_that_compiles_gives_four_figures_what_compile_removed_and_what_stays(user_folder):
    result = _timed("steps:mlp_int8")
    kinds = ("eager plain", "eager yours", "compiled plain", "compiled yours")
    assert all(len(result.samples(kind)) == PAIRS and result.step_ns(kind) > 0 for kind in kinds)
    assert result.plain_compile.ok and result.subclass_compile.ok
    assert result.plain_compile.compile_s > 0 and result.subclass_compile.compile_s > 0
    # each side compiled after a reset: the other side's cache entries are no recompile of yours
    # (the plain side, compiled alone, has none). torch 2.14 recompiles the int8 wrapper's own
    # code for its second weight's shape ("tensor 'qdata' size mismatch ..."), 2.13 does not:
    # whatever yours has is said with its reason.
    assert result.plain_compile.recompiles == ()
    assert all(isinstance(reason, str) and reason for reason in result.subclass_compile.recompiles)
    eager, stays, removed = result.eager_overhead, result.stays, result.removed
    assert eager.value_ns > 0  # the wrapper dequantizes on every op, eager
    assert removed.value_ns == pytest.approx(eager.value_ns - stays.value_ns)
    for estimate in (eager, stays, removed):
        assert estimate.low_ns < estimate.value_ns < estimate.high_ns
    assert not result.eager.drift and result.compiled_while_timing == 0
    # what stays, named: the wrapper's __tensor_flatten__ runs in the compiled step (once a weight
    # a pass), AOTAutograd wraps and unwraps it and Dynamo guards its metadata; the plain step none
    # (how much of each depends on the torch release and on what compiled before in this process:
    # after test_compiled.py's cases the wrapper's forward falls back to eager, +35 calls of yours)
    counted = result.counted
    assert counted is not None and counted.compiled_while_counting == 0
    assert counted.subclass_calls > counted.plain_calls
    owners = {owner: calls for owner, calls, _ in counted.by_owner}
    assert owners.get("your code", 0) >= 2, owners
    yours = [name for name, who, _ in counted.functions if who == "your code"]
    assert yours and all("(scaled.py)" in name or "(steps.py)" in name for name in yours), counted.functions


@pytest.mark.matrix  # Dynamo differs by version (conftest.MATRIX_RUNS)
def test_the_same_plain_step_on_both_sides_leaves_nothing_compiled_or_eager(user_folder):
    result = _timed(f"{MODULE}:same", A_A_PAIRS)
    assert result.step_ns("eager plain") > 0 and result.step_ns("compiled plain") > 0
    # an A/A: what stays and the eager overhead are noise, a small share of a step
    assert abs(result.stays.value_ns) < 0.15 * result.step_ns("compiled plain"), result.stays
    assert abs(result.eager_overhead.value_ns) < 0.15 * result.step_ns("eager plain"), result.eager_overhead
    # and counted, the two compiled copies make the same Python calls but for the guard on the
    # shared code that one of them tests first (stays.py): a few calls of ~500, none of yours
    counted = result.counted
    assert abs(counted.subclass_calls - counted.plain_calls) <= 4, counted
    assert not [name for name, owner, _ in counted.functions if owner == "your code"], counted.functions


def test_a_print_in_your_torch_function_breaks_the_graph_at_its_line(user_folder):
    from overrides.step.compiling import compile_pair
    from overrides.step.factory import build_steps

    printed_at = next(number for number, line in enumerate(STEPS_MODULE.splitlines(), 1) if "# the graph break" in line)
    compiled = compile_pair(build_steps(f"{MODULE}:loud"), BACKEND)
    assert compiled.plain is not None and compiled.plain_compile.ok
    places = {b.place: b for b in compiled.subclass_compile.breaks}
    assert f"{MODULE}.py:{printed_at} in __torch_function__" in places, places
    assert "`print`" in places[f"{MODULE}.py:{printed_at} in __torch_function__"].explanation
    assert not any("__torch_function__" in b.place for b in compiled.plain_compile.breaks)


def test_bench_py_says_a_failing_compile_in_one_line_and_keeps_the_eager_figures(user_folder):
    out = _bench_here(user_folder, "--step", "steps:mlp", "--compiled", "--compile-backend", BACKEND,
                      "-m", "30", "--json", "run.json", "-q")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    rows = _rows(out.stdout)
    assert rows["plain"][2].replace(",", "").isdigit() and rows["plain"][4].replace(",", "").isdigit()
    assert rows["yours"][1].replace(",", "").isdigit() and rows["yours"][3] == "failed"
    failed = [line for line in out.stdout.splitlines() if "failed" in line and "what compile did, yours" in line]
    assert len(failed) == 1 and "TypeError: Multiple dispatch failed" in failed[0], out.stdout
    assert "in the compiled graph" in failed[0] and "its eager figures stand" in failed[0]
    assert "op by op and the closure: not with --compiled" in out.stdout
    with open(user_folder / "run.json", encoding="utf-8") as src:
        saved = json.load(src)["compiled"]
    assert saved["backend"] == BACKEND and saved["compile"]["subclass"]["failure"]["error"] == "TypeError"
    assert len(saved["figures"]["eager yours"]["samples_ns"]) == 30 and saved["figures"]["compiled yours"]["samples_ns"] == []
    assert saved["eager_overhead"]["ns"] > 0 and saved["stays"] is None


def test_step_compiled_with_batch_is_refused_in_one_line_with_exit_2(user_folder):
    out = _bench_here(user_folder, "--step", "steps:mlp", "--compiled", "--batch", "8", "32")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--step --compiled times one batch size" in out.stderr and "drop --batch" in out.stderr


@pytest.mark.slow
def test_bench_py_step_compiled_with_inductor_times_all_four(user_folder):
    out = _bench_here(user_folder, "--step", "steps:mlp_int8", "--compiled", "-m", "20", "-q", timeout=900)
    assert out.returncode == 0, out.stderr
    assert "backend='inductor'" in out.stdout and "compile removed" in out.stdout
    rows = _rows(out.stdout)
    assert all(rows["plain"][i].replace(",", "").isdigit() for i in (2, 4))
    assert all(rows["yours"][i].replace(",", "").isdigit() for i in (1, 3))
