"""The valgrind process that counts: found, started, switched on from outside, heard from.

`callgrind.py` decides what is counted and reads the counts; this module owns the process that
counts them, so that everything its counts depend on besides the spec is fixed here, in one
place (why each piece is there: callgrind.py's docstring):

- the command line: instrumentation off while Python starts and imports torch
  (`--instr-atstart=no`), collection toggled by the worker's client requests
  (`--collect-atstart=no`), one profile per thread (`--separate-threads=yes`, the main thread's
  read), call paths when asked (`--separate-callers`), one vgdb folder per process, and forked
  children that callgrind_control can find (TRACE_FORKS: forkserver.py's children);
- the environment, the working folder and the padding, fixed so that two processes of the same
  seed make the same memory layout;
- switching instrumentation on with `callgrind_control` once the worker says it is ready; a
  worker that dies meanwhile is a `WorkerDied` (counted again), told from one that said why as
  every parent tells it (`overrides/workers.py`).
"""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
import subprocess
import tempfile
import time
from typing import Callable

from overrides import ROOT, children, entry, workers
from overrides.builds import samepath
from overrides.clock.allocator import MALLOC_ENV
from overrides.counts import statfinder
from overrides.errors import UsageError, place_error
from overrides import variables

# No torch here: bench.py imports this (through callgrind.py) before torch, for the head start.

INSTALL_HINT = "install it with `apt-get install valgrind` (Debian/Ubuntu) or your system's package manager"
CONTROL_TIMEOUT_S = 60  # callgrind_control answers in well under a second when the worker lives
# Call paths are kept when asked for (`tree=True`: the report and comparisons, where "where did
# it go" is the question): `--separate-callers=CONTEXT_DEPTH` names every function by its chain
# of callers, so the last repeat's profile is a call tree with exact self counts per path. It
# changes no count, only how counts are attributed; it costs ~4 s a case more under valgrind
# (SubTensor and Tensor, 5 repeats: 53 s against 45 s), so `bench.py --instructions` goes without.
# The deepest chain of the seed cases was 40 (SubTensor, counted from the loop's own frame).
CONTEXT_DEPTH = 80
# Callgrind counts every thread while collection is on, and a thread other than the one running
# the loop does work whenever the scheduler lets it (an idle BLAS or OpenMP pool, a CUDA driver's
# threads on a machine with a GPU). So each thread's counts go to a file of their own
# (`--separate-threads=yes`, each dump named `...-01`, `-02`, ... by thread) and only the main
# thread's are read: here that took ~15 instructions a call off Tensor and ~30 off SubTensor (the
# same on every run of a seed), work no loop did. (It did not explain a GPU machine's untouched
# Tensor spreading 4.8% over seeds: that was one side's layouts, judged by judge.py.)
MAIN_THREAD_SUFFIX = "-01"
# A forked child's gdbserver, which callgrind_control asks to switch it on, is started only when
# children are traced (without, the tool exits 0 saying "not detected"); `--trace-children-skip=*`
# traces no program a worker runs, as before (forkserver.py).
TRACE_FORKS = ("--trace-children=yes", "--trace-children-skip=*")
PAD_VARIABLE = variables.LAYOUT_PAD


def find_valgrind() -> tuple[str, str]:
    """(valgrind, callgrind_control) paths, or a UsageError saying how to install them."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if not valgrind or not control:
        raise UsageError(f"valgrind not found; {INSTALL_HINT}")
    return valgrind, control


def valgrind_version(valgrind: str) -> str:
    return subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout.strip()


# The process (forkserver.serve): runs under valgrind, started as entry.py's `count-fork` role
# with a spec that names no job, so that a server is the same whatever it counts; each job is
# read by a forked child after the import. (When a process counted one job, its spec was parsed
# before torch was imported: reading it from stdin after the imports had moved the heap and made
# SubTensor's repeats bimodal on some seeds; forked children are checked against fresh processes,
# to the instruction, in tests/test_forkserver.py.)
#
# Before anything else it sets up its imports (entry.py loads statfinder by its file path): this
# checkout, the caller's own path entries and the user's folder are found by stat, never listed,
# so files that come and go there do not move the counts.


def _own_python_path() -> list[str]:
    """The caller's own PYTHONPATH entries, this checkout left out (it comes first anyway)."""
    return [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if path and os.path.realpath(path) != os.path.realpath(ROOT)]


