"""`bench.py --step SPEC --instructions`: a step's instructions counted by Callgrind, plain twin and
yours, exact between two runs, and your functions' calls a step.

Real torch and real valgrind: a subclass whose `__torch_function__` runs a loop of SPIN_ITERATIONS
is the known truth (its step costs at least its calls a step times the loop more than the plain
twin); the calls a step of your functions are checked against the hooks' own count
(overrides/step/hooks.py), on the project's steps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest

from conftest import ROOT, as_users_folder, tiny_steps, user_library

SPIN_ITERATIONS = 10_000  # each __torch_function__ call of Spinning loops this many times
# Fewer instructions than any CPython spends on one iteration of `for _ in range(n): pass`
# (FOR_ITER, STORE_FAST, JUMP_BACKWARD: dozens of instructions together), so the bound holds
# on any build.
MIN_INSTRUCTIONS_PER_ITERATION = 10
# About twice what a build spends on one, so the spin must be most of what the subclass adds, not
# lost in it (the subclass's own super() call, a few thousand instructions, comes on top).
# Measured under Callgrind, a million iterations less none: 198 an iteration on 3.11, 257 on
# 3.12.1 and 252 on 3.13 (a bound of 200 failed on 3.12 in CI).
MAX_INSTRUCTIONS_PER_ITERATION = 500
COUNT_TIMEOUT_S = 600  # two processes importing torch under valgrind at once, beside other work

STEPS_MODULE = tiny_steps({"Spinning": "        for _ in range(SPIN_ITERATIONS):\n            pass\n"},
                          {"spinning": ("Spinning", "a small step, its weight spinning a call")},
                          prelude=f"SPIN_ITERATIONS = {SPIN_ITERATIONS}\n")


def _user_folder(folder) -> str:
    return user_library(folder, stepcounttest=STEPS_MODULE)


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
    """benchmarks/userlib and this test's step, in a folder of the user's own, as the cwd."""
    folder = _user_folder(tmp_path / "lib")
    as_users_folder(monkeypatch, folder)
    return folder


@pytest.fixture(scope="module")
def counted_twice(tmp_path_factory):
    """`bench.py --step stepcounttest:spinning --instructions` run twice at once, from the user's
    folder, each with --json: (the two payloads, the folder)."""
    folder = _user_folder(tmp_path_factory.mktemp("stepcounts") / "lib")
    outputs = [os.path.join(folder, f"counts{i}.json") for i in (1, 2)]
    processes = [subprocess.Popen([sys.executable, os.path.join(ROOT, "bench.py"), "--step",
                                   "stepcounttest:spinning", "--instructions", "-q", "--json", out],
                                  cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for out in outputs]
    for process in processes:
        stdout, stderr = process.communicate(timeout=COUNT_TIMEOUT_S)
        assert process.returncode == 0, stderr + stdout
        assert "yours instr/step" in stdout and "Spinning.__torch_function__ (stepcounttest.py)" in stdout, stdout
    payloads = []
    for out in outputs:
        with open(out, encoding="utf-8") as handle:
            payloads.append(json.load(handle))
    return payloads, folder


def _function(payload: dict, name: str) -> dict:
    return next(f for f in payload["functions"] if f["function"] == name)


# How far two processes' counts of one step may lie apart. A step's figure is the least of its
# repeats, which within one process differ by up to 0.37% (seen on torch 2.14; the cause not
# found, torch's sampled RecordFunction callbacks a candidate); on torch 2.13 two processes read the same to the instruction in every
# run here, on torch 2.14 twice 0.03-0.05% apart (CI, Python 3.13: plain 469,020.67 against
# 468,767.33; a fresh clone, 3.12: 477,506.67 against 477,355.33). Twice the largest seen.
STEP_COUNT_AGREEMENT = 0.001


@pytest.mark.slow
def test_a_step_counted_twice_reads_the_same_instructions(counted_twice):
    (first, second), _ = counted_twice
    for one, other in zip(first["per_seed"], second["per_seed"]):
        assert one["seed"] == other["seed"]
        for which in ("plain", "yours"):
            assert abs(one[which] - other[which]) <= STEP_COUNT_AGREEMENT * one[which], (first["per_seed"],
                                                                                       second["per_seed"])
    assert [s["seed"] for s in first["per_seed"]] == [1] and len(second["per_seed"]) == 1
    assert all(s["plain"] > 0 and s["yours"] > 0 for s in first["per_seed"])


@pytest.mark.slow
def test_a_spinning_subclass_costs_at_least_its_calls_times_the_spin(counted_twice):
    (payload, _), _ = counted_twice
    calls = _function(payload, "Spinning.__torch_function__ (stepcounttest.py)")
    assert calls["plain"] == 0 and calls["yours"] >= 5, calls  # linear, square, sum, backward, grad...
    for seed in payload["per_seed"]:
        added = seed["yours"] - seed["plain"]
        spun = calls["yours"] * SPIN_ITERATIONS
        assert spun * MIN_INSTRUCTIONS_PER_ITERATION <= added, (added, spun)
        assert added <= spun * MAX_INSTRUCTIONS_PER_ITERATION, (added, spun)


@pytest.mark.slow
def test_the_functions_a_step_in_the_output_are_the_hooks_calls(counted_twice):
    (payload, _), folder = counted_twice
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step

    old = os.getcwd()
    os.chdir(folder)
    try:
        pair = build_steps("stepcounttest:spinning")
        hooked = [c for c in capture_step(pair.subclass, pair.user_dir).calls if not c.nested]
    finally:
        os.chdir(old)
    assert _function(payload, "Spinning.__torch_function__ (stepcounttest.py)")["yours"] == len(hooked)
    assert _function(payload, "_step.<locals>.step (stepcounttest.py)") == {
        "function": "_step.<locals>.step (stepcounttest.py)", "plain": 1.0, "yours": 1.0}


@pytest.mark.parametrize("spec", ["steps:mlp", "steps:cnn", "steps:mlp_int8"])
def test_your_hooks_calls_a_step_match_the_hooks_count(user_folder, spec):
    from overrides.step.counting import python_calls
    from overrides.step.factory import build_steps
    from overrides.step.hooks import HOOKS, capture_step

    pair = build_steps(spec)
    # a hook is named by the class it ran for (TensorImage), a function by the class defining it
    # (TensorBase): compared by kind, every hook call of the step against every call of a hook
    hooked = Counter(c.kind for c in capture_step(pair.subclass, pair.user_dir).calls)
    rows = python_calls(pair.plain, pair.subclass, pair.user_dir)
    counted, plain = Counter(), Counter()
    for row in rows:
        name = row.function.split(" (")[0]
        if name.endswith(HOOKS):
            counted[name.rsplit(".", 1)[1]] += row.yours
            plain[name.rsplit(".", 1)[1]] += row.plain
    assert hooked and counted == hooked and not +plain, (counted, hooked, plain)
    steps = [row for row in rows if row.function.endswith("<locals>.step (steps.py)")]
    assert len(steps) == 1 and steps[0].plain == steps[0].yours == 1.0, rows


@pytest.mark.parametrize("flags, says", [
    (["--batch", "8"], "--step --instructions counts one step with Callgrind, at the factory's own batch size, "
                       "on the CPU; drop --batch"),
    (["--device", "cpu"], "--step --instructions counts one step with Callgrind, at the factory's own batch "
                          "size, on the CPU; drop --device"),
    (["--shape", "64x64"], "--step runs your own step, built by your factory, as text (other modes "
                           "take steps later); drop --shape"),
])
def test_step_instructions_refusals_are_one_line_exit_2(bench, flags, says):
    out = bench("--step", "steps:mlp", "--instructions", *flags)
    assert out.returncode == 2 and out.stderr.strip() == f"bench.py: error: {says}", out.stderr


def test_step_instructions_is_a_mode_of_its_own():
    from overrides import modes
    from overrides.cli import build_parser

    assert modes.refusal(build_parser().parse_args(["--step", "steps:mlp", "--instructions"])) is None
    assert modes.refusal(build_parser().parse_args(["--step", "steps:mlp", "--instructions", "--seeds", "1",
                                                    "2"])) is None


def test_step_instructions_starts_no_valgrind_for_the_seed_cases_ahead():
    from overrides.cli import instruction_head_start

    assert instruction_head_start(["--step", "steps:mlp", "--instructions"]) is None
    assert instruction_head_start(["--instructions"]) is not None  # the cases' own head start stays
