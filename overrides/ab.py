"""Paired, interleaved A/B: two environments measured side by side, with intervals you can trust.

Why each piece is there (figures measured on the 2-core VM this was built on):
- One persistent worker process per environment (`overrides/worker.py`); the parent asks for
  one ~1 ms sample at a time, alternating base and branch for each case (and which goes first
  alternates every round), so only one worker runs at a time and both see the same machine.
  The machine's slow spells last seconds, so neighbouring samples see the same spell.
- A pair's estimate per case is the median, over rounds, of log(branch sample / base sample
  beside it). Pairing in time cancels the slow spells sample by sample: over ~1 s of rounds its
  spread was 1.0-1.5%, against 4-7% for the ratio of the two sides' p10 headlines (the first
  version), which must wait for enough undisturbed samples on both sides.
- Nothing else runs while a pair samples: the parent pins itself and both workers to one CPU,
  and the next pair starts only after this one is done. Load on the other vCPU slows this one
  (p10 +5%, medians +20-40% here); starting the next pair in the background (the first
  version) made p10-ratio estimates swing by +-10%, and even with the paired median it gained
  nothing (two imports on one CPU take as long as a pair samples) and read the bare shim
  0.9% against 1.3% without it, over 30 pairs each.
- Every process is launched by its interpreter's real path (`sys.executable` as the interpreter
  reports it), never through a wrapper: pyenv's `python3` shim adds its own variables to the
  environment, which moved the stack and faked -1% on SubTensor in a venv-against-base A/A.
  The environment blocks of the two sides are padded to the same size, so the stacks line up.
- Memory layout differs per process and moves a 5 us call by +-5% under address-space
  randomisation. Within a pair, layouts are matched: randomisation off (`setarch -R`), the same
  `PYTHONHASHSEED`, the same environment padding, the same CPU. What is left still differs
  from process to process (~1% on the subclass cases in A/A, same interpreter on both sides),
  and two *different* environments differ by a layout amount too. So the layout is varied
  between pairs (a new hash seed and padding each pair), which side starts and prepares first
  alternates, and the 95% interval is a t-interval over the per-pair estimates: as wide as
  process-to-process luck really is.
- glibc malloc's heap-top state alone moved plain `torch.add` by ~4% between a virtualenv and
  its base interpreter, the same in every pair; each worker pins it (`overrides/allocator.py`).
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
from overrides.usercases import USER_DIR_VARIABLE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_PAIRS = 10  # degrees of freedom for the t-interval, against ~2.5 s start-up per pair
DEFAULT_SECONDS_PER_PAIR = 2.5  # 10 pairs of 2.5 s fit the four seed cases in ~55 s here
HASH_SEED_BASE = 1000  # pair p runs with PYTHONHASHSEED = HASH_SEED_BASE + p on both sides
PAD_STEP = 1531  # bytes of environment padding added per pair: moves the initial stack
PAD_VARIABLE = "OVERRIDES_LAYOUT_PAD"
PROBE_TIMEOUT_S = 120  # asking an interpreter for its path and torch; a cold disk is slow
PROGRESS_EVERY_S = 1.0
# Printed by an interpreter asked who it is: its real path, and whether torch is importable
# (found, not imported: that would take seconds).
_PROBE = ("import importlib.util, json, sys; print(json.dumps({'executable': sys.executable, "
          "'torch': importlib.util.find_spec('torch') is not None}))")


@dataclasses.dataclass(frozen=True)
class ABConfig:
    pairs: int = DEFAULT_PAIRS
    seconds_per_pair: float = DEFAULT_SECONDS_PER_PAIR
    threads: int = 1
    threshold_ns: float = DEFAULT_THRESHOLD_NS
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    fix_layout: bool = True  # setarch -R + per-pair hash seed; off only to show why it is on
    # Hash seeds to count instructions under (Callgrind), after the timing; empty: no counts.
    instruction_seeds: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class PairEstimate:
    """One worker pair's view of one case."""

    pair: int
    case: str
    op: str
    log_ratio: float  # median over rounds of log(branch sample / base sample beside it)
    headline_log_ratio: float  # log(branch headline / base headline) in this pair, for study only
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


def _interpreter_path(spec: str) -> str:
    """The executable a spec names: an interpreter, a virtualenv directory, or a name on PATH."""
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


