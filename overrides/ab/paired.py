"""Paired, interleaved A/B: two environments measured side by side, with intervals you can trust.

Why each piece is there (the figures that were the evidence, measured on the 2-core VM this was
built on: benchmarks/history.md, 'Docstring figures'):
- One persistent worker process per environment (`overrides/ab/worker.py`); the parent asks for
  one ~1 ms sample at a time, alternating base and branch for each case (and which goes first
  alternates every round), so only one worker runs at a time and both see the same machine.
  The machine's slow spells last seconds, so neighbouring samples see the same spell.
- A pair's estimate per case is the median, over rounds, of log(branch sample / base sample
  beside it). Pairing in time cancels the slow spells sample by sample: its spread is a
  fraction of that of the ratio of the two sides' p10 headlines (the first version), which must
  wait for enough undisturbed samples on both sides.
- Nothing else runs while a pair samples: the parent pins itself and both workers to one CPU,
  and the next pair starts only after this one is done. Load on the other vCPU slows this one
  (its p10, and its medians more); starting the next pair in the background (the first
  version) made p10-ratio estimates swing widely, and even with the paired median it gained
  nothing (two imports on one CPU take as long as a pair samples) and read the bare shim's
  cost lower than without it.
- Every process is launched by its interpreter's real path (`sys.executable` as the interpreter
  reports it), never through a wrapper: pyenv's `python3` shim adds its own variables to the
  environment, which moved the stack and faked a change on SubTensor in a venv-against-base A/A.
  The environment blocks of the two sides are padded to the same size, so the stacks line up.
- Memory layout differs per process and moves a call by several percent under address-space
  randomisation. Within a pair, layouts are matched: randomisation off (`setarch -R`), the same
  `PYTHONHASHSEED`, the same environment padding, the same CPU. What is left still differs
  from process to process (on the subclass cases in A/A, same interpreter on both sides),
  and two *different* environments differ by a layout amount too. So the layout is varied
  between pairs (a new hash seed and padding each pair), which side starts and prepares first
  alternates, and the 95% interval is a t-interval over the per-pair estimates: as wide as
  process-to-process luck really is.
- glibc malloc's heap-top state alone moved plain `torch.add` between a virtualenv and its base
  interpreter, the same in every pair; each worker pins it (`overrides/clock/allocator.py`).
- Calls per sample are calibrated once (first pair, base side) and used by both sides in every
  pair, so each case's samples are alike and pool into one result per side.
- Each side imports torch through a view (`overrides/builds/placement.py`): libraries identical on
  both sides are mapped from one file, differing ones from fresh copies every pair. Two installs
  of one wheel otherwise differed, beyond the threshold, through where their pages sat in
  memory.
- Pairs are added until every case has a verdict or the time cap (`estimates.why_stop`), and every
  comparison draws its own hash seeds: the same seeds every time made every run's pairs the same
  sample of layouts.
- Instruction counts, when asked for, are made first (`countfirst.py`): they judge, so a case
  whose counts are decided needs only MIN_PAIRS of the clock, and where they decide every case
  those pairs sample for CHECK_SECONDS_PER_PAIR (the clock then only checks them, and the
  layouts the pairs draw, not how long each samples, set its interval). Counted after the
  pairs (the first version), most A/A comparisons ran the clock to its time cap and only then
  counted, although the counts said "no change" to the instruction. Cases whose counts spread
  too far over the drawn seeds are counted under more (`counts/rounds.py`); counts still too
  spread settle nothing: the clock goes on for those cases, and judges them. Nor do counts
  settle a case whose clock goes against them (`estimates.decided`): it is sampled on to the cap
  before it may be called `clock only`.

This module runs a comparison (`run_ab`); beside it in `overrides/ab/`: `config.py` (ABConfig
and the flags), `pairs.py` (the parent's handles on its workers), `worker.py` (the worker
process), `estimates.py` (what the pairs say, and when to stop), `countfirst.py` (the counts
made first) and `named.py` (what changed in the cases that moved, by name, counted after).
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from typing import Callable, Sequence

from overrides.ab.config import MAX_PAIRS, MIN_PAIRS, ABConfig
from overrides.ab.countfirst import Counted, check_seconds, count_first
from overrides.ab.named import with_names
from overrides.ab.estimates import (PairEstimate, Pooled, compare_pooled, pair_estimates, waiting_for,
                                    why_stop)
from overrides.ab.pairs import Pair, pin, timing_cpu
from overrides.ab.worker import RESULT, SAMPLE, Request, Result, Sampled
from overrides.builds import placement, samepath
from overrides.builds.interpreters import Build, Interpreter, probe_interpreter
from overrides.cases.casenames import Case
from overrides.cases.ops import Op
from overrides.counts import records
from overrides.case_comparison import Comparison
from overrides.comparison_settings import (PAIRED, ComparisonSettings, CountSettings, LibraryPlacement, NotTimed,
                                           StartupPaths)
from overrides.run_settings import RunSettings
from overrides.environment import Environment
from overrides.results import CaseResult, RunResult
from overrides.sides import BASE, BRANCH, ROLES, Sides
from overrides.verdicts import NO_CHANGE_CONFIDENCE
from overrides.workers import WorkerDied

HASH_SEED_LIMIT = 2**32 - 1  # PYTHONHASHSEED's largest value
# Workers that may die (killed, crashed) in one comparison before it ends with the pairs it
# finished: each death costs its own pair, started again with the same layout. Two: an
# out-of-memory kill or a rare crash is met once or twice; a case that crashes every time
# ends the comparison after three pairs' start-ups, not thirty.
WORKER_RETRIES = 2
PROGRESS_EVERY_S = 1.0


@dataclasses.dataclass(frozen=True)
class ABResult:
    comparisons: tuple[Comparison, ...]
    base_run: RunResult
    branch_run: RunResult
    pairs: tuple[PairEstimate, ...]
    settings: ComparisonSettings
    wall_s: float
    interrupted: bool = False
    failure: str = ""  # a worker that died past its retries ended it: the pairs finished are kept


def _live_targets(pair: Pair, pooled: Pooled) -> list[int]:
    """The targets both prepared workers of `pair` can time; records the others' errors."""
    live = []
    for i, errors in enumerate(zip(*(prepared.errors for prepared in pair.prepared))):
        e_base, e_branch = errors
        if e_base or e_branch:
            pooled.errors[i] = e_base if e_base == e_branch else "; ".join(
                f"{side}: {e}" for side, e in zip(ROLES, errors) if e)
        elif pooled.errors[i] is None:
            live.append(i)
    return live


