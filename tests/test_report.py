"""record.sh and report.sh end to end: real bench runs, real py-spy, the PNGs drawn by
matplotlib (no browser), and a branch that is really slower in the subclass path (a start-up
hook wraps Tensor.__torch_function__)."""

import json
import os
import re
import sys
import zipfile

import pytest

from conftest import script
from test_flamepng import assert_frames_readable
from overrides import results
from overrides.ab import shimenv

SLOWED = {"SubTensor", "SubWithTorchFunction"}  # the only seed cases that reach the shim
# The label workflow is unpaired: a bench run taken while another tenant loads this shared
# machine reads everything slower and its comparisons come out inconclusive, as they should.
RECORD_ATTEMPTS = 3


# This machine also has spells in which everything, even the fastest sample, runs ~65% slower
# for seconds: a 5 s label run can fall wholly inside one (Tensor read 2,638 ns against 1,611 on
# the other side, min 2,630). No statistic of one run can see that; the plain-Tensor figure,
# which the shim cannot touch, can. A user re-records then too. Within 5%: the unpaired
# interval (3% a side, +-8% at 95%) holds such a difference; at 10% it did not, and the report
# flagged Tensor once while two other CPU-heavy jobs ran beside the suite.
SAME_MACHINE_SPEED = 0.05


def _record(label, python, folder):
    for _ in range(RECORD_ATTEMPTS):
        # --no-keep: this module tests the unpaired fallback (tests/test_keep.py the kept copies)
        out = script("record.sh", "--label", label, "--python", python, "--seconds", "2", "--force",
                     "--min-time", "1", "--no-keep", "--runs-dir", str(folder))
        assert out.returncode == 0, out.stderr
        run = results.load(str(folder / label / f"{label}.json"))
        if not any(r.contended for r in run.results):
            break  # else the machine was busy for the whole bench: what a user re-records too
    return run


def _tensor_ns(run):
    return next(r.per_call_ns for r in run.results if r.case == "Tensor")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """runs/base and runs/branch recorded with record.sh (short flamegraphs, short bench)."""
    folder = tmp_path_factory.mktemp("runs")
    slow = shimenv.make_shim_env(sys.executable, str(tmp_path_factory.mktemp("env") / "slow"), "sleep1us")
    for _ in range(RECORD_ATTEMPTS):
        base = _record("base", sys.executable, folder)
        branch = _record("branch", slow.python, folder)
        if abs(_tensor_ns(branch) / _tensor_ns(base) - 1) <= SAME_MACHINE_SPEED:
            break
    return folder


def test_record_writes_the_readme_names_and_a_manifest(runs):
    files = set(os.listdir(runs / "base"))
    for stem in ("tensor", "subtensor", "overridden", "suboverridden"):
        assert {f"base-{stem}.svg", f"base-{stem}.folded"} <= files
    assert {"base.json", "base.txt", "record.json"} <= files
    assert not any(name.endswith(".png") for name in files)  # the PNGs are report.sh's (docs/pr-report.md)
    manifest = json.loads((runs / "base" / "record.json").read_text())
    assert manifest["schema"] == "torch-function-overhead/record/1" and manifest["complete"]
    # 2 s at 200 Hz is ~400 samples a case; py-spy --native falls behind on a busy machine (under
    # three heavy processes on 2 cores one case got fewer than 100; beside a CPU hog on each core,
    # a validation run and the suite, one got 20 or fewer), so: sampled, no more.
    samples = {case: entry["samples"] for case, entry in manifest["flamegraphs"].items()}
    assert all(n > 5 for n in samples.values()), samples


def _report(runs, tmp_path, *extra, env=None, no_chromium=None):
    path = tmp_path / "report.zip"
    out = script("report.sh", "base", "branch", "-o", str(path), "--runs-dir", str(runs), *extra, env=env,
                 no_chromium=no_chromium)
    return out, path