def process_environment(seed: int, pad: int, where: samepath.Placement, side_env: tuple = ()) -> dict:
    """The whole environment of the valgrind process: fixed content, fixed order. The user's
    directory is passed only when a user case needs it (it would move the layout otherwise).
    The side's import path (its view or kept copy of torch) comes first after this checkout,
    both as `where` says the process sees them; the caller's own PYTHONPATH follows (a develop
    build is often found only through it). `side_env`: (name, value) pairs of the side's own
    (which of your code it builds: casenames.YOUR_CODE_VARIABLE). The user's folder is no part
    of it: a forked child of yours is given it with its job (forkserver.py), so the built-in
    cases count alike wherever they are run from."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/"),
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": str(seed),
        # No PYTHONPATH: the worker puts these on its path itself (statfinder.enter).
        statfinder.TOOL_VARIABLE: where.tool,
        **({statfinder.VIEW_VARIABLE: where.import_path} if where.import_path else {}),
        statfinder.OWN_PATH_VARIABLE: os.pathsep.join(_own_python_path()),
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ appearing between two runs
        # Each side's bytecode compiled at the fixed path (samepath.prime), not pip's at its own.
        **({"PYTHONPYCACHEPREFIX": where.pycache} if where.pycache else {}),
        # numpy's OpenBLAS starts an idle worker thread at import; with it, two runs of one layout
        # side by side differed by up to 85 instructions a call (callgrind counts every thread).
        "OPENBLAS_NUM_THREADS": "1",
        **MALLOC_ENV,
        PAD_VARIABLE: "p" * pad,
    }
    env.update(side_env)
    return env


def fixed_cwd() -> str:
    """An empty folder with a fixed name: a counting process's working directory, the same for
    every seed and side."""
    path = os.path.join(tempfile.gettempdir(), "overrides-callgrind-cwd")
    os.makedirs(path, exist_ok=True)
    return path


@dataclasses.dataclass
class Launch:
    """A valgrind worker started with its spec, importing torch."""

    key: tuple  # (python, seed, pad, user_dir, spec, tree, import_path, side_env, role): what the counts depend on
    process: subprocess.Popen
    out_dir: str
    started: float
    where: samepath.Placement

    def close(self) -> None:
        children.reap(self.process)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()
        shutil.rmtree(self.out_dir, ignore_errors=True)


def main_thread_dumps(out_dir: str, pid: int) -> list[str]:
    """The main thread's profile of each dump the worker `pid` made, in the order it made them
    (`callgrind.out.PID.N-01` with --separate-threads; see MAIN_THREAD_SUFFIX)."""
    found = glob.glob(os.path.join(out_dir, f"callgrind.out.{pid}.*{MAIN_THREAD_SUFFIX}"))
    return sorted(found, key=lambda p: int(p[:-len(MAIN_THREAD_SUFFIX)].rsplit(".", 1)[1]))


def options(tree: bool) -> list[str]:
    """valgrind's options that bear on what a process counts (the folders it writes to apart)."""
    contexts = [f"--separate-callers={CONTEXT_DEPTH}"] if tree else []
    return ["--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--compress-strings=no",
            "--compress-pos=no", "--separate-threads=yes", "-q", *contexts, *TRACE_FORKS]


def server_command(where: samepath.Placement, role: str, spec: str) -> list[str]:
    """The counting process's own command line as it sees it (valgrind's before it)."""
    return entry.command(where.python, role, spec, tool=where.tool)


