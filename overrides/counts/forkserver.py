"""`import torch` under valgrind once per side and hash seed: a server that imports it, then forks
one child per job (a module's cases, a layout variant, a step), each counted as a counting
process always counted.

Why it exists. Under valgrind, `import torch` is most of a count's wall time (20-150 s a process
on a 2-CPU host, by its load), and a counting process paid it for every side, seed, module of
yours and layout variant: a budget of two modules was twelve imports. A child forked after the
import starts where the import left off (valgrind follows the fork, and the child inherits what
it translated), so it pays only for what is its own: your module, its operands, the warm-up and
the counting (figures: benchmarks/README.md, "Counting once").

How, and why each piece:
- The server (`serve`, entry.py's `count-fork` role) starts as a counting process always did
  (valgrind.launch: fixed environment, folder and padding, the hash seed, instrumentation off),
  with a spec that names no job, so that its layout is the same whatever it will count. It
  imports torch and what every job imports, collects its garbage and turns the collector off
  (a collection in the server between two forks would give the children different histories),
  forks one child that leaves at once, then forks a child for every `fork` line on its stdin,
  waits for it and says how it ended. So every real child is forked after the same whole turn
  of that loop: child k starts from the state child 1 started from, and counts as a server's
  only child does, to the instruction (tests/test_forkserver.py).
- The child reads its job from stdin (the server never reads past its `fork` line: os.read of
  those five bytes), sets what is its own (`USER_DIR`, your folder found by stat; the layout
  variant), turns the collector on and runs the job's role (entry.ROLES: `count` a case's
  loops, callgrind.serve; `count-step` a step, step/counting.py), which builds, warms up, says
  ready and waits. The parent switches the CHILD's instrumentation on: callgrind_control finds a
  forked child only under `--trace-children=yes` (a child's gdbserver is started only then;
  without it the tool exits 0 saying "not detected"), and `--trace-children-skip=*` keeps any
  program the job runs un-traced, as before.
- Counts are exact between children, not against the processes of 7e31db8 and before: those
  parsed their job (the cases) before importing torch, and a forked child lives with the
  server's `os.fork` behind it, so the same case lies elsewhere. What the counts of a layout
  are is unchanged in kind; a budget written by those versions is refused in one line
  (COUNTED_BY, in a budget's environment).
- A child that dies (killed, crashed) is a WorkerDied as a process's death was, counted again
  in a new child of the same server; a server that dies is started again. The parent's handle
  on a server (`Server`) is `overrides/workers.py`'s client, reading as it must here.

Parent and child speak entry.py's protocol on the server's stdin and stdout (the child inherits
both): `fork` and the job, `ready`, `go`, `dumps`, `loaded` (what kept.py checks a kept count
against), `ended`.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import json
import os
import select
import sys
import threading
import time

from overrides import children, entry, workers
from overrides.counts import valgrind

ROLE = "count-fork"
# How counts are made, in a run's settings and a budget's environment (environment.Fingerprint):
# a forked child of a server that imported torch. Counts made otherwise (a process a job, 7e31db8
# and before) lay the same case out elsewhere, so a budget of those is refused, not misread.
COUNTED_BY = "forked/1"
FORK = b"fork\n"  # the line that forks a child, read whole by os.read: the server reads nothing else
SERVER_SPEC = "{}"  # what the server parses before torch, as a counting process parsed its spec
POLL_S = 0.5  # how often a silent server is looked at: is it still there?
STDERR_KEPT = 40  # last lines of a server's stderr kept, for what its death says
# How long the thread draining a dead server's stderr gets to read its last lines once the group
# is killed: the pipe's end is then at hand, so this only bounds a wait that should not happen.
DRAIN_WAIT_S = 5


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """A child's job as it reads it from stdin after its `fork` line (callgrind.Job writes it): the
    entry.py `role` it runs and that role's `targets` (`count`: [case, op]s; `count-step`: [a
    step's spec, side]s), the calls a repeat, the warm-up and the repeats, the layout `variant`
    (statfinder), and `user_dir`, your folder (None where the job builds nothing of yours)."""

    role: str
    targets: tuple[tuple[str, str], ...]
    calls: int
    repeats: int
    warmup_calls: int
    variant: int
    user_dir: str | None

    def to_dict(self) -> dict:
        return {"role": self.role, "targets": [list(t) for t in self.targets], "calls": self.calls,
                "repeats": self.repeats, "warmup_calls": self.warmup_calls, "variant": self.variant,
                "user_dir": self.user_dir}

    @classmethod
    def from_dict(cls, data: dict) -> "JobSpec":
        return cls(data["role"], tuple(tuple(t) for t in data["targets"]), data["calls"], data["repeats"],
                   data["warmup_calls"], data.get("variant") or 0, data.get("user_dir"))


# ---------------------------------------------------------------------------------------------
# Under valgrind: the server and its children

def serve(channel, spec_json: str) -> None:
    """Import torch once, then fork a child per `fork` line on stdin until stdin ends."""
    json.loads(spec_json)
    import torch

    from overrides.cases import ops, registry  # noqa: F401 (what every job of cases imports)
    from overrides.clock import timer  # noqa: F401

    torch.set_num_threads(1)
    gc.collect()
    gc.disable()
    channel.say({"imported": os.getpid()})
    _turn(channel, throwaway=True)
    while os.read(0, len(FORK)) == FORK:
        _turn(channel)
    os._exit(0)


def _turn(channel, throwaway: bool = False) -> None:
    """One turn of the server's loop: fork, wait, say how the child ended."""
    pid = os.fork()
    if pid == 0:
        if throwaway:
            os._exit(0)
        _child(channel)
    _, status = os.waitpid(pid, 0)
    channel.say({"ended": os.waitstatus_to_exitcode(status)})


