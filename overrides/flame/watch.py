"""`pyspybench.py --record`'s watch over the loop py-spy traces, from the process that waits
for py-spy: when py-spy samples at pace (the loop's TracerPid), whether the loop said it
finished (a pipe), and how it ended once py-spy is gone (this process reaps the orphaned loop).
Apart from hotloop.py, which runs the loops, so that each stays one screen.
"""

from __future__ import annotations

import os
import time

# py-spy --native starts slowly: it is attached for most of its first 0.5-1.5 s (longest on a
# loaded machine), reading each library's unwind tables, and takes few samples meanwhile; the
# first case recorded got 152 samples in 3 s against the second's 393 beside five CPU-bound
# processes. So the first case's clock starts once py-spy is at pace: while the loop runs, the
# process that started py-spy reads the loop's TracerPid every PACE_POLL_S; py-spy is at pace
# once, over the last PACE_WINDOW reads after its first attach, the loop was traced in fewer
# than PACE_TRACED_SHARE of them (86-92% while it starts; 15-40% after, quiet, ~50% loaded).
PACE_POLL_S = 0.002
PACE_WINDOW = 100  # reads: ~0.25 s
PACE_TRACED_SHARE = 0.75
PACE_MAX_S = 10.0  # never waited longer: the first case's clock then starts all the same
# prctl(PR_SET_CHILD_SUBREAPER): an orphaned descendant is reparented to this process, not init.
PR_SET_CHILD_SUBREAPER = 36


def adopt_orphans() -> None:
    """Become the reaper of this process's orphaned descendants (Linux), so that the loop py-spy
    traces, whose parent py-spy is, can be asked how it ended once py-spy has exited."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: a loop that dies is then seen as missing samples only


def await_pace(recorder: int) -> None:
    """Until py-spy, `recorder`, samples the loop (its child) at pace: after its first attach,
    the loop traced in fewer than PACE_TRACED_SHARE of the last PACE_WINDOW reads of its
    TracerPid; or PACE_MAX_S, or py-spy or the loop gone."""
    from collections import deque

    from overrides import children

    deadline = time.monotonic() + PACE_MAX_S
    loop: int | None = None
    traced: deque[bool] = deque(maxlen=PACE_WINDOW)
    while time.monotonic() < deadline:
        if loop is None:
            found = children.descendants(recorder)
            loop = found[0] if found else None
        if loop is not None:
            now = traced_now(loop)
            if now is None:  # the loop is gone
                return
            if now or traced:  # counted from the first attach
                traced.append(now)
            if len(traced) == PACE_WINDOW and sum(traced) < PACE_TRACED_SHARE * PACE_WINDOW:
                return
        if os.waitid(os.P_PID, recorder, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            return  # py-spy ended (left for _title_when_done to reap)
        time.sleep(PACE_POLL_S)


def traced_now(pid: int) -> bool | None:
    """Whether a tracer holds `pid` now (its TracerPid); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("TracerPid:"):
                    return line.split()[1] != "0"
    except (OSError, IndexError):
        return None
    return None


# How long the loop's word may lag py-spy's exit. A killed process stops being readable (py-spy
# sees it gone and exits 0) before the kernel closes its files, the pipe's end among them: read
# at once, the pipe of a loop killed mid-case still looked open under load, and the run read
# "py-spy took no sample" for the case the loop never reached instead of saying it was killed.
LOOP_WORD_WAIT_S = 5.0


def said_finished(finished: int) -> bool | None:
    """Whether the loop said it finished (False: it died without saying so); None while it still
    runs after py-spy, whose duration covers the loop and a margin, has ended: it is stuck."""
    import select

    readable, _, _ = select.select([finished], [], [], LOOP_WORD_WAIT_S)
    if not readable:
        return None
    return os.read(finished, 1) == b"1"


def reaped_loop() -> int:
    """How the traced loop ended, as a return code (-N for signal N), where it has ended and
    was handed to this process; 0 where it finished, is still running or is not ours to ask."""
    try:
        pid, status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return 0
    return os.waitstatus_to_exitcode(status) if pid else 0
