"""Instruction counts with Callgrind: the valgrind processes that count every case per call.

Wall time on a shared machine is noisy; instruction counts are not. A 95 ns change is hundreds
of instructions. How the counts are made, and why (the figures that were the evidence, from the
valgrind 3.19 / torch 2.13 CPU machine this was built on: benchmarks/README.md, 'Docstring
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

Beside this module: `records.py` (the counts as records and their JSON), `dumps.py` (reading a
dump), `judge.py` (verdicts on the deltas between builds) and `rounds.py` (which seeds, and
counting in rounds until the counts decide).
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Sequence

from overrides import ROOT, children
from overrides.builds import samepath
from overrides.cases.casenames import USER_DIR_VARIABLE, env_bytes
from overrides.clock.allocator import MALLOC_ENV
from overrides.counts import statfinder
from overrides.counts.dumps import read_dump, read_total
from overrides.counts.records import CaseCounts, CountRun
from overrides.errors import UsageError, place_error

# No torch at module level: bench.py imports this before torch to give valgrind a head start.

INSTALL_HINT = "install it with `apt-get install valgrind` (Debian/Ubuntu) or your system's package manager"
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
CONTROL_TIMEOUT_S = 60  # callgrind_control answers in well under a second when the worker lives
FUNCTIONS_KEPT = 400  # per case, by self cost: enough to diff, small enough for a JSON file
# Call paths are kept when asked for (`tree=True`: the report and comparisons, where "where did
# it go" is the question): `--separate-callers=CONTEXT_DEPTH` names every function by its chain
# of callers, so the last repeat's profile is a call tree with exact self counts per path. It
# changes no count, only how counts are attributed; it costs ~4 s a case more under valgrind
# (SubTensor and Tensor, 5 repeats: 53 s against 45 s), so `bench.py --instructions` goes without.
# The deepest chain of the seed cases was 40 (SubTensor, counted from the loop's own frame).
CONTEXT_DEPTH = 80
STACK_MIN_PER_CALL = 0.05  # call paths below this many instructions a call are not kept
# Callgrind counts every thread while collection is on, and a thread other than the one running
# the loop does work whenever the scheduler lets it (an idle BLAS or OpenMP pool, a CUDA driver's
# threads on a machine with a GPU). So each thread's counts go to a file of their own
# (`--separate-threads=yes`, each dump named `...-01`, `-02`, ... by thread) and only the main
# thread's are read: here that took ~15 instructions a call off Tensor and ~30 off SubTensor (the
# same on every run of a seed), work no loop did. (It did not explain a GPU machine's untouched
# Tensor spreading 4.8% over seeds: that was one side's layouts, judged by judge.py.)
MAIN_THREAD_SUFFIX = "-01"
PAD_VARIABLE = "OVERRIDES_LAYOUT_PAD"


def find_valgrind() -> tuple[str, str]:
    """(valgrind, callgrind_control) paths, or a UsageError saying how to install them."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if not valgrind or not control:
        raise UsageError(f"valgrind not found; {INSTALL_HINT}")
    return valgrind, control


def valgrind_version(valgrind: str) -> str:
    return subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout.strip()


# ---------------------------------------------------------------------------------------------
# The worker: runs under valgrind, started as `python -c _WORKER_CODE SPEC`. The spec is parsed
# before torch is imported, as it always was: reading it from stdin after the imports (to start
# the worker before the parent knew the spec) moved the heap and made SubTensor's repeats
# bimodal (+500 instructions a call in some of them), spreading the bare shim's per-seed deltas
# over 142..924 where argv gave 515..714. So a head start must guess the whole spec instead.

#
# Before anything else it sets up its imports (statfinder.enter, loaded by its file path): this
# checkout, the caller's own path entries and the user's folder are found by stat, never listed,
# so files that come and go there do not move the counts.
_WORKER_CODE = (
    "import os, sys, importlib.util as u; e = os.environ; "
    f"t = e['{statfinder.TOOL_VARIABLE}']; "
    "s = u.spec_from_file_location('overrides_statfinder', os.path.join(t, 'overrides', 'counts', 'statfinder.py')); "
    "m = u.module_from_spec(s); s.loader.exec_module(m); "
    f"m.enter(t, e.get('{statfinder.VIEW_VARIABLE}'), e.get('{statfinder.OWN_PATH_VARIABLE}', ''), "
    f"e.get('{USER_DIR_VARIABLE}')); "
    "from overrides.counts.callgrind import _worker_main; _worker_main(sys.argv[1])")


def _worker_main(spec_json: str) -> None:
    """Build every target, warm up, say ready, wait for instrumentation, count, leave."""
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
    print(json.dumps({"ready": os.getpid()}), flush=True)
    sys.stdin.readline()  # the parent has switched instrumentation on
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
    print(json.dumps({"dumps": order}), flush=True)
    os._exit(0)


