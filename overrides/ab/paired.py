"""Paired, interleaved A/B: two environments measured side by side, with intervals you can trust.

Why each piece is there (figures measured on the 2-core VM this was built on):
- One persistent worker process per environment (`overrides/ab/worker.py`); the parent asks for
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
  its base interpreter, the same in every pair; each worker pins it (`overrides/clock/allocator.py`).
- Calls per sample are calibrated once (first pair, base side) and used by both sides in every
  pair, so each case's samples are alike and pool into one result per side.
- Each side imports torch through a view (`overrides/builds/placement.py`): libraries identical on
  both sides are mapped from one file, differing ones from fresh copies every pair. Two installs
  of one wheel otherwise differed by up to ~2% through where their pages sat in memory.
- Pairs are added until every case has a verdict or the time cap (`_why_stop`), and every
  comparison draws its own hash seeds: the same seeds every time made every run's pairs the same
  sample of layouts.
- Instruction counts, when asked for, are made first (`_count_first`): they judge, so a case
  whose counts are decided needs only MIN_PAIRS of the clock. Counted after the pairs (the first
  version), A/A comparisons ran the clock to its 60 s cap in 19 of 24 and then counted for ~50 s
  more, although the counts said "no change" to the instruction. Cases whose counts spread too
  far over the drawn seeds are counted under more (`rounds.count_until_decided`); counts
  still too spread settle nothing: the clock goes on for those cases, and judges them.
  Nor do counts settle a case whose clock goes against them (`_decided`): it is sampled on to
  the cap before it may be called `clock only`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import random
import shutil
import subprocess
import time
from typing import Callable, Sequence

from overrides import ROOT
from overrides.builds import placement, samepath
from overrides.builds.interpreters import PROBE_TIMEOUT_S, Build, Interpreter, probe_interpreter, with_import_path
from overrides.clock import stats
from overrides.clock.allocator import MALLOC_ENV
from overrides.cases.casenames import USER_DIR_VARIABLE, Case
from overrides.compare import Comparison
from overrides.errors import UsageError
from overrides.cases.ops import Op
from overrides.results import CaseResult, RunResult
from overrides.verdicts import (DECIDED, DEFAULT_THRESHOLD_NS, DEFAULT_THRESHOLD_PCT, NO_CHANGE_CONFIDENCE,
                                clock_and_counts, judge, threshold_for)

DEFAULT_SECONDS_PER_PAIR = 2.5  # a pair is ~2.5 s of start-up and this much sampling
# Pairs are added until every case has a verdict or the cap is reached: a clear change stops
# early, an unclear one gets all the time there is. 60 s is ~12 pairs of the four seed cases.
DEFAULT_MAX_SECONDS = 60.0
MIN_PAIRS = 5  # before this the t-interval (4 degrees of freedom, t = 2.78) decides nothing
MAX_PAIRS = 200  # a bound for --max-seconds far beyond the default
HASH_SEED_LIMIT = 2**32 - 1  # PYTHONHASHSEED's largest value
# Two sides of a pair are never quite alike, even running the same files: their views' paths
# differ by a letter, and with an odd number of pairs one side started first once more. Over 140
# A/A case comparisons (same venv, two venvs, a venv and its copy; 10 each) the bare t-interval
# missed 0 in 11 (7.9%, nominal 5%), eight of them by less than 0.1% of the call, in both
# directions. The interval is widened by this much of the call on each side: a bias that small
# cannot pose as a change, and the threshold (0.75%) is far above it.
SIDE_ALLOWANCE = 0.001  # as a log ratio: 0.1%
# Stopping as soon as every case is decided looks at the data after every pair; a 95% interval
# checked that often excludes 0 by chance more often than 5% of the time (optional stopping).
# In 10 paired reports of a change that only touched the subclass cases, one stopped "decided"
# after 7 pairs with WithTorchFunction +24 ns [CI excluding 0] on the clock, counts unchanged.
# An early stop therefore needs every regression or improvement at 99%, as "no change" already
# does; at the time cap the verdicts are the usual 95% ones.
EARLY_STOP_CONFIDENCE = NO_CHANGE_CONFIDENCE
PAD_STEP = 1531  # bytes of environment padding added per pair: moves the initial stack
PAD_VARIABLE = "OVERRIDES_LAYOUT_PAD"
PROGRESS_EVERY_S = 1.0


@dataclasses.dataclass(frozen=True)
class ABConfig:
    pairs: int | None = None  # None: add pairs until decided or max_seconds (see _why_stop)
    max_seconds: float = DEFAULT_MAX_SECONDS
    seconds_per_pair: float = DEFAULT_SECONDS_PER_PAIR
    threads: int = 1
    threshold_ns: float = DEFAULT_THRESHOLD_NS
    threshold_pct: float = DEFAULT_THRESHOLD_PCT
    fix_layout: bool = True  # setarch -R + per-pair hash seed; off only to show why it is on
    # Load identical shared libraries from one file and copy differing ones per pair
    # (overrides/builds/placement.py); off only to show why it is on.
    match_placement: bool = True
    # Hash seeds to count instructions under (Callgrind), before the timing; empty: no counts.
    instruction_seeds: tuple[int, ...] = ()
    # The seeds were drawn (no --seeds): cases their counts leave undecided are counted under
    # more drawn seeds, up to rounds.MAX_COMPARE_SEEDS. A user's own seeds are kept as given.
    add_seeds: bool = False
    hash_seed_base: int | None = None  # None: drawn at random per comparison
    call_paths: bool = False  # count with Callgrind's call paths (overrides/counts/calltree.py)
    # Counts asked for by default rather than by the user: when counting fails (a torch built
    # without valgrind support), keep the clock's verdicts and say why instead of failing.
    instructions_optional: bool = False


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


def add_arguments(group) -> None:
    """The A/B's flags, shared by `bench.py --compare` and `report.sh`."""
    from overrides.argtypes import non_negative_float, positive_float, positive_int

    group.add_argument("--pairs", type=positive_int, default=None, metavar="P",
                       help="exactly P fresh worker pairs, each with its own memory layout "
                            "(default: add pairs until every case is decided or --max-seconds)")
    group.add_argument("--max-seconds", type=positive_float, default=DEFAULT_MAX_SECONDS, metavar="S",
                       help=f"time cap for the timed pairs (default {DEFAULT_MAX_SECONDS:g}; "
                            f"at least {MIN_PAIRS} pairs run)")
    group.add_argument("--pair-seconds", type=positive_float, default=DEFAULT_SECONDS_PER_PAIR,
                       metavar="S", help=f"sampling time per pair (default {DEFAULT_SECONDS_PER_PAIR:g})")
    group.add_argument("--threshold-ns", type=non_negative_float, default=DEFAULT_THRESHOLD_NS,
                       metavar="NS", help=f"smallest change worth a verdict, ns (default {DEFAULT_THRESHOLD_NS:g})")
    group.add_argument("--threshold-pct", type=non_negative_float, default=DEFAULT_THRESHOLD_PCT,
                       metavar="PCT", help=f"... or percent of base, whichever is larger "
                                           f"(default {DEFAULT_THRESHOLD_PCT:g})")