def resolve_interpreter(spec: str) -> str:
    """The real path of the interpreter `spec` names, checked to run and to have torch.

    The interpreter is asked for its own `sys.executable`, so a wrapper (pyenv's shims, a
    script) is looked through: the workers then start the same way on both sides.
    """
    path = _interpreter_path(spec)
    try:
        probe = subprocess.run([path, "-c", _PROBE], capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S)
        answer = json.loads(probe.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
        raise UsageError(f"{spec} does not run as a Python interpreter ({exc}); pass a Python "
                         "executable or a virtualenv directory") from None
    if not answer["torch"]:
        raise UsageError(f"{spec} has no torch; install torch into that environment or pass an "
                         "interpreter that has it")
    return answer["executable"]


class WorkerError(Exception):
    """A worker died or said it cannot go on."""


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, label: str, python: str, env: dict, config: ABConfig):
        self.label = label
        self.python = python
        command = [python, "-m", "overrides.worker"]
        setarch = shutil.which("setarch")
        if config.fix_layout and setarch:
            command = [setarch, platform.machine(), "-R"] + command
        # Run from this checkout (`-m` puts the working directory first on sys.path, and a
        # PyTorch checkout's torch/ must not shadow the build); user cases are found through
        # USER_DIR_VARIABLE (see _worker_env).
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, bufsize=1, env=env,
                                        cwd=ROOT)
        self.environment: dict = {}

    def send(self, request: dict) -> None:
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()

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

    def ask(self, request: dict) -> dict:
        self.send(request)
        return self.read()

    def wait_ready(self) -> None:
        self.environment = self.read()["environment"]

    def close(self) -> None:
        # A worker holds nothing worth a graceful exit, and tearing down torch takes ~1 s that
        # would come out of the comparison's time budget; kill it.
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()


def _worker_env(config: ABConfig, pair: int, extra_pad: int) -> dict:
    """The environment of one worker: the same on both sides of a pair but for `extra_pad`,
    which makes up for a shorter interpreter path so both stacks start at the same place."""
    env = dict(os.environ)
    env.pop(PAD_VARIABLE, None)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OVERRIDES_WORKER_THREADS"] = str(config.threads)
    env[USER_DIR_VARIABLE] = os.getcwd()
    env.update(MALLOC_ENV)
    if config.fix_layout:
        env["PYTHONHASHSEED"] = str(HASH_SEED_BASE + pair)
        env[PAD_VARIABLE] = "p" * (PAD_STEP * pair % 8192 + extra_pad)
    return env


class _Pair:
    """Two workers started together with matched layouts; which side starts (and prepares)
    first alternates from pair to pair, so an order effect cannot pose as a change."""

    def __init__(self, base_py: str, branch_py: str, index: int, config: ABConfig):
        self.index = index
        sides = (("base", base_py), ("branch", branch_py))
        self.order = sides if index % 2 == 0 else sides[::-1]
        # argv[0] and the kernel's copy of the path both sit on the new stack.
        longest = max(len(python) for _, python in sides)
        self.workers = {label: _Worker(label, python, _worker_env(config, index, 2 * (longest - len(python))),
                                       config)
                        for label, python in self.order}
        self.prepared: dict[str, dict] = {}

    def in_order(self) -> list[_Worker]:
        return [self.workers[label] for label, _ in self.order]

    def start_prepare(self, wire_targets: list, calls: list, only: Sequence[str] = ("base", "branch")) -> None:
        """Queue the prepare request: a worker reads it once it has imported torch."""
        for worker in self.in_order():
            if worker.label in only:
                worker.send({"cmd": "prepare", "targets": wire_targets, "calls": calls})

    def wait_ready(self) -> None:
        try:
            for worker in self.in_order():
                if not worker.environment:
                    worker.environment = worker.read()["environment"]
        except (WorkerError, json.JSONDecodeError) as exc:
            self.close()
            raise UsageError(f"a worker could not start: {exc}") from None

    def finish_prepare(self, labels: Sequence[str] = ("base", "branch")) -> None:
        self.wait_ready()
        for worker in self.in_order():
            if worker.label in labels:
                self.prepared[worker.label] = worker.read()

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()


def _timing_cpu() -> int | None:
    """The CPU a pair samples on: the parent and both workers share it, one runs at a time."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


def _pin(pids: Sequence[int], cpu: int | None) -> None:
    if cpu is not None:
        for pid in pids:
            os.sched_setaffinity(pid, {cpu})


def _paired_log_ratios(base_samples: Sequence[float], branch_samples: Sequence[float]) -> list[float]:
    """log(branch / base) for each round's two neighbouring samples."""
    return [math.log(b / a) for a, b in zip(base_samples, branch_samples) if a > 0 and b > 0]


