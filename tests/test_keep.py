"""Kept builds: record.sh keeps a copy of the torch it measured, report.sh runs it paired.

The copies are of the real torch this interpreter has (~0.7 GB, a few seconds each); the
"develop build" is that torch copied into a folder and imported through PYTHONPATH."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import ROOT
from overrides.builds import keep
from overrides.review import record
from overrides.review.runs import load_label, recorded_labels


def script(name, *args, env=None, timeout=600):
    return subprocess.run(["bash", f"scripts/{name}", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env or dict(os.environ))


def _installed_torch() -> str:
    import torch

    return os.path.dirname(torch.__file__)


def test_a_kept_copy_is_new_files_that_a_rebuild_cannot_touch(tmp_path):
    source = tmp_path / "checkout"
    (source / "torch" / "lib").mkdir(parents=True)
    (source / "torch" / "__init__.py").write_text("")
    library = source / "torch" / "lib" / "libtorch_cpu.so"
    library.write_bytes(b"old build" * 100)
    outside = tmp_path / "build" / "libc10.so"  # a develop build may link into its build tree
    outside.parent.mkdir()
    outside.write_bytes(b"old c10")
    (source / "torch" / "lib" / "libc10.so").symlink_to(outside)
    (source / "torchgen").mkdir()
    (source / "torchgen" / "__init__.py").write_text("")
    (source / "third_party").mkdir()  # not a package of the build: not kept

    kept = keep.keep(str(source / "torch"), str(tmp_path / "runs" / "base"))

    root = tmp_path / "runs" / "base" / "kept"
    assert kept.root == str(root) and kept.packages == ("torch", "torchgen")
    copied = root / "torch" / "lib" / "libtorch_cpu.so"
    assert os.stat(copied).st_ino != os.stat(library).st_ino and os.stat(copied).st_nlink == 1
    assert not os.path.islink(root / "torch" / "lib" / "libc10.so")
    assert not (root / "third_party").exists() and not (tmp_path / "runs" / "base" / "kept.partial").exists()
    with open(library, "r+b") as rebuilt:  # a rebuild rewriting files in place
        rebuilt.write(b"new build")
    outside.write_bytes(b"new c10")
    assert copied.read_bytes() == b"old build" * 100
    assert (root / "torch" / "lib" / "libc10.so").read_bytes() == b"old c10"
    assert kept.bytes == len(b"old build") * 100 + len(b"old c10")


def test_a_disk_too_short_for_the_copy_costs_a_warning_not_the_recording(tmp_path, monkeypatch):
    monkeypatch.setattr(keep, "DISK_MARGIN_BYTES", shutil.disk_usage(tmp_path).free + 1)
    said = []
    recorder = record.Recorder(str(tmp_path), "base", sys.executable, ["Tensor"], None, said.append)
    recorder.keep(_installed_torch())
    manifest = json.loads((tmp_path / "base" / "record.json").read_text())
    assert "keeping a copy of torch needs" in manifest["kept"]["skipped"]
    assert any("warning:" in line and "--clean" in line for line in said)
    assert not (tmp_path / "base" / "kept").exists()
    run = load_label(str(tmp_path), "base")
    assert run.kept_root is None and "no copy was kept" in run.why_not_kept()


def _link_unless_rebuilt(source: str, target: str) -> None:
    """A hard link of the installed file (quick, no 0.7 GB written), except a version.py, which
    the "rebuild" below rewrites in place: that one a copy, so the installed torch is never
    touched. Nothing else in the checkout is written to; record.sh's kept copy is new files."""
    if os.path.basename(source) != "version.py":
        try:
            os.link(source, target)
            return
        except OSError:  # another file system: copies
            pass
    shutil.copy2(source, target)


@pytest.fixture(scope="module")
def develop(tmp_path_factory):
    """A develop build: this interpreter's torch copied into a folder first on PYTHONPATH, and
    `base` recorded from it (kept by default)."""
    folder = tmp_path_factory.mktemp("develop")
    checkout = folder / "checkout"
    shutil.copytree(_installed_torch(), checkout / "torch", symlinks=True, copy_function=_link_unless_rebuilt)
    env = dict(os.environ, PYTHONPATH=str(checkout))
    runs = folder / "runs"
    out = script("record.sh", "--label", "base", "--python", sys.executable, "--no-flamegraphs",
                 "--min-time", "0.2", "--runs-dir", str(runs), "Tensor", "SubTensor", env=env)
    assert out.returncode == 0, out.stderr
    return checkout, runs, env, out


def test_record_keeps_the_build_it_measured_and_says_how_big(develop):
    checkout, runs, _, out = develop
    manifest = json.loads((runs / "base" / "record.json").read_text())
    kept = manifest["kept"]
    assert kept["root"] == "kept" and kept["source"] == str(checkout / "torch")
    assert kept["bytes"] > 100 * 2**20 and kept["seconds"] >= 0
    assert (runs / "base" / "kept" / "torch" / "version.py").read_text() == \
        (checkout / "torch" / "version.py").read_text()
    # the size in MB or, for a CUDA wheel's ~4 GB, in GB
    assert "kept a copy of the build (torch:" in out.stdout
    assert re.search(r"[0-9.,]+ (MB|GB), copied in", out.stdout), out.stdout
    assert "--clean base" in out.stdout


