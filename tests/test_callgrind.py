"""Instruction counts under real valgrind: repeatable, ordered, and they see a real change."""

import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT
from overrides import callgrind, shimenv

SEED_TARGETS = [(name, "torch.add") for name in
                ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")]


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """This interpreter counted twice (same settings) and a bare-shim branch once, seed 1."""
    shim = shimenv.make_shim_env(sys.executable, str(tmp_path_factory.mktemp("env") / "bare"), "bare")
    pythons = [sys.executable, sys.executable, shim.python]
    first, second, branch = callgrind.count_builds(pythons, SEED_TARGETS, (1,),
                                                   pads=callgrind.pads_for(pythons))
    return first[0], second[0], branch[0]


def test_two_invocations_agree_within_the_reported_spread(counted):
    first, second, _ = counted
    for a, b in zip(first.cases, second.cases):
        assert a.error is None and b.error is None
        allowed = max(a.spread_pct, b.spread_pct, 0.05)  # the Done-when bound: 0.05%
        assert abs(a.per_call - b.per_call) / a.per_call * 100 <= allowed, (a, b)


def test_counts_rank_the_cases(counted):
    per_call = {c.case: c.per_call for c in counted[0].cases}
    assert 3000 < per_call["Tensor"] < per_call["WithTorchFunction"] < per_call["SubTensor"]
    assert per_call["SubTensor"] < per_call["SubWithTorchFunction"]
    assert len(counted[0].cases[0].repeats) == callgrind.DEFAULT_REPEATS


def test_a_shim_on_tensor_torch_function_shows_only_where_it_runs(counted):
    base, _, branch = counted
    deltas = {c.case: c.delta for c in callgrind.compare_counts([base], [branch])}
    assert deltas["SubTensor"] > 100 and deltas["SubWithTorchFunction"] > 100, deltas
    # No path of these reaches Tensor.__torch_function__: layout luck at most.
    assert abs(deltas["Tensor"]) < 0.01 * base.get("Tensor", "torch.add").per_call, deltas
    assert abs(deltas["WithTorchFunction"]) < 0.01 * base.get("WithTorchFunction", "torch.add").per_call
    functions = callgrind.function_deltas([base], [branch], "SubTensor", "torch.add")
    assert functions and all("0x" not in name and "/" not in name.split(" [")[0] for name, _, _ in functions)


def test_the_dump_reader_separates_self_cost_from_calls(tmp_path):
    dump = tmp_path / "callgrind.out.1.1"
    dump.write_text(textwrap.dedent("""\
        version: 1
        events: Ir
        summary: 180
        ob=/usr/lib/libtorch_cpu.so
        fn=at::native::add(at::Tensor const&)
        10 50
        cob=/usr/lib/libc.so.6
        cfn=malloc
        calls=1 0
        11 100
        12 10
        ob=/usr/lib/libc.so.6
        fn=malloc
        5 100
        totals: 160
        """))
    total, functions = callgrind.read_dump(str(dump))
    assert total == 180
    assert functions == {"at::native::add [libtorch_cpu.so]": 60, "malloc [libc.so.6]": 100}


def test_missing_valgrind_exits_2_and_says_how_to_install(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no valgrind on this PATH
    out = subprocess.run([sys.executable, "bench.py", "--instructions"], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2 and "apt-get install valgrind" in out.stderr, out.stderr
