"""pyspybench.py, real py-spy recordings, collapsed stacks and the differential view."""

import contextlib
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

import pytest

from conftest import ROOT, run_tool
from overrides.errors import UsageError
from overrides.flame import differential, flamegraph, flamesvg, pyspy, stacks
from overrides.comparison_settings import ComparisonSettings


def test_pyspybench_runs_exactly_nreps_and_prints_nothing():
    out = run_tool("pyspybench.py", "SubTensor", "--nreps", "120")
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""


def test_a_loop_s_seconds_start_once_it_is_ready():
    """Under --record the first case's loop runs, uncounted, until py-spy is at pace."""
    from overrides.flame.hotloop import HotLoop

    started = time.monotonic()
    asked = []

    def ready() -> bool:
        asked.append(time.monotonic())
        return time.monotonic() - started >= 0.3

    loop = HotLoop(lambda operands, turns: time.sleep(turns * 1e-5), (), contextlib.nullcontext, None, 0.1, ready)
    turns = []
    for chunk in loop.chunks():  # as pyspybench.py runs it
        loop.loop(loop.operands, chunk)
        turns.append(chunk)
    assert len(asked) >= 2 and time.monotonic() - started >= 0.4 and turns
    assert all(t >= 1 for t in turns)


@pytest.mark.slow
def test_pyspybench_rejects_unknown_cases_and_ops_with_exit_2():
    out = run_tool("pyspybench.py", "SubTensr")
    assert out.returncode == 2 and "valid cases: Tensor, SubTensor" in out.stderr
    out = run_tool("pyspybench.py", "WithTorchFunction", "--op", "x.shape")
    assert out.returncode == 2 and "does not apply" in out.stderr
    out = run_tool("pyspybench.py", "Tensor", "--nreps", "5", "--seconds", "1")
    assert out.returncode == 2 and "not allowed with" in out.stderr


@pytest.mark.slow
def test_pyspybench_record_writes_an_svg_titled_with_the_case_and_refuses_an_image_name(tmp_path):
    out = run_tool("pyspybench.py", "SubTensor", "--record", str(tmp_path / "x.png"))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.strip().endswith(f"name it {tmp_path / 'x.svg'}") and not (tmp_path / "x.png").exists()
    svg = tmp_path / "x.svg"
    out = run_tool("pyspybench.py", "SubTensor", "--op", "x.add", "--record", str(svg),
                   "--seconds", "1", "--pyspy", pyspy.find_pyspy(sys.executable))
    assert out.returncode == 0, out.stderr
    tree = ElementTree.parse(svg)
    title = next(t for t in tree.iter() if t.get("id") == "title")
    assert title.text.startswith("SubTensor · x.add: py-spy"), title.text
    assert "--pid" not in title.text  # py-spy's own title was its command line


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pyspy")
    return flamegraph.record_case(sys.executable, "SubWithTorchFunction",
                                  str(folder / "suboverridden.svg"),
                                  str(folder / "suboverridden.folded"), seconds=2.0)


def test_a_short_record_gives_an_svg_titled_with_what_it_shows(recording):
    svg = open(recording.svg_path, encoding="utf-8").read()
    root = ElementTree.fromstring(svg)  # well-formed
    assert root.find("{http://www.w3.org/2000/svg}title").text == "SubWithTorchFunction · torch.add"
    assert ".partial" not in svg and "--output" not in svg  # not py-spy's command line
    assert "hot_loop_SubWithTorchFunction" in svg
    # the case's own __torch_function__ (overrides/cases/seedcases.py, named by its last folder) and torch's, under it
    assert "__torch_function__ (cases/seedcases.py" in svg
    assert "torch/_tensor.py" in svg


# Of all samples, those inside the hot loop. Without the cut at the loop, the imports alone were
# most of a recording; 0.895 once beside the suite's other worker (the harness between chunks).
LOOP_SHARE_FLOOR = 0.85


