"""Instruction counts with Callgrind: the valgrind processes that count every case per call.

Wall time on a shared machine is noisy; instruction counts are not. A 95 ns change is hundreds
of instructions. How the counts are made, and why (the figures that were the evidence, from the
valgrind 3.19 / torch 2.13 CPU machine this was built on: benchmarks/history.md, 'Docstring
figures'):

- All the cases given are counted in ONE valgrind process started with the interpreter asked
  for (never `python` from PATH); `isolated.py` gives each module of the user's its own
  processes, so that one module's code does not move another's counts. `torch.utils.benchmark`'s `collect_callgrind` starts valgrind
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
  `--vex-iropt-level=0` made it slower). So `bench.py` starts the worker before it imports
  torch itself (`head_start`, from a guess at its command line): the parent's own start-up then
  overlaps it.
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

This module holds what is counted and how it is read: the repeats, calls and seeds, the worker
that runs the loops under valgrind, the counts read from its profiles, the retries of a process
that died. The process itself (its command line, environment, switching on, how it ended) is
`valgrind.py`. Beside them: `records.py` (the counts as records and their JSON), `dumps.py` (reading a
dump), `judge.py` (verdicts on the deltas between builds) and `rounds.py` (which seeds, and
counting in rounds until the counts decide).
"""

from __future__ import annotations

import atexit
import gc
import json
import math
import os
import shutil
import tempfile
import time
from typing import Callable, Sequence

from overrides import children
from overrides.builds import samepath
from overrides.cases.casenames import env_bytes
from overrides.clock.allocator import MALLOC_ENV
from overrides.counts import valgrind
from overrides.counts.dumps import read_dump, read_total
from overrides.counts.records import CaseCounts, CountRun
from overrides.counts.valgrind import CountingDied, find_valgrind, valgrind_version
from overrides.errors import UsageError

# No torch at module level: bench.py imports this before torch to give valgrind a head start.

DEFAULT_SEEDS = (1,)
# Repeats per case; the first is dropped, the figure is the minimum of the rest (see above).
# Each repeat of the four seed cases costs ~2.2 s under valgrind: 7 repeats kept the run above
# the 45 s aim on a busy machine.
DEFAULT_REPEATS = 5
CALLS_PER_REPEAT = 1000  # ~10M instructions for plain tensors: the toggles' cost is lost in it
# Uninstrumented calls before counting. The interpreter re-tries failed specialisations with
# exponential back-off; after 500 calls the second and third repeats still paid ~15
# instructions a call in _Py_Specialize_* that later repeats did not.
WARMUP_CALLS = 5000
# A seed's valgrind process may die (the out-of-memory killer, a crash) and be counted again
# this many times before its seed is given up (the other seeds stand): a rerun under the same
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
FUNCTIONS_KEPT = 400  # per case, by self cost: enough to diff, small enough for a JSON file
STACK_MIN_PER_CALL = 0.05  # call paths below this many instructions a call are not kept


# ---------------------------------------------------------------------------------------------
# The worker: runs under valgrind, started with its spec as valgrind.launch says (entry.py's
# `count` role).

