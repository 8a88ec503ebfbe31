"""What a newcomer met with record.sh and report.sh (issue 22): nothing recorded is lost or
overwritten without a word, nothing half-done passes for done, and Ctrl-C stops at once.

Most tests call the library on a hand-made runs/ folder with a real record.json; the few that
need the scripts use the smallest settings they offer (one case, short recordings)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading

import pytest

from conftest import ROOT

# Generous: the machine is shared with heavy jobs; these bound a hang, they time nothing.
SCRIPT_TIMEOUT_S = 300


def _session_processes(session: int) -> list[str]:
    """Processes still running (zombies aside) in the session a script was started in."""
    listed = subprocess.run(["ps", "-s", str(session), "-o", "stat=,args="], capture_output=True,
                            text=True).stdout
    return [line for line in listed.splitlines() if line.strip() and not line.lstrip().startswith("Z")]


def interrupt(script: str, args, wait_for: str, target: str) -> tuple[int, list[str], list[str]]:
    """Start scripts/SCRIPT in a session of its own, as a terminal would, send SIGINT to its
    process (`target` "top") or its whole process group ("group", a terminal's Ctrl-C) a moment
    after a progress line matches `wait_for`; returns (exit status, the stderr lines after the
    SIGINT, processes of its session left running)."""
    process = subprocess.Popen(["bash", f"scripts/{script}", *args], cwd=ROOT, text=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    watchdog = threading.Timer(SCRIPT_TIMEOUT_S, lambda: os.killpg(process.pid, signal.SIGKILL))
    watchdog.start()
    try:
        before = []
        for line in process.stderr:
            before.append(line)
            if re.search(wait_for, line):
                break
        else:
            pytest.fail(f"{script} ended before {wait_for!r}: {''.join(before)}")
        threading.Event().wait(2)  # the children it starts there are running by now
        if target == "group":
            os.killpg(process.pid, signal.SIGINT)
        else:
            os.kill(process.pid, signal.SIGINT)
        after = process.stderr.read().splitlines()
        status = process.wait()
    finally:
        watchdog.cancel()
    threading.Event().wait(0.5)  # killed children are reaped by then
    return status, after, _session_processes(process.pid)


@pytest.mark.skipif(not shutil.which("valgrind"), reason="needs valgrind")
def test_ctrl_c_stops_report_sh_while_valgrind_counts(tmp_path):
    """SIGINT to report.sh's own process while valgrind counts: the counts were waited for
    (~100 s, and queued seeds started); now they are killed and one line says so."""
    output = tmp_path / "report.zip"
    status, after, left = interrupt(
        "report.sh", [sys.executable, sys.executable, "-o", str(output), "--runs-dir",
                      str(tmp_path / "runs"), "--cases", "Tensor"],
        "counting instructions first", "top")
    assert status == 130, after
    assert after == ["report.sh: interrupted; no ZIP written (runs/ keeps what was recorded)"]
    assert not output.exists()
    assert not left, left


@pytest.mark.parametrize("target", ["top", "group"])
def test_ctrl_c_stops_record_sh_while_py_spy_records(tmp_path, target):
    """Ctrl-C while py-spy records: py-spy and the loop it traces stop at once (the loop ran on
    for its --seconds), and no half profile stays behind."""
    runs = tmp_path / "runs"
    status, after, left = interrupt(
        "record.sh", ["--label", "half", "--python", sys.executable, "--seconds", "30",
                      "--min-time", "0.1", "--no-keep", "--runs-dir", str(runs), "Tensor"],
        "py-spy on Tensor", target)
    assert status == 130, after
    assert after == ["record.sh: interrupted; what finished is kept and listed in record.json"]
    assert not left, left
    assert not [name for name in os.listdir(runs / "half") if name.endswith(".partial")]