def test_the_raw_stacks_cover_the_hot_loop(recording):
    raw = stacks.read_folded(recording.folded_path)
    loop = stacks.hot_loop_stacks(raw)
    # 2 s at 200 samples a second; py-spy --native on a loaded machine keeps up with about half
    # (172 with both cores busy). Imports are not sampled: pyspybench hands py-spy its loop after them.
    assert recording.samples == sum(loop.values()) >= 100
    # The rest is the harness between chunks (HotLoop.chunks): 10.5% once, in a fresh clone's
    # plain `make test` beside the other worker's valgrind counts (428 of 478 samples).
    assert recording.samples >= LOOP_SHARE_FLOOR * sum(raw.values())
    assert all(stack[0] == "hot_loop_SubWithTorchFunction (<hot loop: torch.add(x, y)>)" for stack in loop)
    inclusive, _ = stacks.frame_samples(loop)
    # raw stacks carry qualified names
    assert "SubWithTorchFunction.__torch_function__ (cases/seedcases.py)" in inclusive
    assert "Tensor.__torch_function__ (torch/_tensor.py)" in inclusive
    assert not any(":" in f.rsplit("(", 1)[-1] for f in inclusive)  # line numbers are cleaned away


def _loop_shares(raw_path: str) -> tuple[float, float, float, set]:
    """From py-spy's raw stacks, uncleaned: (share of all samples inside the hot loop, share of
    the loop's samples in its most common hot-loop frame (with line), share of the loop's samples
    in its most common callee, the Python frames above the loop)."""
    import collections

    total, frames, callees, above = 0, collections.Counter(), collections.Counter(), set()
    for line in open(raw_path, encoding="utf-8"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        parts, samples = stack.split(";"), int(count)
        total += samples
        for depth, frame in enumerate(parts):
            if frame.startswith("hot_loop_"):
                frames[frame] += samples
                callees[parts[depth + 1] if depth + 1 < len(parts) else "(self)"] += samples
                above.update(f for f in parts[:depth] if ".py:" in f)  # Python frames
                break
    loop = sum(frames.values())
    return (loop / total, frames.most_common(1)[0][1] / loop, callees.most_common(1)[0][1] / loop,
            above)


@pytest.mark.matrix  # py-spy reads each version's frames (conftest.MATRIX_RUNS)
@pytest.mark.slow
def test_the_seed_command_shows_the_loop_as_one_frame_over_one_torch_tower(tmp_path):
    """`py-spy record -o subtensor.svg --native -- python pyspybench.py SubTensor`, as the seed
    README has it (raw format, to read the stacks; py-spy samples the same way either way)."""
    raw = tmp_path / "subtensor.txt"
    out = subprocess.run([pyspy.find_pyspy(sys.executable), "record", "-o", str(raw), "--format",
                          "raw", "--native", "--", sys.executable, "pyspybench.py", "SubTensor"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    loop_share, one_frame, one_tower, above = _loop_shares(str(raw))
    assert loop_share >= 0.8  # importing torch is sampled too; the loop outlasts it 5 to 1
    assert one_frame >= 0.9  # all 50 unrolled calls on one line: one frame, not 50 towers
    assert one_tower >= 0.7  # THPVariable_add; the result's dealloc is the rest (0.79 seen under load)
    assert {f.split(" (")[0] for f in above} == {"<module>"}  # no harness frame but the script's


def test_a_recording_cut_at_the_loop_holds_one_loop_frame(recording):
    loop_share, one_frame, one_tower, _ = _loop_shares(recording.folded_path)
    # one tower: 0.79 once at a load of 3.8 on 2 CPUs (more samples caught in the result's dealloc)
    assert loop_share >= LOOP_SHARE_FLOOR and one_frame >= 0.9 and one_tower >= 0.7


def test_frames_are_cleaned_of_lines_addresses_and_directories():
    assert stacks.clean_frame("add (/usr/lib/python3/site-packages/torch/_tensor.py:1512)") == \
        "add (torch/_tensor.py)"
    assert stacks.clean_frame("0x7f3a2b1c (libtorch_cpu.so)") == "? (libtorch_cpu.so)"


def _stacks(**frames_to_counts):
    return {tuple(k.split("__")): v for k, v in frames_to_counts.items()}


def test_the_differential_finds_a_new_frame_and_prices_it_per_call():
    loop = "hot_loop_X"
    base = {(loop, "add", "kernel"): 600, (loop, "add", "wrap"): 400}
    branch = {(loop, "add", "kernel"): 600, (loop, "add", "wrap"): 400, (loop, "shim"): 100}
    deltas = differential.differential(base, branch, base_per_call_ns=1000.0, branch_per_call_ns=1100.0)
    by_frame = {d.frame: d for d in deltas}
    shim = by_frame["shim"]
    assert shim.new and shim.branch_self_ns == pytest.approx(100.0)  # 100/1100 of 1100 ns
    assert shim.significant and deltas[0].frame == "shim"
    assert by_frame["kernel"].delta_ns == pytest.approx(0.0, abs=1e-9)  # same ns, smaller share
    # own times add up to the change of the whole call
    assert sum(d.delta_ns for d in deltas) == pytest.approx(100.0)
    grew, shrank = differential.top_changes(deltas)
    assert [d.frame for d in grew] == ["shim"] and shrank == []
    svg = differential.differential_svg(base, branch, 1000.0, 1100.0, "test")
    root = ElementTree.fromstring(svg)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("shim: 100 samples on this path; own time 0 -> 100 ns per call") for t in titles)


def test_time_that_moved_with_the_same_instructions_is_amber_not_red():
    loop = "hot_loop_X"
    base = {(loop, "add", "kernel"): 600, (loop, "add", "tuple"): 10}
    branch = {(loop, "add", "kernel"): 600, (loop, "add", "tuple"): 90}  # one process's layout luck

    def fills(svg):
        root = ElementTree.fromstring(svg)
        ns = "{http://www.w3.org/2000/svg}"
        return {g.find(ns + "title").text.split(":")[0]: g.find(ns + "rect").get("fill")
                for g in root.iter(ns + "g") if g.find(ns + "title") is not None}

    plain = fills(differential.differential_svg(base, branch, 1000.0, 1100.0, "test"))
    assert plain["tuple"].startswith("rgb(235,")  # red: more time
    marked_svg = differential.differential_svg(base, branch, 1000.0, 1100.0, "test", {"tuple"})
    marked = fills(marked_svg)
    assert marked["tuple"] == flamesvg.SAME_WORK and marked["kernel"] == plain["kernel"]
    assert "amber: the same instructions in the counts" in marked_svg
    assert "the same instructions in the counts" not in differential.differential_svg(
        base, branch, 1000.0, 1100.0, "test")


def test_a_new_wrapper_is_named_even_when_its_own_time_is_within_noise():
    loop = "hot_loop_X"
    base = {(loop, "add", "kernel"): 300, (loop, "add", "check"): 100}
    # The branch puts a wrapper between add and its callees; the wrapper itself is seldom the leaf.
    branch = {(loop, "add", "wrapper", "kernel"): 300, (loop, "add", "wrapper", "check"): 95,
              (loop, "add", "wrapper"): 5}
    deltas = {d.frame: d for d in differential.differential(base, branch, 1000.0, 1010.0)}
    wrapper = deltas["wrapper"]
    assert abs(wrapper.z) < differential.SIGNIFICANT_Z  # own time alone would not name it
    assert wrapper.new_in_path and wrapper.significant
    grew, shrank = differential.top_changes(list(deltas.values()))
    assert [d.frame for d in grew] == ["wrapper"] and shrank == []
    # A frame seen a handful of times only in the branch is noise, not a new function in the path.
    rare = {(loop, "add", "kernel"): 300, (loop, "add", "check"): 97, (loop, "add", "fluke"): 3}
    fluke = {d.frame: d for d in differential.differential(base, rare, 1000.0, 1000.0)}["fluke"]
    assert fluke.new and not fluke.new_in_path and not fluke.significant


def test_missing_pyspy_says_how_to_install_it(monkeypatch):
    monkeypatch.setenv("PYSPY", "/nonexistent/py-spy")
    with pytest.raises(UsageError, match="pip install py-spy"):
        pyspy.find_pyspy(sys.executable)


def test_pyspy_is_found_in_this_checkouts_venv_when_nowhere_else(tmp_path, monkeypatch):
    # `make test` installs py-spy into .venv; a report on two other environments, neither with
    # py-spy beside its interpreter, must still find it there.
    monkeypatch.delenv("PYSPY", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "elsewhere" / "python"))
    monkeypatch.setattr(pyspy, "ROOT", str(tmp_path))
    with pytest.raises(UsageError, match="pip install py-spy"):
        pyspy.find_pyspy(str(tmp_path / "base-env" / "bin" / "python"))
    own = tmp_path / ".venv" / "bin" / "py-spy"
    own.parent.mkdir(parents=True)
    own.write_text("#!/bin/sh\n")
    own.chmod(0o755)
    assert pyspy.find_pyspy(str(tmp_path / "base-env" / "bin" / "python")) == str(own)


def test_record_script_reports_a_missing_pyspy_before_measuring(tmp_path):
    env = dict(os.environ, PYSPY="/nonexistent/py-spy")
    out = subprocess.run(["bash", "scripts/record.sh", "--label", "x", "--python", sys.executable,
                          "--runs-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 2 and "pip install py-spy" in out.stderr
    assert not (tmp_path / "x").exists()  # nothing measured, nothing half-written


def _footer(svg: str) -> str:
    """The last line of text of a picture: what its PNG says under the flamegraph."""
    root = ElementTree.fromstring(svg)
    return [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")][-1]


def test_png_footers_say_what_a_picture_shows_not_what_to_hover():
    loop = "hot_loop_X"
    base = {(loop, "add (torch/_tensor.py)", "kernel (libtorch_cpu.so)"): 600}
    branch = {(loop, "add (torch/_tensor.py)", "kernel (libtorch_cpu.so)"): 600, (loop, "shim (a.py)"): 60}
    footers = [_footer(flamegraph.flamegraph_svg(base, "one build")),
               _footer(differential.differential_svg(base, branch, 1000.0, 1100.0, "diff"))]
    for footer in footers:
        assert "hover" not in footer.lower()  # a PNG cannot be hovered
    assert footers[0].startswith("Python frames yellow, native frames orange-red")
    assert footers[1].startswith("branch: 660 samples at 1,100 ns per call")


def _two_recordings(loop_frames: dict, phantom: dict | None = None) -> list[dict]:
    """Two recordings of one build: the same samples, plus `phantom` in the first only."""
    first = dict(loop_frames)
    for stack, samples in (phantom or {}).items():
        first[stack] = first.get(stack, 0) + samples
    return [first, dict(loop_frames)]


def test_a_phantom_of_one_recording_is_within_its_spread_and_a_consistent_change_is_not():
    """Two recordings a side (two processes): a function one process spent 90 extra samples in is
    a phantom however large; a helper the branch runs in both recordings is a change."""
    loop = "hot_loop_X"
    common = {(loop, "add", "kernel"): 500, (loop, "add", "wrap"): 300, (loop, "add", "tuple"): 20}
    base = _two_recordings(common)
    with_helper = {**common, (loop, "add", "helper"): 40}
    branch = _two_recordings(with_helper, phantom={(loop, "add", "tuple"): 90})
    deltas = {d.frame: d for d in differential.differential(base, branch, 1000.0, 1050.0)}
    tuple_, helper = deltas["tuple"], deltas["helper"]
    assert tuple_.delta_ns > helper.delta_ns > 0  # the phantom moved further than the change...
    assert tuple_.spread_ns is not None and not tuple_.significant  # ...but in one process only
    assert helper.significant and helper.new_in_path
    grew, shrank = differential.top_changes(list(deltas.values()))
    assert [d.frame for d in grew] == ["helper"] and shrank == []
    # One recording a side cannot tell them apart: both are listed.
    single = {d.frame: d for d in differential.differential(base[0], branch[0], 1000.0, 1050.0)}
    assert single["tuple"].spread_ns is None and single["tuple"].significant
    grew, _ = differential.top_changes(list(single.values()))
    assert {"helper", "tuple"} <= {d.frame for d in grew}


def test_an_outlier_recording_is_flagged_with_two_a_side_and_outvoted_with_three():
    """The cause's time in one process out of line with the other (93 samples at a new helper's
    call site against 34, seen in a report): with two recordings a side the frame says its
    recordings disagree; with a third a side, each side's figure is the median, and the outlier
    no longer sets it."""
    loop = "hot_loop_X"
    common = {(loop, "add", "kernel"): 900, (loop, "add", "wrap"): 270}
    base = [dict(common), dict(common)]
    branch = [{**common, (loop, "add", "helper"): 30}, {**common, (loop, "add", "helper"): 120}]
    two = {d.frame: d for d in differential.differential(base, branch, 1000.0, 1100.0)}
    assert two["helper"].recordings_disagree and not two["kernel"].recordings_disagree
    pooled = two["helper"].branch_self_ns
    three = {d.frame: d for d in differential.differential(
        base + [dict(common)], branch + [{**common, (loop, "add", "helper"): 36}], 1000.0, 1100.0)}
    helper = three["helper"]
    assert helper.branch_self_ns == pytest.approx(36 / 1206 * 1100.0)  # the median recording's
    assert helper.branch_self_ns < pooled / 2
    # Two recordings that agree are pooled as before.
    agree = [{**common, (loop, "add", "helper"): 30}, {**common, (loop, "add", "helper"): 33}]
    calm = {d.frame: d for d in differential.differential(base, agree, 1000.0, 1100.0)}
    assert not calm["helper"].recordings_disagree
    assert calm["helper"].branch_self_ns == pytest.approx(63 / (2 * 1170 + 63) * 1100.0)


def test_the_spread_never_makes_the_error_smaller_than_the_usual_one():
    loop = "hot_loop_X"
    same = [{(loop, "add", "kernel"): 500, (loop, "add", "wrap"): 100}] * 2
    moved = [{(loop, "add", "kernel"): 500, (loop, "add", "wrap"): 112}] * 2  # identical recordings
    by_frame = {d.frame: d for d in differential.differential(same, moved, 1000.0, 1000.0)}
    pooled = {d.frame: d for d in differential.differential(
        stacks.merged(same), stacks.merged(moved), 1000.0, 1000.0)}
    assert by_frame["wrap"].spread_ns == pytest.approx(0.0)
    assert by_frame["wrap"].error_ns == pytest.approx(pooled["wrap"].error_ns)  # all samples' error


def test_a_function_the_counts_name_is_labelled_in_the_differential_picture():
    loop = "hot_loop_X"
    base = {(loop, "Tensor.__torch_function__ (torch/_tensor.py)", "kernel (libtorch_cpu.so)"): 2000}
    branch = {(loop, "Tensor.__torch_function__ (torch/_tensor.py)", "kernel (libtorch_cpu.so)"): 2000,
              (loop, "Tensor.__torch_function__ (torch/_tensor.py)",
               "_check_types_extra (torch/_tensor.py)"): 12}  # ~9 px wide: room for "_c.."
    counted = {"_check_types_extra (torch/_tensor.py)": 1}
    plain = differential.differential_svg(base, branch, 4000.0, 4030.0, "diff")
    named = differential.differential_svg(base, branch, 4000.0, 4030.0, "diff", counted=counted)
    texts = [t.text for t in ElementTree.fromstring(named).iter("{http://www.w3.org/2000/svg}text")]
    assert "_check_types_extra" in texts and not any(t and t.startswith("_c") and t.endswith("..") for t in texts)
    assert "_check_types_extra" not in [t.text for t in ElementTree.fromstring(plain).iter(
        "{http://www.w3.org/2000/svg}text")]
    assert _footer(named).endswith("as the Python-call counts found them new or changed: _check_types_extra")

    def fill(svg):
        ns = "{http://www.w3.org/2000/svg}"
        return next(g.find(ns + "rect").get("fill") for g in ElementTree.fromstring(svg).iter(ns + "g")
                    if g.find(ns + "title").text.startswith("_check_types_extra") and
                    g.find(ns + "rect").get("fill") != "white")

    assert fill(plain) == flamesvg.GREY  # 12 samples: within py-spy's error
    assert fill(named).startswith("rgb(235,")  # red: the counts say it is new


def test_a_call_site_takes_the_callers_line_with_everything_under_it():
    loop = "hot_loop_X (<hot loop: torch.add(x, y)>:3)"
    tf = "Tensor.__torch_function__ (/env/site-packages/torch/_tensor.py:{})"
    raw = {(loop, tf.format(1534)): 8,  # the call itself: the frame made on the caller's line
           (loop, tf.format(1534), "_check_types_extra (/env/site-packages/torch/_tensor.py:104)"): 10,
           (loop, tf.format(1534), "_check_types_extra (/env/site-packages/torch/_tensor.py:105)",
            "PyObject_IsInstance (libpython3.11.so)"): 3,
           (loop, tf.format(1539), "kernel (libtorch_cpu.so)"): 500, (loop, tf.format(1539)): 40}
    sites = {("Tensor.__torch_function__ (torch/_tensor.py)", 1534): "calls of helper"}
    cut = stacks.at_call_sites(raw, sites)
    frame = "Tensor.__torch_function__ (torch/_tensor.py)"
    assert cut == {("hot_loop_X (<hot loop: torch.add(x, y)>)", frame, "calls of helper"): 21,
                   ("hot_loop_X (<hot loop: torch.add(x, y)>)", frame, "kernel (libtorch_cpu.so)"): 500,
                   ("hot_loop_X (<hot loop: torch.add(x, y)>)", frame): 40}
    # without sites: the same stacks as read_folded gives
    plain = stacks.at_call_sites(raw, {})
    assert sum(plain.values()) == 561 and all(":" not in f for s in plain for f in s if "(<" not in f)
    # the site's row holds the helper's own time, what it called and the call on the caller's line
    own = {d.frame: d for d in differential.differential(stacks.at_call_sites({k: v for k, v in raw.items()
                                                                                if "1534" not in k[1]}, {}),
                                                             plain, 1000.0, 1040.0)}
    at_site = {d.frame: d for d in differential.differential(stacks.at_call_sites(
        {k: v for k, v in raw.items() if "1534" not in k[1]}, {}), cut, 1000.0, 1040.0)}
    helper = own["_check_types_extra (torch/_tensor.py)"].delta_ns
    assert at_site["calls of helper"].delta_ns == pytest.approx(21 / 561 * 1040.0)
    assert at_site["calls of helper"].delta_ns > 2 * helper
    assert sum(d.delta_ns for d in at_site.values()) == pytest.approx(40.0)


_FAILS_UNDER_PYSPYBENCH = '''
import sys
import torch

if sys.argv and sys.argv[0].endswith("pyspybench.py"):
    raise RuntimeError("this case refuses to be profiled")


class Fine(torch.Tensor):
    pass
'''


@pytest.mark.slow
def test_several_cases_are_recorded_in_one_process_each_recording_and_split_by_case(tmp_path, monkeypatch):
    """Two cases, two recordings at once: each case gets its own collapsed stacks from each
    process (only its own hot loop in them) and its own SVG; a case that fails in the recording
    process fails the batch, and the report then records the cases one by one, so only the
    failing case is missing, with a note."""
    targets = [flamegraph.Target(case, str(tmp_path / f"{case}.svg"), str(tmp_path / f"{case}.folded"))
               for case in ("Tensor", "SubTensor")]
    made = flamegraph.record_cases(sys.executable, targets, seconds=1.0, recordings=2)
    assert [r.case for r in made] == ["Tensor", "SubTensor"]
    for rec, other in zip(made, ("SubTensor", "Tensor")):
        assert len(rec.folded_paths) == 2 and rec.samples > 0
        for path in rec.folded_paths:
            text = open(path, encoding="utf-8").read()
            assert f"hot_loop_{rec.case} (" in text and f"hot_loop_{other} (" not in text
        assert f"hot_loop_{rec.case}" in open(rec.svg_path, encoding="utf-8").read()
    # the first case's seconds start once py-spy is at pace: before, its slow start ate them
    # (152 samples against the second case's 393 beside five CPU-bound processes)
    assert made[0].samples >= 0.5 * made[1].samples, [r.samples for r in made]
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".partial")]

    from overrides.builds.interpreters import Build
    from overrides.review.measuring import Evidence, record_flamegraphs
    from overrides.review.manifest import Manifest
    from overrides.review.runs import RecordedRun
    from overrides.review.sides import Side

    (tmp_path / "refusing.py").write_text(_FAILS_UNDER_PYSPYBENCH)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UsageError, match="refuses to be profiled"):
        flamegraph.record_cases(sys.executable, [flamegraph.Target(
            "refusing:Fine", str(tmp_path / "f.svg"), str(tmp_path / "f.folded"))], seconds=1.0)
    folder = tmp_path / "runs" / "base"
    folder.mkdir(parents=True)
    evidence = Evidence([], {}, ComparisonSettings(), recorded={"base": RecordedRun(
        "base", str(folder), Manifest("base", sys.executable, op="torch.add"))})
    side = Side("base", sys.executable, python=sys.executable, build=Build(sys.executable))
    found = record_flamegraphs(evidence, side, ["SubTensor", "refusing:Fine"], None, 1.0,
                               str(tmp_path / "runs"), str(tmp_path), lambda message: None)
    assert found["refusing:Fine"] is None and found["SubTensor"] is not None
    assert len(found["SubTensor"][1]) == 2 and all(os.path.exists(p) for p in found["SubTensor"][1])
    assert evidence.notes == [next(n for n in evidence.notes if n.startswith(
        "No base flamegraph for refusing:Fine:") and "refuses to be profiled" in n)]


@pytest.mark.slow
def test_a_case_that_fails_in_the_batch_is_recorded_alone_and_costs_only_itself(tmp_path, monkeypatch):
    """All cases in one py-spy process first; a user case whose every op raises sinks that
    process, so each case is then recorded alone: Tensor's recording lands, the broken case is
    reported with its reason. With stop_at_first (record.sh) a first case failing alone raises."""
    (tmp_path / "brokencase.py").write_text(
        "import torch\n\n\nclass Broken(torch.Tensor):\n    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        raise RuntimeError('this subclass refuses every op')\n")
    monkeypatch.chdir(tmp_path)  # user cases are found from the user's folder
    targets = [flamegraph.Target(case, str(tmp_path / f"{n}.svg"), str(tmp_path / f"{n}.folded"))
               for n, case in enumerate(("Tensor", "brokencase:Broken"))]
    landed, alone, failed = [], [], {}
    made = flamegraph.record_together_or_alone(
        sys.executable, targets, seconds=1, on_recorded=landed.extend,
        on_alone=lambda index, target: alone.append(target.case),
        on_failed=lambda target, why: failed.update({target.case: why}))
    assert [rec.case for rec in made] == [rec.case for rec in landed] == ["Tensor"]
    assert alone == ["Tensor", "brokencase:Broken"]
    assert list(failed) == ["brokencase:Broken"] and "refuses every op" in failed["brokencase:Broken"]
    assert os.path.exists(tmp_path / "0.svg") and not os.path.exists(tmp_path / "1.svg")
    with pytest.raises(UsageError, match="refuses every op"):
        flamegraph.record_together_or_alone(sys.executable, targets[::-1], seconds=1, stop_at_first=True)


STUCK_MODULE = '''
import os
import time

import torch

BORN = os.getpid()


class Stuck(torch.Tensor):
    """runs in the process that built it; in a forked child, blocks for good (as OpenMP's pool did)"""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if os.getpid() != BORN:
            time.sleep(3600)
        return super().__torch_function__(func, types, args, kwargs or {})


def pair():
    return torch.ones(1).as_subclass(Stuck), torch.ones(1).as_subclass(Stuck)
'''


@pytest.mark.slow
def test_a_recorded_loop_that_gets_stuck_is_an_error_not_a_recording(tmp_path):
    """py-spy ends at its duration and exits 0 while the loop it traced never finished: that is
    a stuck loop (an SVG of one frame at 100%), said in one line, exit 2, nothing left running."""
    (tmp_path / "stuck.py").write_text(STUCK_MODULE)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "pyspybench.py"), "stuck:pair", "--record",
                          str(tmp_path / "stuck.svg"), "--seconds", "0.5"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2 and "was still running when py-spy's duration" in out.stderr, out.stderr
    assert not [line for line in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
                if "stuck:pair" in line]