# ---------------------------------------------------------------------------------------------
# Running it

def _own_python_path() -> list[str]:
    """The caller's own PYTHONPATH entries, this checkout left out (it comes first anyway)."""
    return [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if path and os.path.realpath(path) != os.path.realpath(ROOT)]


def _environment(seed: int, pad: int, where: samepath.Placement, side_env: tuple = ()) -> dict:
    """The whole environment of the valgrind process: fixed content, fixed order. The user's
    directory is passed only when a user case needs it (it would move the layout otherwise).
    The side's import path (its view or kept copy of torch) comes first after this checkout,
    both as `where` says the process sees them; the caller's own PYTHONPATH follows (a develop
    build is often found only through it). `side_env`: (name, value) pairs of the side's own
    (which of your code it builds: casenames.YOUR_CODE_VARIABLE)."""
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
    if where.user_dir:
        env[USER_DIR_VARIABLE] = where.user_dir
    env.update(side_env)
    return env


def _fixed_cwd() -> str:
    """An empty folder with a fixed name: the first entry of sys.path for `python -c`."""
    path = os.path.join(tempfile.gettempdir(), "overrides-callgrind-cwd")
    os.makedirs(path, exist_ok=True)
    return path


@dataclasses.dataclass
class _Launch:
    """A valgrind worker started with its spec, importing torch."""

    key: tuple  # (python, seed, pad, user_dir, spec, tree, import_path, side_env): what the counts depend on
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


def _spec(targets: Sequence[tuple[str, str]], repeats: int, calls: int) -> str:
    return json.dumps({"targets": [list(t) for t in targets], "calls": calls, "repeats": repeats,
                       "warmup_calls": WARMUP_CALLS})


def _launch(python: str, seed: int, pad: int, user_dir: str | None, spec: str,
            tree: bool = False, import_path: str | None = None, source: str | None = None,
            side_env: tuple = ()) -> _Launch:
    valgrind, _ = find_valgrind()
    where = samepath.place(python, import_path, user_dir, source=source)
    samepath.prime(where, os.pathsep.join(_own_python_path()))
    try:
        out_dir = tempfile.mkdtemp(prefix="overrides-callgrind-")
    except OSError as exc:
        raise place_error(os.path.join(tempfile.gettempdir(), "overrides-callgrind-*"), exc,
                          "Callgrind's profiles (TMPDIR)") or exc from None
    contexts = [f"--separate-callers={CONTEXT_DEPTH}"] if tree else []
    command = [valgrind, "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               "--compress-strings=no", "--compress-pos=no", "--separate-threads=yes", "-q", *contexts,
               _vgdb_prefix(out_dir),
               f"--callgrind-out-file={out_dir}/callgrind.out.%p", where.python, "-c", _WORKER_CODE,
               spec]
    process = children.start(where.wrap(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=_fixed_cwd(),
                             env=_environment(seed, pad, where, side_env))
    return _Launch((python, seed, pad, user_dir, spec, tree, import_path, side_env), process, out_dir,
                   time.monotonic(), where)


# Workers started ahead by head_start(), taken by count_once() when the key matches exactly. The
# import of torch under valgrind (20-28 s) then overlaps the parent's own start-up (~3 s).
_HEAD_STARTS: dict[tuple, _Launch] = {}

def head_start(python: str, targets: Sequence[tuple[str, str]], seeds: Sequence[int]) -> None:
    """Start the first count_jobs() workers now, before the caller imports torch.

    A guess: a worker whose key does not match what is finally counted is never used (its
    layout, so its counts, would differ), and any not taken are killed at exit.
    """
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        return  # count() says how to install it, in its own time
    spec = _spec(targets, DEFAULT_REPEATS, CALLS_PER_REPEAT)
    for seed in list(dict.fromkeys(seeds))[:count_jobs()]:
        launch = _launch(python, seed, 0, None, spec)
        _HEAD_STARTS[launch.key] = launch
    atexit.register(_drop_head_starts)


def _drop_head_starts() -> None:
    while _HEAD_STARTS:
        _HEAD_STARTS.popitem()[1].close()


def count_once(python: str, targets: Sequence[tuple[str, str]], seed: int, *, pad: int = 0,
               repeats: int = DEFAULT_REPEATS, calls: int = CALLS_PER_REPEAT,
               say: Callable[[str], None] | None = None, tree: bool = False,
               import_path: str | None = None, source: str | None = None, side_env: tuple = ()) -> CountRun:
    """Count every (case, op) in one valgrind process under hash seed `seed` (with `tree`, the
    last repeat's call paths too); `side_env` as `_environment`'s."""
    valgrind, control = find_valgrind()
    say = say or (lambda message: None)
    user_dir = os.getcwd() if any(":" in case for case, _ in targets) else None
    spec = _spec(targets, repeats, calls)
    ahead = _HEAD_STARTS.pop((python, seed, pad, user_dir, spec, tree, import_path, side_env), None)
    launch = ahead or _launch(python, seed, pad, user_dir, spec, tree, import_path, source, side_env)
    process, out_dir, started = launch.process, launch.out_dir, launch.started
    try:
        ready = _read_json(process, "ready", f"seed {seed} ({python})", "importing torch")
        say(f"callgrind seed {seed}: imports done in {time.monotonic() - started:.0f} s"
            f"{' (started ahead)' if ahead else ''}; counting")
        _switch_on(control, process, ready["ready"], f"seed {seed} ({python})", out_dir)
        process.stdin.write("go\n")
        process.stdin.flush()
        order = _read_json(process, "dumps", f"seed {seed} ({python})", "counting")["dumps"]
        process.wait(timeout=RUN_TIMEOUT_S)
        dumps = main_thread_dumps(out_dir, ready["ready"])
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
                "valgrind": valgrind_version(valgrind), "python": python,
                "environment": sorted(_environment(seed, pad, launch.where, side_env)),
                "import_path": import_path,
                "same_path": launch.where.fixed,
                "same_path_reason": launch.where.reason or None,
                "malloc_top_pad": MALLOC_ENV.get("MALLOC_TOP_PAD_")}
    return CountRun(seed, tuple(results), settings, time.monotonic() - started)


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


