"""Child processes that Ctrl-C stops at once: valgrind (`counts/valgrind.py`) and py-spy
(`flame/flamegraph.py`);
and how any child ended, in words (`ended`); how many this process may run at once
(`usable_cpus`).

Why it exists. report.sh went on for a long while after Ctrl-C to its own process (figures:
benchmarks/history.md, 'Docstring figures'): the valgrind workers were waited for by threads,
and a thread pool's exit waits for its threads, which waited for valgrind to finish counting
(and the pool then started the seeds still queued).
With Ctrl-C sent to the whole process group, py-spy wrote a partial recording and its traced
loop ran on. So every such child is started here, in a process group of its own (py-spy's
loop, forked from the process that becomes py-spy, is in the same group), and registered;
`parallel` runs work on threads and, when the calling thread is interrupted, kills every
registered group before it waits for the threads, which then find their child gone and
return. Nothing is left running, and the process stopping is the only one deciding how: the
children never see the terminal's Ctrl-C themselves (a py-spy that sees it writes half a
profile).
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import threading
from typing import Callable, Iterable, TypeVar

_LOCK = threading.Lock()
_LIVE: set[subprocess.Popen] = set()
_stopping = False  # set while parallel() kills: a thread must not start another child then

# How a child ended, said as a user would look it up; the out-of-memory killer sends SIGKILL,
# so that is the likely cause when nobody here killed it.
_SIGNAL_WORDS = {signal.SIGKILL: "was killed by SIGKILL (out of memory?)",
                 signal.SIGSEGV: "crashed with a segmentation fault (SIGSEGV)",
                 signal.SIGABRT: "aborted (SIGABRT)",
                 signal.SIGBUS: "crashed with a bus error (SIGBUS: a file it mapped shrank, or no space?)",
                 signal.SIGILL: "crashed on an illegal instruction (SIGILL: built for another CPU?)",
                 signal.SIGFPE: "crashed with an arithmetic fault (SIGFPE)",
                 signal.SIGTERM: "was terminated (SIGTERM)"}

Item = TypeVar("Item")
Result = TypeVar("Result")


def start(command: list[str], **popen_kwargs) -> subprocess.Popen:
    """subprocess.Popen in a process group of its own, registered until `reap`. Raises
    KeyboardInterrupt instead while an interrupted `parallel` is stopping children."""
    group = {"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}
    with _LOCK:
        if _stopping:
            raise KeyboardInterrupt
        process = subprocess.Popen(command, **group, **popen_kwargs)
        _LIVE.add(process)
    return process


def kill(process: subprocess.Popen) -> None:
    """Kill the child's whole group (py-spy and the loop it traces) if the child still runs.
    Before `reap`: a group whose leader is reaped may be gone, and its number reused."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()


def kill_group(process: subprocess.Popen) -> None:
    """Kill whatever is left of the child's group, the child ended or not: a helper it started
    (callgrind_control's `vgdb`) outlives it when what it waits for never answers."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(process: subprocess.Popen) -> None:
    """Kill the child's group if it still runs, wait for it, and forget it."""
    kill(process)
    process.wait()
    with _LOCK:
        _LIVE.discard(process)


def descendants(root: int) -> list[int]:
    """Every living descendant of process `root`, from /proc (Linux): what a fault check kills
    for real, and what must not be left running."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = [], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def stopping() -> bool:
    """True while an interrupted `parallel` kills the children: a child found dead then was
    killed here, not by a fault, and is not to be retried."""
    return _stopping


def ended(returncode: int | None) -> str:
    """How a child with this return code ended, in words: "was killed by SIGKILL (out of
    memory?)", "crashed with a segmentation fault (SIGSEGV)", "exited with status 3"."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            number = signal.Signals(-returncode)
        except ValueError:
            return f"was killed by signal {-returncode}"
        return _SIGNAL_WORDS.get(number, f"was killed by {number.name}")
    if returncode > 128 and returncode - 128 in {s.value for s in _SIGNAL_WORDS}:
        return ended(128 - returncode)  # a shell or launcher between us and it reports 128 + N
    return f"exited with status {returncode}"


def usable_cpus() -> int:
    """The CPUs this process may run on (`taskset -c 0` gives one): the children run at once
    (`callgrind.count_jobs`) and the count an environment records (`environment.collect`)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parallel(function: Callable[[Item], Result], items: Iterable[Item], max_workers: int) -> list[Result]:
    """[function(item) for item in items] on up to `max_workers` threads, in order. Ctrl-C in
    the calling thread kills every child started through `start` and cancels the items not
    begun, so the threads return within moments and the KeyboardInterrupt goes on."""
    global _stopping
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_workers)
    try:
        futures = [pool.submit(function, item) for item in items]
        return [future.result() for future in futures]
    except KeyboardInterrupt:
        with _LOCK:
            _stopping = True
            for process in list(_LIVE):
                kill(process)
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            with _LOCK:
                _stopping = False
        raise
    finally:
        pool.shutdown(wait=True)
