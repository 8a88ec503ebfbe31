"""Faults of record.sh and report.sh, made for real: py-spy killed with SIGKILL (as the
out-of-memory killer sends) while it records, a copy of the build that meets a full disk, and
outputs written to a full or read-only file system (a small tmpfs mounted for the test).

Each says so in one line, with no traceback, and keeps what finished: py-spy killed is exit 3
(incomplete) naming what died and how; a full or unwritable place is exit 2 naming the path,
what was being written and the fix. Nothing half-written stays, and a label whose recording
stopped is never listed as usable. Mounting needs root: where it is refused, those tests are
skipped saying so."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import zipfile

import pytest

from conftest import ROOT
from overrides import children
from overrides.review.runs import listing

# Generous: the machine is shared with heavy jobs; these bound a hang, they time nothing.
SCRIPT_TIMEOUT_S = 600
FIND_TIMEOUT_S = 300
# Seconds py-spy records a case for: long enough that it is surely still recording when it is
# killed, however slow the machine (the kill ends the recording, so this is not waited for).
LONG_RECORDING_S = "30"


@contextlib.contextmanager
def tmpfs(path, options: str):
    """A tmpfs mounted at `path` for the test (skipped where mounting is refused)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot mount a tmpfs to make the fault ({exc}); run the tests as root")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to make the fault ({done.stderr.strip() or 'refused'}); "
                    "run the tests as root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)


def room_for_a_copy() -> str:
    """A tmpfs size with room for this interpreter's torch copy and keep.py's margin, so that
    the copy starts (the CPU wheel is ~0.3 GB, a CUDA wheel's torch ~1.1 GB)."""
    import importlib.util

    from overrides.builds import keep

    torch_dir = importlib.util.find_spec("torch").submodule_search_locations[0]
    needed = sum(keep.tree_bytes(path) for path in keep.packages_of(torch_dir))
    return f"size={(needed + keep.DISK_MARGIN_BYTES) // 2**20 + 512}m"


