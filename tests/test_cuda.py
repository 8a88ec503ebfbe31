"""On CUDA: the host's cost a call, the synchronized cost and the GPU's own, and from which size the
GPU's work hides a case's overhead.

What runs everywhere: the refusals (counting on CUDA, --plot without a sweep) and what a run's
CUDA figures say (the table, the sentence, the JSON, the picture), from figures given here. What
needs a GPU (skipped without one, run on the lent GPU machine): bench.py timing on cuda, a size
sweep and its picture, and comparisons on cuda (an A/A, the 100 ns spin shim).
"""

import json
import os
import sys

import pytest

from conftest import run_tool
from overrides import device_report, results
from overrides.cases import casenames
from overrides.errors import UsageError
from overrides.environment import Environment
from overrides.results import CaseResult, RunResult
from overrides.run_settings import RunSettings


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not _has_cuda(), reason="no CUDA device here")

SIZES = (1, 65_536, 4_194_304)


def _result(case: str, host: float, synced: float, gpu: float) -> CaseResult:
    """A case timed on CUDA: 40 samples around each figure (ns a call)."""
    spread = [1.0 + i / 2000 for i in range(40)]
    suffix = case.partition("@")[2]
    return CaseResult(case=case, op="torch.add", stmt="torch.add(x, y)", description="", calls_per_sample=200,
                      samples_ns=tuple(host * s for s in spread), loop_overhead_ns=0.5,
                      baseline=f"Tensor@{suffix}",
                      device="cuda", device_ns=(("synced", tuple(synced * s for s in spread)),
                                                ("gpu", tuple(gpu * s for s in spread))))


def _sweep_run() -> RunResult:
    """Plain tensors and a subclass at three sizes, as an H200 read them (issue 39's table): the
    host pays ~+4.5 us at every size; the GPU's 4M-element kernel (~13 us) hides it."""
    figures = {1: ((7_000, 7_100, 2_000), (11_500, 11_600, 2_000)),
               65_536: ((6_600, 6_700, 2_200), (11_200, 11_300, 2_200)),
               4_194_304: ((6_700, 13_100, 13_000), (11_000, 13_150, 13_000))}
    rows = []
    for size, (plain, sub) in figures.items():
        rows += [_result(f"Tensor@{size}/cuda", *plain), _result(f"SubTensor@{size}/cuda", *sub)]
    return RunResult(Environment(torch_version="2.11.0+cu130", cuda_device="NVIDIA H200"), RunSettings(), tuple(rows))


def test_the_gpu_hides_the_overhead_from_the_size_whose_synced_cost_no_longer_shows_it():
    run = _sweep_run()
    found = device_report.rows(run)
    sub = [row for row in found if row.case.startswith("SubTensor")]
    assert [row.hidden for row in sub] == [False, False, True]
    text = device_report.text(run)
    assert "SubTensor [torch.add]: the host pays +4.3..+4.6 us a call over plain tensors; this GPU's work " \
           "hides it from 4,194,304 elements (synced +0.1 us), not at 65,536 (+4.6 us)" in text
    assert "\nTensor [torch.add]: the host" not in text  # plain tensors pay no overhead to hide
    header = text.splitlines()[0]
    assert all(word in header for word in ("host us", "synced us", "GPU us"))


def test_a_sweep_the_gpu_never_catches_up_with_says_so():
    run = RunResult(Environment(), RunSettings(), tuple(r for r in _sweep_run().results if not r.case.endswith("4194304/cuda")))
    assert "does not hide it up to 65,536 elements" in device_report.text(run)


def test_cuda_figures_survive_the_json_and_are_named_there():
    run = _sweep_run()
    data = results.to_dict(run)
    row = next(r for r in data["results"] if r["case"] == "SubTensor@1/cuda")
    assert row["device"] == "cuda" and row["synced_per_call_ns"] > row["per_call_ns"] > row["gpu_per_call_ns"]
    back = results.from_dict(json.loads(json.dumps(data)))
    assert device_report.text(back) == device_report.text(run)


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_the_sweep_picture_is_drawn_with_its_lines_and_where_the_gpu_hides_it(tmp_path, suffix):
    path = str(tmp_path / f"sweep{suffix}")
    said = device_report.plot(_sweep_run(), path)
    assert said == "1 case over 3 sizes" and os.path.getsize(path) > 10_000
    if suffix == ".svg":
        svg = open(path, encoding="utf-8").read()
        assert all(f'id="SubTensor-{line}"' in svg for line in ("host", "synced", "GPU", "plain tensors, synced"))
        assert 'id="SubTensor-hidden-from-4194304"' in svg


