"""Paired, interleaved A/B: two environments measured side by side, with intervals you can trust.

Why each piece is there:
- One persistent worker process per environment (`overrides/worker.py`); the parent asks for
  one ~1 ms sample at a time, alternating base and branch for each case (and which goes first
  alternates every round), so only one worker runs at a time and both see the same machine.
  The machine's slow spells last seconds, so over a pair's few seconds both sides see the same
  spells in the same proportion. A pair's estimate per case is the ratio of the two sides'
  headlines (p10, as everywhere in this tool). The median of the ratios of neighbouring
  samples was tried too: on the same data its intervals were ~40% wider on SubTensor, and it
  answers a different question (the median call, not the undisturbed one) from the headline.
- Memory layout differs per process and moves a 5 us call by +-5% under address-space
  randomisation. Within a pair, layouts are matched as far as they can be: both workers run
  with randomisation off (`setarch -R`), the same `PYTHONHASHSEED`, the same environment
  padding, and are pinned to the same CPU. But two *different* environments still differ by a
  fixed layout amount, which would look like a real change if one layout were used throughout.
  So the layout is varied between pairs (a new hash seed and padding for each pair), and the
  95% interval is a t-interval over the per-pair estimates: it is as wide as layout luck
  actually is, and a verdict has to beat it.
- glibc malloc's heap-top state alone moved plain `torch.add` by ~4% between a virtualenv and
  its base interpreter, the same in every pair; each worker pins it (`overrides/allocator.py`).
- Several short fresh pairs beat one long pair: the interval needs pair-to-pair spread.
- Calls per sample are calibrated once (first pair, base side) and used by both sides in every
  pair, so each case's samples are alike and pool into one result per side.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from typing import Callable, Sequence

from overrides import stats
from overrides.allocator import MALLOC_ENV
from overrides.cases import Case
from overrides.compare import (DEFAULT_THRESHOLD_NS, DEFAULT_THRESHOLD_PCT, Comparison, judge,
                               threshold_for)
from overrides.errors import UsageError
from overrides.ops import Op
from overrides.results import CaseResult, RunResult

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PAIRS = 10  # degrees of freedom for the t-interval; pairs start in the background, so cheap
DEFAULT_SECONDS_PER_PAIR = 3.0  # sampling per pair: layout luck, not sampling noise, dominates
HASH_SEED_BASE = 1000  # pair p runs with PYTHONHASHSEED = HASH_SEED_BASE + p on both sides
PAD_STEP = 1531  # bytes of environment padding added per pair: moves the initial stack
WORKER_START_TIMEOUT_S = 120  # importing torch can take a while on a cold disk
PROGRESS_EVERY_S = 1.0


@dataclasses.dataclass(frozen=True)
class ABConfig:
    pairs: int = DEFAULT_PAIRS
    seconds_per_pair: float = DEFAULT_SECONDS_PER_PAIR
    threads: int = 1
    threshold_ns: float = DEFAULT_THRESHOLD_NS
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    fix_layout: bool = True  # setarch -R + per-pair hash seed; off only to show why it is on


@dataclasses.dataclass(frozen=True)
class PairEstimate:
    """One worker pair's view of one case."""

    pair: int
    case: str
    op: str
    log_ratio: float  # log(branch headline / base headline) within this pair: the estimate
    median_log_ratio: float  # median of log(branch sample / base sample beside it), for study
    base_ns: float  # headline of the base samples in this pair
    branch_ns: float
    samples: int


@dataclasses.dataclass(frozen=True)
class ABResult:
    comparisons: tuple[Comparison, ...]
    base_run: RunResult
    branch_run: RunResult
    pairs: tuple[PairEstimate, ...]
    settings: dict
    wall_s: float
    interrupted: bool = False


def resolve_interpreter(spec: str) -> str:
    """An interpreter path from an interpreter, a virtualenv directory, or a name on PATH."""
    if os.path.isdir(spec):
        for candidate in ("bin/python", "bin/python3", "Scripts/python.exe"):
            path = os.path.join(spec, candidate)
            if os.access(path, os.X_OK):
                return os.path.abspath(path)
        raise UsageError(f"{spec} is a directory without bin/python; pass a virtualenv or an interpreter")
    if os.sep in spec:
        if os.access(spec, os.X_OK) and not os.path.isdir(spec):
            return os.path.abspath(spec)
        raise UsageError(f"no interpreter at {spec}; pass a Python executable or a virtualenv directory")
    found = shutil.which(spec)
    if not found:
        raise UsageError(f"no interpreter {spec!r} on PATH; pass a Python executable or a virtualenv directory")
    return found


