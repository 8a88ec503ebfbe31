"""`bench.py --history`: counts across an ordered list of builds, the picture, the cache, bad input.

The measured history runs real Callgrind on two small shim environments of this torch: one
sharing its packages unchanged, one whose start-up wraps `Tensor.__torch_function__` in a
40-iteration Python loop (overrides/ab/shimenv.py), so SubTensor's step is a known regression and
Tensor's is none. The cache and order tests install hand-made wheels with the real pip (a
"torch" that is only a version file: the order is refused before anything would import it).
"""

import json
import os

import pytest

from conftest import make_wheel, run_tool
from test_history_output import picture_marks
from overrides.ab import shimenv
from overrides.flame import flamepng
from test_flamepng import assert_frames_readable
from overrides.history import HISTORY_SCHEMA
from overrides.history import lineup as history


@pytest.fixture(scope="module")
def history_measured(tmp_path_factory, torch_python):
    folder = tmp_path_factory.mktemp("history")
    plain = shimenv.make_shim_env(torch_python, str(folder / "plain-env"), None)
    loop = shimenv.make_shim_env(torch_python, str(folder / "with-a-40-step-loop"), "loop40")
    out = folder / "out"
    # drawn seeds, in rounds, as users run it; on a machine without a browser (CHROMIUM names
    # none there): every picture is matplotlib's, the call tree's PNG too
    done = run_tool("bench.py", "--history", plain.path, loop.path, "--cases", "Tensor", "SubTensor",
                    "--out", str(out), timeout=900,
                    env=dict(os.environ, CHROMIUM=str(folder / "no-chromium-here")))
    return done, out, plain, loop


def test_history_counts_each_step_and_draws_it(history_measured):
    done, out, plain, loop = history_measured
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads((out / "history.json").read_text())
    assert data["schema"] == HISTORY_SCHEMA and data["complete"] is True
    assert [b["name"] for b in data["builds"]] == ["plain-env", "with-a-40-step-loop"]
    steps = {s["case"]: s for s in data["steps"]}
    assert steps["SubTensor"]["verdict"] == "regression" and steps["SubTensor"]["delta_instructions"] > 500
    assert steps["Tensor"]["verdict"] == "no change"
    # The picture says the same as the JSON: one point per case and build at its count, one
    # step line per case with its verdict.
    marks = picture_marks(out / "history.svg")
    points = {(case, build): float(mean) for kind, case, build, mean, _ in (m for m in marks if m[0] == "point")}
    figures = {(c["case"], b["build"]): b["instructions"] for c in data["cases"] for b in c["builds"]}
    assert points.keys() == figures.keys() and len(points) == 4
    assert all(abs(points[k] - figures[k]) < 0.01 for k in points)
    lines = {case: verdict for kind, case, _, verdict, _ in (m for m in marks if m[0] == "step")}
    assert lines == {"Tensor": "no change", "SubTensor": "regression"}
    # The PNGs are matplotlib's, written with no browser at hand, checked like the flamegraphs'
    # (their size, not one colour); the call tree's with its frames readable where md shows it.
    png = out / "history.png"
    assert flamepng.png_size(str(png))[0] == 1600 and not flamepng.png_is_flat(str(png))
    assert_frames_readable((out / "where-subtensor.svg").read_text(), str(out / "where-subtensor.png"),
                           ["counted loop (the interpreter running it)"])
    assert "![call-tree diff](where-subtensor.png)" in (out / "history.md").read_text()
    assert json.loads((out / "history.json").read_text())["largest_step"]["pictures"] == [
        "where-subtensor.svg", "where-subtensor.png"]
    # The step that changed most comes with its call tree.
    md = (out / "history.md").read_text()
    assert "Where the largest step went: SubTensor, plain-env -> with-a-40-step-loop" in md
    assert data["largest_step"]["case"] == "SubTensor" and (out / "where-subtensor.svg").exists()
    # The table on stdout: one block per case, the step's verdict beside its build.
    sub = done.stdout.split("SubTensor (torch.add)")[1]
    assert "with-a-40-step-loop" in sub and "regression" in sub.split("\n\n")[0]


def _fake_torch(folder, version: str) -> str:
    return make_wheel(folder, "torch", version, {"torch/__init__.py": "raise ImportError('not a real torch')\n",
                                             "torch/version.py": f"__version__ = '{version}'\n"})