def test_counting_on_cuda_is_refused_and_points_to_meta():
    assert casenames.on_cuda("SubTensor@1/cuda") and casenames.on_cuda("Tensor@64x64/float16/cuda:1")
    assert not casenames.on_cuda("SubTensor@1/meta") and not casenames.on_cuda("units:pair")
    # your factory asked for a device, and its plain twin: counting them would start valgrind on CUDA
    assert casenames.on_cuda("scaled:pair256@cuda") and casenames.on_cuda("scaled:pair256@64x64/cuda:1@plain")
    assert not casenames.on_cuda("scaled:pair256@meta@plain")
    with pytest.raises(UsageError, match=r"--instructions counts instructions under valgrind, which cannot "
                                         r"run CUDA \(SubTensor@1/cuda\); count the same cases with --device meta"):
        casenames.refuse_counting_on_cuda(["Tensor", "SubTensor@1/cuda"], "--instructions")


@pytest.mark.parametrize("args, said", [
    (["--plot", "sweep.pdf"], "--plot sweep.pdf: name a .png or .svg file"),
    (["--plot", "sweep.png"], "--plot sweep.png draws a size sweep on CUDA; add --device cuda"),
])
def test_plot_is_refused_in_one_line_before_anything_runs(args, said):
    done = run_tool("bench.py", *args, timeout=60)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) == 1


@needs_cuda
def test_bench_on_cuda_times_the_host_the_synced_cost_and_the_gpu_over_a_sweep(tmp_path):
    out, picture = tmp_path / "run.json", tmp_path / "sweep.png"
    done = run_tool("bench.py", "--device", "cuda", "--cases", "Tensor", "SubTensor", "--shape",
                    *map(str, (1, 16_777_216)), "--min-time", "0.5", "-q", "--plot", str(picture),
                    "--json", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    small, big = rows["SubTensor@1/cuda"], rows["SubTensor@16777216/cuda"]
    assert small["device"] == "cuda" and small["calls_per_sample"] <= 200
    # a 16M-element add takes the GPU tens of microseconds; a 1-element one next to nothing
    assert big["gpu_per_call_ns"] > 5 * small["gpu_per_call_ns"]
    assert big["synced_per_call_ns"] > big["per_call_ns"]  # the GPU, not the host, sets the pace there
    assert rows["SubTensor@1/cuda"]["overhead_ns"] > 1_000  # the subclass's host cost, microseconds
    assert "host us" in done.stdout and "SubTensor [torch.add]: the host pays" in done.stdout
    assert picture.stat().st_size > 10_000


@needs_cuda
def test_comparisons_on_cuda_judge_the_host_and_catch_a_100ns_shim_only_where_it_runs(tmp_path, torch_python):
    from overrides.ab import shimenv

    same = run_tool("bench.py", "--compare", torch_python, torch_python, "--device", "cuda", "--cases", "Tensor",
                    "SubTensor", "--json", str(tmp_path / "aa.json"), timeout=600)
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-2000:]
    aa = json.loads((tmp_path / "aa.json").read_text())
    assert all(c["verdict"] in ("no change", "inconclusive") for c in aa["comparisons"])
    assert "valgrind cannot run" in aa["settings"]["instructions_skipped"]
    shim = shimenv.make_shim_env(torch_python, str(tmp_path / "shim"), "sleep100ns").python
    done = run_tool("bench.py", "--compare", torch_python, shim, "--device", "cuda", "--cases", "Tensor", "SubTensor",
                    "--json", str(tmp_path / "shim.json"), timeout=600)
    verdicts = {c["case"]: c["verdict"] for c in json.loads((tmp_path / "shim.json").read_text())["comparisons"]}
    assert verdicts["SubTensor@1/cuda"] == "regression", done.stdout[-3000:]
    assert verdicts["Tensor@1/cuda"] in ("no change", "inconclusive")
    assert sys.executable  # the parent needs no torch of its own: the sides are the virtualenvs