def _child(channel) -> None:
    """A forked child: its job from stdin, then the job's role, as a fresh process would run it."""
    gc.collect()  # the collector's counts start from nothing, whatever the server's turns left in them
    gc.enable()
    line = sys.stdin.readline()
    job = JobSpec.from_dict(json.loads(line))
    if job.variant:
        from overrides.counts.statfinder import LAYOUT_VARIANT_VARIABLE

        os.environ[LAYOUT_VARIANT_VARIABLE] = str(job.variant)
    if job.user_dir:
        from overrides.cases.casenames import USER_DIR_VARIABLE
        from overrides.counts import statfinder

        os.environ[USER_DIR_VARIABLE] = job.user_dir
        statfinder.add_user_folder(job.user_dir)
    module, function = entry.ROLES[job.role]
    try:
        import importlib

        getattr(importlib.import_module(module), function)(channel, line)
        channel.say({"loaded": loaded_files()})
    except Exception as exc:
        channel.say({"fatal": f"{type(exc).__name__}: {exc}"})
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    os._exit(0)


def loaded_files() -> list[str]:
    """Every file this process loaded, as it sees them (after counting: what kept.py checks a
    kept count against): each module's file, each file mapped (the interpreter, libtorch), and
    the `.pth` files on its path, which decide at start-up what else is imported."""
    import glob

    found = {m.__file__ for m in list(sys.modules.values()) if isinstance(getattr(m, "__file__", None), str)}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                parts = line.split(None, 5)
                # valgrind's own gdbserver channels (vgdb-pipe-..., vgdb-shared-mem-... by version),
                # made per process and gone with it: nothing counted depends on them
                if len(parts) == 6 and parts[5].startswith("/") and not os.path.basename(parts[5]).startswith("vgdb-"):
                    found.add(parts[5].strip())
    except OSError:
        pass
    found |= {f for d in sys.path if d and os.path.isdir(d) for f in glob.glob(os.path.join(d, "*.pth"))}
    return sorted(path for path in found if os.path.isfile(path))


# ---------------------------------------------------------------------------------------------
# The parent's handle on a server

@dataclasses.dataclass
class Served:
    """What one child counted: its pid, the order of its dumps, and those dumps' files."""

    pid: int
    order: list
    dumps: list[str]
    seconds: float
    loaded: list[str]  # every file it loaded, as it saw them (loaded_files)


class Server(workers.Client):
    """A server under valgrind for one build and hash seed; `run` counts one job in a child.

    Its stdout is read by select, never blocking past POLL_S: a child whose server died (killed)
    keeps the pipe open, so the server's end is watched, and then its whole process group (the
    children it forked) killed before its end is waited for. Its stderr is drained as it comes (a
    child's warnings, a print of yours, over many children) and its last lines kept for what a
    death says. `who`: "seed 1 (/usr/bin/python3)"."""

    def __init__(self, launch: valgrind.Launch, who: str):
        super().__init__(launch.process, f"the counting process for {who}")
        self.launch = launch
        self.imported_s: float | None = None
        self.served = 0
        self._buffer = b""
        self._said: collections.deque = collections.deque(maxlen=STDERR_KEPT)
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()

    def wait_imported(self) -> float:
        """Block until torch is imported (and the throwaway turn done): the seconds it took."""
        if self.imported_s is None:
            self.read("imported", "importing torch")
            self.read("ended", "importing torch")
            self.imported_s = time.monotonic() - self.launch.started
        return self.imported_s

    def run(self, job: JobSpec, control: str) -> Served:
        """Fork a child for `job`, switch it on when it is ready, and wait for its dumps."""
        self.wait_imported()
        started = time.monotonic()
        self.write(FORK.decode() + json.dumps(job.to_dict()) + "\n", "being given a job")
        pid = self.value("ready", "building its cases")
        valgrind.switch_on(control, self, pid, self.launch.out_dir, lambda: _alive(pid))
        self.write("go\n", "being given a job")
        order = self.value("dumps", "counting")
        loaded = self.value("loaded", "listing what it loaded")
        code = self.value(workers.ENDED, "leaving")
        self.served += 1
        if code != 0:
            raise workers.WorkerDied(f"{self.who} {children.ended(code)} after counting")
        return Served(pid, order, valgrind.main_thread_dumps(self.launch.out_dir, pid), time.monotonic() - started,
                      loaded)

    def forget(self, served: Served) -> None:
        """Remove a child's profiles once read: TMPDIR holds one child's at a time."""
        for path in os.listdir(self.launch.out_dir):
            if path.startswith(f"callgrind.out.{served.pid}"):
                try:
                    os.unlink(os.path.join(self.launch.out_dir, path))
                except OSError:
                    pass

    def close(self) -> None:
        try:
            self.process.stdin.close()  # the server leaves at the end of its stdin
        except OSError:
            pass
        children.kill_group(self.process)  # and nothing it forked outlives it
        self.launch.close()

    def _line(self) -> str | None:
        """The next line the server or a child of it wrote; None once the server has ended."""
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], POLL_S)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk
            elif self.process.poll() is not None:
                return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")

    def _drain_stderr(self) -> None:
        try:
            for line in self.process.stderr:
                self._said.append(line.rstrip("\n"))
        except (OSError, ValueError):
            pass

    def _stop(self) -> None:
        """Kill the server's group before its end is waited for: a child it forked would hold
        its pipes open, and its stderr would never end."""
        children.kill_group(self.process)

    def _stderr_lines(self, code: int | None) -> list[str]:
        self._drain.join(timeout=DRAIN_WAIT_S)
        return list(self._said)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
