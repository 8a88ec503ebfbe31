"""The environment record (overrides/environment.py): files written before it still load and
write back byte for byte, one fingerprint says what counts depend on, torch's version is the
interpreter's own word, and the CPU count is asked in one place.

The files in tests/old_files/ were written by the tool before the record existed (main at
1510eaa; results/1 at cb54fba^, before `cuda_device`), on the development machine, with
`--json` of a timed run, `--instructions --json` and `--write-budget`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

import pytest

from conftest import ROOT
from overrides import budget, children, environment, results
from overrides.builds.interpreters import Build, probe_interpreter
from overrides.counts import callgrind
from overrides.environment import Environment, Fingerprint
from test_imports import PACKAGE, package_modules

OLD = os.path.join(ROOT, "tests", "old_files")


def _text(name: str) -> str:
    with open(os.path.join(OLD, name), encoding="utf-8") as src:
        return src.read()


# Since e2cc653 (the counts read once as records) a counted file written again recomputes each
# case's `spread_pct` from the rounded figures: 0.1545 -> 0.1548, the fourth decimal. Not the
# environment's doing; strict, so that the day it holds again this says so.
# Written before a9bd952, whose spread_pct came from the unrounded repeats; written again, it is
# worked out from the rounded figures the file holds (0.1545 -> 0.1548), so that a file written
# since reads and writes back the same (tests/test_callgrind.py's round trip).
_COUNTS_REWRITTEN = pytest.mark.xfail(strict=True, reason="spread_pct of a file written before a9bd952")


@pytest.mark.parametrize("name", ["results2_timed.json",
                                  pytest.param("results2_counted.json", marks=_COUNTS_REWRITTEN)])
def test_a_results_file_written_before_loads_and_writes_back_the_same_bytes(name, tmp_path):
    run = results.load(os.path.join(OLD, name))
    assert run.environment.torch_version.startswith("2.") and run.environment.threads == 1
    results.save(run, str(tmp_path / name))
    assert (tmp_path / name).read_text() == _text(name)


def test_a_counted_results_file_written_before_keeps_its_environment_byte_for_byte(tmp_path):
    run = results.load(os.path.join(OLD, "results2_counted.json"))
    results.save(run, str(tmp_path / "again.json"))
    again, before = json.loads((tmp_path / "again.json").read_text()), json.loads(_text("results2_counted.json"))
    assert json.dumps(again["environment"]) == json.dumps(before["environment"])
    assert [r["instructions_per_call"] for r in again["results"]] == [r["instructions_per_call"] for r in before["results"]]


def test_a_results_1_file_without_cuda_device_keeps_its_keys_and_their_order():
    data = json.loads(_text("results1_timed.json"))
    env = results.from_dict(data).environment
    assert env.cuda_device is None and "cuda_device" not in data["environment"]
    assert json.dumps(env.to_dict()) == json.dumps(data["environment"])  # order too
    newer = dict(data["environment"], added_later={"a": 1})  # a key this version does not know
    assert json.dumps(Environment.from_dict(newer).to_dict()) == json.dumps(newer)


def test_a_budget_written_before_loads_and_writes_back_the_same_bytes():
    old = budget.load(os.path.join(OLD, "budget1.json"))
    assert isinstance(old.environment, Fingerprint) and old.environment.valgrind.startswith("valgrind")
    assert budget.dumps(old) == _text("budget1.json")


def test_collect_writes_every_field_in_the_files_order_and_reads_back_equal():
    here = environment.collect(1)
    written = here.to_dict()
    assert list(written) == list(json.loads(_text("results2_timed.json"))["environment"])
    assert Environment.from_dict(written) == here and here.cpu_count == children.usable_cpus()
    sided = here.with_user_modules({"units:pair": "/u/units.py"})
    assert list(sided.to_dict())[-1] == "user_modules" and sided.user_modules == {"units:pair": "/u/units.py"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        here.torch_version = "2.0"


def test_one_fingerprint_says_when_counts_are_comparable():
    here = environment.collect(1).fingerprint("valgrind-3.19.0")
    assert (here.torch_version, here.valgrind) == (environment.collect(1).torch_version, "valgrind-3.19.0")
    assert here.differences(dataclasses.replace(here, cpu="another model")) == ()  # the CPU: recorded only
    moved = dataclasses.replace(here, torch_git_hash="abc", python="3.14.0")
    assert here.differences(moved) == (f"torch_git_hash {here.torch_git_hash!r} -> 'abc'",
                                       f"python {here.python!r} -> '3.14.0'")
    assert budget.refusal(budget.Budget(here, (1, 2), ()), moved).startswith(
        "the budget holds for another environment (torch_git_hash ")
    # a budget's keys as before, and the tool's code after them (written since tool_code came), then how
    # its counts were made (since a forked child counts each job)
    assert list(here.to_dict()) == list(json.loads(_text("budget1.json"))["environment"]) + ["tool_code",
                                                                                            "counted_by"]


def test_torch_version_is_what_the_interpreter_makes_of_version_py(tmp_path):
    """Read by the interpreter, not by a pattern from the text: a version.py that builds its
    string (as a source build's may) gives the whole version, not its first literal."""
    folder = tmp_path / "torch"
    folder.mkdir()
    (folder / "__init__.py").write_text("raise ImportError('the probe must not import torch')\n")
    (folder / "version.py").write_text("from typing import Optional\n__version__ = '2.99.' + str(1)\n"
                                       "git_version = 'abc'\n")
    assert probe_interpreter(Build(sys.executable, str(tmp_path))).torch_version == "2.99.1"
    (folder / "version.py").write_text("raise RuntimeError\n")
    assert probe_interpreter(Build(sys.executable, str(tmp_path))).torch_version == "?"
    assert probe_interpreter(sys.executable).torch_version == str(environment.collect(1).torch_version)


def test_the_cpu_count_is_asked_in_one_place():
    asked = []
    for name, path in sorted(package_modules(ROOT, PACKAGE).items()):
        with open(path, encoding="utf-8") as src:
            text = src.read()
        if "len(os.sched_getaffinity(" in text or "os.cpu_count(" in text:  # (pinning asks for the set)
            asked.append(name)
    assert asked == ["overrides.children"], asked
    assert callgrind.count_jobs() == children.usable_cpus() == environment.collect(1).cpu_count


def test_a_comparison_across_two_pythons_says_the_interpreter_moved_too():
    here = environment.collect(1)
    other = dataclasses.replace(here, python="3.12.1" if here.python != "3.12.1" else "3.13.0")
    said = environment.interpreters_differ(here, other)
    assert said.startswith(f"the sides run different Pythons ({here.python} and {other.python})"), said
    assert "compare two builds on one Python" in said
    assert environment.interpreters_differ(here, dataclasses.replace(here, torch_version="x")) == ""
