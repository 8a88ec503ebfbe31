"""Your case's plain twin is plain tensors like those your operands present (issue 45).

The library is benchmarks/userlib's `scaled.py`: an int8 wrapper subclass presenting float32, as
quantization libraries write them. Its twin was its int8 payload, against which a float32
F.linear read 0.52x ("faster than plain"). The wrapper subclasses torch ships are built by
benchmarks/shipped_wrappers.py; each gets a twin, or its reason, and the run exits 0.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from overrides.run_settings import RunSettings

from conftest import ROOT
from overrides.environment import Environment

USERLIB = os.path.join(ROOT, "benchmarks", "userlib")
BENCHMARKS = os.path.join(ROOT, "benchmarks")
# The subclass dequantizes both 256x256 operands before the same float32 kernel its twin runs:
# it is slower, never faster. The int8 twin read 0.52x on F.linear (0.88-0.92x on matmul); a
# float32 one 1.09-1.38x beside four other developers' work. The floor leaves the clock room.
RATIO_FLOOR = 0.95


def _library(folder) -> str:
    for name in ("scaled.py", "units.py", "units_fast.py"):
        shutil.copy(os.path.join(USERLIB, name), folder / name)
    return str(folder)


def run_in(directory, *args, timeout=300):
    return subprocess.run([sys.executable, *args], cwd=directory, capture_output=True, text=True,
                          timeout=timeout)


def test_a_wrapper_subclass_twin_is_the_float32_it_presents_holding_its_dequantized_values(tmp_path, monkeypatch):
    import torch

    from overrides.cases import registry

    _library(tmp_path)
    monkeypatch.chdir(tmp_path)
    case, twin = registry.get_case("scaled:pair256"), registry.get_case("scaled:pair256@plain")
    for mine, plain in zip(case.make_operands(), twin.make_operands()):
        assert type(plain) is torch.Tensor and plain.dtype == torch.float32
        assert plain.shape == mine.shape and plain.stride() == mine.stride()
        assert torch.equal(plain, mine.dequantize())
    assert "float32 (256, 256), as ScaledInt8Tensor presents them, holding ScaledInt8Tensor.dequantize()" \
        in twin.description
    assert not twin.warning and not twin.unbuildable
    # a subclass with data of its own keeps its twin: the same data, as a plain tensor
    units_twin = registry.get_case("units:pair@plain")
    assert all(type(t) is torch.Tensor for t in units_twin.make_operands())
    assert "as_subclass(torch.Tensor)" in units_twin.description


def test_a_dtensors_twin_is_this_ranks_local_shard_and_an_op_it_redistributes_for_is_na(tmp_path):
    """DTensor (benchmarks/userlib/dtensors.py, a 4-rank fake process group in the run's own
    process): a Shard(0) operand's twin is its local shard, the rows its kernel runs on, not ones
    of the global shape; torch.add of it and a Replicate operand, which DTensor redistributes for
    first, does not run on the local shards as they lie: n/a with that reason, not a failure."""
    shutil.copy(os.path.join(USERLIB, "dtensors.py"), tmp_path / "dtensors.py")
    out = tmp_path / "run.json"
    done = run_in(tmp_path, os.path.join(ROOT, "bench.py"), "--cases", "dtensors:sharded", "--op",
                  "torch.matmul(x, y)", "torch.add", "-m", "50", "-q", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert ("this rank's local shard (S(0): float32 (16, 64) of the global (64, 64)); its local tensor "
            "(R: float32 (64, 64), the whole on every rank)") in done.stdout
    assert "n/a: not on this rank's local shards as they lie: DTensor redistributes an operand first" in done.stdout
    assert "the overhead is against unlike tensors" not in done.stdout + done.stderr
    results = {(r["case"], r["op"]): r for r in json.loads(out.read_text())["results"]}
    assert results[("dtensors:sharded@plain", "torch.matmul(x, y)")]["per_call_ns"] > 0
    assert results[("dtensors:sharded@plain", "torch.add")]["per_call_ns"] is None


@pytest.mark.slow
def test_an_int8_wrapper_reads_no_faster_than_its_float32_twin(tmp_path):
    _library(tmp_path)
    done = run_in(tmp_path, f"{ROOT}/bench.py", "--cases", "scaled:pair256", "--op", "torch.matmul(x, y)",
                  "F.linear(x, y)", "--min-time", "0.3", "-q", "--json", "out.json")
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((tmp_path / "out.json").read_text())
    rows = {(r["case"], r["op"]): r for r in data["results"]}
    for op in ("torch.matmul(x, y)", "F.linear(x, y)"):
        mine, twin = rows[("scaled:pair256", op)], rows[("scaled:pair256@plain", op)]
        assert mine["baseline"] == "scaled:pair256@plain"
        assert mine["per_call_ns"] / twin["per_call_ns"] >= RATIO_FLOOR, (op, mine["per_call_ns"], twin["per_call_ns"])
        assert "ScaledInt8Tensor.dequantize()" in twin["description"]  # which twin, in the JSON
    # and under the table
    assert ("overhead and ratio against scaled:pair256@plain (its own operands as plain tensors: new float32 "
            "(256, 256), as ScaledInt8Tensor presents them") in done.stdout


SHIPPED_PROBE = """
import json, sys, torch
import shipped_wrappers
from overrides.cases import registry
out = {}
for name in shipped_wrappers.FACTORIES:
    case, twin = registry.get_case("shipped_wrappers:" + name), registry.get_case("shipped_wrappers:" + name + "@plain")
    if getattr(twin, "unbuildable", ""):
        out[name] = twin.unbuildable
        continue
    out[name] = [[type(t).__name__, str(t.dtype), str(tuple(t.shape)), str(m.dtype), str(tuple(m.shape))]
                 for t, m in zip(twin.make_operands(), case.make_operands())]
