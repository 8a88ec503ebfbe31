"""Counts kept by content and reused (counts/kept.py): never counting the same thing twice, and
counting anew whenever anything the count depends on changed."""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from conftest import ROOT
from overrides.counts import kept, rounds

BENCH = os.path.join(ROOT, "bench.py")


def _identity(job: str = "job") -> kept.Identity:
    return kept.Identity("valgrind-3.19.0", ("--tool=callgrind",), ("python", "entry.py"), (("HOME", "/"),), job,
                         "tool", "forked/1")


def test_a_kept_count_is_found_while_its_files_read_the_same_wherever_they_lie(tmp_path, monkeypatch):
    monkeypatch.setenv("OVERRIDES_COUNTS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(kept._STATE, "fresh", False)
    monkeypatch.setattr(kept, "_DIGESTS", {})
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "lib.py").write_text("x = 1\n")
    seen = {"/fixed/lib.py": str(tmp_path / "a" / "lib.py"), "/fixed": str(tmp_path / "a")}
    kept.keep(_identity(), 7, {"run": 1}, ["/fixed/lib.py"], lambda p: seen[p])
    assert kept.find(_identity(), 7, lambda p: seen[p]).run == {"run": 1}
    assert kept.find(_identity(), 8, lambda p: seen[p]) is None  # another seed
    assert kept.find(_identity("other job"), 7, lambda p: seen[p]) is None
    assert kept.seeds(_identity(), lambda p: seen[p]) == [7]
    # the same content at another path (a view made afresh): found; the content changed: not found
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    moved = {"/fixed/lib.py": str(tmp_path / "b" / "lib.py"), "/fixed": str(tmp_path / "b")}
    assert kept.find(_identity(), 7, lambda p: moved[p]) is not None
    (tmp_path / "b" / "lib.py").write_text("x = 2\n")
    assert kept.find(_identity(), 7, lambda p: moved[p]) is None
    (tmp_path / "b" / "new.py").write_text("")  # a module added where the imports look
    (tmp_path / "b" / "lib.py").write_text("x = 1\n")
    assert kept.find(_identity(), 7, lambda p: moved[p]) is None
    # a second content of one identity is kept beside the first (two builds at one fixed path)
    kept.keep(_identity(), 7, {"run": 2}, ["/fixed/lib.py"], lambda p: moved[p])
    assert kept.find(_identity(), 7, lambda p: moved[p]).run == {"run": 2}
    assert kept.find(_identity(), 7, lambda p: seen[p]).run == {"run": 1}
    kept.count_anew()
    assert kept.find(_identity(), 7, lambda p: seen[p]) is None and kept.seeds(_identity(), lambda p: seen[p]) == []


def test_keeping_is_off_where_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("OVERRIDES_COUNTS_CACHE", "off")
    kept.keep(_identity(), 1, {"run": 1}, [str(tmp_path)], lambda p: p)
    assert kept.folder() is None and kept.find(_identity(), 1, lambda p: p) is None


def test_a_comparison_takes_the_seeds_kept_first_and_fills_the_cpus_with_what_costs():
    assert rounds.kept_first([5, 6], ([3, 4], [4])) == [4, 3, 5, 6]
    assert rounds.seeds_that_fit([4, 3, 5], ([3, 4], [4]), 6, 2) == (4,)  # kept for both: free, all of them
    assert rounds.seeds_that_fit([3, 5, 6], ([3], []), 6, 2) == (3,)  # the branch's count, then no room for 2
    assert rounds.seeds_that_fit([3, 7, 5, 6], ([3, 7], []), 6, 2) == (3, 7)  # two branch counts fill 2 CPUs
    assert rounds.seeds_that_fit([5, 6], ([], []), 6, 2) == (5,)  # nothing kept: one seed a round, as before
    assert rounds.seeds_that_fit([5, 6, 7], ([], []), 6, 4) == (5, 6)


def _counted(path) -> dict:
    counts = json.loads(path.read_text())["instructions"]
    return {(r["seed"], c["case"]): (c["instructions_per_call"], c["repeats"]) for r in counts["runs"] for c in r["cases"]}


@pytest.mark.slow
def test_bench_reuses_counts_of_what_did_not_change_and_counts_anew_what_did(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    shutil.copy(os.path.join(ROOT, "benchmarks", "userlib", "units.py"), user / "units.py")
    env = dict(os.environ, OVERRIDES_COUNTS_CACHE=str(tmp_path / "cache"))

    def run(*extra: str, out: str = "c.json") -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, BENCH, "--instructions", "--cases", "Tensor", "units:pair", "--seeds",
                               "1", "--json", out, *extra], cwd=user, env=env, capture_output=True, text=True,
                              timeout=1200)
        assert done.returncode == 0, done.stderr
        return done

    # two runs at once on an empty cache: both count, both keep (written whole), neither fails
    runs: list = [None, None]
    both = [threading.Thread(target=lambda i=i: runs.__setitem__(i, run(out=f"at-once-{i}.json"))) for i in range(2)]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    assert all("reused" not in r.stderr and "imports done" in r.stderr for r in runs), runs[0].stderr
    assert _counted(user / "at-once-0.json") == _counted(user / "at-once-1.json")
    again = run(out="again.json")
    assert "counts of " in again.stderr and " reused from " in again.stderr and "imports done" not in again.stderr
    assert _counted(user / "again.json") == _counted(user / "at-once-0.json")  # to the instruction
    for entry in (tmp_path / "cache").rglob("*.json"):
        json.loads(entry.read_text())  # every file whole
    # your source edited: its module is counted again, and only it; the built-in cases reused
    with open(user / "units.py", "a", encoding="utf-8") as src:
        src.write("\n\ndef _unused_helper(x):\n    return x\n")
    edited = run(out="edited.json")
    assert "(1 of 2 jobs)" in edited.stderr and "units counted in" in edited.stderr, edited.stderr
    assert "the built-in cases counted" not in edited.stderr
    fresh = run("--fresh", out="fresh.json")
    assert "reused" not in fresh.stderr and "the built-in cases counted" in fresh.stderr, fresh.stderr
    assert _counted(user / "fresh.json") == _counted(user / "edited.json")


@pytest.mark.slow
def test_a_repeated_comparison_against_the_same_base_reuses_its_counts(tmp_path):
    env = dict(os.environ, OVERRIDES_COUNTS_CACHE=str(tmp_path / "cache"))

    def compare(out: str) -> tuple[subprocess.CompletedProcess, dict]:
        done = subprocess.run([sys.executable, BENCH, "--compare", sys.executable, sys.executable, "--cases", "Tensor",
                               "--json", out], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr
        return done, json.loads((tmp_path / out).read_text())

    first, first_json = compare("first.json")
    assert "reused" not in first.stderr
    second, second_json = compare("second.json")
    assert "counts of base reused from" in second.stderr and "imports done" not in second.stderr, second.stderr
    seeds = [json_["settings"]["instructions"]["seeds"] for json_ in (first_json, second_json)]
    assert seeds[0] == seeds[1], seeds  # the seeds kept, not drawn afresh
    assert [c["verdict"] for c in second_json["comparisons"]] == [c["verdict"] for c in first_json["comparisons"]]
