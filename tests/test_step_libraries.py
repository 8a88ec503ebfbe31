"""`bench.py --step` on the subclasses users run, as their libraries write them: DTensor (its
dispatch in C++ in torch 2.13, on a fake process group of 4 ranks), a torchao-style class whose
`__torch_function__` is a classmethod of a function named otherwise, and an int8 wrapper that
dequantizes inside its dispatch. Each is the real thing, in this process: the independent truth
is a dispatch mode written here, DTensor's own placements, and the kernels torch runs."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from conftest import as_users_folder, bench_in, user_library

RENAMED_MODULE = '''
import torch
import torch.nn.functional as F


def _route(cls, func, types, args=(), kwargs=None):
    """torchao's pattern: one function routes every class's calls, named for what it does"""
    with torch._C.DisableTorchFunctionSubclass():
        return func(*args, **(kwargs or {}))


class Routed(torch.Tensor):
    __torch_function__ = classmethod(_route)


def step(plain=False):
    torch.manual_seed(0)
    w = torch.randn(8, 8)
    w = w if plain else w.as_subclass(Routed)
    x, x_grad = torch.randn(4, 8), torch.randn(4, 8, requires_grad=True)

    def run():
        F.linear(x, w).sum()
        F.linear(x_grad, w).sum().backward()  # alike but for its operand's grad: a row of its own
        x_grad.grad = None

    return run
'''


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """benchmarks/userlib (dtensors.py among it) and a renamed hook, in a folder of the user's own;
    the fake process group a DTensor step starts is ended after the test."""
    import torch.distributed as dist

    folder = tmp_path / "lib"
    user_library(folder, renamed=RENAMED_MODULE)
    as_users_folder(monkeypatch, folder)
    yield folder
    if dist.is_initialized():
        dist.destroy_process_group()


def _dtensor_ops(step) -> Counter:
    """Every aten op with a DTensor operand in one step, by a dispatch mode written here."""
    from torch.distributed.tensor import DTensor
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    seen = Counter()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if any(isinstance(t, DTensor) for t in tree_flatten((args, kwargs))[0]):
                seen[str(func)] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        step()
    return seen


def test_dtensor_ops_dispatched_in_cpp_are_each_seen_and_replayed(user_folder):
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step

    pair = build_steps("dtensors:mlp")
    captured = capture_step(pair.subclass, pair.user_dir)
    assert Counter(c.op for c in captured.calls) == _dtensor_ops(pair.subclass)
    assert len(captured.calls) > 40 and {(c.kind, c.cls) for c in captured.calls} == {("__torch_dispatch__", "DTensor")}
    assert {c.site.split(" ")[0].split(":")[0] for c in captured.calls} == {"dtensors.py"}
    # every op replays (DTensor's device mesh is no tensor; mean's backward expands a grad: stride 0)
    assert captured.replays and not [(r.op, r.not_applicable) for r in captured.replays if r.not_applicable]
    assert capture_step(pair.plain, pair.user_dir).calls == ()


def test_a_replicate_dtensor_s_op_table_is_all_dispatch(user_folder):
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_step

    pair = build_steps("dtensors:mlp")
    priced = price_step(capture_step(pair.subclass, pair.user_dir), time_s=0.3)
    assert priced.rows and not [r.op for r in priced.rows if r.not_applicable or r.nested]
    # Replicate: each op's dispatch runs the twin's own kernel on the whole local tensor, so all of
    # its overhead is dispatch, exactly; DTensor's dispatch costs microseconds a call
    assert all(r.own_kernels_ns == 0.0 and not r.kernels and not r.redistributes for r in priced.rows)
    assert all(r.overhead_ns > 1_000 for r in priced.rows), [(r.op, r.overhead_ns) for r in priced.rows]
    assert priced.in_order_ns > 0.5 * sum(r.cost_ns for r in priced.rows)


def test_a_sharded_dtensor_s_kernels_are_its_local_shard_and_redistributions_are_named(user_folder):
    import torch
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from overrides.step.hooks import _replay
    from overrides.step.kernels import LOCALLY, record

    from overrides.cases.usercases import import_module

    mesh = import_module("dtensors:pair", "dtensors").mesh  # found beside the user, as --step finds it

    def made(*placements):
        return [distribute_tensor(torch.randn(64, 64), mesh(), [p]) for p in placements]

    def kernels_of(op, *operands):
        return record(_replay("__torch_dispatch__", str(op), "", op, tuple(operands), {}, False))

    aten = torch.ops.aten
    local = kernels_of(aten.mm.default, *made(Shard(0), Replicate()))
    assert [op.key for op in local.ops] == ["aten.mm.default(f32[16,64], f32[64,64])"]  # the rank's rows
    assert local.twin_ops == ("aten.mm.default(f32[64,64], f32[64,64])",) and not local.same
    assert local.redistributes == ()
    assert kernels_of(aten.add.Tensor, *made(Replicate(), Replicate())).same
    assert kernels_of(aten.add.Tensor, *made(Shard(0), Shard(1))).redistributes == ("all_gather_into_tensor",)
    assert kernels_of(aten.mm.default, *made(Shard(1), Replicate())).redistributes == (LOCALLY,)


def test_a_hook_defined_under_another_name_is_found_and_grads_tell_calls_apart(user_folder):
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step

    pair = build_steps("renamed:step")
    captured = capture_step(pair.subclass, pair.user_dir)
    linear = [c for c in captured.calls if c.op == "torch.nn.functional.linear"]
    assert [c.cls for c in linear] == ["Routed", "Routed"], captured.calls
    assert sorted(r.signature for r in captured.replays if r.op == "torch.nn.functional.linear") == [
        "f32[4,8]*, f32[8,8]", "f32[4,8], f32[8,8]"]


def test_a_dequantizing_wrapper_s_own_kernels_are_priced_apart_from_its_dispatch(user_folder):
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_step

    pair = build_steps("steps:mlp_int8")
    rows = price_step(capture_step(pair.subclass, pair.user_dir), time_s=0.3).rows
    dequantizing = [r for r in rows if "mul" in r.kernels.split(" against ")[0]]
    # scaled.py's mm and addmm dequantize the 256x256 int8 weight (.to(), * scale) before the twin's op
    assert {r.op for r in dequantizing} == {"aten.mm.default", "aten.addmm.default"}, [(r.op, r.kernels) for r in rows]
    assert all(r.own_kernels_ns > 0 and r.dispatch_ns == pytest.approx(r.overhead_ns - r.own_kernels_ns)
               and r.own_kernels_ci_ns[0] <= r.own_kernels_ns <= r.own_kernels_ci_ns[1] for r in dequantizing)


@pytest.mark.slow
def test_bench_step_on_a_dtensor_step_prints_its_ops_and_the_rest_named(user_folder):
    out = bench_in(user_folder, "--step", "dtensors:mlp", "--min-time", "0.5", "-q")
    assert out.returncode == 0, out.stderr
    assert "none: the step called no" not in out.stdout and "aten.addmm.default" in out.stdout, out.stdout
    assert "they explain" in out.stdout and "the same calls run back to back in your step's order" in out.stdout


RAISING_MODULE = '''
import torch


def at(call, plain):
    x = torch.randn(4, 4, requires_grad=True)
    made = [0]

    def step():
        made[0] += 1
        if made[0] == call and not plain:
            raise RuntimeError(f"a shape changed at call {call}")
        (x * 2).sum().backward()
        x.grad = None

    return step


def second(plain=False):
    return at(2, plain)


def fifth(plain=False):
    return at(5, plain)


def dtensor_second(plain=False):
    import dtensors  # under torch.distributed, whose tracebacks print each line prefixed [rank0]:
    dtensors.mesh()
    return at(2, plain)
'''


@pytest.mark.parametrize("factory", ["second", "fifth", "dtensor_second"])
def test_a_step_raising_on_a_later_call_is_one_line_and_exit_2(tmp_path, factory):
    folder = tmp_path / "lib"
    user_library(folder, raising=RAISING_MODULE)
    out = bench_in(folder, "--step", f"raising:{factory}", "--min-time", "0.2", "-q")
    call = 5 if factory == "fifth" else 2
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"bench.py: error: --step raising:{factory}: your code raised RuntimeError: a shape "
                                 f"changed at call {call} at raising.py:"), out.stderr


@pytest.mark.parametrize("mode, said", [
    (["--step", "steps:mlp"], "timing the plain step and yours"),
    # valgrind importing torch first: ~60 s, a slow test's
    pytest.param(["--instructions", "--cases", "Tensor"], "counting", marks=pytest.mark.slow),
])
def test_sigterm_in_a_mode_that_keeps_nothing_is_one_line_and_143(user_folder, mode, said):
    """SIGTERM (a CI job's timeout) once the mode's work has begun, as its progress says: one
    line, the terminated status, and no traceback (--instructions and --step raised one, exit 1)."""
    import os
    import signal
    import subprocess
    import sys

    from conftest import ROOT

    process = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench.py"), *mode], cwd=user_folder,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in process.stderr:  # the hand-off: its progress says the work has begun
        seen.append(line)
        if said in line:
            process.send_signal(signal.SIGTERM)
            break
    rest = process.stderr.read()
    assert process.wait(timeout=120) == 143, (seen, rest)
    assert rest.strip() == ("bench.py: terminated; this mode keeps nothing of a run stopped before its end: nothing "
                            "was printed or written") and "Traceback" not in rest, rest


def test_a_wrapper_without_flatten_is_copied_by_its_own_clone_and_not_counted_twice(user_folder):
    """MaskedTensor has no __tensor_flatten__ but a clone() of its own kind: its ops replay on
    that copy (they were all n/a). Its sum's backward sends ops through its dispatch, each a row of
    its own, so the sum is timed forward alone: with its backward too, the table read 166% of the
    step, every backward op counted twice."""
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import backward_seed

    pair = build_steps("masked:step")
    captured = capture_step(pair.subclass, pair.user_dir)
    assert captured.replays and not [(r.op, r.not_applicable) for r in captured.replays if r.not_applicable]
    # copying an operand (its clone() runs its __torch_function__) is no call of the step's
    assert not [c for c in captured.calls if c.op == "torch.Tensor.clone"], captured.calls
    summed = next(r for r in captured.replays if r.op == "torch.Tensor.sum")
    assert summed.grad_enabled and backward_seed(summed) is None
    assert "__torch_dispatch__" in {c.kind for c in captured.calls if c.op == "aten.expand.default"}  # a row of its own


def test_ops_with_no_plain_twin_have_their_dispatch_priced_against_their_kernels(user_folder):
    """NestedTensor's ragged dimension has no plain twin, so its ops' overhead is unknown (they
    were n/a, and the table explained 0% of a +1.2 ms step); their dispatch is known all the same:
    your op less the aten work its dispatch runs on its values."""
    from overrides.step.closure import close
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_step

    pair = build_steps("jagged:step")
    rows = price_step(capture_step(pair.subclass, pair.user_dir), time_s=0.3).rows
    alone = [r for r in rows if r.mine_only and not r.nested]
    assert alone and all("ragged dimension" in r.not_applicable for r in alone)
    linear = next(r for r in alone if r.op == "torch.nn.functional.linear")
    assert linear.kernels == "linear" and 0 < linear.kernels_ns < linear.subclass_ns, linear  # on its values
    assert linear.dispatch_ns == pytest.approx(linear.subclass_ns - linear.kernels_ns)
    queries = [r for r in alone if r.op == "aten.sym_size.default"]  # no aten work at all: all dispatch
    assert queries and all(r.kernels_ns == 0.0 and r.dispatch_ns == r.subclass_ns for r in queries)
    closure = close(1e6, (0.9e6, 1.1e6), rows, pair.plain, pair.subclass)
    assert closure.dispatch_alone_ns == pytest.approx(sum(r.calls * r.dispatch_ns for r in alone
                                                          if math.isfinite(r.dispatch_ns)))


def test_misspelt_factories_and_methods_get_a_did_you_mean(user_folder):
    """`dtensors:mlpp` was "no attribute" alone, and `--op "x.detah()"` ran as `n/a: DTensor has no
    .detah`; an attribute your own code reads (units.py's `.unit`) is no typo of the op's."""
    factory = bench_in(user_folder, "--step", "dtensors:mlpp")
    assert factory.returncode == 2 and "has no attribute 'mlpp'; did you mean mlp?" in factory.stderr, factory.stderr
    case = bench_in(user_folder, "--cases", "units:pairr")
    assert case.returncode == 2 and "did you mean pair?" in case.stderr, case.stderr
    method = bench_in(user_folder, "--cases", "units:pair", "--op", "x.detah()", "-n", "5", "-m", "5", "-q")
    assert "n/a: UnitTensor has no .detah (did you mean .detach?)" in method.stdout, method.stdout