print(json.dumps(out))
"""


def test_every_wrapper_subclass_torch_ships_gets_a_plain_twin_like_it_or_a_reason():
    done = subprocess.run([sys.executable, "-c", SHIPPED_PROBE], cwd=BENCHMARKS, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=ROOT))
    assert done.returncode == 0, done.stderr[-2000:]
    twins = json.loads(done.stdout.strip().splitlines()[-1])
    assert str(twins.pop("nested_jagged")).startswith("no plain twin: NestedTensor's shape (2, j")
    unlike = {name: operands for name, operands in twins.items()
              if any(twin != ["Tensor", dtype, shape] for *twin, dtype, shape in operands)}
    assert not unlike


@pytest.mark.slow
def test_a_run_of_torchs_wrapper_subclasses_exits_0_with_a_twin_or_its_reason(tmp_path):
    sys.path.insert(0, BENCHMARKS)
    import shipped_wrappers

    cases = [f"shipped_wrappers:{name}" for name in shipped_wrappers.FACTORIES]
    done = run_in(BENCHMARKS, f"{ROOT}/bench.py", "--cases", "Tensor", *cases, "-n", "20", "-m", "20", "-q",
                  "--json", str(tmp_path / "out.json"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    rows = {r["case"]: r for r in json.loads((tmp_path / "out.json").read_text())["results"]}
    jagged = rows["shipped_wrappers:nested_jagged@plain"]
    assert jagged["not_applicable"].startswith("no plain twin: NestedTensor's shape")
    assert rows["shipped_wrappers:nested_jagged"]["per_call_ns"] > 0  # its own figure stands
    for case in cases:
        if case.endswith("nested_jagged"):
            continue
        mine, twin = rows[case], rows[case + "@plain"]
        # the twin is plain: a fraction of the subclass's Python dispatch, never the subclass again
        assert twin["per_call_ns"] < 0.5 * mine["per_call_ns"], case


def test_a_twin_that_cannot_be_built_is_said_and_nothing_recorded():
    done = run_in(BENCHMARKS, f"{ROOT}/pyspybench.py", "shipped_wrappers:nested_jagged@plain", "--nreps", "10")
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert "no plain twin: NestedTensor's shape (2, j" in line and "Traceback" not in line


HOOK = """

