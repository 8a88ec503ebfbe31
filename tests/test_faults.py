"""Faults, made for real: a timing worker or a valgrind process killed with SIGKILL (as the
out-of-memory killer sends) while it runs. Each costs its own pair or seed, retried with a fresh
process; past the retries the run ends with what finished kept and written, exit 3, and a line
naming the side, the interpreter as the user named it, what it was doing and the signal."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT
from overrides import children

BENCH = os.path.join(ROOT, "bench.py")


def _read(pid: int, what: str) -> str:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as src:
            return src.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Watched:
    """A bench.py command whose stderr lines are gathered as they come."""

    def __init__(self, *args: str, cwd: str):
        self.process = subprocess.Popen([sys.executable, BENCH, *args], cwd=cwd, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.stdout = ""
        self.killed: set[int] = set()
        self.reading = threading.Thread(target=self._gather, daemon=True)
        self.reading.start()

    def _gather(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, after: int = 0, timeout: float = 300) -> int:
        """The index of the first stderr line from `after` on that holds `text`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in range(after, len(self.lines)):
                if text in self.lines[i]:
                    return i
            if self.process.poll() is not None and not self.reading.is_alive():
                break  # every line is in: it is not coming
            time.sleep(0.1)
        raise AssertionError(f"no {text!r} on stderr:\n" + "\n".join(self.lines[-20:]))

    def kill_one(self, command_part: str, environment_part: str = "") -> int:
        """SIGKILL one living descendant, not killed before, whose command line (and
        environment) hold these."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for pid in children.descendants(self.process.pid):
                if pid not in self.killed and command_part in _read(pid, "cmdline") \
                        and environment_part in _read(pid, "environ") and ") Z" not in _read(pid, "stat"):
                    os.kill(pid, signal.SIGKILL)
                    self.killed.add(pid)
                    return pid
            time.sleep(0.05)
        raise AssertionError(f"no process running {command_part!r} to kill")

    def finish(self, timeout: float = 900) -> int:
        self.stdout = self.process.stdout.read()
        self.process.wait(timeout=timeout)
        self.reading.join(timeout=10)
        return self.process.returncode

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


@pytest.mark.slow
def test_a_worker_killed_mid_pair_costs_its_pair_which_is_run_again(tmp_path):
    run = Watched("--compare", sys.executable, sys.executable, "--no-instructions", "--cases", "Tensor",
                  "--pairs", "3", "--pair-seconds", "4", "--json", "ab.json", cwd=str(tmp_path))
    run.wait_for("pair 2/3: sampling")
    run.kill_one("overrides/entry.py time")
    code = run.finish()
    assert code in (0, 1), run.stderr[-3000:]
    said = run.wait_for("was killed by SIGKILL (out of memory?) while timing Tensor [torch.add]", timeout=1)
    assert "retry 1 of 2" in run.lines[said] and sys.executable in run.lines[said]
    assert "overrides-same-path" not in run.lines[said]  # the interpreter as the user named it
    settings = json.loads((tmp_path / "ab.json").read_text())["settings"]
    assert settings["pairs"] == 3 and len(settings["workers_died"]) == 1 and "incomplete" not in settings
    assert "retried: 1 worker died" in run.stdout


@pytest.mark.slow
def test_workers_dying_past_the_retries_end_the_comparison_with_what_finished_kept(tmp_path):
    run = Watched("--compare", sys.executable, sys.executable, "--no-instructions", "--cases", "Tensor",
                  "--pairs", "5", "--pair-seconds", "4", "--json", "ab.json", cwd=str(tmp_path))
    at = run.wait_for("pair 2/5: sampling")
    for _ in range(3):  # the pair and both of its retries
        run.kill_one("overrides/entry.py time")
        at = run.wait_for("was killed by SIGKILL", after=at + 1) + 1
        if "retry" in run.lines[at - 1]:
            at = run.wait_for("sampling", after=at)
    code = run.finish()
    assert code == 3, run.stderr[-3000:]
    last = run.lines[run.wait_for("bench.py: incomplete:", timeout=1)]
    assert "was killed by SIGKILL (out of memory?)" in last and "what finished is in ab.json" in last
    payload = json.loads((tmp_path / "ab.json").read_text())
    assert payload["settings"]["pairs"] == 1 and "3 workers died" in payload["settings"]["incomplete"]
    assert "incomplete:" in run.stdout and "(incomplete)" in run.stdout


@pytest.mark.slow
def test_a_valgrind_process_killed_mid_count_is_counted_again_and_past_its_retries_costs_its_seed(tmp_path):
    # seed 1: killed each time it starts (three times: the process and both retries), while it
    # imports torch; seed 2: killed once, once it has imported torch, then counted again
    run = Watched("--instructions", "--seeds", "1", "2", "--cases", "Tensor", "--json", "counts.json",
                  cwd=str(tmp_path))
    at = 0
    for attempt in range(3):
        run.kill_one("--tool=callgrind", "PYTHONHASHSEED=1 ")
        at = run.wait_for(f"callgrind seed 1: the counting process for seed 1 ({sys.executable}) was killed by "
                          "SIGKILL (out of memory?) while importing torch", after=at) + 1
    run.wait_for("callgrind seed 2: imports done")
    run.kill_one("--tool=callgrind", "PYTHONHASHSEED=2 ")
    code = run.finish()
    assert code == 3, run.stderr[-3000:]
    retried = run.lines[run.wait_for("callgrind seed 2: the counting process", timeout=1)]
    assert "was killed by SIGKILL" in retried and "retry 1 of 2" in retried
    assert f"bench.py: incomplete: seed 1: the counting process for seed 1 ({sys.executable}) was killed by " \
           "SIGKILL (out of memory?) while importing torch, 3 times; what finished is in counts.json" in run.stderr
    counts = json.loads((tmp_path / "counts.json").read_text())["instructions"]
    by_seed = {r["seed"]: r for r in counts["runs"]}
    assert by_seed[1]["died"] and by_seed[1]["cases"][0]["error"]
    assert by_seed[2]["cases"][0]["instructions_per_call"] > 1000  # the seed that stood
    assert "incomplete: seed 1:" in run.stdout


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MB tmpfs, full but for what is asked (`fill`): a disk with no room, made for real."""
    folder = tmp_path / "small"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here ({mounted.stderr.strip()}); run as root to test a full disk")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(folder) -> None:
    with open(folder / "filler", "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass


def test_no_room_for_json_is_one_line_after_the_table_and_nothing_half_written(small_disk, tmp_path):
    _fill(small_disk)
    done = subprocess.run([sys.executable, BENCH, "--cases", "Tensor", "-n", "50", "-m", "3",
                           "--json", str(small_disk / "results.json")], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Tensor" in done.stdout  # what was measured is shown before the file is tried
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"bench.py: error: cannot write --json {small_disk / 'results.json'}: no space left "
                           "on the device (0.0 MB free in") and "write it to another path" in last
    assert "Traceback" not in done.stderr and sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_no_room_in_tmpdir_for_callgrinds_profiles_is_said_before_counting(small_disk, tmp_path):
    done = subprocess.run([sys.executable, BENCH, "--instructions", "--cases", "Tensor", "SubTensor"],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TMPDIR=str(small_disk)))
    assert done.returncode == 2, done.stderr
    assert f"bench.py: error: TMPDIR {small_disk} has 1.0 MB free; Callgrind's profiles of this run need about" \
           in done.stderr and "set TMPDIR to a folder with room" in done.stderr


@pytest.mark.slow
def test_counting_works_with_a_tmpdir_of_the_users(tmp_path):
    """valgrind and callgrind_control meet in the caller's TMPDIR; the worker's own environment
    has none, and callgrind_control used to find no process to switch on."""
    (tmp_path / "tmp").mkdir()
    done = subprocess.run([sys.executable, BENCH, "--instructions", "--cases", "Tensor", "-q"], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TMPDIR=str(tmp_path / "tmp")))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Tensor" in done.stdout
