"""`bench.py --compiled` and the record under it (overrides/compiled/): what compile did, read
from Dynamo's own records with real torch.compile on real subclasses, and the four figures.

Dynamo's records are the point here, so these compile with the `eager` and `aot_eager`
backends (a fraction of a second); Inductor, which builds C++ with gcc, runs in the one slow test.
"""

from __future__ import annotations

import inspect
import io
import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import ROOT
from overrides.clock import stats
from overrides.compiled import dynamo

USERLIB = os.path.join(ROOT, "benchmarks", "userlib")
_SINK = io.StringIO()  # where LoudTensor prints: a print is the graph break, not its text


class LoudTensor(torch.Tensor):
    """Prints every call it sees: Dynamo cannot trace `print`, so the graph breaks there."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        print("calling", func.__name__, file=_SINK)  # the graph break
        return super().__torch_function__(func, types, args, kwargs or {})


class ItemTensor(torch.Tensor):
    """Reads a one-element result back to Python: `.item()` breaks the graph."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            out.item()  # the graph break
        return out


def _line_of(cls, marker: str) -> int:
    lines, first = inspect.getsourcelines(cls.__torch_function__)
    return first + next(i for i, line in enumerate(lines) if marker in line)


def _pair(cls):
    return torch.ones(1).as_subclass(cls), torch.ones(1).as_subclass(cls)


def _units_pair():
    sys.path.insert(0, USERLIB)
    try:
        import units
    finally:
        sys.path.remove(USERLIB)
    return units.pair()


@pytest.mark.parametrize("cls, marker", [(LoudTensor, "print("), (ItemTensor, ".item()")])
def test_a_graph_break_is_named_at_its_line_in_your_torch_function(cls, marker):
    compiled = dynamo.compile_call(dynamo.op_function("torch.add(x, y)"), _pair(cls), backend="eager")
    record = compiled.record
    assert record.ok and compiled.call is not None
    assert record.break_count >= 1 and len(record.breaks) == 1
    place = record.breaks[0].place
    # "in __torch_function__" too where Dynamo logged the stack: the first time in a process only
    assert place.split(" in ")[0] == f"{os.path.relpath(__file__)}:{_line_of(cls, marker)}", place
    assert "\n" not in record.breaks[0].line()


def test_a_compile_that_fails_with_the_metadata_subclass_is_one_line_saying_where_and_why():
    compiled = dynamo.compile_call(dynamo.op_function("torch.add(x, y)"), _units_pair(), backend="aot_eager")
    failure = compiled.record.failure
    assert compiled.call is None and failure is not None
    assert (failure.when, failure.error) == ("running the compiled code", "TypeError")
    assert failure.message.startswith("Multiple dispatch failed for 'torch._ops.aten.add.Tensor'")
    assert failure.where == "aten.add.Tensor in the compiled graph"
    assert "\n" not in failure.line() and "Traceback" not in failure.line()


def test_a_plain_function_compiles_with_nothing_to_say_and_its_seconds_apart():
    compiled = dynamo.compile_call(dynamo.op_function("torch.add(x, y)"), (torch.ones(1), torch.ones(1)),
                                   backend="aot_eager")
    record = compiled.record
    assert record.ok and record.lines() == [] and record.frames == 1 and record.graphs == 1
    assert 0 < record.compile_s < 60
    assert torch.equal(compiled.call(torch.ones(1), torch.ones(1)), torch.full((1,), 2.0))
    assert dynamo.CompileRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == \
        dataclasses_replace_seconds(record)


def test_a_zero_argument_callable_compiles_as_a_step_would():
    weight, data = torch.ones(4, 4), torch.ones(2, 4)
    compiled = dynamo.compile_call(lambda: torch.nn.functional.linear(data, weight).relu().sum(), backend="eager")
    assert compiled.record.ok and compiled.record.graphs == 1 and compiled.call() == 32.0


def test_a_function_dynamo_leaves_eager_is_said_so():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passing(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passing():
        record = dynamo.compile_call(dynamo.op_function("torch.add(x, y)"), (torch.ones(1), torch.ones(1)),
                                     backend="eager").record
    assert record.ok and record.frames == 0
    assert record.lines() and record.lines()[0].startswith("Dynamo compiled no frame")


def dataclasses_replace_seconds(record):
    import dataclasses

    return dataclasses.replace(record, compile_s=round(record.compile_s, 4))


class CountingTensor(torch.Tensor):
    """Counts its calls on the class: Dynamo guards on the count it read, so every call
    after the first compiles again."""

    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        CountingTensor.calls += 1
        if CountingTensor.calls % 2:
            pass
        return super().__torch_function__(func, types, args, kwargs or {})


def test_recompiles_are_counted_with_their_reason():
    record = dynamo.compile_call(dynamo.op_function("torch.add(x, y)"), _pair(CountingTensor), backend="eager").record
    assert record.ok and record.recompiles, record
    assert all(reason and "\n" not in reason for reason in record.recompiles)
    assert any(line.endswith(record.recompiles[0]) or "recompile" in line for line in record.lines())


def test_a_difference_of_headlines_carries_both_intervals():
    a = [100.0 + i % 7 for i in range(400)]
    b = [40.0 + i % 5 for i in range(400)]
    value, (low, high) = stats.headline_difference([a], [b])
    assert value == pytest.approx(stats.headline(a) - stats.headline(b))
    a_low, a_high = stats.quantile_ci95(a)
    b_low, b_high = stats.quantile_ci95(b)
    assert low == pytest.approx(value - math.hypot(stats.headline(a) - a_low, b_high - stats.headline(b)))
    assert high == pytest.approx(value + math.hypot(a_high - stats.headline(a), stats.headline(b) - b_low))
    same, (s_low, s_high) = stats.headline_difference([a], [a])
    assert same == 0 and s_low <= 0 <= s_high


def _user_folder(tmp_path) -> str:
    """benchmarks/userlib and a module of graph-breaking subclasses, in a folder of the user's own."""
    for name in os.listdir(USERLIB):
        if name.endswith(".py"):
            shutil.copy(os.path.join(USERLIB, name), tmp_path / name)
    (tmp_path / "chatty.py").write_text(
        "import io\nimport torch\n\n_SINK = io.StringIO()\n\n\n"
        "class Loud(torch.Tensor):\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        print(func.__name__, file=_SINK)\n"  # line 10
        "        return super().__torch_function__(func, types, args, kwargs or {})\n\n\n"
        "def pair():\n"
        "    return torch.ones(1).as_subclass(Loud), torch.ones(1).as_subclass(Loud)\n")
    return str(tmp_path)


def _bench(folder: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), *args], cwd=folder,
                          capture_output=True, text=True, timeout=600)