def serve(channel, spec_json: str) -> None:
    """Build every target, warm up, say ready, wait for instrumentation, count, leave
    (`channel`: entry.Channel)."""
    spec = json.loads(spec_json)
    import torch

    from overrides.cases import ops, registry
    from overrides.clock.timer import UNROLL, compile_hot_loop

    torch.set_num_threads(1)
    targets = []
    for case_name, op_name in spec["targets"]:
        case = registry.get_case(case_name)
        op = ops.get_op(op_name)
        loop = compile_hot_loop(case.stmt_for(op), "counted_loop")
        targets.append((case, tuple(case.make_operands()), loop))
    empty = compile_hot_loop("pass", "counted_loop", unroll=1)  # the loop and toggles alone
    turns = spec["calls"] // UNROLL
    for case, operands, loop in targets:
        with case.active():
            loop(operands, max(1, spec["warmup_calls"] // UNROLL))
    toggle, toggle_and_dump = torch._C._valgrind_toggle, torch._C._valgrind_toggle_and_dump_stats
    gc.collect()
    gc.disable()  # as when timing: a collection every ~700 allocations moved repeats by 0.3%
    channel.say({"ready": os.getpid()})
    channel.wait()  # the parent has switched instrumentation on
    order = []
    for repeat in range(spec["repeats"]):
        for index, (case, operands, loop) in enumerate(targets):
            with case.active():
                toggle()
                loop(operands, turns)
                toggle_and_dump()
            order.append(["target", index, repeat])
        toggle()
        empty((None, None), turns)
        toggle_and_dump()
        order.append(["empty", -1, repeat])
    channel.say({"dumps": order})
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# Running it

def _spec(targets: Sequence[tuple[str, str]], repeats: int, calls: int, warmup_calls: int = WARMUP_CALLS) -> str:
    return json.dumps({"targets": [list(t) for t in targets], "calls": calls, "repeats": repeats,
                       "warmup_calls": warmup_calls})


# Workers started ahead by head_start(), taken by count_once() when the key matches exactly. The
# import of torch under valgrind (20-28 s) then overlaps the parent's own start-up (~3 s).
_HEAD_STARTS: dict[tuple, valgrind.Launch] = {}

def head_start(python: str, targets: Sequence[tuple[str, str]], seeds: Sequence[int]) -> None:
    """Start the first count_jobs() workers now, before the caller imports torch.

    A guess: a worker whose key does not match what is finally counted is never used (its
    layout, so its counts, would differ), and any not taken are killed at exit.
    """
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        return  # count() says how to install it, in its own time
    spec = _spec(targets, DEFAULT_REPEATS, CALLS_PER_REPEAT)
    for seed in list(dict.fromkeys(seeds))[:count_jobs()]:
        launch = valgrind.launch(python, seed, 0, None, spec)
        _HEAD_STARTS[launch.key] = launch
    atexit.register(_drop_head_starts)


def _drop_head_starts() -> None:
    while _HEAD_STARTS:
        _HEAD_STARTS.popitem()[1].close()


def count_once(python: str, targets: Sequence[tuple[str, str]], seed: int, *, pad: int = 0,
               repeats: int = DEFAULT_REPEATS, calls: int = CALLS_PER_REPEAT,
               say: Callable[[str], None] | None = None, tree: bool = False,
               import_path: str | None = None, source: str | None = None, side_env: tuple = (),
               role: str = "count", warmup_calls: int = WARMUP_CALLS) -> CountRun:
    """Count every (case, op) in one valgrind process under hash seed `seed` (with `tree`, the
    last repeat's call paths too); `side_env` as `valgrind.process_environment`'s. `role` is the
    worker (`count-step`: a target is (a step's spec, "plain" or "yours"), a call one step;
    `warmup_calls` then warm steps), speaking this worker's protocol."""
    valgrind_path, control = find_valgrind()
    say = say or (lambda message: None)
    user_dir = os.getcwd() if any(":" in case for case, _ in targets) else None
    spec = _spec(targets, repeats, calls, warmup_calls)
    ahead = _HEAD_STARTS.pop((python, seed, pad, user_dir, spec, tree, import_path, side_env, role), None)
    launch = ahead or valgrind.launch(python, seed, pad, user_dir, spec, tree, import_path, source, side_env,
                                      role)
    process, out_dir, started = launch.process, launch.out_dir, launch.started
    try:
        ready = valgrind.read_message(process, "ready", f"seed {seed} ({python})", "importing torch")
        say(f"callgrind seed {seed}: imports done in {time.monotonic() - started:.0f} s"
            f"{' (started ahead)' if ahead else ''}; counting")
        valgrind.switch_on(control, process, ready["ready"], f"seed {seed} ({python})", out_dir)
        process.stdin.write("go\n")
        process.stdin.flush()
        order = valgrind.read_message(process, "dumps", f"seed {seed} ({python})", "counting")["dumps"]
        process.wait(timeout=RUN_TIMEOUT_S)
        dumps = valgrind.main_thread_dumps(out_dir, ready["ready"])
        if len(dumps) < len(order):
            free = shutil.disk_usage(out_dir).free / 1e6
            if free < (TREE_DUMP_MB if tree else DUMP_MB):
                raise UsageError(f"callgrind wrote {len(dumps)} profiles, {len(order)} expected: TMPDIR "
                                 f"{tempfile.gettempdir()} filled up ({free:,.1f} MB free); free some space or "
                                 "set TMPDIR to a folder with room")
            raise UsageError(f"callgrind wrote {len(dumps)} profiles, {len(order)} expected; "
                             "is this torch built with valgrind support (torch._C._valgrind_toggle)?")
        per_target: dict[int, list[tuple[int, str]]] = {}  # index -> (total, dump) per repeat
        empty: dict[int, int] = {}
        for (kind, index, repeat), path in zip(order, dumps):
            if kind == "empty":
                empty[repeat] = read_total(path)
            else:
                per_target.setdefault(index, []).append((read_total(path), path))
        results = []
        for index, (case, op) in enumerate(targets):
            rows = per_target.get(index, [])
            repeats_per_call = tuple((total - empty.get(r, 0)) / calls for r, (total, _) in enumerate(rows))
            figure = min(repeats_per_call[1:] or repeats_per_call) if rows else math.nan
            # The functions of the last repeat; the call paths of the repeat that gave the
            # figure, so that they add up to it. Only those dumps are read whole.
            chosen = repeats_per_call.index(figure) if rows else 0
            stacks: dict = {}
            functions: dict = {}
            if rows:
                last = len(rows) - 1
                functions = read_dump(rows[last][1], stacks if tree and chosen == last else None)[1]
                if tree and chosen != last:
                    read_dump(rows[chosen][1], stacks)
            top = sorted(functions.items(), key=lambda kv: -kv[1])[:FUNCTIONS_KEPT]
            figure_stacks = {path: value / calls for path, value in stacks.items()
                             if value / calls >= STACK_MIN_PER_CALL}
            results.append(CaseCounts(case, op, figure, repeats_per_call,
                                      {name: value / calls for name, value in top},
                                      None if rows else "no profile", figure_stacks))
    finally:
        launch.close()
    settings = {"seed": seed, "repeats": repeats, "calls_per_repeat": calls, "call_paths": tree,
                "statistic": "minimum of repeats 2..n, loop and toggles removed",
                "valgrind": valgrind_version(valgrind_path), "python": python,
                "environment": sorted(valgrind.process_environment(seed, pad, launch.where, side_env)),
                "import_path": import_path,
                "same_path": launch.where.fixed,
                "same_path_reason": launch.where.reason or None,
                "malloc_top_pad": MALLOC_ENV.get("MALLOC_TOP_PAD_")}
    return CountRun(seed, tuple(results), settings, time.monotonic() - started)


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
    """One valgrind process per seed, up to count_jobs() at once; runs in seed order."""
    return count_builds([python], targets, seeds, pads=[pad], repeats=repeats, say=say, tree=tree,
                        import_paths=[import_path])[0]


def count_builds(pythons: Sequence[str], targets: Sequence[tuple[str, str]],
                 seeds: Sequence[int] = DEFAULT_SEEDS, *, pads: Sequence[int] | None = None,
                 repeats: int = DEFAULT_REPEATS, say: Callable[[str], None] | None = None,
                 tree: bool = False, import_paths: Sequence[str | None] | None = None,
                 sources: Sequence[str | None] | None = None,
                 side_envs: Sequence[tuple] | None = None, role: str = "count",
                 calls: int = CALLS_PER_REPEAT, warmup_calls: int = WARMUP_CALLS) -> list[list[CountRun]]:
    """Every build under every seed (the same seeds, so layouts are matched build to build),
    count_jobs() valgrind processes at once; one list of runs per build, in seed order.
    `import_paths`: per build, a folder to import torch from first (a view or a kept copy);
    `sources`: per build, the folder a view stands for (names its bytecode cache, samepath);
    `side_envs`: per build, (name, value) pairs of its own (two versions of your code); `role`,
    `calls` and `warmup_calls` as count_once's."""
    find_valgrind()
    check_room(len(targets), repeats, tree, min(count_jobs(), len(pythons) * len(seeds)))
    paths = list(import_paths) if import_paths is not None else [None] * len(pythons)
    origins = list(sources) if sources is not None else paths
    extras = [tuple(e) for e in side_envs] if side_envs is not None else [()] * len(pythons)
    pads = list(pads) if pads is not None else pads_for(pythons, paths, extras)
    jobs = [(python, pad, path, origin, extra, seed)
            for python, pad, path, origin, extra in zip(pythons, pads, paths, origins, extras) for seed in seeds]

    def run(job: tuple) -> CountRun:
        python, pad, path, origin, extra, seed = job
        for attempt in range(COUNT_RETRIES + 1):
            try:
                return count_once(python, targets, seed, pad=pad, repeats=repeats, say=say, tree=tree,
                                  import_path=path, source=origin, side_env=extra, role=role, calls=calls,
                                  warmup_calls=warmup_calls)
            except CountingDied as exc:
                if children.stopping():  # Ctrl-C or SIGTERM killed it: no fault to retry
                    raise KeyboardInterrupt from None
                died = str(exc)
                (say or (lambda message: None))(
                    f"callgrind seed {seed}: {died}; " + (f"counting it again (retry {attempt + 1} of {COUNT_RETRIES})"
                                                          if attempt < COUNT_RETRIES else
                                                          "given up; the other seeds stand"))
        return died_run(seed, targets, f"{died}, {COUNT_RETRIES + 1} times")

    # Ctrl-C kills the valgrind processes at once (overrides/children.py), not after counting.
    runs = children.parallel(run, jobs, count_jobs())
    per_build = len(seeds)
    return [runs[i * per_build:(i + 1) * per_build] for i in range(len(pythons))]


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