def _switch_on(control: str, process: subprocess.Popen, pid: int, who: str, out_dir: str) -> None:
    """callgrind_control switches the worker's instrumentation on; it waits for an answer
    that a worker killed meanwhile never gives, so the worker is watched while it runs. Where it
    could not find the worker, the worker is given DYING_S to show it died (a death: retried by
    the caller), and a living one is asked again, up to CONTROL_ATTEMPTS times."""
    for attempt in range(CONTROL_ATTEMPTS):
        done = _control(control, process, pid, out_dir)
        switched = done.returncode == 0 and not _control_errors(done)
        if not switched:
            # A worker killed as callgrind_control looked for it is gone, or going: its death,
            # not a failure to switch on ("task not detected", exit 0), once the kernel has
            # finished it.
            try:
                process.wait(timeout=DYING_S)
            except subprocess.TimeoutExpired:
                pass
        if process.poll() is not None:
            _died(process, who, "its instrumentation was being switched on")
        if done.returncode is None or done.returncode < 0:
            raise UsageError(f"callgrind_control did not answer in {CONTROL_TIMEOUT_S} s for {who}")
        if switched or attempt == CONTROL_ATTEMPTS - 1:
            check_switched(done)
            return


def _control(control: str, process: subprocess.Popen, pid: int, out_dir: str) -> subprocess.CompletedProcess:
    """One callgrind_control run switching `pid` on, stopped early if the worker dies."""
    with tempfile.TemporaryFile("w+") as said:
        # Its output goes to a file, and its process group is killed once it is done: the
        # `vgdb` it starts waits forever for a worker that died, holding any pipe open.
        switching = children.start([control, _vgdb_prefix(out_dir), "-i", "on", str(pid)], stdout=said,
                                   stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + CONTROL_TIMEOUT_S
        while switching.poll() is None and process.poll() is None and time.monotonic() < deadline:
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


class CountingDied(Exception):
    """A valgrind process ended with no answer (killed, crashed): its seed is counted again in
    a fresh process (count_builds), which under the same seed makes the same layout."""


def _read_json(process: subprocess.Popen, key: str, who: str, doing: str) -> dict:
    for line in process.stdout:
        line = line.strip()
        if line.startswith("{"):
            try:
                message = json.loads(line)
            except ValueError:
                break  # half a line: it died writing it
            if key in message:
                return message
    _died(process, who, doing)


def _died(process: subprocess.Popen, who: str, doing: str) -> None:
    """Raise how the worker ended: a UsageError where it said why, else CountingDied."""
    code = process.wait()
    err = process.stderr.read().strip().splitlines()
    said = next((line for line in reversed(err) if line.strip() and not line.startswith("==")), "")
    if code > 0 and said:  # it said why: a Python error in a case, a torch that does not import
        raise UsageError(f"the counting process for {who} ended early: {said}")
    raise CountingDied(f"the counting process for {who} {children.ended(code)} while {doing}"
                       + (f" ({said})" if said else ""))


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
                 side_envs: Sequence[tuple] | None = None) -> list[list[CountRun]]:
    """Every build under every seed (the same seeds, so layouts are matched build to build),
    count_jobs() valgrind processes at once; one list of runs per build, in seed order.
    `import_paths`: per build, a folder to import torch from first (a view or a kept copy);
    `sources`: per build, the folder a view stands for (names its bytecode cache, samepath);
    `side_envs`: per build, (name, value) pairs of its own (two versions of your code)."""
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
                                  import_path=path, source=origin, side_env=extra)
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


