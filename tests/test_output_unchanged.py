"""What must read the same from one version of the tool to the next: `--list`, `--list-ops`, and a
saved results file printed again (`--load`), byte for byte against the text kept beside it in
tests/old_files/ (`NAME.shown.txt`, written by the tool when the test was added).

A change that means to change one of these writes its text anew in the same commit, so the
change is read in review; any other change to them is a regression this catches.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import ROOT, run_tool

OLD = os.path.join(ROOT, "tests", "old_files")


def _kept(name: str) -> str:
    with open(os.path.join(OLD, name), encoding="utf-8") as src:
        return src.read()


@pytest.mark.parametrize("args, shown", [
    (("--list",), "list.shown.txt"),
    (("--list-ops",), "list_ops.shown.txt"),
    (("--load", os.path.join(OLD, "results1_timed.json")), "results1_timed.shown.txt"),
    (("--load", os.path.join(OLD, "results2_timed.json")), "results2_timed.shown.txt"),
    (("--load", os.path.join(OLD, "results2_counted.json")), "results2_counted.shown.txt"),
])
def test_what_a_user_reads_is_unchanged(args, shown):
    out = run_tool("bench.py", *args)
    assert out.returncode == 0, out.stderr
    assert out.stdout == _kept(shown), f"bench.py {' '.join(args)} no longer prints tests/old_files/{shown}"


def test_the_check_sees_one_case_1_percent_slower(tmp_path):
    """A saved run whose first case's samples read 1% higher prints other text: the comparison
    above can fail."""
    with open(os.path.join(OLD, "results2_timed.json"), encoding="utf-8") as src:
        data = json.load(src)
    first = data["results"][0]
    first["samples_ns"] = [value * 1.01 for value in first["samples_ns"]]
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(data), encoding="utf-8")
    out = run_tool("bench.py", "--load", str(changed))
    assert out.returncode == 0, out.stderr
    assert out.stdout != _kept("results2_timed.shown.txt")