def _user_modules(pair: Pair, label: str) -> dict:
    """{spec: file} of what the side's worker ran of yours, the files as they are outside its
    namespace (builds/samepath.py mounts your folder at a fixed path)."""
    prepared = pair.prepared.side(label)
    modules = prepared.modules if prepared else {}
    where = pair.placements.side(label)
    return {spec: os.path.realpath(where.seen_from_outside(path)) for spec, path in modules.items()} \
        if modules else {}


def _first_pair(base_py: str, branch_py: str, pooled: Pooled, config: ABConfig,
                views: placement.Views, import_paths: Sides, sources: Sides) -> Pair:
    """Pair 0, started on an idle machine; its base worker calibrates the calls per sample that
    every worker then uses."""
    views.for_pair(0)
    pair = Pair(base_py, branch_py, 0, config, import_paths, sources)
    try:
        pair.wait_ready()
        _check_views(pair, views)
        wire = pooled.wire_targets()
        pair.start_prepare(wire, pooled.calls, only=(BASE,))
        pair.finish_prepare((BASE,))
        pooled.calls = list(pair.prepared.base.calls)
        pair.start_prepare(wire, pooled.calls, only=(BRANCH,))
        pair.finish_prepare((BRANCH,))
    except BaseException:  # Ctrl-C or a failure: the caller never gets the pair to close
        pair.close()
        raise
    return pair


def _check_views(pair: Pair, views: placement.Views) -> None:
    """Each worker must have imported torch from its view, and both must map every library the
    plan shares from one file; otherwise placement is not matched, and the record says so."""
    if not views.plan.active:
        return
    for (label, worker), where in zip(pair.workers.roles(), pair.placements):
        torch_path = worker.environment.torch_path or ""
        if not torch_path.startswith(where.import_path + os.sep):
            views.failed(f"the {label} worker imported torch from {torch_path}, not from its view")
            return
    # A GPU-only library never runs here, so where it sits does not matter; and one the plan
    # shares may still be mapped from its install, found through another GPU-only library's
    # own RPATH (libcupti.so.13 of torch 2.14.1 against 2.15.0).
    names = {os.path.basename(rel) for rel in views.plan.shared if not placement.GPU_ONLY.search(rel)}
    same = placement.shared_inodes(pair.workers.base.process.pid, pair.workers.branch.process.pid, names)
    views.verified = sorted(name for name, one_file in same.items() if one_file)
    unmatched = sorted(name for name, one_file in same.items() if not one_file)
    if unmatched:
        views.failed(f"libraries meant to be shared were mapped from different files: {', '.join(unmatched)}")