def config_from_arguments(args, instruction_seeds: Sequence[int] = (), threads: int = 1) -> ABConfig:
    return ABConfig(pairs=args.pairs, max_seconds=args.max_seconds,
                    seconds_per_pair=args.pair_seconds, threads=threads,
                    threshold_ns=args.threshold_ns, threshold_pct=args.threshold_pct,
                    instruction_seeds=tuple(instruction_seeds), add_seeds=not args.seeds)


class WorkerError(Exception):
    """A worker died or said it cannot go on."""


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, label: str, where: samepath.Placement, env: dict, config: ABConfig):
        self.label = label
        self.python = where.python
        command = [where.python, "-m", "overrides.ab.worker"]
        setarch = shutil.which("setarch")
        if config.fix_layout and setarch:
            command = [setarch, platform.machine(), "-R"] + command
        # Run from this checkout (`-m` puts the working directory first on sys.path, and a
        # PyTorch checkout's torch/ must not shadow the build); user cases are found through
        # USER_DIR_VARIABLE (see _worker_env). Where `where` is fixed, the checkout is seen at
        # samepath.FIXED_ROOT and the namespace launcher changes into it.
        self.process = subprocess.Popen(where.wrap(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
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


def _worker_env(config: ABConfig, pair: int, extra_pad: int, where: samepath.Placement) -> dict:
    """The environment of one worker: the same on both sides of a pair but for `extra_pad`,
    which makes up for a shorter interpreter path so both stacks start at the same place, and
    the side's import path (its view, overrides/builds/placement.py, or else its Build.torch_root),
    which comes before anything else torch could be imported from; all as `where` says the
    worker sees them."""
    env = dict(os.environ)
    env.pop(PAD_VARIABLE, None)
    with_import_path(env, where.tool, where.import_path)
    env["OVERRIDES_WORKER_THREADS"] = str(config.threads)
    env[USER_DIR_VARIABLE] = where.user_dir
    if where.pycache:  # each side's bytecode compiled at the fixed path (samepath.prime)
        env["PYTHONPYCACHEPREFIX"] = where.pycache
    env.update(MALLOC_ENV)
    if config.fix_layout:
        env["PYTHONHASHSEED"] = str(config.hash_seed_base + pair)
        env[PAD_VARIABLE] = "p" * (PAD_STEP * pair % 8192 + extra_pad)
    return env


class _Pair:
    """Two workers started together with matched layouts; which side starts (and prepares)
    first alternates from pair to pair, so an order effect cannot pose as a change."""

    def __init__(self, base_py: str, branch_py: str, index: int, config: ABConfig,
                 import_paths: dict | None = None, sources: dict | None = None):
        self.index = index
        sides = (("base", base_py), ("branch", branch_py))
        self.order = sides if index % 2 == 0 else sides[::-1]
        where = {label: samepath.place(python, (import_paths or {}).get(label), os.getcwd(),
                                       in_tool=True, source=(sources or {}).get(label))
                 for label, python in sides}
        for placed in where.values():
            samepath.prime(placed)
        self.placements = where
        # argv[0] and the kernel's copy of the path both sit on the new stack; the import path
        # once, in the environment (with one fixed path for both sides, these are equal).
        longest = max(len(w.python) for w in where.values())
        longest_path = max(len(w.import_path or "") for w in where.values())
        self.workers = {label: _Worker(label, where[label],
                                       _worker_env(config, index,
                                                   2 * (longest - len(where[label].python))
                                                   + longest_path - len(where[label].import_path or ""),
                                                   where[label]), config)
                        for label, _ in self.order}
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
              branch_ns: float, threshold_ns: float, threshold_pct: float,
              change_confidence: float = 0.95) -> Comparison:
    """Pool the per-pair estimates of one case into a delta, a 95% t-interval and a verdict
    (a regression or improvement at `change_confidence`, "no change" at NO_CHANGE_CONFIDENCE)."""
    logs = [e.log_ratio for e in estimates if e.case == case and e.op == op]
    if len(logs) < 2:
        return Comparison(case, op, base_ns, branch_ns, math.nan, None, "inconclusive", paired=True)
    mean = sum(logs) / len(logs)
    se = stats.stdev(logs) / math.sqrt(len(logs))
    half = stats.t_quantile(0.95, len(logs) - 1) * se + SIDE_ALLOWANCE
    judged = stats.t_quantile(change_confidence, len(logs) - 1) * se + SIDE_ALLOWANCE
    wide = stats.t_quantile(NO_CHANGE_CONFIDENCE, len(logs) - 1) * se + SIDE_ALLOWANCE
    delta = base_ns * math.expm1(mean)
    ci = (base_ns * math.expm1(mean - half), base_ns * math.expm1(mean + half))
    judged_ci = (base_ns * math.expm1(mean - judged), base_ns * math.expm1(mean + judged))
    no_change_ci = (base_ns * math.expm1(mean - wide), base_ns * math.expm1(mean + wide))
    verdict = judge(delta, judged_ci, threshold_for(base_ns, threshold_ns, threshold_pct), no_change_ci)
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


def _first_pair(base_py: str, branch_py: str, pooled: _Pooled, config: ABConfig,
                views: placement.Views, import_paths: dict, sources: dict) -> _Pair:
    """Pair 0, started on an idle machine; its base worker calibrates the calls per sample that
    every worker then uses."""
    views.for_pair(0)
    pair = _Pair(base_py, branch_py, 0, config, import_paths, sources)
    try:
        pair.wait_ready()
        _check_views(pair, views)
        wire = pooled.wire_targets()
        pair.start_prepare(wire, pooled.calls, only=("base",))
        pair.finish_prepare(("base",))
        pooled.calls = pair.prepared["base"]["calls"]
        pair.start_prepare(wire, pooled.calls, only=("branch",))
        pair.finish_prepare(("branch",))
    except BaseException:  # Ctrl-C or a failure: the caller never gets the pair to close
        pair.close()
        raise
    return pair


def _check_views(pair: _Pair, views: placement.Views) -> None:
    """Each worker must have imported torch from its view, and both must map every library the
    plan shares from one file; otherwise placement is not matched, and the record says so."""
    if not views.plan.active:
        return
    for label, worker in pair.workers.items():
        torch_path = worker.environment.get("torch_path", "")
        if not torch_path.startswith(pair.placements[label].import_path + os.sep):
            views.failed(f"the {label} worker imported torch from {torch_path}, not from its view")
            return
    # A GPU-only library never runs here, so where it sits does not matter; and one the plan
    # shares may still be mapped from its install, found through another GPU-only library's
    # own RPATH (libcupti.so.13 of torch 2.14.1 against 2.15.0).
    names = {os.path.basename(rel) for rel in views.plan.shared if not placement.GPU_ONLY.search(rel)}
    same = placement.shared_inodes(pair.workers["base"].process.pid,
                                   pair.workers["branch"].process.pid, names)
    views.verified = sorted(name for name, one_file in same.items() if one_file)
    unmatched = sorted(name for name, one_file in same.items() if not one_file)
    if unmatched:
        views.failed(f"libraries meant to be shared were mapped from different files: {', '.join(unmatched)}")


def _sample_pair(pair: _Pair, live: list[int], pooled: _Pooled, config: ABConfig,
                 say: Callable[[str], None], of: str) -> None:
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
                say(f"pair {pair.index + 1}{of}: sampling, round {rounds}")
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


def _comparisons(pooled: _Pooled, config: ABConfig,
                 change_confidence: float = 0.95) -> list[Comparison]:
    """Every target's comparison from what the pairs have gathered so far."""
    out = []
    for i, (case, op) in enumerate(pooled.targets):
        base_samples, branch_samples = pooled.samples["base"][i], pooled.samples["branch"][i]
        if pooled.errors[i] is not None or not base_samples or not branch_samples:
            out.append(Comparison(case.name, op.name, math.nan, math.nan, math.nan, None,
                                  "inconclusive", paired=True))
            continue
        out.append(summarise(pooled.estimates, case.name, op.name, stats.headline(base_samples),
                             stats.headline(branch_samples), config.threshold_ns,
                             config.threshold_pct, change_confidence))
    return out


def _why_stop(pooled: _Pooled, config: ABConfig, pairs_done: int, elapsed_s: float,
              pair_s: float, settled: dict | None = None) -> str | None:
    """Why no further pair should run, or None to go on. With a fixed number of pairs, that
    number; otherwise as soon as every target has a verdict (regression, improvement or no
    change) at EARLY_STOP_CONFIDENCE, from the clock or, for the (case, op)s in `settled`
    (mapped to their verdicts), from the instruction counts made before the pairs; or when the
    next pair would end past the time cap."""
    if config.pairs is not None:
        return "pairs given" if pairs_done >= config.pairs else None
    if pairs_done >= MIN_PAIRS and all(_decided(c, (settled or {}).get((c.case, c.op))) for c in
                                       _comparisons(pooled, config, EARLY_STOP_CONFIDENCE)):
        return "decided"
    if pairs_done >= MAX_PAIRS:
        return "pair limit"
    if pairs_done >= MIN_PAIRS and elapsed_s + pair_s > config.max_seconds:
        return "time cap"
    return None


def _waiting_for(pooled: _Pooled, config: ABConfig, pairs_done: int, elapsed_s: float,
                 settled: dict) -> str:
    """What the next pair is for, and how long at most is left, for the progress line."""
    if config.pairs is not None:
        return f"{config.pairs - pairs_done} of {config.pairs} pairs left"
    if pairs_done < MIN_PAIRS:
        return f"at least {MIN_PAIRS} pairs, {MIN_PAIRS - pairs_done} to go"
    open_ = [c.case for c in _comparisons(pooled, config, EARLY_STOP_CONFIDENCE)
             if not _decided(c, settled.get((c.case, c.op)))]
    return (f"waiting for {', '.join(dict.fromkeys(open_))} to be decided, "
            f"at most ~{max(0.0, config.max_seconds - elapsed_s):.0f} s more")


def _decided(clock: Comparison, counts_verdict: str | None) -> bool:
    """Whether a case needs no more pairs: the clock decided it, or the counts did and the clock
    (at EARLY_STOP_CONFIDENCE) does not go against them. A clock that does is sampled on to the
    cap before it may be called `clock only`: after 5 pairs, 99% sure, it read +44 ns (+1.1%) on
    SubWithTorchFunction in one of 40 A/A comparisons whose counts were equal."""
    if counts_verdict is None:
        return clock.verdict in DECIDED
    return clock_and_counts(clock.verdict, counts_verdict) not in ("clock only", "disagree")


def _hash_seed_base(config: ABConfig) -> int:
    """Pair p runs with PYTHONHASHSEED = base + p: a fresh set of layouts every comparison
    (the first version used the same seeds every time), unless the config fixes it."""
    if config.hash_seed_base is not None:
        return config.hash_seed_base
    return random.SystemRandom().randrange(1, HASH_SEED_LIMIT - MAX_PAIRS)


def run_ab(
    base_spec: "str | Build",
    branch_spec: "str | Build",
    cases: Sequence[Case],
    ops: Sequence[Op],
    config: ABConfig = ABConfig(),
    progress: Callable[[str], None] | None = None,
    keep_interrupted: bool = True,
) -> ABResult:
    """Measure base and branch side by side; see the module docstring for the method. A side
    is an interpreter spec, or a Build (an interpreter with a kept copy of torch). Ctrl-C
    returns what was measured, marked interrupted; without `keep_interrupted` (a caller that
    keeps nothing partial) the KeyboardInterrupt goes on once the workers are stopped."""
    say = progress or (lambda message: None)
    base, branch = probe_interpreter(base_spec), probe_interpreter(branch_spec)
    base_py, branch_py = base.executable, branch.executable
    config = dataclasses.replace(config, hash_seed_base=_hash_seed_base(config))
    pooled = _Pooled.empty([(case, op) for op in ops for case in cases])
    started = time.monotonic()
    interrupted = False
    pairs_done = 0
    stopped = "interrupted"
    current = upcoming = None
    if config.match_placement:
        say("matching the two builds' shared libraries (placement)")
        # A kept copy's folder holds torch alone: then both views do (placement.plan).
        plan = placement.plan(base.torch_dir, branch.torch_dir,
                              torch_only=bool(base.torch_root or branch.torch_root))
    else:
        plan = placement.PlacementPlan(None, reason="switched off")
    views = placement.Views(plan)
    # Where each side imports torch from first: its view, or without views its kept copy.
    import_paths = {"base": views.paths["base"] or base.torch_root,
                    "branch": views.paths["branch"] or branch.torch_root}
    # ... and the folder that stands for (a view is new every comparison; its source is not).
    sources = ({side: root for side, root in zip(placement.SIDES, plan.roots)} if views.paths["base"]
               else dict(import_paths))
    same_path = samepath.record(samepath.place(python, import_paths[side], os.getcwd(), in_tool=True,
                                               source=sources[side])
                                for side, python in (("base", base_py), ("branch", branch_py)))
    say(f"start-up paths: {same_path['summary']}")
    of = f"/{config.pairs}" if config.pairs is not None else f" (until decided, up to {config.max_seconds:.0f} s)"
    counted: _Counted | None = None
    try:  # the views live until the pairs are done
        try:
            if config.instruction_seeds:
                counted = _count_first(base_py, branch_py, pooled.targets, config, say,
                                       [import_paths["base"], import_paths["branch"]],
                                       [sources["base"], sources["branch"]])
            settled = counted.settled if counted else {}
            say(f"pair 1{of}: starting workers and calibrating")
            # The time cap is the clock's: counting first does not shorten it.
            pairs_started = pair_started = time.monotonic()
            current = _first_pair(base_py, branch_py, pooled, config, views, import_paths, sources)
            while True:
                pooled.environments = {label: w.environment for label, w in current.workers.items()}
                live = _live_targets(current, pooled)
                _sample_pair(current, live, pooled, config, say, of)
                _collect(current, pooled)
                current.close()
                current = None
                pairs_done += 1
                now = time.monotonic()
                why = _why_stop(pooled, config, pairs_done, now - pairs_started, now - pair_started,
                                settled)
                if why:
                    stopped = why
                    break
                # Started only now, on an idle machine: see the module docstring.
                say(f"pair {pairs_done + 1}{of}: starting workers; "
                    f"{_waiting_for(pooled, config, pairs_done, now - pairs_started, settled)}")
                pair_started = now
                views.for_pair(pairs_done)
                upcoming = _Pair(base_py, branch_py, pairs_done, config, import_paths, sources)
                upcoming.start_prepare(pooled.wire_targets(), pooled.calls)
                upcoming.finish_prepare()
                current, upcoming = upcoming, None
        except KeyboardInterrupt:
            if not keep_interrupted:
                raise
            interrupted = True
            say(f"interrupted after {pairs_done} pairs; keeping what was measured")
        except WorkerError as exc:
            raise UsageError(str(exc)) from None
        finally:
            for pair in (current, upcoming):
                if pair is not None:
                    pair.close()
        return _finish(base, branch, pooled, config, views, pairs_done, stopped, interrupted,
                       started, counted, same_path)
    finally:
        views.close()


def _finish(base: Interpreter, branch: Interpreter, pooled: _Pooled, config: ABConfig,
            views: placement.Views, pairs_done: int, stopped: str, interrupted: bool,
            started: float, counted: "_Counted | None", same_path: dict) -> ABResult:
    """The timed pairs' results, judged with the instruction counts where they were counted."""
    settings = {"mode": "paired A/B", "pairs": pairs_done, "pairs_asked": config.pairs,
                "max_seconds": config.max_seconds if config.pairs is None else None,
                "stopped": stopped, "min_pairs": MIN_PAIRS,
                "seconds_per_pair": config.seconds_per_pair, "threads": config.threads,
                "fix_layout": config.fix_layout, "hash_seed_base": config.hash_seed_base,
                "threshold_ns": config.threshold_ns, "threshold_pct": config.threshold_pct,
                "no_change_confidence": NO_CHANGE_CONFIDENCE,
                "calls_per_sample": pooled.calls, "placement": views.record(), "same_path": same_path,
                "torch_roots": {"base": base.torch_root, "branch": branch.torch_root},
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
    comparisons = _comparisons(pooled, config)
    if counted is not None and counted.skipped:
        settings["instructions_skipped"] = counted.skipped
    elif counted is not None:
        from overrides import compare
        from overrides.counts import records
        from overrides.counts.judge import DEFAULT_THRESHOLD_INSTRUCTIONS

        settings["instructions"] = {"seeds": list(counted.seeds),
                                    "threshold": DEFAULT_THRESHOLD_INSTRUCTIONS,
                                    "threshold_pct": config.threshold_pct,
                                    "seeds_added": list(counted.seeds_added),
                                    "counted_first_s": round(counted.seconds, 1),
                                    "settled_by_counts": sorted(f"{case} {op}" for case, op in counted.settled)}
        runs = {side: dataclasses.replace(run, instructions=records.to_dict(counts))
                for (side, run), counts in zip(runs.items(), counted.runs)}
        sure_clock = {(c.case, c.op): c.verdict
                      for c in _comparisons(pooled, config, NO_CHANGE_CONFIDENCE)}
        comparisons = compare.with_counts(comparisons, counted.comparisons, sure_clock)
    return ABResult(tuple(comparisons), runs["base"], runs["branch"], tuple(pooled.estimates),
                    settings, time.monotonic() - started, interrupted)


# Asks an interpreter which (case, op)s apply (overrides.cases.ops.not_applicable_reason) and
# prints them as JSON, or {"error": ...} for a user case that cannot be built.
_NOT_APPLICABLE_PROBE = (
    "import json, sys\n"
    "from overrides.errors import UsageError\n"
    "try:\n"
    "    from overrides.cases.ops import get_op, not_applicable_reason\n"
    "    from overrides.cases.registry import get_case\n"
    "    answer = [not_applicable_reason(get_case(c), get_op(o)) for c, o in json.loads(sys.argv[1])]\n"
    "except UsageError as error:\n"
    "    answer = {'error': str(error)}\n"
    "print(json.dumps(answer))\n")


def _countable(targets: Sequence[tuple[Case, Op]], python: str,
               import_path: str | None) -> list[tuple[str, str]]:
    """The (case, op) names worth counting: those the op applies to. A built-in case declares
    where it does not; a user case (`pkg.module:factory`) is tried by `python`, as a worker
    would, because this process has no torch to try it with."""
    declared = [(case.name, op.name) for case, op in targets if not case.not_applicable_to(op)]
    unknown = [(case, op) for case, op in declared if ":" in case]
    if not unknown:
        return declared
    env = with_import_path(dict(os.environ), ROOT, import_path)
    env[USER_DIR_VARIABLE] = os.getcwd()
    try:
        asked = subprocess.run([python, "-c", _NOT_APPLICABLE_PROBE, json.dumps(unknown)],
                               capture_output=True, text=True, env=env, cwd=ROOT,
                               timeout=PROBE_TIMEOUT_S)
        answer = json.loads(asked.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        raise UsageError(f"{python} took over {PROBE_TIMEOUT_S} s to build the user cases") from None
    except (IndexError, json.JSONDecodeError):
        err = asked.stderr.strip().splitlines()
        raise UsageError(f"{python} could not build the user cases: "
                         f"{err[-1] if err else 'no message'}") from None
    if isinstance(answer, dict):
        raise UsageError(answer["error"])
    skipped = {target for target, reason in zip(unknown, answer) if reason}
    return [target for target in declared if target not in skipped]


def counts_progress(settled: int, wanted: int) -> str:
    """What the clock does next, once the counts are in."""
    left = wanted - settled
    if not left:
        return (f"counts decide all {wanted} case{'s' if wanted != 1 else ''}; the clock checks "
                f"them over {MIN_PAIRS} pairs")
    return (f"counts decide {settled} of {wanted} cases; the clock runs until the other {left} "
            f"{'is' if left == 1 else 'are'} decided, or its cap")


@dataclasses.dataclass(frozen=True)
class _Counted:
    """Both builds' instruction counts, made before the timed pairs."""

    runs: tuple = ()  # (base CountRuns, branch CountRuns)
    comparisons: tuple = ()  # judge.CountComparison per counted target
    seconds: float = 0.0
    skipped: str | None = None  # why there are no counts (optional counting that failed)
    seeds: tuple[int, ...] = ()  # every seed counted under, the added ones last
    seeds_added: tuple[int, ...] = ()  # those that counted only the cases left undecided

    @property
    def settled(self) -> dict:
        """(case, op) -> the counts' verdict, for the cases the counts decide."""
        return {(c.case, c.op): c.verdict for c in self.comparisons if c.verdict in DECIDED}


def _count_first(base_py: str, branch_py: str, targets, config: ABConfig, say,
                 import_paths: Sequence[str | None], sources: Sequence[str | None]) -> _Counted:
    """Count instructions on both sides under the same seeds, before the timed pairs. The
    counts judge (see compare), so a case they decide needs no more than MIN_PAIRS of the clock:
    a clear change, or none at all between two copies of one build, ends the timing early.
    Counted through the views, like the workers: both sides' import paths have one length."""
    from overrides.counts import callgrind, rounds

    started = time.monotonic()
    wanted = _countable(targets, base_py, import_paths[0])
    first = rounds.first_round(config.instruction_seeds, config.add_seeds)
    say(f"counting instructions first: {first} seed{'s' if first != 1 else ''} x 2 builds with Callgrind, "
        f"{min(2 * first, callgrind.count_jobs())} at once"
        + (f"; more seeds for cases left undecided, up to {rounds.MAX_COMPARE_SEEDS}" if config.add_seeds else ""))

    def count(targets_: list, seeds_: Sequence[int]) -> list[list]:
        return callgrind.count_builds([base_py, branch_py], targets_, seeds_, say=say,
                                      tree=config.call_paths, import_paths=import_paths, sources=sources)

    try:
        base_counts, branch_counts, comparisons, seeds = rounds.count_until_decided(
            count, wanted, config.instruction_seeds, config.add_seeds, say,
            threshold_pct=config.threshold_pct)
    except UsageError as error:
        if not config.instructions_optional:
            raise
        say(f"instruction counts skipped: {error}")
        return _Counted(skipped=str(error))
    added = tuple(run.seed for run in base_counts if len(run.cases) < len(wanted))
    counted = _Counted((base_counts, branch_counts), tuple(comparisons), time.monotonic() - started,
                       seeds=seeds, seeds_added=added)
    say(counts_progress(len(counted.settled), len(wanted)))
    return counted