def test_bench_compiled_keeps_eager_figures_where_compile_fails_and_names_a_break(tmp_path):
    folder = _user_folder(tmp_path)
    out = _bench(folder, "--compiled", "--compile-backend", "aot_eager", "--cases", "units:pair", "chatty:pair",
                 "-m", "40", "--json", "run.json", "-q")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.startswith(("units:pair", "chatty:pair"))}
    units_cells = [cell for cell in rows["units:pair"].split() if cell != "!"]  # "!": too spread, under load
    assert units_cells[1].replace(",", "").isdigit() and units_cells[2].replace(",", "").isdigit()  # eager kept
    assert "failed [1]" in rows["units:pair"]
    failed = [line for line in out.stdout.splitlines() if line.startswith("[1] ")]
    assert len(failed) == 1 and "units:pair [torch.add] compiled subclass" in failed[0]
    assert "TypeError: Multiple dispatch failed" in failed[0] and "aten.add.Tensor in the compiled graph" in failed[0]
    assert any(line.startswith("chatty:pair [torch.add] subclass:") and "graph break" in line
               and "at chatty.py:10 in __torch_function__" in line for line in out.stdout.splitlines()), out.stdout
    with open(tmp_path / "run.json", encoding="utf-8") as src:
        saved = json.load(src)
    assert saved["schema"] == "torch-function-overhead/compiled/1" and saved["backend"] == "aot_eager"
    units = next(r for r in saved["results"] if r["case"] == "units:pair")
    assert units["compile"]["subclass"]["failure"]["error"] == "TypeError"
    assert len(units["figures"]["eager subclass"]["samples_ns"]) >= 40 and units["figures"]["compiled subclass"]["samples_ns"] == []


@pytest.mark.parametrize("args, said", [
    (["--compare", "a/bin/python", "b/bin/python"], "--compiled times eager and compiled in this process"),
    (["--instructions"], "drop --instructions"),
    (["--compile-backend", "no_such_backend"], "--compile-backend no_such_backend: torch.compile has no such backend"),
    (["--device", "meta"], "--compiled runs on the CPU; drop --device meta"),
    (["--format", "legacy"], "--compiled prints a table or markdown; drop --format legacy"),
])
def test_bench_compiled_refuses_in_one_line_with_exit_2(bench, args, said):
    out = bench("--compiled", *args)
    assert out.returncode == 2 and said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_compile_backend_without_compiled_is_refused(bench):
    out = bench("--compile-backend", "aot_eager")
    assert out.returncode == 2 and "--compile-backend chooses torch.compile's backend; add --compiled" in out.stderr


@pytest.mark.matrix  # Dynamo differs by version (conftest.MATRIX_RUNS)
@pytest.mark.slow
def test_bench_compiled_with_inductor_times_all_four_on_a_subclass_that_compiles(bench):
    out = bench("--compiled", "--cases", "SubTensor", "-m", "40", "-q", timeout=900)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("SubTensor"))
    assert "failed" not in row and "backend='inductor'" in out.stdout
    cells = [cell for cell in row.split() if cell != "!"]  # "!": a figure too spread, under load
    figures = [int(cell.replace(",", "")) for cell in cells[1:6] if cell.replace(",", "").lstrip("+-").isdigit()]
    assert len(figures) == 5 and all(figures[i] > 0 for i in (0, 1, 3, 4))


def test_a_frame_of_the_standard_library_is_not_your_code(tmp_path):
    import functools

    from overrides.compiled.dynamo import _yours

    assert not _yours(functools.__file__)
    assert not _yours(torch.__file__)
    mine = tmp_path / "mine.py"
    mine.write_text("x = 1\n")
    assert _yours(str(mine))


def test_a_graph_that_returns_nothing_and_writes_nothing_is_said_dead_code():
    """A step that computes and returns nothing: the backend drops its ops, and a compiled figure
    of nothing must not stand silently beside the eager one; a step that writes in place (an
    optimizer's update) or returns its loss is no dead code."""
    import torch

    from overrides.compiled import dynamo

    weight, data = torch.randn(8, 8), torch.randn(4, 8)

    def unused():
        torch.nn.functional.linear(data, weight).relu()

    def writes():
        weight.add_(torch.nn.functional.linear(data, weight).sum())

    dead = dynamo.compile_call(unused, backend="eager").record
    assert dead.graphs == dead.dead_graphs == 1 and any("dead code" in line for line in dead.lines()), dead
    for live in (writes, lambda: torch.nn.functional.linear(data, weight).relu().sum()):
        record = dynamo.compile_call(live, backend="eager").record
        assert record.graphs == 1 and not record.dead_graphs and not any("dead code" in line for line in record.lines())
    assert dynamo.CompileRecord.from_dict(dead.to_dict()).dead_graphs == 1