def _sample_pair(pair: Pair, live: list[int], pooled: Pooled, config: ABConfig,
                 say: Callable[[str], None], of: str) -> None:
    """Alternate one sample of base and branch per target until the pair's time is spent."""
    base, branch = pair.workers
    cpu = timing_cpu()
    parent_cpus = os.sched_getaffinity(0) if cpu is not None else None
    pin([base.process.pid, branch.process.pid, 0], cpu)
    try:
        started = time.monotonic()
        next_report = started + PROGRESS_EVERY_S
        rounds = 0
        while live and time.monotonic() - started < config.seconds_per_pair:
            for position, i in enumerate(live):
                order = (base, branch) if (rounds + position) % 2 == 0 else (branch, base)
                for worker in order:
                    worker.doing = f"timing {pooled.targets[i][0].name} [{pooled.targets[i][1].name}]"
                    reply = Sampled.from_dict(worker.ask(Request(SAMPLE, target=i).to_dict()))
                    if reply.error:
                        pooled.errors[i] = f"{worker.label}: {reply.error}"
            live = [i for i in live if pooled.errors[i] is None]
            rounds += 1
            if time.monotonic() >= next_report:
                say(f"pair {pair.index + 1}{of}: sampling, round {rounds}")
                next_report += PROGRESS_EVERY_S
    finally:
        if parent_cpus is not None:
            os.sched_setaffinity(0, parent_cpus)


def _collect(pair: Pair, pooled: Pooled) -> None:
    """The pair's samples into the pool, and its per-case estimates."""
    for worker in pair.workers:
        worker.doing = "handing over its samples"
    outputs = pair.workers.map(lambda worker: Result.from_dict(worker.ask(Request(RESULT).to_dict())).targets)
    for out, samples, loop_cost in zip(outputs, pooled.samples, pooled.loop_cost):
        for i, target in enumerate(out):
            samples[i].extend(target.samples_ns)
            loop_cost[i] = target.loop_overhead_ns
    ok = [i for i in range(len(pooled.targets)) if pooled.errors[i] is None]
    pooled.estimates += pair_estimates(pair.index, [pooled.targets[i] for i in ok],
                                        *([out[i] for i in ok] for out in outputs))


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
    config = dataclasses.replace(config, hash_seed_base=_hash_seed_base(config))
    pooled = Pooled.empty([(case, op) for op in ops for case in cases])
    started = time.monotonic()
    sides = _placed(base, branch, config, say)
    loop = _Loop()
    interrupted = False
    counted: Counted | None = None
    try:  # the views live until the pairs are done
        try:
            if config.instruction_seeds:
                counted = count_first(sides.base_py, sides.branch_py, pooled.targets, config, say,
                                      list(sides.import_paths), list(sides.sources))
            shorter = check_seconds(config, counted, pooled.targets)  # the clock only checks the counts
            config = dataclasses.replace(config, seconds_per_pair=shorter or config.seconds_per_pair)
            # a count that died: the clock goes on, and the counts judge on the seeds that stand
            loop.failure = "; ".join(f"{side} {died}" for side, runs in zip(ROLES, counted.runs if counted else ())
                                     for died in records.deaths(runs))
            _run_pairs(sides, pooled, config, counted.settled if counted else {}, say, loop)
        except KeyboardInterrupt:
            if not keep_interrupted:
                raise
            interrupted = True
            say(f"interrupted after {loop.pairs_done} pairs; keeping what was measured")
        finally:
            if loop.current is not None:
                loop.current.close()
        result = _finish(base, branch, pooled, config, sides.views, loop.pairs_done, loop.stopped, interrupted,
                         started, counted, sides.same_path, loop.deaths, loop.failure)
    finally:
        sides.views.close()
    if not config.name_functions or interrupted:
        return result
    counts_off = None if counted is not None and not counted.skipped else (counted.skipped if counted else "")
    try:
        named = with_names(result.comparisons, base, branch, config, counts_off, say)
        return dataclasses.replace(result, comparisons=named, wall_s=time.monotonic() - started)
    except KeyboardInterrupt:
        if not keep_interrupted:
            raise
        return dataclasses.replace(result, interrupted=True)


