"""The parent's handles on its timing workers: one `Worker` per side, started two at a time as a
`Pair` with matched layouts, and the CPU a pair samples on.

The workers themselves are `overrides/ab/worker.py`, started as `overrides/entry.py`'s `time`
role in each side's own interpreter; a `Worker` is `overrides/workers.py`'s client of them
(how each is read, and how a death is told from a worker that said why).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Sequence

from overrides import ROOT, children, entry, workers
from overrides.ab.worker import PREPARE, Prepared, Ready, Request
from overrides.ab.config import ABConfig, side_env
from overrides.builds import samepath
from overrides.builds.interpreters import with_import_path
from overrides.cases.casenames import USER_DIR_VARIABLE, env_bytes
from overrides.clock.allocator import MALLOC_ENV
from overrides.environment import Environment
from overrides.sides import BASE, ROLES, Sides
from overrides import variables

PAD_STEP = 1531  # bytes of environment padding added per pair: moves the initial stack
PAD_VARIABLE = variables.LAYOUT_PAD


# How long a worker whose output ended may take to end itself before it is said to have stopped
# answering: it is gone or going (a worker holds nothing to flush), so anything near this is a hang.
END_WAIT_S = 10


class Worker(workers.Client):
    """The parent's handle on one worker process. `shown`: the interpreter as the user named
    it, for messages (the process itself may run it at samepath's fixed path)."""

    def __init__(self, label: str, where: samepath.Placement, env: dict, config: ABConfig, shown: str = ""):
        self.label = label
        self.python = shown or where.python
        command = entry.command(where.python, "time", tool=where.tool)
        setarch = shutil.which("setarch")
        if config.fix_layout and setarch:
            command = [setarch, platform.machine(), "-R"] + command
        # Run from this checkout (a PyTorch checkout's torch/ in the user's folder must not
        # shadow the build); user cases are found through USER_DIR_VARIABLE (see worker_env).
        # Where `where` is fixed, the checkout is seen at samepath.FIXED_ROOT and the namespace
        # launcher changes into it.
        process = subprocess.Popen(where.wrap(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, bufsize=1, env=env, cwd=ROOT)
        super().__init__(process, f"the {label} worker ({self.python})", wait_s=END_WAIT_S)
        self.environment: Environment | None = None  # once the worker has imported torch

    def close(self) -> None:
        # A worker holds nothing worth a graceful exit, and tearing down torch takes ~1 s that
        # would come out of the comparison's time budget; kill it.
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                stream.close()
            except OSError:  # a request still buffered for a worker that died
                pass


def worker_env(config: ABConfig, pair: int, extra_pad: int, where: samepath.Placement,
               label: str = BASE) -> dict:
    """The environment of one worker: the same on both sides of a pair but for `extra_pad`,
    which makes up for a shorter interpreter path so both stacks start at the same place, the
    side's import path (its view, overrides/builds/placement.py, or else its Build.torch_root),
    which comes before anything else torch could be imported from, all as `where` says the
    worker sees them, and which of your code the side builds (config.side_env)."""
    env = dict(os.environ)
    env.pop(PAD_VARIABLE, None)
    with_import_path(env, where.tool, where.import_path)
    env[variables.WORKER_THREADS] = str(config.threads)
    env[USER_DIR_VARIABLE] = where.user_dir
    if where.pycache:  # each side's bytecode compiled at the fixed path (samepath.prime)
        env["PYTHONPYCACHEPREFIX"] = where.pycache
    env.update(MALLOC_ENV)
    env.update(side_env(config, label))
    if config.fix_layout:
        env["PYTHONHASHSEED"] = str(config.hash_seed_base + pair)
        env[PAD_VARIABLE] = "p" * (PAD_STEP * pair % 8192 + extra_pad)
    return env


class Pair:
    """Two workers started together with matched layouts; which side starts (and prepares)
    first alternates from pair to pair, so an order effect cannot pose as a change."""

    def __init__(self, base_py: str, branch_py: str, index: int, config: ABConfig,
                 import_paths: Sides | None = None, sources: Sides | None = None):
        self.index = index
        pythons = Sides(base_py, branch_py)
        self.order = ROLES if index % 2 == 0 else ROLES[::-1]  # the roles, in the order they start
        import_paths, sources = import_paths or Sides(None, None), sources or Sides(None, None)
        where = Sides.of([samepath.place(python, import_path, os.getcwd(), in_tool=True, source=source)
                          for python, import_path, source in zip(pythons, import_paths, sources)])
        # Both sides at once (each ~1.4 s of importing torch natively), on an idle machine.
        children.parallel(samepath.prime, list(where), len(ROLES))
        self.placements = where
        # argv[0] and the kernel's copy of the path both sit on the new stack; the import path
        # once, in the environment (with one fixed path for both sides, these are equal).
        # And each side's own variables (config.side_env), in the environment.
        longest = max(len(w.python) for w in where)
        env_sizes = Sides.of([len(w.import_path or "") + env_bytes(side_env(config, label))
                              for label, w in where.roles()])

        def start(label: str) -> Worker:
            place = where.side(label)
            pad = 2 * (longest - len(place.python)) + max(env_sizes) - env_sizes.side(label)
            return Worker(label, place, worker_env(config, index, pad, place, label), config,
                          shown=pythons.side(label))

        started = {label: start(label) for label in self.order}
        self.workers: Sides[Worker] = Sides.of([started[label] for label in ROLES])
        self.prepared: Sides[Prepared | None] = Sides(None, None)  # each worker's answer to prepare

    def in_order(self) -> list[Worker]:
        return [self.workers.side(label) for label in self.order]

    def start_prepare(self, wire_targets: list, calls: list, only: Sequence[str] = ROLES) -> None:
        """Queue the prepare request: a worker reads it once it has imported torch."""
        for worker in self.in_order():
            if worker.label in only:
                worker.doing = "preparing the cases"
                worker.send(Request(PREPARE, tuple(map(tuple, wire_targets)), tuple(calls)).to_dict())

    def wait_ready(self) -> None:
        """Both workers' environments once they have imported torch. One that exits with a
        message (no torch, a broken build) is the user's to fix (WorkerSaid, a UsageError); one
        killed or crashed is a WorkerDied, for the caller to retry."""
        try:
            for worker in self.in_order():
                if not worker.environment:
                    worker.environment = Ready.from_dict(worker.read("environment", "importing torch")).environment
        except (workers.WorkerSaid, workers.WorkerDied):
            self.close()
            raise

    def finish_prepare(self, labels: Sequence[str] = ROLES) -> None:
        self.wait_ready()
        for worker in self.in_order():
            if worker.label in labels:
                self.prepared = self.prepared.with_side(worker.label, Prepared.from_dict(worker.read()))

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


def timing_cpu() -> int | None:
    """The CPU a pair samples on: the parent and both workers share it, one runs at a time."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


def pin(pids: Sequence[int], cpu: int | None) -> None:
    if cpu is not None:
        for pid in pids:
            os.sched_setaffinity(pid, {cpu})