def test_report_flags_the_slowed_cases_with_their_flamegraphs_and_leaves_tensor_out(runs, tmp_path):
    out, path = _report(runs, tmp_path)
    assert out.returncode == 1, out.stderr  # something regressed: CI can gate on it
    names = set(zipfile.ZipFile(path).namelist())
    assert {"report.md", "comparison.json", "base.txt", "branch.txt", "base.json", "branch.json"} <= names
    for stem in ("subtensor", "suboverridden"):
        assert {f"base-{stem}.svg", f"branch-{stem}.svg", f"base-{stem}.png", f"branch-{stem}.png",
                f"diff-{stem}.svg", f"diff-{stem}.png"} <= names, names
    assert not any("tensor." in n and "sub" not in n for n in names if n.startswith(("base-", "branch-")))
    with zipfile.ZipFile(path) as bundle:
        comparisons = json.loads(bundle.read("comparison.json"))
        markdown = bundle.read("report.md").decode()
    assert isinstance(comparisons, list)
    flagged = {c["case"] for c in comparisons if c["verdict"] == "regression"}
    assert flagged == SLOWED, comparisons
    assert all(set(c) >= {"case", "base_ns", "branch_ns", "delta_ns", "ci95_ns", "verdict"} for c in comparisons)
    assert "UNPAIRED" in markdown and "![base-subtensor](base-subtensor.png)" in markdown
    assert "Not paired: label `base`: no copy was kept (recorded with --no-keep)" in markdown
    # The differential view names the shim as where the extra time went.
    assert "| more, new | `_shim (_overrides_shim.py)` |" in markdown


def test_report_all_includes_every_case(runs, tmp_path):
    out, path = _report(runs, tmp_path, "--all")
    assert out.returncode == 1, out.stderr
    names = set(zipfile.ZipFile(path).namelist())
    assert {"base-tensor.svg", "branch-tensor.svg", "base-overridden.png"} <= names


def test_every_png_is_drawn_on_a_machine_without_a_browser_and_reads_like_its_svg(runs, tmp_path):
    """Chromium hidden (conftest.without_chromium) and named nowhere: the PNGs are matplotlib's,
    each the size of its SVG, its case's frames labelled where the SVG puts them."""
    (tmp_path / "bin-underneath").mkdir()
    out, path = _report(runs, tmp_path, env={"CHROMIUM": str(tmp_path / "no-chromium-here")},
                        no_chromium=str(tmp_path / "bin-underneath"))
    assert out.returncode == 1, out.stderr
    with zipfile.ZipFile(path) as bundle:
        names = set(bundle.namelist())
        markdown = bundle.read("report.md").decode()
        bundle.extractall(tmp_path / "zip")
    pngs = {n for n in names if n.endswith(".png")}
    assert pngs == {f"{role}-{stem}.png" for role in ("base", "branch", "diff")
                    for stem in ("subtensor", "suboverridden")}, names
    assert {n[:-4] for n in names if n.endswith(".svg")} == {png[:-4] for png in pngs}  # a PNG beside each SVG
    assert all(f"![{png[:-4]}]({png})" in markdown for png in pngs)
    assert "No PNG" not in markdown and "no-chromium-here" not in markdown + out.stderr
    for png in pngs:
        loop = "hot_loop_" + ("SubTensor" if "subtensor" in png else "SubWithTorchFunction")
        svg = (tmp_path / "zip" / (png[:-4] + ".svg")).read_text(encoding="utf-8")
        assert_frames_readable(svg, str(tmp_path / "zip" / png), [loop] + (["_shim"] if "diff-" in png else []))


def test_numbers_only_report(runs, tmp_path):
    out, path = _report(runs, tmp_path, "--no-flamegraphs")
    assert out.returncode == 1
    assert not any(n.endswith((".svg", ".png")) for n in zipfile.ZipFile(path).namelist())