def _pair_estimates(pair: int, targets: Sequence[tuple[Case, Op]], base_out: list,
                    branch_out: list) -> list[PairEstimate]:
    estimates = []
    for (case, op), a, b in zip(targets, base_out, branch_out):
        ratios = _paired_log_ratios(a["samples_ns"], b["samples_ns"])
        if not ratios:
            continue
        base_head, branch_head = stats.headline(a["samples_ns"]), stats.headline(b["samples_ns"])
        estimates.append(PairEstimate(pair, case.name, op.name, stats.median(ratios),
                                      math.log(branch_head / base_head), base_head, branch_head,
                                      len(ratios)))
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


@dataclasses.dataclass
class _Pooled:
    """What the pairs of one run have gathered so far (mutable, never leaves this module)."""

    targets: list
    calls: list
    errors: list
    samples: dict
    loop_cost: dict
    environments: dict = dataclasses.field(default_factory=dict)
    estimates: list = dataclasses.field(default_factory=list)

    def wire_targets(self) -> list[list[str]]:
        return [[case.name, op.name] for case, op in self.targets]

    @classmethod
    def empty(cls, targets: list) -> "_Pooled":
        n = len(targets)
        return cls(targets, [None] * n, [None] * n,
                   {side: [[] for _ in range(n)] for side in ("base", "branch")},
                   {side: [0.0] * n for side in ("base", "branch")})


def _live_targets(pair: _Pair, pooled: _Pooled) -> list[int]:
    """The targets both prepared workers of `pair` can time; records the others' errors."""
    live = []
    for i, (e_base, e_branch) in enumerate(zip(pair.prepared["base"]["errors"],
                                              pair.prepared["branch"]["errors"])):
        if e_base or e_branch:
            pooled.errors[i] = "; ".join(f"{side}: {e}" for side, e in
                                         (("base", e_base), ("branch", e_branch)) if e)
        elif pooled.errors[i] is None:
            live.append(i)
    return live


def _first_pair(base_py: str, branch_py: str, pooled: _Pooled, config: ABConfig) -> _Pair:
    """Pair 0, started on an idle machine; its base worker calibrates the calls per sample that
    every worker then uses."""
    pair = _Pair(base_py, branch_py, 0, config)
    pair.wait_ready()
    wire = pooled.wire_targets()
    pair.start_prepare(wire, pooled.calls, only=("base",))
    pair.finish_prepare(("base",))
    pooled.calls = pair.prepared["base"]["calls"]
    pair.start_prepare(wire, pooled.calls, only=("branch",))
    pair.finish_prepare(("branch",))
    return pair


def _sample_pair(pair: _Pair, live: list[int], pooled: _Pooled, config: ABConfig,
                 say: Callable[[str], None]) -> None:
    """Alternate one sample of base and branch per target until the pair's time is spent."""
    base, branch = pair.workers["base"], pair.workers["branch"]
    cpu = _timing_cpu()
    parent_cpus = os.sched_getaffinity(0) if cpu is not None else None
    _pin([base.process.pid, branch.process.pid, 0], cpu)
    try:
        started = time.monotonic()
        next_report = started + PROGRESS_EVERY_S
        rounds = 0
        while live and time.monotonic() - started < config.seconds_per_pair:
            for position, i in enumerate(live):
                order = (base, branch) if (rounds + position) % 2 == 0 else (branch, base)
                for worker in order:
                    reply = worker.ask({"cmd": "sample", "target": i})
                    if "error" in reply:
                        pooled.errors[i] = f"{worker.label}: {reply['error']}"
            live = [i for i in live if pooled.errors[i] is None]
            rounds += 1
            if time.monotonic() >= next_report:
                say(f"pair {pair.index + 1}/{config.pairs}: sampling, round {rounds}")
                next_report += PROGRESS_EVERY_S
    finally:
        if parent_cpus is not None:
            os.sched_setaffinity(0, parent_cpus)