def test_report_runs_the_kept_copy_beside_the_rebuilt_branch(develop, tmp_path):
    checkout, runs, env, _ = develop
    version = checkout / "torch" / "version.py"
    original = version.read_text()
    # The "rebuild": the checkout's torch now calls itself something else.
    version.write_text(original.replace("__version__ = '", "__version__ = 'rebuilt-"))
    try:
        path = tmp_path / "report.zip"
        out = script("report.sh", "base", sys.executable, "-o", str(path), "--runs-dir", str(runs),
                     "--cases", "Tensor", "SubTensor", "--pairs", "2", "--pair-seconds", "0.3",
                     "--no-instructions", "--no-flamegraphs", env=env)
    finally:
        version.write_text(original)
    assert out.returncode in (0, 1), out.stderr
    with zipfile.ZipFile(path) as bundle:
        markdown = bundle.read("report.md").decode()
        base = json.loads(bundle.read("base.json"))
        branch = json.loads(bundle.read("branch.json"))
    assert base["settings"]["mode"] == "paired A/B"
    assert base["environment"]["torch_version"].startswith("2.")
    assert branch["environment"]["torch_version"].startswith("rebuilt-")
    assert base["settings"]["torch_roots"]["base"] == str(runs / "base" / "kept")
    assert base["settings"]["placement"]["matched"], base["settings"]["placement"]
    assert "Paired from kept builds: base ran label `base`'s copy" in markdown
    assert "UNPAIRED" not in markdown and "run from its kept copy" in markdown
    assert json.loads((runs / "base" / "record.json").read_text())["kept"]["root"] == "kept"


def test_a_kept_copy_that_no_longer_runs_falls_back_to_unpaired_and_says_why(develop, tmp_path):
    _, runs, env, _ = develop
    shutil.copytree(runs / "base", runs / "gone", ignore=shutil.ignore_patterns("kept"))
    os.symlink(runs / "base" / "kept", runs / "gone" / "kept")
    manifest_path = runs / "gone" / "record.json"
    manifest = json.loads(manifest_path.read_text())
    manifest.update(label="gone", python=str(tmp_path / "uninstalled" / "python"))
    manifest_path.write_text(json.dumps(manifest))
    os.rename(runs / "gone" / "base.json", runs / "gone" / "gone.json")
    try:
        path = tmp_path / "report.zip"
        out = script("report.sh", "gone", "base", "-o", str(path), "--runs-dir", str(runs),
                     "--no-flamegraphs", env=env)
    finally:
        shutil.rmtree(runs / "gone")
    assert out.returncode in (0, 1), out.stderr
    markdown = zipfile.ZipFile(path).read("report.md").decode()
    assert "UNPAIRED" in markdown
    assert "Not paired: label `gone`'s kept copy does not run: no interpreter at" in markdown


def test_list_and_clean_kept_copies(develop):
    _, runs, env, _ = develop
    shutil.copytree(runs / "base", runs / "other", ignore=shutil.ignore_patterns("kept"))
    (runs / "other" / "kept" / "torch").mkdir(parents=True)  # the manifest says how big it was
    (runs / "other" / "kept" / "torch" / "__init__.py").write_text("")
    manifest = json.loads((runs / "other" / "record.json").read_text())
    (runs / "other" / "record.json").write_text(json.dumps(dict(manifest, label="other")))
    listed = script("record.sh", "--list", "--runs-dir", str(runs), env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["label", "recorded", "torch", "kept", "copy", "interpreter"]
    assert any(line.startswith("other ") and re.search(r" [0-9.,]+ (MB|GB) ", line) for line in lines), lines
    assert lines[-1].startswith(f"{len(recorded_labels(str(runs)))} label(s) in {runs}; kept copies: ")

    cleaned = script("record.sh", "--clean", "other", "--runs-dir", str(runs), env=env)
    assert cleaned.returncode == 0, cleaned.stderr
    assert cleaned.stdout.startswith("other: deleted its kept copy, ")
    assert not (runs / "other" / "kept").exists() and (runs / "base" / "kept").exists()
    assert "deleted" in json.loads((runs / "other" / "record.json").read_text())["kept"]
    assert load_label(str(runs), "other").why_not_kept().startswith("its copy was deleted")
    again = script("record.sh", "--list", "--runs-dir", str(runs), env=env)
    assert any(line.startswith("other ") and " deleted " in line for line in again.stdout.splitlines())

    for args, message in ((("--clean", "nosuch"), "no recorded label 'nosuch'"),
                          (("--list", "--label", "x"), "--list and --clean take no --label"),
                          ((), "--label is required")):
        bad = script("record.sh", *args, "--runs-dir", str(runs), env=env)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
    shutil.rmtree(runs / "other")