def _argv(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as src:
            return [part.decode(errors="replace") for part in src.read().split(b"\0") if part]
    except OSError:
        return []


class Running:
    """A script run as a user runs it, its stderr lines gathered as they come."""

    def __init__(self, name: str, *args: str):
        self.process = subprocess.Popen(["bash", f"scripts/{name}", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reading = threading.Thread(target=self._gather, daemon=True)
        self.reading.start()

    def _gather(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def kill_pyspy(self) -> list[str]:
        """SIGKILL the first py-spy process found among the script's descendants, once one
        records; returns its command line."""
        deadline = time.monotonic() + FIND_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            for pid in children.descendants(self.process.pid):
                argv = _argv(pid)
                if argv and os.path.basename(argv[0]) == "py-spy" and "record" in argv:
                    os.kill(pid, signal.SIGKILL)
                    return argv
            time.sleep(0.05)
        raise AssertionError("no py-spy process to kill:\n" + "\n".join(self.lines[-20:]))

    def finish(self) -> tuple[int, str, list[str]]:
        """(exit status, stdout, stderr lines)."""
        stdout = self.process.stdout.read()
        self.process.wait(timeout=SCRIPT_TIMEOUT_S)
        self.reading.join(timeout=60)
        return self.process.returncode, stdout, self.lines


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", f"scripts/{name}", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=SCRIPT_TIMEOUT_S)


def one_line(err: str) -> str:
    """The script's one error line: no traceback, nothing after it."""
    assert "Traceback" not in err, err[-3000:]
    last = err.strip().splitlines()[-1]
    return last


def no_leftovers(folder) -> list[str]:
    """What a stopped run left half-written in `folder`: `.partial` files and folders, temp files."""
    return [name for name in os.listdir(folder) if name.endswith(".partial") or name.startswith(".tmp-")]


# -- py-spy killed ------------------------------------------------------------------------------

@pytest.mark.slow
def test_record_sh_with_py_spy_killed_says_so_exits_3_and_keeps_the_bench_results(tmp_path):
    runs = tmp_path / "runs"
    run = Running("record.sh", "--label", "oom", "--python", sys.executable, "--seconds", LONG_RECORDING_S,
                  "--min-time", "0.1", "--runs-dir", str(runs), "Tensor")
    killed = run.kill_pyspy()
    code, stdout, lines = run.finish()
    assert code == 3, "\n".join(lines[-20:])
    assert lines[-1] == ("record.sh: incomplete: py-spy (recording Tensor) was killed by SIGKILL (out of "
                         f"memory?); what finished is kept in {runs / 'oom'} (`scripts/record.sh --list` says "
                         "what it misses); record it again with `scripts/record.sh --label oom --force`"), lines
    assert "Traceback" not in "\n".join(lines) and not stdout
    assert not any("alone" in line for line in lines)  # not retried case by case: not the case's fault
    assert not children.descendants(os.getpid()), "py-spy's loop (or py-spy) is left running"
    manifest = json.loads((runs / "oom" / "record.json").read_text())
    assert manifest["results"] == "oom.json" and (runs / "oom" / "oom.json").is_file()
    assert not manifest["complete"] and manifest["flamegraphs"] == {} and "stopped" in manifest
    assert not no_leftovers(runs / "oom") and not (runs / "oom" / "kept").exists()
    assert any(part.endswith(".folded.partial") for part in killed)  # the recording it was writing
    row = next(line for line in listing(str(runs)).splitlines() if line.startswith("oom "))
    assert "incomplete" in row
    assert ("oom: incomplete (stopped: py-spy (recording Tensor) was killed by SIGKILL (out of memory?)): "
            "missing flamegraphs (Tensor) and the kept copy") in listing(str(runs))


@pytest.mark.slow
def test_report_sh_with_py_spy_killed_writes_the_zip_without_that_flamegraph_and_exits_3(tmp_path):
    path = tmp_path / "report.zip"
    run = Running("report.sh", sys.executable, sys.executable, "-o", str(path), "--runs-dir",
                  str(tmp_path / "runs"), "--all", "--no-instructions", "--cases", "Tensor", "--pairs", "2",
                  "--pair-seconds", "0.3", "--seconds", "8")
    run.kill_pyspy()
    code, stdout, lines = run.finish()
    assert code == 3, "\n".join(lines[-20:])
    last = lines[-1]
    role = "base" if last.startswith("report.sh: incomplete: base:") else "branch"
    assert last == (f"report.sh: incomplete: {role}: py-spy (recording Tensor) was killed by SIGKILL (out of "
                    f"memory?); {path} was written without what that cost (its notes say which); run the "
                    "report again for it"), lines
    assert "Traceback" not in "\n".join(lines) and f"report written to {path}" in stdout
    with zipfile.ZipFile(path) as bundle:
        report = bundle.read("report.md").decode()
        names = bundle.namelist()
    assert f"No {role} flamegraph for Tensor: py-spy (recording Tensor) was killed by SIGKILL (out of memory?)." \
        in report
    other = "branch" if role == "base" else "base"
    assert f"{other}-tensor.svg" in names and f"{role}-tensor.svg" not in names  # what finished is in


# -- a full or read-only place ------------------------------------------------------------------

@pytest.mark.slow
def test_a_copy_of_the_build_that_meets_a_full_disk_is_removed_and_the_label_is_not_usable(tmp_path):
    """The disk has room for the copy and the 2 GB margin when it starts, and fills during it:
    here it runs out of inodes (a few dozen), as a disk full of small files does; a disk filled
    by another writer during the copy goes the same way (an ENOSPC from the copy)."""
    with tmpfs(tmp_path / "disk", room_for_a_copy() + ",nr_inodes=40") as disk:
        runs = disk / "runs"
        out = script("record.sh", "--label", "full", "--python", sys.executable, "--no-flamegraphs",
                     "--min-time", "0.1", "--runs-dir", str(runs), "Tensor")
        assert out.returncode == 2, out.stderr[-3000:]
        line = one_line(out.stderr)
        assert line.startswith(f"record.sh: error: cannot write the copy of the build {runs / 'full' / 'kept'}: "
                               "no space left on the device ("), line
        assert f"MB free in {runs / 'full'}); free some space there or write it to another path" in line
        assert "record it again with `scripts/record.sh --label full --force` (`--no-keep` keeps no copy" in line
        assert sorted(os.listdir(runs / "full")) == ["full.json", "full.txt", "record.json"]
        manifest = json.loads((runs / "full" / "record.json").read_text())
        assert not manifest["complete"] and manifest["kept"] == {"failed": "No space left on device"}
        said = listing(str(runs))
        row = next(line for line in said.splitlines() if line.startswith("full "))
        assert " incomplete " in row and " MB" not in row and " GB" not in row, said  # no copy listed
        assert "full: incomplete (stopped: the copy of the build failed (No space left on device)): missing " \
               "the kept copy" in said
        refused = script("report.sh", "full", sys.executable, "--runs-dir", str(runs), "-o",
                         str(tmp_path / "r.zip"))
        assert refused.returncode == 2 and "label 'full' is an incomplete recording (stopped: the copy of " \
            "the build failed" in one_line(refused.stderr)


@pytest.mark.slow
def test_record_sh_killed_during_the_copy_leaves_a_label_listed_incomplete_and_no_half_copy(tmp_path):
    with tmpfs(tmp_path / "disk", room_for_a_copy()) as disk:  # room for the copy and its margin
        runs = disk / "runs"
        run = Running("record.sh", "--label", "cut", "--python", sys.executable, "--no-flamegraphs",
                      "--min-time", "0.1", "--runs-dir", str(runs), "Tensor")
        partial = runs / "cut" / "kept.partial"
        deadline = time.monotonic() + FIND_TIMEOUT_S
        while not partial.is_dir() and run.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(run.process.pid, signal.SIGKILL)  # record.sh execs its Python: the copy itself
        code, _, lines = run.finish()
        assert code == -signal.SIGKILL and partial.is_dir(), "\n".join(lines[-20:])
        said = listing(str(runs))
        assert "cut: incomplete (interrupted): missing the kept copy; removed its half-written kept.partial" \
            in said, said
        assert sorted(os.listdir(runs / "cut")) == ["cut.json", "cut.txt", "record.json"]
        refused = script("report.sh", "cut", sys.executable, "--runs-dir", str(runs), "-o", str(tmp_path / "r.zip"))
        assert refused.returncode == 2 and "label 'cut' is an incomplete recording (interrupted; missing the " \
            "kept copy)" in one_line(refused.stderr)


@pytest.mark.slow
def test_py_spy_writing_to_a_full_disk_is_one_line_naming_the_path_and_the_fix(tmp_path):
    # room for record.json and bench.py's results of one case, not for py-spy's recording
    with tmpfs(tmp_path / "disk", "size=64k") as disk:
        runs = disk / "runs"
        out = script("record.sh", "--label", "full", "--python", sys.executable, "--seconds", "4",
                     "--min-time", "0.1", "--no-keep", "--runs-dir", str(runs), "Tensor")
        assert out.returncode == 2, out.stderr[-3000:]
        assert one_line(out.stderr).startswith(
            f"record.sh: error: cannot write py-spy's recording of Tensor {runs / 'full' / 'full-tensor.folded'}: "
            "no space left on the device (")
        assert f"MB free in {runs / 'full'}); free some space there or write it to another path; nothing " \
               "was left half-written" in out.stderr
        assert not no_leftovers(runs / "full")
        assert "stopped: cannot write py-spy's recording" in listing(str(runs))


def test_record_sh_into_a_read_only_place_is_one_line(tmp_path):
    with tmpfs(tmp_path / "ro", "size=64k,ro") as read_only:
        out = script("record.sh", "--label", "base", "--python", sys.executable, "--no-flamegraphs",
                     "--no-keep", "--runs-dir", str(read_only / "runs"), "Tensor")
    assert out.returncode == 2, out.stderr[-3000:]
    assert one_line(out.stderr) == (
        f"record.sh: error: cannot write the folder of label 'base' {read_only / 'runs' / 'base'}: the file "
        "system is read-only; write it to a folder you can write; nothing was left half-written (pass "
        "--runs-dir, or set $OVERRIDES_RUNS_DIR, for another place)")


def test_report_sh_into_a_read_only_place_is_refused_before_anything_is_measured(tmp_path):
    with tmpfs(tmp_path / "ro", "size=64k,ro") as read_only:
        zipped = script("report.sh", sys.executable, sys.executable, "-o", str(read_only / "report.zip"),
                        "--runs-dir", str(tmp_path / "runs"), "--no-flamegraphs", "--no-instructions",
                        "--cases", "Tensor")
        runs = script("report.sh", sys.executable, sys.executable, "-o", str(tmp_path / "report.zip"),
                      "--runs-dir", str(read_only / "runs"), "--no-flamegraphs", "--no-instructions",
                      "--cases", "Tensor")
    assert zipped.returncode == 2 and one_line(zipped.stderr) == (
        f"report.sh: error: cannot write the report {read_only / 'report.zip'}: the file system is read-only; "
        "write it to a folder you can write; nothing was left half-written")
    assert runs.returncode == 2 and one_line(runs.stderr) == (
        f"report.sh: error: cannot write base's measured run {read_only / 'runs' / 'base'}: the file system "
        "is read-only; write it to a folder you can write; nothing was left half-written (pass --runs-dir, "
        "or set $OVERRIDES_RUNS_DIR, for another place)")
    for out in (zipped, runs):
        assert "pair" not in out.stderr  # refused before the comparison started
    assert not (tmp_path / "runs").exists() and not (tmp_path / "report.zip").exists()


@pytest.mark.slow
def test_report_sh_whose_zip_meets_a_full_disk_says_so_and_keeps_the_measured_runs(tmp_path):
    with tmpfs(tmp_path / "disk", "size=4k") as disk:
        out = script("report.sh", sys.executable, sys.executable, "-o", str(disk / "report.zip"),
                     "--runs-dir", str(tmp_path / "runs"), "--no-flamegraphs", "--no-instructions",
                     "--cases", "Tensor", "--pairs", "2", "--pair-seconds", "0.3")
        assert out.returncode == 2, out.stderr[-3000:]
        assert one_line(out.stderr).startswith(
            f"report.sh: error: cannot write the report {disk / 'report.zip'}: no space left on the device (")
        assert os.listdir(disk) == []  # nothing half-written
    assert (tmp_path / "runs" / "base" / "base.json").is_file()  # the measured runs stay


def _wait_traced(pid: int, timeout: float = 120.0) -> None:
    """Until py-spy (--native) has attached to `pid` (its TracerPid set), then a moment of
    sampling: on a loaded machine attaching took longer than the second once waited."""
    deadline = time.monotonic() + timeout
    from overrides.flame.watch import traced_now

    while time.monotonic() < deadline and not traced_now(pid):
        time.sleep(0.05)
    time.sleep(0.5)


@pytest.mark.slow
def test_record_sh_whose_traced_loop_dies_says_so_and_records_each_case_alone(tmp_path):
    """The loop py-spy traces killed (a crash in the case's code, the out-of-memory killer):
    py-spy records on and exits 0, so the loop's own word that it finished is what tells. The
    recording of the cases together fails saying so, and each case is recorded alone."""
    runs = tmp_path / "runs"
    run = Running("record.sh", "--label", "crash", "--python", sys.executable, "--seconds", "3",
                  "--min-time", "0.1", "--runs-dir", str(runs), "Tensor", "SubTensor")
    deadline = time.monotonic() + FIND_TIMEOUT_S
    killed = None
    while killed is None and time.monotonic() < deadline and run.process.poll() is None:
        for pid in children.descendants(run.process.pid):
            argv = _argv(pid)
            parent = _argv(int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])) if argv else []
            if argv and argv[1:2] and argv[1].endswith("pyspybench.py") and parent and \
                    os.path.basename(parent[0]) == "py-spy":
                _wait_traced(pid)  # py-spy attached and sampling (killed before, it fails to attach)
                os.kill(pid, signal.SIGKILL)
                killed = argv
                break
        time.sleep(0.05)
    assert killed, "\n".join(run.lines[-20:])
    code, _, lines = run.finish()
    assert code == 0, "\n".join(lines[-20:])
    said = "\n".join(lines)
    assert ("recording Tensor, SubTensor in one process failed (the hot loop py-spy was recording (Tensor, SubTensor"
            in said and "before it finished); each case alone" in said), said
    # how it ended, where py-spy left the loop for this side to reap; in general words where not
    assert "was killed by SIGKILL (out of memory?) before" in said or "ended (killed or crashed) before" in said
    manifest = json.loads((runs / "crash" / "record.json").read_text())
    assert set(manifest["flamegraphs"]) == {"Tensor", "SubTensor"}