class WorkerError(Exception):
    """A worker died or said it cannot go on."""


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, label: str, python: str, pair: int, config: ABConfig, cpu: int | None):
        self.label = label
        self.python = python
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["OVERRIDES_WORKER_THREADS"] = str(config.threads)
        env.update(MALLOC_ENV)
        command = [python, "-m", "overrides.worker"]
        if config.fix_layout:
            env["PYTHONHASHSEED"] = str(HASH_SEED_BASE + pair)
            env["OVERRIDES_LAYOUT_PAD"] = "p" * (PAD_STEP * pair % 8192)
            setarch = shutil.which("setarch")
            if setarch:
                command = [setarch, platform.machine(), "-R"] + command
        # Start (import torch) on the CPU given; `pin` moves the worker to the timing CPU later.
        preexec = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1, env=env,
                                        cwd=ROOT, preexec_fn=preexec)
        self.environment: dict = {}

    def read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            err = self.process.stderr.read().strip().splitlines()
            raise WorkerError(f"{self.label} worker ({self.python}) exited: "
                              f"{err[-1] if err else 'no message'}")
        reply = json.loads(line)
        if "fatal" in reply:
            raise WorkerError(f"{self.label} worker ({self.python}): {reply['fatal']}")
        return reply

    def pin(self, cpu: int | None) -> None:
        if cpu is not None:
            os.sched_setaffinity(self.process.pid, {cpu})

    def wait_ready(self) -> None:
        reply = self.read()
        self.environment = reply["environment"]

    def ask(self, request: dict) -> dict:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        # A worker holds nothing worth a graceful exit, and tearing down torch takes ~1 s that
        # would come out of the comparison's time budget; kill it.
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()


def _cpus() -> tuple[int | None, int | None]:
    """(timing CPU, start-up CPU). Both workers of a pair time on the same CPU; the next pair
    imports torch on another one meanwhile, so start-up costs no sampling time."""
    if not hasattr(os, "sched_getaffinity"):
        return None, None
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[-1], (allowed[0] if len(allowed) > 1 else allowed[-1])


class _Pair:
    """Two workers started together with the same layout settings."""

    def __init__(self, base_py: str, branch_py: str, index: int, config: ABConfig):
        self.index = index
        _, startup_cpu = _cpus()
        self.base = _Worker("base", base_py, index, config, startup_cpu)
        self.branch = _Worker("branch", branch_py, index, config, startup_cpu)

    def ready(self) -> tuple[_Worker, _Worker]:
        timing_cpu, _ = _cpus()
        try:
            for worker in (self.base, self.branch):
                worker.wait_ready()
                worker.pin(timing_cpu)
        except (WorkerError, json.JSONDecodeError) as exc:
            self.close()
            if "No module named 'torch'" in str(exc):
                side = self.base if self.base.python in str(exc) else self.branch
                raise UsageError(f"{side.python} has no torch; install torch into that environment "
                                 "or pass an interpreter that has it") from None
            raise UsageError(f"a worker could not start: {exc}") from None
        return self.base, self.branch

    def close(self) -> None:
        self.base.close()
        self.branch.close()


def _pair_estimates(pair: int, targets: Sequence[tuple[Case, Op]], base_out: list,
                    branch_out: list) -> list[PairEstimate]:
    estimates = []
    for (case, op), a, b in zip(targets, base_out, branch_out):
        n = min(len(a["samples_ns"]), len(b["samples_ns"]))
        ratios = [math.log(bs / as_) for as_, bs in zip(a["samples_ns"][:n], b["samples_ns"][:n])
                  if as_ > 0 and bs > 0]
        if not ratios:
            continue
        base_head, branch_head = stats.headline(a["samples_ns"]), stats.headline(b["samples_ns"])
        estimates.append(PairEstimate(pair, case.name, op.name, math.log(branch_head / base_head),
                                      stats.median(ratios), base_head, branch_head, n))
    return estimates


def summarise(estimates: Sequence[PairEstimate], case: str, op: str, base_ns: float,
              branch_ns: float, threshold_ns: float, threshold_pct: float) -> Comparison:
    """Pool the per-pair estimates of one case into a delta, a 95% t-interval and a verdict."""
    logs = [e.log_ratio for e in estimates if e.case == case and e.op == op]
    if len(logs) < 2:
        return Comparison(case, op, base_ns, branch_ns, math.nan, None, "inconclusive", paired=True)
    mean = sum(logs) / len(logs)
    half = stats.t95(len(logs) - 1) * stats.stdev(logs) / math.sqrt(len(logs))
    delta = base_ns * math.expm1(mean)
    ci = (base_ns * math.expm1(mean - half), base_ns * math.expm1(mean + half))
    verdict = judge(delta, ci, threshold_for(base_ns, threshold_ns, threshold_pct))
    return Comparison(case, op, base_ns, branch_ns, delta, ci, verdict, paired=True)