@dataclasses.dataclass(frozen=True)
class _Sides:
    """Both sides placed: their interpreters, the library views they load torch's shared
    libraries from, where each imports torch from first, and the folder that stands for it."""

    base_py: str
    branch_py: str
    views: placement.Views
    import_paths: Sides  # each side's view, or without views its kept copy (or None)
    sources: Sides  # the folder that stands for each side (a view is new every comparison)
    same_path: StartupPaths  # samepath.record: how both start from one path


def _placed(base: Interpreter, branch: Interpreter, config: ABConfig, say: Callable[[str], None]) -> _Sides:
    """Match the two builds' shared libraries (placement) and settle each side's start-up path."""
    if config.match_placement:
        say("matching the two builds' shared libraries (placement)")
        # A kept copy's folder holds torch alone: then both views do (placement.plan).
        plan = placement.plan(base.torch_dir, branch.torch_dir,
                              torch_only=bool(base.torch_root or branch.torch_root))
    else:
        plan = placement.PlacementPlan(None, reason="switched off")
    views = placement.Views(plan)
    import_paths = Sides.of([view or build.torch_root for view, build in zip(views.paths, (base, branch))])
    sources = Sides.of(plan.roots) if views.paths.base else import_paths
    same_path = StartupPaths.from_dict(samepath.record(
        samepath.place(python, import_path, os.getcwd(), in_tool=True, source=source)
        for python, import_path, source in zip((base.executable, branch.executable), import_paths, sources)))
    say(f"start-up paths: {same_path.summary}")
    return _Sides(base.executable, branch.executable, views, import_paths, sources, same_path)


@dataclasses.dataclass
class _Loop:
    """Where the pair loop stands, kept up to date as it goes, so that Ctrl-C or a worker's
    death keeps what finished (never leaves this module)."""

    pairs_done: int = 0
    stopped: str = "interrupted"  # why sampling stopped (settings.stopped)
    deaths: list = dataclasses.field(default_factory=list)  # each worker that died, in words, in order
    failure: str = ""  # what ended the comparison early, after its retries
    current: Pair | None = None  # the pair running now, closed by whoever stops the loop


def _run_pairs(sides: _Sides, pooled: Pooled, config: ABConfig, settled: dict,
               say: Callable[[str], None], loop: _Loop) -> None:
    """Pairs of fresh workers, one after the other, until the stop rule (`why_stop`) says so;
    a pair whose worker died is run again with fresh workers, up to WORKER_RETRIES."""
    of = f"/{config.pairs}" if config.pairs is not None else f" (until decided, up to {config.max_seconds:.0f} s)"
    say(f"pair 1{of}: starting workers and calibrating")
    # The time cap is the clock's: counting first does not shorten it.
    pairs_started = pair_started = time.monotonic()
    while True:
        try:
            if loop.pairs_done == 0:
                loop.current = _first_pair(sides.base_py, sides.branch_py, pooled, config, sides.views,
                                           sides.import_paths, sides.sources)
            else:
                # Started only now, on an idle machine: see the module docstring.
                sides.views.for_pair(loop.pairs_done)
                loop.current = Pair(sides.base_py, sides.branch_py, loop.pairs_done, config,
                                    sides.import_paths, sides.sources)
                loop.current.start_prepare(pooled.wire_targets(), pooled.calls)
                loop.current.finish_prepare()
            # what each side ran of yours (its user cases' files) goes with its environment
            pooled.environments = Sides.of([w.environment.with_user_modules(_user_modules(loop.current, label))
                                            for label, w in loop.current.workers.roles()])
            live = _live_targets(loop.current, pooled)
            _sample_pair(loop.current, live, pooled, config, say, of)
            _collect(loop.current, pooled)  # the pair's samples count only once all are read
        except WorkerDied as exc:  # one that said why (WorkerSaid) is a UsageError: not retried
            if loop.current is not None:
                loop.current.close()
            loop.current = None
            loop.deaths.append(str(exc))
            if len(loop.deaths) > WORKER_RETRIES:
                loop.failure = "; ".join(filter(None, [loop.failure, f"{exc}; {len(loop.deaths)} workers died "
                                                       f"in this comparison, {WORKER_RETRIES} were retried"]))
                loop.stopped = f"a worker died: {exc}"
                say(f"pair {loop.pairs_done + 1}{of}: {exc}; not retried again, keeping the {loop.pairs_done} "
                    "pairs finished")
                return
            say(f"pair {loop.pairs_done + 1}{of}: {exc}; its samples dropped, starting it again with "
                f"fresh workers (retry {len(loop.deaths)} of {WORKER_RETRIES})")
            continue
        loop.current.close()
        loop.current = None
        loop.pairs_done += 1
        now = time.monotonic()
        why = why_stop(pooled, config, loop.pairs_done, now - pairs_started, now - pair_started, settled)
        if why:
            loop.stopped = why
            return
        say(f"pair {loop.pairs_done + 1}{of}: starting workers; "
            f"{waiting_for(pooled, config, loop.pairs_done, now - pairs_started, settled)}")
        pair_started = now


