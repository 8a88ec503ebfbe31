"""Instruction counts with Callgrind: the builds, seeds and jobs counted, by which processes.

Wall time on a shared machine is noisy; instruction counts are not. A 95 ns change is hundreds
of instructions. How the counts are made, and why (the figures that were the evidence, from the
valgrind 3.19 / torch 2.13 CPU machine this was built on: benchmarks/history.md, 'Docstring
figures'):

- One valgrind process per build and hash seed imports torch, started with the interpreter
  asked for (never `python` from PATH), and forks a child for every job: all the cases given,
  or (`isolated.py`) each module of the user's and each layout variant, so that one module's
  code does not move another's counts (`forkserver.py`: why a child counts as a process of its
  own did, and what it saves). `torch.utils.benchmark`'s `collect_callgrind` starts valgrind
  and imports torch anew for every Timer: a whole import under valgrind per case.
- Instrumentation is off while Python starts and imports torch (`--instr-atstart=no`: most of
  a run was `import torch` under instrumentation). When the worker is ready, the parent
  switches it on from outside (`callgrind_control -i on PID`); with instrumentation off the
  collection toggles count nothing. Collection (`--collect-atstart=no`) is toggled on and off
  around each measured loop through torch's client requests, and each loop dumps its own
  profile. The worker leaves with `os._exit`: interpreter shutdown under valgrind costs
  seconds.
- `import torch` under valgrind is most of the wall time (translating libtorch's static
  initialisers and torch's Python modules; no VEX option made it faster, and
  `--vex-iropt-level=0` made it slower). So it is paid once per build and seed, and `bench.py`
  starts the servers before it imports torch itself (`head_start`, from a guess at its command
  line): the parent's own start-up then overlaps it.
- Repeats of a loop were bimodal (two totals for 1000 plain calls): glibc's
  `malloc_consolidate`, reached from torch's allocator every so many calls.
  `MALLOC_TOP_PAD_` (set in every timing process anyway, `overrides/clock/allocator.py`) makes it
  rare. The first repeat of each case runs high once, so it is run and
  dropped. Noise in counts only adds, as in wall time: a consolidation, pymalloc's arena
  bookkeeping, or a streak of cache misses in the interpreter (in some layouts SubTensor's
  repeats were bimodal, high in some of them, and whether a repeat was high even differed
  between two runs of the same layout). So the figure is the *minimum* of the
  remaining repeats, the undisturbed count: over the same runs (base against itself and against
  the bare shim, several seeds) the per-seed deltas on SubTensor by the median of the repeats
  spread wide and overlapped between A/A and A/B, and by the minimum they were narrow and apart.
  The spread of the repeats is reported.
- Counts depend on object addresses, and under valgrind addresses move only when the history
  before the loop changes: the hash seed, the environment (content, length, order), the
  listing of the first folder on sys.path. So the worker runs with a fixed, minimal
  environment, padded so both builds' argument lists are the same length, from a fixed empty
  folder, with a given `PYTHONHASHSEED`. Two such runs gave identical counts. Across layouts
  counts still move, so a verdict should rest on several hash seeds
  (`--seeds`), matched between base and branch, with the interval from their spread.

This module holds what is counted by which process: the builds (`Build`), the jobs (`Job`),
the seeds, a server a build and seed, the retries of a child or server that died, the progress
lines. The loops a child runs and how its profiles are read are `caseloops.py`; the server and
its children `forkserver.py`; the process itself (its command line, environment, switching on)
`valgrind.py`; how any process of the tool's own ended, `overrides/workers.py`. Beside them:
`records.py` (the counts as records and their JSON), `dumps.py` (reading a dump), `judge.py`
(verdicts on the deltas between builds) and `rounds.py` (which seeds, and counting in rounds
until the counts decide).
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import math
import os
import shutil
import tempfile
import threading
from typing import Callable, Mapping, Sequence

from overrides import children
from overrides.builds import samepath
from overrides.cases.casenames import env_bytes
from overrides.clock.allocator import MALLOC_ENV
from overrides.counts import forkserver, kept, records, valgrind
from overrides.counts.caseloops import CALLS_PER_REPEAT, DEFAULT_REPEATS, WARMUP_CALLS, read_counts
from overrides.counts.records import CaseCounts, CountRun
from overrides.counts.valgrind import find_valgrind, valgrind_version
from overrides.errors import UsageError
from overrides.workers import WorkerDied

# No torch at module level: bench.py imports this before torch to give valgrind a head start.

DEFAULT_SEEDS = (1,)
__all__ = ["CALLS_PER_REPEAT", "DEFAULT_REPEATS", "WARMUP_CALLS"]  # caseloops' sizes, read here as before
# A job's child (or its server) may die (the out-of-memory killer, a crash) and be counted again
# this many times before the job is given up (the other seeds stand): a rerun under the same
# seed makes the same layout, so it costs only its time.
COUNT_RETRIES = 2
# Valgrind processes at once: one per CPU this process may use (counts do not care what else
# runs, and each is single-threaded). `taskset -c 0` gives one.
def count_jobs() -> int:
    return children.usable_cpus()


RUN_TIMEOUT_S = 600
# Megabytes a profile takes in TMPDIR (one per target and repeat): measured 0.16 for the four
# seed cases, 1.8 with call paths (--separate-callers); with room to spare for bigger cases.
DUMP_MB = 0.25
TREE_DUMP_MB = 2.5


@dataclasses.dataclass(frozen=True)
class Build:
    """One side as its counting processes start: the interpreter, its padding, the folder torch
    is imported from first and the one that stands for (samepath), its own variables."""

    python: str
    pad: int = 0
    import_path: str | None = None
    source: str | None = None
    side_env: tuple = ()


@dataclasses.dataclass(frozen=True)
class Job:
    """What one forked child counts: its targets in the entry.py `role` (`count`: (case, op)s;
    `count-step`: (a step's spec, side)), under a layout `variant` (statfinder), and how."""

    targets: tuple[tuple[str, str], ...]
    variant: int = 0
    role: str = "count"
    calls: int = CALLS_PER_REPEAT
    warmup_calls: int = WARMUP_CALLS
    repeats: int = DEFAULT_REPEATS

    @property
    def yours(self) -> bool:
        """Whether it builds anything of the user's folder (a `pkg.module:factory` case or step)."""
        return any(":" in case for case, _ in self.targets)

    def spec(self, user_dir: str | None) -> forkserver.JobSpec:
        """What the child is told (`user_dir`: your folder, told only to a job of yours)."""
        return forkserver.JobSpec(self.role, self.targets, self.calls, self.repeats, self.warmup_calls,
                                  self.variant, user_dir if self.yours else None)


# Servers started ahead by head_start(), taken by count_served() when the key matches exactly. The
# import of torch under valgrind (20-150 s) then overlaps the parent's own start-up (~3 s).
_HEAD_STARTS: dict[tuple, valgrind.Launch] = {}


def _launch(build: Build, seed: int, tree: bool) -> valgrind.Launch:
    return valgrind.launch(build.python, seed, build.pad, os.getcwd(), forkserver.SERVER_SPEC, tree,
                           build.import_path, build.source, build.side_env, forkserver.ROLE)


def _server_key(build: Build, seed: int, tree: bool) -> tuple:
    return (build, seed, tree, os.getcwd())


def head_start(python: str, targets: Sequence[tuple[str, str]], seeds: Sequence[int]) -> None:
    """Start the first count_jobs() servers now, before the caller imports torch (`targets`: what
    they will count; a server is the same for any)."""
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        return  # count() says how to install it, in its own time
    for seed in list(dict.fromkeys(seeds))[:count_jobs()]:
        _HEAD_STARTS[_server_key(Build(python), seed, False)] = _launch(Build(python), seed, False)
    atexit.register(_drop_head_starts)


def _drop_head_starts() -> None:
    while _HEAD_STARTS:
        _HEAD_STARTS.popitem()[1].close()


class _Tally:
    """What is counted and what is left, for the progress lines: every child's and every
    server's import time so far, and an estimate of the rest at `jobs` processes at once."""

    def __init__(self, servers: int, children_: int, jobs: int):
        self.lock = threading.Lock()
        self.servers_left, self.children_left, self.jobs = servers, children_, jobs
        self.imports: list[float] = []
        self.children: list[float] = []

    def imported(self, seconds: float) -> None:
        with self.lock:
            self.servers_left = max(0, self.servers_left - 1)  # a server started again after a death imports again
            self.imports.append(seconds)

    def counted(self, seconds: float) -> str:
        with self.lock:
            self.children_left -= 1
            self.children.append(seconds)
            done = len(self.children)
            total = done + self.children_left
            left = (self.servers_left * (sum(self.imports) / len(self.imports) if self.imports else 0.0)
                    + self.children_left * sum(self.children) / done) / max(1, self.jobs)
            return f"{done} of {total} counted" + (f", about {_duration(left)} left" if self.children_left else "")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _what(job: Job) -> str:
    modules = sorted({case.split(":")[0] for case, _ in job.targets if ":" in case})
    what = ", ".join(modules) if modules else "the built-in cases"
    return what + (f" (layout variant {job.variant})" if job.variant else "")


def count_served(builds: Sequence[Build], seeds: Sequence[int], jobs: Sequence[Job] | Mapping[int, Sequence[Job]],
                 *, tree: bool = False, say: Callable[[str], None] | None = None,
                 names: Sequence[str] = ()) -> list[list[list[CountRun]]]:
    """Every job under every build and seed (`jobs`: the same for every seed, or each seed's
    own): one server a build and seed (forkserver.py), each job a child of it, count_jobs()
    servers at once. Returns runs[build][seed][job]. `names`: a word per build for the progress
    lines (base, branch)."""
    of_seed = dict(jobs) if isinstance(jobs, Mapping) else {seed: list(jobs) for seed in seeds}
    every = [job for seed in seeds for job in of_seed[seed]]
    find_valgrind()
    say = say or (lambda message: None)
    found, identities = _kept(builds, seeds, of_seed, tree, say, names)
    servers = [(b, seed) for b in range(len(builds)) for seed in seeds
               if any((b, seed, j) not in found for j in range(len(of_seed[seed])))]
    check_room(max((len(j.targets) for j in every), default=0), max((j.repeats for j in every), default=0), tree,
               min(count_jobs(), max(1, len(servers))))
    left = sum(1 for b, seed in servers for j in range(len(of_seed[seed])) if (b, seed, j) not in found)
    tally = _Tally(len(servers), left, min(count_jobs(), max(1, len(servers))))
    if servers and (left > len(servers) or len(servers) > 1):
        say(f"counting {left} job{'s' if left != 1 else ''} in {len(servers)} process{'es' if len(servers) != 1 else ''} "
            f"(one import of torch each, a forked child a job), {tally.jobs} at once")

    def serve(item: tuple[int, int]) -> list[CountRun]:
        index, seed = item
        side = f", {names[index]}" if index < len(names) and names[index] else ""
        todo = [(j, job) for j, job in enumerate(of_seed[seed]) if (index, seed, j) not in found]

        def keep(j: int, run: CountRun, loaded: list[str]) -> None:
            identity, where = identities.get((index, seed, j), (None, None))
            if identity is not None and not run.died:
                kept.keep(identity, seed, run.to_dict(), loaded, where.seen_from_outside,
                          (where.user_dir, where.tool))

        return _serve(builds[index], seed, todo, tree, say, tally, side, keep)

    counted = dict(zip(servers, children.parallel(serve, servers, count_jobs())))
    out = []
    for b in range(len(builds)):
        per_seed = []
        for seed in seeds:
            fresh = iter(counted.get((b, seed), ()))
            per_seed.append([found[(b, seed, j)] if (b, seed, j) in found else next(fresh)
                             for j in range(len(of_seed[seed]))])
        out.append(per_seed)
    return out


def _identity(build: Build, where, tree: bool, job: Job) -> kept.Identity:
    """What a child of `build`'s server counting `job` is told, its seed apart (kept.py)."""
    environment = valgrind.process_environment(0, build.pad, where, build.side_env)
    environment.pop("PYTHONHASHSEED")
    return kept.Identity(valgrind_version(find_valgrind()[0]), tuple(valgrind.options(tree)),
                         tuple(valgrind.server_command(where, forkserver.ROLE, forkserver.SERVER_SPEC)), tuple(sorted(environment.items())),
                         json.dumps(job.spec(where.user_dir).to_dict(), sort_keys=True), _tool_digest(),
                         forkserver.COUNTED_BY)


_DIGEST: list[str] = []


def _tool_digest() -> str:
    if not _DIGEST:
        _DIGEST.append(kept.tool_digest())
    return _DIGEST[0]


def kept_seeds(pythons: Sequence[str], targets: Sequence[tuple[str, str]], *, tree: bool = False,
               import_paths: Sequence[str | None] | None = None, sources: Sequence[str | None] | None = None,
               side_envs: Sequence[tuple] | None = None) -> list[list[int]]:
    """Per build (as count_builds takes them), the seeds its counts of `targets` are kept under
    (kept.py): a comparison counts under those first."""
    if not kept.reusing():
        return [[] for _ in pythons]
    builds = _builds(pythons, import_paths, sources, side_envs)
    job = Job(tuple(map(tuple, targets)))
    out = []
    for build in builds:
        where = samepath.place(build.python, build.import_path, os.getcwd(), source=build.source)
        out.append(kept.seeds(_identity(build, where, tree, job), where.seen_from_outside))
    return out


def _builds(pythons: Sequence[str], import_paths=None, sources=None, side_envs=None, pads=None) -> list[Build]:
    """Builds as count_builds' arguments give them, padded alike (pads_for) unless `pads`."""
    paths = list(import_paths) if import_paths is not None else [None] * len(pythons)
    origins = list(sources) if sources is not None else paths
    extras = [tuple(e) for e in side_envs] if side_envs is not None else [()] * len(pythons)
    pads = list(pads) if pads is not None else pads_for(pythons, paths, extras)
    return [Build(*b) for b in zip(pythons, pads, paths, origins, extras)]


def _kept(builds: Sequence[Build], seeds: Sequence[int], of_seed: dict, tree: bool, say,
          names: Sequence[str]) -> tuple[dict, dict]:
    """The counts kept for each (build, seed, job) (kept.find), said per build; and each one's
    Identity and Placement, to keep what is counted. Nothing where keeping is off."""
    found: dict = {}
    identities: dict = {}
    if kept.folder() is None:
        return found, identities
    for b, build in enumerate(builds):
        where = samepath.place(build.python, build.import_path, os.getcwd(), source=build.source)
        when = []
        for seed in seeds:
            for j, job in enumerate(of_seed[seed]):
                identities[(b, seed, j)] = (_identity(build, where, tree, job), where)
                hit = kept.find(identities[(b, seed, j)][0], seed, where.seen_from_outside)
                if hit is not None:
                    run = CountRun.from_dict(hit.run)
                    found[(b, seed, j)] = dataclasses.replace(run, settings=dict(run.settings, reused_from=hit.written))
                    when.append(hit.written)
        if when:
            total = sum(len(of_seed[seed]) for seed in seeds)
            whose = f"{names[b]}" if b < len(names) and names[b] else build.python
            part = "" if len(when) == total else f" ({len(when)} of {total} jobs)"
            say(f"counts of {whose} reused from {min(when).replace('T', ' ')}{part}, kept by content "
                f"({kept.folder()}); --fresh counts anew")
    return found, identities


def _serve(build: Build, seed: int, jobs: Sequence[tuple[int, Job]], tree: bool, say, tally: _Tally, side: str,
           keep: Callable[[int, CountRun, list], None]) -> list[CountRun]:
    """Every job (index, job) of one server, in order, each retried on a death up to
    COUNT_RETRIES times (a dead server started again), the job given up past them (died_run);
    each counted one kept (`keep`)."""
    _, control = find_valgrind()
    who = f"seed {seed} ({build.python})"
    server: forkserver.Server | None = None
    out: list[CountRun] = []
    attempts = 0
    try:
        for index, job in jobs:
            while True:
                try:
                    if server is None or server.process.poll() is not None:
                        if server is not None:
                            server.close()
                        ahead = _HEAD_STARTS.pop(_server_key(build, seed, tree), None)
                        server = forkserver.Server(ahead or _launch(build, seed, tree), who)
                        imported = server.wait_imported()
                        tally.imported(imported)
                        say(f"callgrind seed {seed}{side}: imports done in {imported:.0f} s"
                            f"{' (started ahead)' if ahead else ''}; counting")
                    run, loaded = _run_job(server, job, control, build, seed, tree, tally, say, side)
                    keep(index, run, loaded)
                    out.append(run)
                    break
                except WorkerDied as exc:
                    if children.stopping():  # Ctrl-C or SIGTERM killed it: no fault to retry
                        raise KeyboardInterrupt from None
                    attempts += 1
                    died = str(exc)
                    if attempts <= COUNT_RETRIES:
                        say(f"callgrind seed {seed}{side}: {died}; counting it again (retry {attempts} of "
                            f"{COUNT_RETRIES})")
                        continue
                    say(f"callgrind seed {seed}{side}: {died}; given up; the other seeds stand")
                    out.append(died_run(seed, job.targets, f"{died}, {COUNT_RETRIES + 1} times"))
                    attempts = 0
                    break
    finally:
        if server is not None:
            server.close()
    return out


def _run_job(server: forkserver.Server, job: Job, control: str, build: Build, seed: int, tree: bool,
             tally: _Tally, say, side: str) -> tuple[CountRun, list[str]]:
    where = server.launch.where
    served = server.run(job.spec(where.user_dir), control)
    try:
        if len(served.dumps) < len(served.order):
            free = shutil.disk_usage(server.launch.out_dir).free / 1e6
            if free < (TREE_DUMP_MB if tree else DUMP_MB):
                raise UsageError(f"callgrind wrote {len(served.dumps)} profiles, {len(served.order)} expected: TMPDIR "
                                 f"{tempfile.gettempdir()} filled up ({free:,.1f} MB free); free some space or "
                                 "set TMPDIR to a folder with room")
            raise UsageError(f"callgrind wrote {len(served.dumps)} profiles, {len(served.order)} expected; "
                             "is this torch built with valgrind support (torch._C._valgrind_toggle)?")
        cases = read_counts(job.targets, served.order, served.dumps, tree)
    finally:
        server.forget(served)
    calls = sorted({entry[3] for entry in served.order if len(entry) > 3}, reverse=True) or [job.calls]
    say(f"callgrind seed {seed}{side}: {_what(job)} counted in {served.seconds:.0f} s; {tally.counted(served.seconds)}")
    settings = {"seed": seed, "repeats": job.repeats, "calls_per_repeat": calls[0], "call_paths": tree,
                **({"calls_per_repeat_each": calls} if len(calls) > 1 else {}),
                "statistic": "minimum of repeats 2..n, loop and toggles removed",
                "valgrind": valgrind_version(find_valgrind()[0]), "python": build.python,
                "environment": sorted(valgrind.process_environment(seed, build.pad, where, build.side_env)),
                "import_path": build.import_path,
                "same_path": where.fixed,
                "same_path_reason": where.reason or None,
                "malloc_top_pad": MALLOC_ENV.get("MALLOC_TOP_PAD_"),
                "counted_by": forkserver.COUNTED_BY,
                **({"layout_variant": job.variant} if job.variant else {})}
    return CountRun(seed, cases, settings, served.seconds), served.loaded


def count_once(python: str, targets: Sequence[tuple[str, str]], seed: int, *, pad: int = 0,
               repeats: int = DEFAULT_REPEATS, calls: int = CALLS_PER_REPEAT,
               say: Callable[[str], None] | None = None, tree: bool = False,
               import_path: str | None = None, source: str | None = None, side_env: tuple = (),
               role: str = "count", warmup_calls: int = WARMUP_CALLS) -> CountRun:
    """Every (case, op) counted under hash seed `seed` in one child of a server of its own."""
    job = Job(tuple(map(tuple, targets)), role=role, calls=calls, warmup_calls=warmup_calls, repeats=repeats)
    return count_served([Build(python, pad, import_path, source, side_env)], [seed], [job], tree=tree,
                        say=say)[0][0][0]


def check_room(targets: int, repeats: int, tree: bool, jobs: int) -> None:
    """A UsageError before anything starts when TMPDIR has no room for the profiles: a full
    TMPDIR otherwise showed as callgrind_control finding no process, or as missing profiles."""
    folder = tempfile.gettempdir()
    # a dump per target and repeat, and the empty loop's, for every process counting at once
    need = (targets + 1) * repeats * (TREE_DUMP_MB if tree else DUMP_MB) * jobs
    try:
        free = shutil.disk_usage(folder).free / 1e6
    except OSError:
        return
    if free < need:
        raise UsageError(f"TMPDIR {folder} has {free:,.1f} MB free; Callgrind's profiles of this run need about "
                         f"{need:,.0f} MB there; free some space or set TMPDIR to a folder with room")


def count(python: str, targets: Sequence[tuple[str, str]], seeds: Sequence[int] = DEFAULT_SEEDS,
          *, pad: int = 0, repeats: int = DEFAULT_REPEATS,
          say: Callable[[str], None] | None = None, tree: bool = False,
          import_path: str | None = None) -> list[CountRun]:
    """One server per seed, up to count_jobs() at once; runs in seed order."""
    return count_builds([python], targets, seeds, pads=[pad], repeats=repeats, say=say, tree=tree,
                        import_paths=[import_path])[0]


def count_builds(pythons: Sequence[str], targets: Sequence[tuple[str, str]],
                 seeds: Sequence[int] = DEFAULT_SEEDS, *, pads: Sequence[int] | None = None,
                 repeats: int = DEFAULT_REPEATS, say: Callable[[str], None] | None = None,
                 tree: bool = False, import_paths: Sequence[str | None] | None = None,
                 sources: Sequence[str | None] | None = None,
                 side_envs: Sequence[tuple] | None = None, role: str = "count",
                 calls: int = CALLS_PER_REPEAT, warmup_calls: int = WARMUP_CALLS,
                 names: Sequence[str] = ()) -> list[list[CountRun]]:
    """Every build under every seed (the same seeds, so layouts are matched build to build),
    count_jobs() servers at once; one list of runs per build, in seed order.
    `import_paths`: per build, a folder to import torch from first (a view or a kept copy);
    `sources`: per build, the folder a view stands for (names its bytecode cache, samepath);
    `side_envs`: per build, (name, value) pairs of its own (two versions of your code); `role`,
    `calls` and `warmup_calls` as Job's."""
    builds = _builds(pythons, import_paths, sources, side_envs, pads)
    job = Job(tuple(map(tuple, targets)), role=role, calls=calls, warmup_calls=warmup_calls, repeats=repeats)
    runs = count_served(builds, seeds, [job], tree=tree, say=say, names=names)
    return [[per_seed[0] for per_seed in per_build] for per_build in runs]


def died_run(seed: int, targets: Sequence[tuple[str, str]], why: str) -> CountRun:
    """The record of a seed whose process died past its retries: every case counted nothing,
    with the reason, so the other seeds stand (`CountRun.died` says so)."""
    return CountRun(seed, tuple(CaseCounts(case, op, math.nan, (), {}, why) for case, op in targets),
                    {"seed": seed, "died": why}, 0.0)


def pads_for(pythons: Sequence[str], import_paths: Sequence[str | None] | None = None,
             side_envs: Sequence[tuple] | None = None) -> list[int]:
    """Environment padding per build so that every argument list and environment together are
    as long as the longest (the interpreter's path is in the arguments, the import path in the
    environment, and a side's own variables), measured as each process sees them (samepath:
    often the same already)."""
    paths = list(import_paths or [None] * len(pythons))
    extras = list(side_envs or [()] * len(pythons))
    placed = [samepath.place(python, path) for python, path in zip(pythons, paths)]
    sizes = [len(where.python) + len(where.import_path or "") + env_bytes(extra)
             for where, extra in zip(placed, extras)]
    return [max(sizes) - size for size in sizes]