def run_ab(
    base_spec: str,
    branch_spec: str,
    cases: Sequence[Case],
    ops: Sequence[Op],
    config: ABConfig = ABConfig(),
    progress: Callable[[str], None] | None = None,
) -> ABResult:
    """Measure base and branch side by side; see the module docstring for the method."""
    say = progress or (lambda message: None)
    base_py, branch_py = resolve_interpreter(base_spec), resolve_interpreter(branch_spec)
    targets = [(case, op) for op in ops for case in cases]
    wire_targets = [[case.name, op.name] for case, op in targets]
    calls: list[int | None] = [None] * len(targets)
    pooled = {"base": [[] for _ in targets], "branch": [[] for _ in targets]}
    loop_cost = {"base": [0.0] * len(targets), "branch": [0.0] * len(targets)}
    errors: list[str | None] = [None] * len(targets)
    environments: dict = {}
    estimates: list[PairEstimate] = []
    started = time.monotonic()
    interrupted = False
    pairs_done = 0
    upcoming: _Pair | None = None
    try:
        upcoming = _Pair(base_py, branch_py, 0, config)
        for pair in range(config.pairs):
            say(f"pair {pair + 1}/{config.pairs}: waiting for workers")
            current = upcoming
            base, branch = current.ready()
            upcoming = (_Pair(base_py, branch_py, pair + 1, config)
                        if pair + 1 < config.pairs else None)
            try:
                environments = {"base": base.environment, "branch": branch.environment}
                prepared = base.ask({"cmd": "prepare", "targets": wire_targets, "calls": calls})
                calls = prepared["calls"]
                branch_prepared = branch.ask({"cmd": "prepare", "targets": wire_targets, "calls": calls})
                live = []
                for i, (e_base, e_branch) in enumerate(zip(prepared["errors"], branch_prepared["errors"])):
                    if e_base or e_branch:
                        errors[i] = "; ".join(f"{side}: {e}" for side, e in
                                              (("base", e_base), ("branch", e_branch)) if e)
                    else:
                        live.append(i)
                pair_start = time.monotonic()
                next_report = pair_start + PROGRESS_EVERY_S
                rounds = 0
                while live and time.monotonic() - pair_start < config.seconds_per_pair:
                    for position, i in enumerate(live):
                        order = (base, branch) if (rounds + position) % 2 == 0 else (branch, base)
                        for worker in order:
                            reply = worker.ask({"cmd": "sample", "target": i})
                            if "error" in reply:
                                errors[i] = f"{worker.label}: {reply['error']}"
                    live = [i for i in live if errors[i] is None]
                    rounds += 1
                    if time.monotonic() >= next_report:
                        done = (time.monotonic() - pair_start) / config.seconds_per_pair
                        say(f"pair {pair + 1}/{config.pairs}: sampling {min(done, 1):4.0%} (round {rounds})")
                        next_report += PROGRESS_EVERY_S
                base_out = base.ask({"cmd": "result"})["targets"]
                branch_out = branch.ask({"cmd": "result"})["targets"]
            finally:
                current.close()
            for side, out in (("base", base_out), ("branch", branch_out)):
                for i, target in enumerate(out):
                    pooled[side][i].extend(target["samples_ns"])
                    loop_cost[side][i] = target["loop_overhead_ns"]
            ok = [i for i in range(len(targets)) if errors[i] is None]
            estimates += _pair_estimates(pair, [targets[i] for i in ok],
                                         [base_out[i] for i in ok], [branch_out[i] for i in ok])
            pairs_done += 1
    except KeyboardInterrupt:
        interrupted = True
        say(f"interrupted after {pairs_done} pairs; keeping what was measured")
    except WorkerError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if upcoming is not None:
            upcoming.close()

    settings = {"mode": "paired A/B", "pairs": pairs_done, "pairs_asked": config.pairs,
                "seconds_per_pair": config.seconds_per_pair, "threads": config.threads,
                "fix_layout": config.fix_layout, "hash_seed_base": HASH_SEED_BASE,
                "threshold_ns": config.threshold_ns, "threshold_pct": config.threshold_pct,
                "calls_per_sample": calls}
    runs = {}
    for side in ("base", "branch"):
        case_results = tuple(
            CaseResult(case=case.name, op=op.name, stmt=case.stmt_for(op), description=case.description,
                       calls_per_sample=calls[i] or 0, samples_ns=tuple(pooled[side][i]),
                       loop_overhead_ns=loop_cost[side][i],
                       error=errors[i] if not pooled[side][i] else None)
            for i, (case, op) in enumerate(targets))
        runs[side] = RunResult(environments.get(side, {}), dict(settings, side=side), case_results,
                               interrupted=interrupted, wall_s=time.monotonic() - started)
    comparisons = []
    for i, (case, op) in enumerate(targets):
        base_result, branch_result = runs["base"].results[i], runs["branch"].results[i]
        if not (base_result.ok and branch_result.ok):
            comparisons.append(Comparison(case.name, op.name, math.nan, math.nan, math.nan, None,
                                          "inconclusive", paired=True))
            continue
        comparisons.append(summarise(estimates, case.name, op.name, base_result.per_call_ns,
                                     branch_result.per_call_ns, config.threshold_ns,
                                     config.threshold_pct))
    return ABResult(tuple(comparisons), runs["base"], runs["branch"], tuple(estimates), settings,
                    time.monotonic() - started, interrupted)