@pytest.mark.slow
def test_requirements_are_installed_once_and_builds_must_be_in_order(tmp_path):
    cache = tmp_path / "cache"
    # Versions below any cap a machine's pip config may set (this kind's /etc/xdg/pip caps
    # torch at 2.14.1, and pip refuses 2.99.1 before the order could be checked).
    newer = f"torch @ file://{_fake_torch(tmp_path, '1.99.1')}"
    older = f"torch @ file://{_fake_torch(tmp_path, '1.99.0')}"
    first = run_tool("bench.py", "--history", newer, older, "--cache", str(cache), "--out",
                     str(tmp_path / "out"), timeout=600)
    assert first.returncode == 2, first.stderr[-2000:]
    last = first.stderr.strip().splitlines()[-1]
    assert "builds out of order" in last and "1.99.1" in last and "--any-order" in last
    assert first.stderr.count("installing into") == 2
    installed = sorted(os.listdir(cache))
    assert len(installed) == 2 and not any(name.endswith(".partial") for name in installed)
    # Again: both from the cache, no pip; the same refusal.
    again = run_tool("bench.py", "--history", newer, older, "--cache", str(cache), timeout=120)
    assert again.returncode == 2 and "installing into" not in again.stderr
    assert again.stderr.count("from the cache") == 2 and "builds out of order" in again.stderr
    assert sorted(os.listdir(cache)) == installed
    # The same build twice.
    twice = run_tool("bench.py", "--history", older, older, "--cache", str(cache), timeout=120)
    assert twice.returncode == 2 and "are one build" in twice.stderr.strip().splitlines()[-1]
    # ... also when named two ways: a virtualenv's folder and its bin/python3.
    venv_python = os.path.join(str(cache), sorted(os.listdir(cache))[0], "bin", "python3")
    two_ways = run_tool("bench.py", "--history", os.path.dirname(os.path.dirname(venv_python)),
                        venv_python, "--any-order", timeout=120)
    assert two_ways.returncode == 2 and "are one build" in two_ways.stderr, two_ways.stderr[-500:]


@pytest.mark.slow
def test_bad_builds_are_one_line_and_exit_2(tmp_path):
    cache = tmp_path / "cache"
    notorch = f"notorch @ file://{make_wheel(tmp_path, 'notorch', '1.0', {'notorch.py': ''})}"
    cases = [
        (["--history", notorch, notorch], "has no torch"),
        (["--history", "torch==0.0.0.1"], "at least two builds"),
        (["--history", "no-such-build-anywhere", "another"], "neither an interpreter"),
        (["--history", "torch==0.0.0.1", "torch==0.0.0.2"], "did not install"),
        (["--clock"], "for --history"),
        (["--history", "a", "b", "--compare", "x", "y"], "drop --compare"),
    ]
    for args, expected in cases:
        done = run_tool("bench.py", *args, "--cache", str(cache), timeout=600)
        lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("[")]
        assert done.returncode == 2, (args, done.stderr[-1000:])
        assert len(lines) == 1 and expected in lines[0], (args, done.stderr[-1000:])
        assert "Traceback" not in done.stderr
    assert not any(name.endswith(".partial") for name in os.listdir(cache))
    # Folders that cannot be made: a file in the way of --out, a --cache under a file.
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    for args, expected in ((["--out", str(in_the_way)], "--out"),
                           (["--cache", str(in_the_way / "cache")], "--cache")):
        done = run_tool("bench.py", "--history", notorch, "torch==0.0.0.2", *args, timeout=600)
        lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("[")]
        assert done.returncode == 2 and len(lines) == 1 and expected in lines[0], done.stderr[-1000:]
        assert "cannot make that folder" in lines[0] and "Traceback" not in done.stderr


def test_version_order_reads_releases_and_nightlies():
    key = history.version_key
    assert key("2.12.1+cu130") < key("2.14.1") < key("2.15.0.dev20260101") < key("2.15.0rc1") < key("2.15.0")
    assert key("not a version") is None
    assert history.is_requirement("torch==2.14.1") and history.is_requirement("torch @ file:///x.whl")
    assert not history.is_requirement("/tmp/x/main") and not history.is_requirement("base")