def _collect(pair: _Pair, pooled: _Pooled) -> None:
    """The pair's samples into the pool, and its per-case estimates."""
    outputs = {label: pair.workers[label].ask({"cmd": "result"})["targets"] for label in ("base", "branch")}
    for side, out in outputs.items():
        for i, target in enumerate(out):
            pooled.samples[side][i].extend(target["samples_ns"])
            pooled.loop_cost[side][i] = target["loop_overhead_ns"]
    ok = [i for i in range(len(pooled.targets)) if pooled.errors[i] is None]
    pooled.estimates += _pair_estimates(pair.index, [pooled.targets[i] for i in ok],
                                        [outputs["base"][i] for i in ok],
                                        [outputs["branch"][i] for i in ok])


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
    pooled = _Pooled.empty([(case, op) for op in ops for case in cases])
    started = time.monotonic()
    interrupted = False
    pairs_done = 0
    current = upcoming = None
    try:
        say(f"pair 1/{config.pairs}: starting workers and calibrating")
        current = _first_pair(base_py, branch_py, pooled, config)
        for index in range(config.pairs):
            pooled.environments = {label: w.environment for label, w in current.workers.items()}
            live = _live_targets(current, pooled)
            _sample_pair(current, live, pooled, config, say)
            _collect(current, pooled)
            current.close()
            pairs_done += 1
            if index + 1 < config.pairs:
                # Started only now, on an idle machine: see the module docstring.
                say(f"pair {index + 2}/{config.pairs}: starting workers")
                upcoming = _Pair(base_py, branch_py, index + 1, config)
                upcoming.start_prepare(pooled.wire_targets(), pooled.calls)
                upcoming.finish_prepare()
                current, upcoming = upcoming, None
    except KeyboardInterrupt:
        interrupted = True
        say(f"interrupted after {pairs_done} pairs; keeping what was measured")
    except WorkerError as exc:
        raise UsageError(str(exc)) from None
    finally:
        for pair in (current, upcoming):
            if pair is not None:
                pair.close()

    settings = {"mode": "paired A/B", "pairs": pairs_done, "pairs_asked": config.pairs,
                "seconds_per_pair": config.seconds_per_pair, "threads": config.threads,
                "fix_layout": config.fix_layout, "hash_seed_base": HASH_SEED_BASE,
                "threshold_ns": config.threshold_ns, "threshold_pct": config.threshold_pct,
                "calls_per_sample": pooled.calls,
                "estimator": "mean over pairs of the median log ratio of neighbouring samples"}
    runs = {}
    for side in ("base", "branch"):
        case_results = tuple(
            CaseResult(case=case.name, op=op.name, stmt=case.stmt_for(op), description=case.description,
                       calls_per_sample=pooled.calls[i] or 0, samples_ns=tuple(pooled.samples[side][i]),
                       loop_overhead_ns=pooled.loop_cost[side][i],
                       error=pooled.errors[i] if not pooled.samples[side][i] else None,
                       baseline=case.baseline)
            for i, (case, op) in enumerate(pooled.targets))
        runs[side] = RunResult(pooled.environments.get(side, {}), dict(settings, side=side),
                               case_results, interrupted=interrupted,
                               wall_s=time.monotonic() - started)
    comparisons = []
    for i, (case, op) in enumerate(pooled.targets):
        base_result, branch_result = runs["base"].results[i], runs["branch"].results[i]
        if not (base_result.ok and branch_result.ok):
            comparisons.append(Comparison(case.name, op.name, math.nan, math.nan, math.nan, None,
                                          "inconclusive", paired=True))
            continue
        comparisons.append(summarise(pooled.estimates, case.name, op.name, base_result.per_call_ns,
                                     branch_result.per_call_ns, config.threshold_ns,
                                     config.threshold_pct))
    if config.instruction_seeds and not interrupted:
        comparisons, runs = _with_counts(base_py, branch_py, pooled.targets, comparisons, runs,
                                         settings, config, say)
    return ABResult(tuple(comparisons), runs["base"], runs["branch"], tuple(pooled.estimates),
                    settings, time.monotonic() - started, interrupted)


def _with_counts(base_py: str, branch_py: str, targets, comparisons, runs: dict, settings: dict,
                 config: ABConfig, say) -> tuple[list, dict]:
    """Count instructions on both sides under the same seeds; the counts judge (see compare)."""
    from overrides import callgrind, compare
    from overrides.measure import not_applicable_reason

    counted = [(case.name, op.name) for case, op in targets if not not_applicable_reason(case, op)]
    say(f"counting instructions: {len(config.instruction_seeds)} seed(s) x 2 builds with Callgrind")
    base_counts, branch_counts = callgrind.count_builds([base_py, branch_py], counted,
                                                        config.instruction_seeds, say=say)
    settings["instructions"] = {"seeds": list(config.instruction_seeds),
                                "threshold": callgrind.DEFAULT_THRESHOLD_INSTRUCTIONS,
                                "threshold_pct": callgrind.DEFAULT_THRESHOLD_INSTRUCTIONS_PCT}
    runs = {side: dataclasses.replace(run, instructions=callgrind.to_dict(counts))
            for (side, run), counts in zip(runs.items(), (base_counts, branch_counts))}
    return compare.with_counts(comparisons, callgrind.compare_counts(base_counts, branch_counts)), runs