def _finish(base: Interpreter, branch: Interpreter, pooled: Pooled, config: ABConfig,
            views: placement.Views, pairs_done: int, stopped: str, interrupted: bool,
            started: float, counted: "Counted | None", same_path: StartupPaths, deaths: Sequence[str] = (),
            failure: str = "") -> ABResult:
    """The timed pairs' results, judged with the instruction counts where they were counted."""
    user_modules = pooled.environments.map(lambda environment: environment.user_modules)
    settings = ComparisonSettings(
        mode=PAIRED, pairs=pairs_done, pairs_asked=config.pairs,
        max_seconds=config.max_seconds if config.pairs is None else None,
        stopped=stopped, min_pairs=MIN_PAIRS, seconds_per_pair=config.seconds_per_pair,
        threads=config.threads, fix_layout=config.fix_layout, hash_seed_base=config.hash_seed_base,
        threshold_ns=config.threshold_ns, threshold_pct=config.threshold_pct,
        no_change_confidence=NO_CHANGE_CONFIDENCE, calls_per_sample=tuple(pooled.calls),
        placement=LibraryPlacement.from_dict(views.record()), same_path=same_path,
        torch_roots=Sides(base.torch_root, branch.torch_root),
        estimator="mean over pairs of the median log ratio of neighbouring samples",
        # n/a (the op does not apply) or failed, in words, for the notes
        not_timed=tuple(NotTimed(f"{case.name} [{op.name}]", error)
                        for (case, op), error in zip(pooled.targets, pooled.errors) if error),
        # two versions of your code, one interpreter: the row is named by the base's
        your_code=Sides.of(config.your_code) if config.your_code else None,
        workers_died=tuple(deaths),  # each cost its pair, retried up to WORKER_RETRIES
        incomplete=failure,
        # which file of yours each side's clock ran
        user_modules=user_modules if any(user_modules) else None)

    def run_of(side: str, environment: Environment, samples: list, loop_cost: list) -> RunResult:
        case_results = tuple(
            CaseResult(case=case.name, op=op.name, stmt=case.stmt_for(op), description=case.description,
                       calls_per_sample=pooled.calls[i] or 0, samples_ns=tuple(samples[i]),
                       loop_overhead_ns=loop_cost[i], error=pooled.errors[i] if not samples[i] else None,
                       baseline=case.baseline)
            for i, (case, op) in enumerate(pooled.targets))
        return RunResult(environment, RunSettings(side=side, comparison=settings), case_results,
                         interrupted=interrupted or bool(failure), wall_s=time.monotonic() - started)

    runs = Sides.of([run_of(*side) for side in zip(ROLES, pooled.environments, pooled.samples, pooled.loop_cost)])
    comparisons = compare_pooled(pooled, config)
    if counted is not None and counted.skipped:
        settings = dataclasses.replace(settings, instructions_skipped=counted.skipped)
    elif counted is not None:
        from overrides import case_comparison
        from overrides.counts.judge import DEFAULT_THRESHOLD_INSTRUCTIONS

        settings = dataclasses.replace(settings, instructions=CountSettings(
            tuple(counted.seeds), DEFAULT_THRESHOLD_INSTRUCTIONS, config.threshold_pct,
            tuple(counted.seeds_added), round(counted.seconds, 1),
            tuple(sorted(f"{case} {op}" for case, op in counted.settled))))
        runs = Sides.of([dataclasses.replace(run, instructions=records.as_saved(counts))
                         for run, counts in zip(runs, counted.runs)])
        sure_clock = {(c.case, c.op): c.verdict
                      for c in compare_pooled(pooled, config, NO_CHANGE_CONFIDENCE)}
        comparisons = case_comparison.with_counts(comparisons, counted.comparisons, sure_clock)
    return ABResult(tuple(comparisons), runs.base, runs.branch, tuple(pooled.estimates),
                    settings, time.monotonic() - started, interrupted, failure)