def launch(python: str, seed: int, pad: int, user_dir: str | None, spec: str,
           tree: bool = False, import_path: str | None = None, source: str | None = None,
           side_env: tuple = (), role: str = "count") -> Launch:
    """Start a valgrind worker for `spec` under hash seed `seed`, importing torch; `tree` keeps
    call paths (CONTEXT_DEPTH); `side_env` as `process_environment`'s; `role` the entry.py role
    it runs (`count`: cases; `count-step`: a training step, overrides/step/counting.py)."""
    valgrind, _ = find_valgrind()
    where = samepath.place(python, import_path, user_dir, source=source)
    samepath.prime(where, os.pathsep.join(_own_python_path()))
    try:
        out_dir = tempfile.mkdtemp(prefix="overrides-callgrind-")
    except OSError as exc:
        raise place_error(os.path.join(tempfile.gettempdir(), "overrides-callgrind-*"), exc,
                          "Callgrind's profiles (TMPDIR)") or exc from None
    command = [valgrind, *options(tree), _vgdb_prefix(out_dir),
               f"--callgrind-out-file={out_dir}/callgrind.out.%p",
               *server_command(where, role, spec)]
    process = children.start(where.wrap(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=fixed_cwd(),
                             env=process_environment(seed, pad, where, side_env))
    return Launch((python, seed, pad, user_dir, spec, tree, import_path, side_env, role), process, out_dir,
                   time.monotonic(), where)


# How long a worker that callgrind_control could not reach gets to show it was dying: a SIGKILL
# during the switch read "Callgrind task ... not detected" (callgrind_control exits 0 then) and
# bench.py exit 2, where the worker's death (a retry) was the truth, its exit not yet seen.
DYING_S = 2.0
# callgrind_control runs for a worker it could not find, alive after DYING_S: a living worker
# missed under load is asked again; one it never finds is a UsageError, as before.
CONTROL_ATTEMPTS = 3


def _vgdb_prefix(out_dir: str) -> str:
    """Where valgrind and callgrind_control meet (vgdb's pipes), given to both, in the worker's
    own folder: the worker runs with an environment of its own, without the caller's TMPDIR,
    where callgrind_control looked for it and found no process; and with one prefix for all,
    the pipes a killed worker left behind once made callgrind_control miss a living one ("task
    ... not detected", the fault test's seed 2 after seed 1 was killed three times)."""
    return f"--vgdb-prefix={os.path.join(out_dir, 'vgdb')}"


def switch_on(control: str, server: workers.Client, pid: int, out_dir: str,
              alive: Callable[[], bool] | None = None) -> None:
    """callgrind_control switches the worker `pid`'s instrumentation on (`server`: the client of
    the process it was forked from, `alive`: whether the worker itself still lives); it waits
    for an answer that a worker killed meanwhile never gives, so the worker is watched while it
    runs. Where it could not find the worker, the worker is given DYING_S to show it died (a
    WorkerDied: retried by the caller), and a living one is asked again, up to CONTROL_ATTEMPTS
    times. A server that ended meanwhile says how (`server.died`)."""
    alive = alive or (lambda: True)
    process = server.process
    for attempt in range(CONTROL_ATTEMPTS):
        done = _control(control, process, pid, out_dir, alive)
        switched = done.returncode == 0 and not _control_errors(done)
        if not switched:
            # A worker killed as callgrind_control looked for it is gone, or going: its death,
            # not a failure to switch on ("task not detected", exit 0), once the kernel has
            # finished it.
            deadline = time.monotonic() + DYING_S
            while process.poll() is None and alive() and time.monotonic() < deadline:
                time.sleep(0.05)
        if process.poll() is not None:
            server.died("its instrumentation was being switched on")
        if not alive():
            raise workers.WorkerDied(f"{server.who} died while its instrumentation was being switched on")
        if done.returncode is None or done.returncode < 0:
            raise UsageError(f"callgrind_control did not answer in {CONTROL_TIMEOUT_S} s for {server.who}")
        if switched or attempt == CONTROL_ATTEMPTS - 1:
            check_switched(done)
            return


def _control(control: str, process: subprocess.Popen, pid: int, out_dir: str,
             alive: Callable[[], bool]) -> subprocess.CompletedProcess:
    """One callgrind_control run switching `pid` on, stopped early if the worker dies."""
    with tempfile.TemporaryFile("w+") as said:
        # Its output goes to a file, and its process group is killed once it is done: the
        # `vgdb` it starts waits forever for a worker that died, holding any pipe open.
        switching = children.start([control, _vgdb_prefix(out_dir), "-i", "on", str(pid)], stdout=said,
                                   stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while switching.poll() is None and process.poll() is None and alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        children.kill_group(switching)
        children.reap(switching)
        said.seek(0)
        return subprocess.CompletedProcess(switching.args, switching.returncode, said.read(), "")


def _control_errors(done: subprocess.CompletedProcess) -> list[str]:
    """callgrind_control's own error lines ("Error: ..."), not the command line it echoes."""
    lines = [line.strip() for line in f"{done.stdout or ''}\n{done.stderr or ''}".splitlines() if line.strip()]
    return [line for line in lines if line.startswith("Error:")]


def check_switched(done: subprocess.CompletedProcess) -> None:
    """A UsageError unless callgrind_control switched instrumentation on. It exits 0 when it
    cannot find the process ("Error: Callgrind task with PID/name ... not detected", valgrind
    3.19, as for a forked child), and the counts would then be zero."""
    lines = [line.strip() for line in f"{done.stdout or ''}\n{done.stderr or ''}".splitlines() if line.strip()]
    errors = _control_errors(done)
    if done.returncode != 0 or errors:
        raise UsageError("callgrind_control could not switch instrumentation on: "
                         f"{(errors or lines or ['no message'])[0]}")