def pair_plain():
    return torch.ones(1, dtype=torch.int8), torch.ones(1, dtype=torch.int8)
"""


def test_your_own_twin_is_used_and_a_twin_unlike_your_operands_is_warned_of(tmp_path):
    _library(tmp_path)
    with open(tmp_path / "scaled.py", "a", encoding="utf-8") as src:
        src.write(HOOK)
    done = run_in(tmp_path, f"{ROOT}/bench.py", "--cases", "scaled:pair", "-n", "20", "-m", "20", "-q",
                  "--json", "out.json")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["case"]: r for r in json.loads((tmp_path / "out.json").read_text())["results"]}
    twin = rows["scaled:pair@plain"]
    assert twin["description"] == "scaled:pair's twin of your own, scaled.pair_plain()"
    unlike = "its x is int8 (1,) where scaled:pair's is float32 (1,)"
    assert unlike in twin["warning"]
    assert f"warning: scaled:pair@plain: {unlike}" in done.stdout
    assert f"warning: scaled:pair@plain: {unlike}" in done.stderr


def test_a_wrapper_class_named_directly_that_needs_more_than_a_tensor_says_which_factory_to_write(tmp_path):
    _library(tmp_path)
    done = run_in(tmp_path, f"{ROOT}/bench.py", "--cases", "scaled:ScaledInt8Tensor")
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert "missing 1 required positional argument: 'scale'" in line
    assert line.endswith("give a factory that builds the operands as you do, e.g. in scaled.py `def pair(): "
                         "return ScaledInt8Tensor(torch.ones(1), ...), ScaledInt8Tensor(torch.ones(1), ...)`, "
                         "and pass scaled:pair")


def test_each_side_of_a_comparison_builds_the_twin_from_its_own_code_and_says_which_file(tmp_path, monkeypatch):
    import torch

    from overrides.cases import casenames, registry
    from overrides.cases.usercases import module_files

    for side in ("scaled_side_a", "scaled_side_b"):
        shutil.copy(os.path.join(USERLIB, "scaled.py"), tmp_path / f"{side}.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(casenames.YOUR_CODE_VARIABLE, "scaled_side_a:pair=scaled_side_b:pair")
    twin = registry.get_case("scaled_side_a:pair@plain")  # as the branch's processes build it
    assert twin.name == "scaled_side_a:pair@plain"
    assert all(type(t) is torch.Tensor and t.dtype == torch.float32 for t in twin.make_operands())
    # the notes of a comparison name the file each side ran, the twin's too
    assert module_files(["scaled_side_a:pair@plain"]) == {
        "scaled_side_a:pair@plain": os.path.realpath(tmp_path / "scaled_side_b.py")}


def test_a_counting_run_says_which_twin_each_case_was_counted_against():
    from overrides import run_report
    from overrides.counts.records import SCHEMA, from_dict
    from overrides.results import CaseResult, RunResult

    how = "its own operands as plain tensors: new float32 (1,), as ScaledInt8Tensor presents them"
    rows = (CaseResult("scaled:pair@plain", "torch.add", "torch.add(x, y)", f"scaled:pair's own operands as "
                       f"plain tensors: {how.split(': ', 1)[1]}", 0, (), 0.0, baseline="scaled:pair@plain"),
            CaseResult("scaled:pair", "torch.add", "torch.add(x, y)", "your case", 0, (), 0.0,
                       baseline="scaled:pair@plain"))
    counts = {"schema": SCHEMA, "seeds": [1], "settings": {"repeats": 5, "calls_per_repeat": 1000},
              "runs": [{"seed": 1, "cases": [{"case": r.case, "op": r.op, "instructions_per_call": n,
                                              "repeats": [n] * 5} for r, n in zip(rows, (11_000, 220_000))]}]}
    shown = run_report.render(RunResult(Environment(), RunSettings(), rows, instructions=tuple(from_dict(counts))), "table")
    assert f"scaled:pair: overhead and ratio against scaled:pair@plain ({how}), not Tensor" in shown