def test_bad_inputs_exit_2_with_a_clear_line(runs, tmp_path):
    out = script("report.sh", "nolabel", "branch", "--runs-dir", str(runs))
    assert out.returncode == 2 and "recorded: base, branch" in out.stderr
    out = script("report.sh", "base", str(tmp_path / "missing" / "python"), "--runs-dir", str(runs))
    assert out.returncode == 2 and "no interpreter at" in out.stderr
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True).create(tmp_path / "empty")
    out = script("report.sh", "base", str(tmp_path / "empty"), "--runs-dir", str(runs))
    assert out.returncode == 2 and "has no torch" in out.stderr
    out = script("report.sh", "base", "branch", "-o", str(tmp_path / "report.tar"), "--runs-dir", str(runs))
    assert out.returncode == 2 and "FILE.zip" in out.stderr
    for result in (out,):
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    out = script("record.sh", "--label", "bad label", "--runs-dir", str(runs))
    assert out.returncode == 2 and "must be letters" in out.stderr


def test_paired_report_counts_by_default_and_says_where_the_instructions_went(paired_report, tmp_path):
    out, path = paired_report  # conftest.py: two interpreters, the branch with a 40-turn shim
    assert out.returncode == 1, out.stderr  # the counts call the shim a regression
    with zipfile.ZipFile(path) as bundle:
        names = set(bundle.namelist())
        markdown = bundle.read("report.md").decode()
        differential = json.loads(bundle.read("differential.json"))
        bundle.extractall(tmp_path)
    assert {"differential.json", "counts-diff-subtensor.svg", "counts-diff-subtensor.png"} <= names
    assert_frames_readable((tmp_path / "counts-diff-subtensor.svg").read_text(encoding="utf-8"),
                           str(tmp_path / "counts-diff-subtensor.png"), ["counted loop (the interpreter running it)"])
    # the shim, named by the Python-call counts, is labelled in the py-spy differential's PNG
    assert_frames_readable((tmp_path / "diff-subtensor.svg").read_text(encoding="utf-8"),
                           str(tmp_path / "diff-subtensor.png"), ["hot_loop_SubTensor", "_shim"])
    assert "## Where the instructions went" in markdown
    # the Python-call counts name the shim first, before the instructions and the time
    assert (markdown.index("## Where the Python calls went") < markdown.index("## Where the instructions went")
            < markdown.index("## Where the time went"))
    assert "| new | `_shim (_overrides_shim.py:" in markdown
    assert "`_PyEval_EvalFrameDefault [libpython3" in markdown  # the shim's frame, as the interpreter runs it
    # read in a minute: the method is folded, the verdicts and the cause are in view, first
    visible = re.sub(r"<details>.*?</details>", "", markdown, flags=re.S)
    assert len(visible.split()) < 900, len(visible.split())
    assert "| new | `_shim (_overrides_shim.py:" in visible and "| SubTensor |" in visible
    assert visible.index("| new | `_shim") < visible.index("## Where the instructions went")
    assert "<summary>How these verdicts were reached</summary>" in markdown
    assert "library placement: " in markdown and "Made by `scripts/report.sh` in" in markdown
    assert differential["schema"] == "torch-function-overhead/differential/1"
    sub = next(c for c in differential["cases"] if c["case"] == "SubTensor")
    went = sub["instructions"]
    listed = sum(f["delta_self"] for f in went["functions"])
    assert listed + went["everything_else"] == pytest.approx(went["total_delta"], abs=0.05)
    assert went["total_delta"] > 100 and sub["wall_clock"]["source"] == "py-spy"
    # the py-spy view lists the functions the Python-call counts name first, whatever the machine
    assert sub["wall_clock"]["functions"][0]["function"] == "_shim (_overrides_shim.py)"
    assert sub["wall_clock"]["functions"][0]["python_calls"] == "new"
    assert sub["python_calls"]["functions"][0]["function"] == "_shim (_overrides_shim.py)"
    # each py-spy row is set against the counts: Python code is not in them (None), a C function
    # is, by the same name; the table has the column and tags the rows the Python calls name
    functions = {f["function"]: f for f in sub["wall_clock"]["functions"]}
    assert all("instructions" in f for f in functions.values())
    assert functions["_shim (_overrides_shim.py)"]["instructions"] is None
    assert "| instructions |" in markdown and "| Python calls: new" in markdown
    # Tensor never reaches the shim: not among the regressed cases, no call tree drawn for it
    assert "counts-diff-tensor.svg" not in names
