"""Instruction counts with Callgrind: deterministic per-call costs, and deltas between builds.

Wall time on a shared machine is noisy; instruction counts are not. A 95 ns change is hundreds
of instructions. How the counts are made, and why (figures from the valgrind 3.19 / torch 2.13
CPU machine this was built on):

- All selected cases are counted in ONE valgrind process started with the interpreter asked
  for (never `python` from PATH). `torch.utils.benchmark`'s `collect_callgrind` starts valgrind
  and imports torch anew for every Timer: ~68 s a case here.
- Instrumentation is off while Python starts and imports torch (`--instr-atstart=no`: 57 s of
  a 66 s run was `import torch` under instrumentation). When the worker is ready, the parent
  switches it on from outside (`callgrind_control -i on PID`); with instrumentation off the
  collection toggles count nothing. Collection (`--collect-atstart=no`) is toggled on and off
  around each measured loop through torch's client requests, and each loop dumps its own
  profile. The worker leaves with `os._exit`: interpreter shutdown under valgrind costs 6-11 s.
- `import torch` under valgrind is most of the wall time (20-28 s here: translating libtorch's
  static initialisers and torch's Python modules; no VEX option made it faster, and
  `--vex-iropt-level=0` made it 1.7x slower). So `bench.py` starts the worker before it imports
  torch itself (`head_start`, from a guess at its command line): the parent's own ~3 s
  start-up then overlaps it.
- Repeats of a loop were bimodal (9.98M or 10.28M for 1000 plain calls): glibc's
  `malloc_consolidate`, reached from torch's allocator about every 1,650 calls.
  `MALLOC_TOP_PAD_` (set in every timing process anyway, `overrides/clock/allocator.py`) makes it
  rare. The first repeat of each case runs 0.4-1.8k per call high once, so it is run and
  dropped. Noise in counts only adds, as in wall time: a consolidation, pymalloc's arena
  bookkeeping, or a streak of cache misses in the interpreter (in some layouts SubTensor's
  repeats were bimodal, +500 instructions a call in some of them, and whether a repeat was high
  even differed between two runs of the same layout). So the figure is the *minimum* of the
  remaining repeats, the undisturbed count. Over the same 30 runs (15 seeds, base against
  itself and against the bare shim) the per-seed deltas on SubTensor were, by the median of
  four repeats, -506..+279 (A/A) and +47..+999 (A/B); by the minimum -41..0 and +310..+970.
  The spread of the repeats is reported.
- Counts depend on object addresses, and under valgrind addresses move only when the history
  before the loop changes: the hash seed, the environment (content, length, order), the
  listing of the first folder on sys.path. So the worker runs with a fixed, minimal
  environment, padded so both builds' argument lists are the same length, from a fixed empty
  folder, with a given `PYTHONHASHSEED`. Two such runs gave identical counts. Across layouts
  counts still move (0.2-0.8% per case), so a verdict should rest on several hash seeds
  (`--seeds`), matched between base and branch, with the interval from their spread.
"""

from __future__ import annotations

import atexit
import dataclasses
import gc
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Sequence

from overrides import ROOT, children
from overrides.builds import samepath
from overrides.clock import stats
from overrides.clock.allocator import MALLOC_ENV
from overrides.errors import UsageError

# No torch at module level: bench.py imports this before torch to give valgrind a head start.

SCHEMA = "torch-function-overhead/instructions/1"
INSTALL_HINT = "install it with `apt-get install valgrind` (Debian/Ubuntu) or your system's package manager"
DEFAULT_SEEDS = (1,)
# Comparing builds: a verdict must not rest on one layout unless the counts are exact, so three
# seeds are drawn afresh for every comparison (fresh_seeds) and counted in rounds that fill the
# CPUs (count_until_decided; one seed a round on two CPUs). Fixed seeds (1, 2, 3) made every
# comparison of a pair the same sample of layouts: the bare shim on SubTensor read +517
# [-262..+1,297], "inconclusive", in every comparison of one batch, one seed far from the other
# two each time.
COMPARE_SEED_COUNT = 3
# Seeds whose counts leave a case undecided get company, for those cases only, up to this many
# in all, while more could decide them (more_seeds_could_decide). With layout's known spread
# pooled in (LAYOUT_SPREAD_PCT) most cases are decided on one or two seeds; six is for a
# comparison whose own spread is wider than that. One more seed costs ~15 s quiet, ~30 s busy
# (both builds at once; the imports under valgrind are most of it).
MAX_COMPARE_SEEDS = 6
# Drawn seeds have six digits: PYTHONHASHSEED's value is in the environment, so every
# comparison's environment then has one length.
FRESH_SEED_RANGE = (100_000, 999_999)
# Repeats per case; the first is dropped, the figure is the minimum of the rest (see above).
# Each repeat of the four seed cases costs ~2.2 s under valgrind: 7 repeats kept the run above
# the 45 s aim on a busy machine.
DEFAULT_REPEATS = 5
CALLS_PER_REPEAT = 1000  # ~10M instructions for plain tensors: the toggles' cost is lost in it
# Uninstrumented calls before counting. The interpreter re-tries failed specialisations with
# exponential back-off; after 500 calls the second and third repeats still paid ~15
# instructions a call in _Py_Specialize_* that later repeats did not.
WARMUP_CALLS = 5000
# Valgrind processes at once: one per CPU this process may use (counts do not care what else
# runs, and each is single-threaded). `taskset -c 0` gives one.
def count_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


RUN_TIMEOUT_S = 600
FUNCTIONS_KEPT = 400  # per case, by self cost: enough to diff, small enough for a JSON file
# Call paths are kept when asked for (`tree=True`: the report and comparisons, where "where did
# it go" is the question): `--separate-callers=CONTEXT_DEPTH` names every function by its chain
# of callers, so the last repeat's profile is a call tree with exact self counts per path. It
# changes no count, only how counts are attributed; it costs ~4 s a case more under valgrind
# (SubTensor and Tensor, 5 repeats: 53 s against 45 s), so `bench.py --instructions` goes without.
# The deepest chain of the seed cases was 40 (SubTensor, counted from the loop's own frame).
CONTEXT_DEPTH = 80
STACK_MIN_PER_CALL = 0.05  # call paths below this many instructions a call are not kept
PAD_VARIABLE = "OVERRIDES_LAYOUT_PAD"
# Verdicts on counts. Across 9 layouts SubTensor's per-call count ranged 0.83% (+-108 of 39k),
# so a single layout cannot carry a change of less than ~1% (SINGLE_LAYOUT_ALLOWANCE_PCT).
# The threshold is the clock's own fraction of the base (verdicts.DEFAULT_THRESHOLD_PCT, or the
# user's --threshold-pct), so a verdict means one size of change in both views: at ~0.12 ns an
# instruction 0.75% of a case's instructions is 0.75% of its time. It was 0.25% until the bare
# shim's untouched WithTorchFunction, whose per-seed deltas move -94..+39 by layout (0.12% sd),
# stayed undecided in 4 of 20 comparisons: a third of the clock's threshold no count could reach.
DEFAULT_THRESHOLD_INSTRUCTIONS = 50.0
DEFAULT_THRESHOLD_INSTRUCTIONS_PCT = 0.75
SINGLE_LAYOUT_ALLOWANCE_PCT = 1.0  # one seed: no spread to measure, so this much is layout luck
# How far layout moves a per-seed delta, known before a comparison starts: the standard deviation
# of the bare shim's per-seed deltas over 26 comparisons (199 seeds) was 0.12% of the count on
# Tensor and WithTorchFunction and 0.22% on SubTensor and SubWithTorchFunction. The interval of
# a comparison's seeds pools this prior, weighted as LAYOUT_SPREAD_WEIGHT seeds, with their own
# spread (the moderated t of empirical Bayes): two or three seeds alone give t-intervals of
# +-12.7 and +-4.3 standard errors, so wide that the bare shim's SubTensor (+1.2%) read
# "regression" on two seeds only 56% of the time and its untouched cases needed three to six.
# With the prior both are decided on one or two seeds (replayed over the 199 seed deltas: 1.1
# and 1.6 rounds on average, no wrong verdict). A comparison whose own spread exceeds the prior
# LAYOUT_SPREAD_TRUSTED times is not the kind the prior was measured on: its own t-interval
# alone judges it.
LAYOUT_SPREAD_PCT = 0.25
LAYOUT_SPREAD_WEIGHT = 4
LAYOUT_SPREAD_TRUSTED = 2.0
# Counts made from one path on both sides (overrides/builds/samepath.py) are deterministic: two installs
# or copies of one build counted 0.0 apart on every case and seed in every A/A comparison so far
# (benchmarks/README.md, "One path for both sides"), while any change of code a case runs moved
# its count at every seed (the bare shim's untouched Tensor: 0 on some seeds, -4..-19 on others).
# So a case whose delta stays within this many instructions on every seed is "no change", from
# its first seed on: the same instructions ran.
EXACT_INSTRUCTIONS = 2.0
# "no change" on counts: the 95% interval of the per-seed deltas inside the threshold, where the
# clock asks 99% (verdicts.NO_CHANGE_CONFIDENCE). The clock's margin guards its threshold against
# a sample whose noise is the machine's; the counts' noise is layout's, measured (above) and
# pooled into the interval. At 99% the bare shim's untouched Tensor (-19..0 over seeds) took
# five seeds, ~17 s each on two CPUs; at 95% it takes two or three.
COUNTS_NO_CHANGE_CONFIDENCE = 0.95


@dataclasses.dataclass(frozen=True)
class CaseCounts:
    """One case's instruction counts in one valgrind run (one layout)."""

    case: str
    op: str
    per_call: float  # minimum of the repeats after the first: the figure
    repeats: tuple[float, ...]  # every repeat's per-call count, the dropped first one included
    functions: dict  # function -> self instructions per call (last repeat), largest first
    error: str | None = None
    # call path (root first) -> self instructions per call, in the repeat that gave `per_call`;
    # empty without tree
    stacks: dict = dataclasses.field(default_factory=dict)

    @property
    def spread_pct(self) -> float:
        """(max - min) / figure, over the repeats that make the figure."""
        used = self.repeats[1:]
        if len(used) < 2 or not self.per_call:
            return 0.0
        return 100.0 * (max(used) - min(used)) / self.per_call


@dataclasses.dataclass(frozen=True)
class CountRun:
    """One valgrind process: every case counted under one hash seed."""

    seed: int
    cases: tuple[CaseCounts, ...]
    settings: dict
    wall_s: float

    def get(self, case: str, op: str) -> CaseCounts | None:
        return next((c for c in self.cases if c.case == case and c.op == op), None)


def find_valgrind() -> tuple[str, str]:
    """(valgrind, callgrind_control) paths, or a UsageError saying how to install them."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if not valgrind or not control:
        raise UsageError(f"valgrind not found; {INSTALL_HINT}")
    return valgrind, control


def counting_plan(asked: bool, refused: bool, seeds: Sequence[int] | None
                  ) -> tuple[tuple[int, ...], str | None]:
    """The seeds a comparison of two builds counts instructions under, and why it does not.

    Comparisons count by default wherever valgrind is installed: the counts call changes the
    clock cannot (a ~1% one at the 0.75% threshold). Without `seeds`, COMPARE_SEED_COUNT fresh
    ones. `asked` (--instructions) or `seeds` make a missing valgrind an error; `refused`
    (--no-instructions) turns counting off. Returns (seeds, None), or ((), why counting is
    skipped and how to install valgrind)."""
    if refused:
        if seeds:
            raise UsageError("--seeds chooses layouts for the counts; drop --no-instructions or --seeds")
        return (), None
    if asked or seeds or (shutil.which("valgrind") and shutil.which("callgrind_control")):
        find_valgrind()  # asked for and missing: say how to install it now, not after the timing
        return tuple(seeds or fresh_seeds()), None
    return (), f"valgrind is not installed; {INSTALL_HINT}"


def fresh_seeds(count_: int = COMPARE_SEED_COUNT, taken: Sequence[int] = ()) -> tuple[int, ...]:
    """`count_` distinct hash seeds, drawn anew and none of `taken`: each comparison counts its
    own sample of layouts."""
    import random

    rng, taken, drawn = random.SystemRandom(), set(taken), []
    while len(drawn) < count_:
        seed = rng.randint(*FRESH_SEED_RANGE)
        if seed not in taken:
            taken.add(seed)
            drawn.append(seed)
    return tuple(drawn)


def valgrind_version(valgrind: str) -> str:
    return subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout.strip()


# ---------------------------------------------------------------------------------------------
# The worker: runs under valgrind, started as `python -c _WORKER_CODE SPEC`. The spec is parsed
# before torch is imported, as it always was: reading it from stdin after the imports (to start
# the worker before the parent knew the spec) moved the heap and made SubTensor's repeats
# bimodal (+500 instructions a call in some of them), spreading the bare shim's per-seed deltas
# over 142..924 where argv gave 515..714. So a head start must guess the whole spec instead.

_WORKER_CODE = "import sys; from overrides.counts.callgrind import _worker_main; _worker_main(sys.argv[1])"


def _worker_main(spec_json: str) -> None:
    """Build every target, warm up, say ready, wait for instrumentation, count, leave."""
    spec = json.loads(spec_json)
    import torch

    from overrides.cases import seedcases as cases, ops
    from overrides.clock.timer import UNROLL, compile_hot_loop

    torch.set_num_threads(1)
    targets = []
    for case_name, op_name in spec["targets"]:
        case = cases.get_case(case_name)
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
# Reading callgrind's output (written with --compress-strings=no --compress-pos=no).

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def clean_function(name: str, object_file: str | None) -> str:
    """A function name that means the same in two builds: no addresses, no argument lists, no
    directories (the object file's base name is kept for context)."""
    # "(anonymous namespace)" is part of the name, not an argument list: keep it, or every
    # function in an anonymous namespace of at:: would be cut to the same "at::".
    name = _ADDRESS.sub("?", name.strip()).replace("(anonymous namespace)", "{anonymous}")
    depth, cut = 0, len(name)
    for i, char in enumerate(name):  # drop the outermost argument list: "f(int, ...)" -> "f"
        if char == "(":
            if depth == 0 and i > 0:
                cut = i
                break
            depth += 1
        elif char == ")":
            depth -= 1
    name = name[:cut] or name
    if object_file:
        name += f" [{os.path.basename(object_file)}]"
    return name


def read_dump(path: str, stacks: dict | None = None) -> tuple[int, dict[str, int]]:
    """(total instructions, self instructions per function) of one callgrind dump; with
    `stacks`, self instructions per call path are added to it (root first), from the caller
    chains `--separate-callers` writes as `callee'caller'caller...`."""
    total = 0
    functions: dict[str, int] = {}
    current, current_object, object_file = None, None, None
    chain: tuple[str, ...] = ()
    # (callee-first raw names, the callee's object file) -> count; cleaned at the end
    raw_stacks: dict[tuple[tuple[str, ...], str | None], int] = {}
    objects: dict[str, str | None] = {}  # raw function name -> an object file it is in
    skip_next_cost = False
    with open(path, encoding="utf-8", errors="replace") as src:
        for line in src:
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split(":", 1)[1].split()[0]))
            elif line.startswith("ob="):
                object_file = line[3:].strip()
            elif line.startswith("fn="):
                names = split_chain(line[3:].strip())
                current, current_object = names[0], object_file
                objects.setdefault(current, current_object)
                chain = tuple(names)
            elif line.startswith("calls="):
                skip_next_cost = True  # the next cost line is the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip_next_cost:
                    skip_next_cost = False
                    continue
                parts = line.split()
                if current is not None and len(parts) >= 2:
                    key = clean_function(current, current_object)
                    functions[key] = functions.get(key, 0) + int(parts[1])
                    if stacks is not None:
                        key = (chain, current_object)
                        raw_stacks[key] = raw_stacks.get(key, 0) + int(parts[1])
    if stacks is not None:
        # A caller's object file is known only where it was a callee itself: look it up there
        # (an inline function can sit in two libraries; the callee's own is always exact).
        for (raw, leaf_object), value in raw_stacks.items():
            path = tuple(clean_function(name, leaf_object if i == len(raw) - 1 else objects.get(name))
                         for i, name in enumerate(reversed(raw)))
            stacks[path] = stacks.get(path, 0) + value
    return total, functions


def split_chain(name: str) -> list[str]:
    """`callee'2'caller'caller` -> [callee, caller, caller]: the caller chain of a context
    (`--separate-callers`), recursion levels (`'2`) dropped."""
    return [part for part in name.split("'") if part and not part.isdigit()]


# ---------------------------------------------------------------------------------------------
# Running it

def _own_python_path() -> list[str]:
    """The caller's own PYTHONPATH entries, this checkout left out (it comes first anyway)."""
    return [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if path and os.path.realpath(path) != os.path.realpath(ROOT)]


def _environment(seed: int, pad: int, where: samepath.Placement) -> dict:
    """The whole environment of the valgrind process: fixed content, fixed order. The user's
    directory is passed only when a user case needs it (it would move the layout otherwise).
    The side's import path (its view or kept copy of torch) comes first after this checkout,
    both as `where` says the process sees them; the caller's own PYTHONPATH follows (a develop
    build is often found only through it)."""
    own = _own_python_path()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/"),
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": str(seed),
        "PYTHONPATH": os.pathsep.join([where.tool] + ([where.import_path] if where.import_path else [])
                                      + own),
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
        from overrides.cases.casenames import USER_DIR_VARIABLE

        env[USER_DIR_VARIABLE] = where.user_dir
    return env


def _fixed_cwd() -> str:
    """An empty folder with a fixed name: the first entry of sys.path for `python -c`."""
    path = os.path.join(tempfile.gettempdir(), "overrides-callgrind-cwd")
    os.makedirs(path, exist_ok=True)
    return path


@dataclasses.dataclass
class _Launch:
    """A valgrind worker started with its spec, importing torch."""

    key: tuple  # (python, seed, pad, user_dir, spec, tree, import_path): what the counts depend on
    process: subprocess.Popen
    out_dir: str
    started: float
    where: samepath.Placement

    def close(self) -> None:
        children.reap(self.process)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            stream.close()
        shutil.rmtree(self.out_dir, ignore_errors=True)


def _spec(targets: Sequence[tuple[str, str]], repeats: int, calls: int) -> str:
    return json.dumps({"targets": [list(t) for t in targets], "calls": calls, "repeats": repeats,
                       "warmup_calls": WARMUP_CALLS})


def _launch(python: str, seed: int, pad: int, user_dir: str | None, spec: str,
            tree: bool = False, import_path: str | None = None, source: str | None = None) -> _Launch:
    valgrind, _ = find_valgrind()
    where = samepath.place(python, import_path, user_dir, source=source)
    samepath.prime(where, os.pathsep.join(_own_python_path()))
    out_dir = tempfile.mkdtemp(prefix="overrides-callgrind-")
    contexts = [f"--separate-callers={CONTEXT_DEPTH}"] if tree else []
    command = [valgrind, "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               "--compress-strings=no", "--compress-pos=no", "-q", *contexts,
               f"--callgrind-out-file={out_dir}/callgrind.out.%p", where.python, "-c", _WORKER_CODE,
               spec]
    process = children.start(where.wrap(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=_fixed_cwd(),
                             env=_environment(seed, pad, where))
    return _Launch((python, seed, pad, user_dir, spec, tree, import_path), process, out_dir,
                   time.monotonic(), where)


# Workers started ahead by head_start(), taken by count_once() when the key matches exactly. The
# import of torch under valgrind (20-28 s) then overlaps the parent's own start-up (~3 s).
_HEAD_STARTS: dict[tuple, _Launch] = {}
# What `bench.py --instructions` counts by default: the seed cases under torch.add. Named here
# because the head start must not import torch (overrides.cases.seedcases does); if the defaults change
# and this does not, the guess misses and counting merely starts later
# (tests/test_callgrind.py checks that the default command line is started ahead).
GUESS_DEFAULT_CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
GUESS_DEFAULT_OPS = ("torch.add",)


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


def head_start_for_command_line(argv: Sequence[str], python: str) -> None:
    """`bench.py --instructions` without --compare/--load: head-start the workers it will need.
    Only a guess at the command line (the real parser runs later, after torch), so anything
    unusual (user cases, 'all', unknown names, unparsable arguments, an interpreter without
    torch: all refused at once by the real one) gets none."""
    import argparse
    import importlib.util

    from overrides.cases.casenames import case_names
    from overrides.cases.ops import all_ops

    guess = argparse.ArgumentParser(add_help=False)
    guess.add_argument("--instructions", action="store_true")
    guess.add_argument("--seeds", nargs="+", type=int, default=list(DEFAULT_SEEDS))
    guess.add_argument("--cases", nargs="+", default=list(GUESS_DEFAULT_CASES))
    guess.add_argument("--op", nargs="+", default=list(GUESS_DEFAULT_OPS))
    for flag in ("--compare", "--load", "--list", "--list-ops", "-h", "--help", "-n", "--nreps",
                 "-m", "--nrepreps", "--min-time"):
        guess.add_argument(flag, nargs="?", const=True, dest=flag.lstrip("-").replace("-", "_"))
    try:
        known, _ = guess.parse_known_args(list(argv))
    except (SystemExit, ValueError):
        return
    other = [value for name, value in vars(known).items()
             if name not in ("instructions", "seeds", "cases", "op") and value is not None]
    known_names = set(case_names()) | {op.name for op in all_ops()}
    names = known.cases + known.op
    if (known.instructions and not other and all(name in known_names for name in names)
            and importlib.util.find_spec("torch") is not None):
        head_start(python, [(case, op) for op in known.op for case in known.cases], known.seeds)


def _drop_head_starts() -> None:
    while _HEAD_STARTS:
        _HEAD_STARTS.popitem()[1].close()


def count_once(python: str, targets: Sequence[tuple[str, str]], seed: int, *, pad: int = 0,
               repeats: int = DEFAULT_REPEATS, calls: int = CALLS_PER_REPEAT,
               say: Callable[[str], None] | None = None, tree: bool = False,
               import_path: str | None = None, source: str | None = None) -> CountRun:
    """Count every (case, op) in one valgrind process under hash seed `seed` (with `tree`, the
    last repeat's call paths too)."""
    valgrind, control = find_valgrind()
    say = say or (lambda message: None)
    user_dir = os.getcwd() if any(":" in case for case, _ in targets) else None
    spec = _spec(targets, repeats, calls)
    ahead = _HEAD_STARTS.pop((python, seed, pad, user_dir, spec, tree, import_path), None)
    launch = ahead or _launch(python, seed, pad, user_dir, spec, tree, import_path, source)
    process, out_dir, started = launch.process, launch.out_dir, launch.started
    try:
        ready = _read_json(process, "ready")
        say(f"callgrind seed {seed}: imports done in {time.monotonic() - started:.0f} s"
            f"{' (started ahead)' if ahead else ''}; counting")
        switched = subprocess.run([control, "-i", "on", str(ready["ready"])],
                                  capture_output=True, text=True, timeout=60)
        if switched.returncode != 0:
            raise UsageError(f"callgrind_control could not switch instrumentation on: "
                             f"{switched.stderr.strip() or switched.stdout.strip()}")
        process.stdin.write("go\n")
        process.stdin.flush()
        order = _read_json(process, "dumps")["dumps"]
        process.wait(timeout=RUN_TIMEOUT_S)
        dumps = sorted(glob.glob(os.path.join(out_dir, f"callgrind.out.{ready['ready']}.*")),
                       key=lambda p: int(p.rsplit(".", 1)[1]))
        if len(dumps) < len(order):
            raise UsageError(f"callgrind wrote {len(dumps)} profiles, {len(order)} expected; "
                             "is this torch built with valgrind support (torch._C._valgrind_toggle)?")
        per_target: dict[int, list[tuple[int, dict, dict]]] = {}
        empty: dict[int, int] = {}
        for (kind, index, repeat), path in zip(order, dumps):
            last = repeat == repeats - 1
            stacks: dict | None = {} if tree and kind != "empty" else None
            total, functions = read_dump(path, stacks)
            if kind == "empty":
                empty[repeat] = total
            else:
                per_target.setdefault(index, []).append((total, functions if last else {}, stacks or {}))
    finally:
        launch.close()
    results = []
    for index, (case, op) in enumerate(targets):
        rows = per_target.get(index, [])
        repeats_per_call = tuple((total - empty.get(r, 0)) / calls for r, (total, _, _) in enumerate(rows))
        last_functions = rows[-1][1] if rows else {}
        top = sorted(last_functions.items(), key=lambda kv: -kv[1])[:FUNCTIONS_KEPT]
        figure = min(repeats_per_call[1:] or repeats_per_call) if rows else math.nan
        # The call paths of the repeat that gave the figure, so that they add up to it.
        chosen = repeats_per_call.index(figure) if rows else 0
        figure_stacks = {path: value / calls for path, value in (rows[chosen][2] if rows else {}).items()
                         if value / calls >= STACK_MIN_PER_CALL}
        results.append(CaseCounts(case, op, figure, repeats_per_call,
                                  {name: value / calls for name, value in top},
                                  None if rows else "no profile", figure_stacks))
    settings = {"seed": seed, "repeats": repeats, "calls_per_repeat": calls, "call_paths": tree,
                "statistic": "minimum of repeats 2..n, loop and toggles removed",
                "valgrind": valgrind_version(valgrind), "python": python,
                "environment": sorted(_environment(seed, pad, launch.where)),
                "import_path": import_path,
                "same_path": launch.where.fixed,
                "same_path_reason": launch.where.reason or None,
                "malloc_top_pad": MALLOC_ENV.get("MALLOC_TOP_PAD_")}
    return CountRun(seed, tuple(results), settings, time.monotonic() - started)


def _read_json(process: subprocess.Popen, key: str) -> dict:
    for line in process.stdout:
        line = line.strip()
        if line.startswith("{"):
            message = json.loads(line)
            if key in message:
                return message
    err = process.stderr.read().strip().splitlines()
    raise UsageError(f"the counting process ended early: {err[-1] if err else 'no message'}")


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
                 sources: Sequence[str | None] | None = None) -> list[list[CountRun]]:
    """Every build under every seed (the same seeds, so layouts are matched build to build),
    count_jobs() valgrind processes at once; one list of runs per build, in seed order.
    `import_paths`: per build, a folder to import torch from first (a view or a kept copy);
    `sources`: per build, the folder a view stands for (names its bytecode cache, samepath)."""
    find_valgrind()
    paths = list(import_paths) if import_paths is not None else [None] * len(pythons)
    origins = list(sources) if sources is not None else paths
    pads = list(pads) if pads is not None else pads_for(pythons, paths)
    jobs = [(python, pad, path, origin, seed) for python, pad, path, origin in zip(pythons, pads, paths, origins)
            for seed in seeds]

    def run(job: tuple) -> CountRun:
        python, pad, path, origin, seed = job
        return count_once(python, targets, seed, pad=pad, repeats=repeats, say=say, tree=tree,
                          import_path=path, source=origin)

    # Ctrl-C kills the valgrind processes at once (overrides/children.py), not after counting.
    runs = children.parallel(run, jobs, count_jobs())
    per_build = len(seeds)
    return [runs[i * per_build:(i + 1) * per_build] for i in range(len(pythons))]


def pads_for(pythons: Sequence[str], import_paths: Sequence[str | None] | None = None) -> list[int]:
    """Environment padding per build so that every argument list and environment together are
    as long as the longest (the interpreter's path is in the arguments, the import path in the
    environment), measured as each process sees them (samepath: often the same already)."""
    paths = list(import_paths or [None] * len(pythons))
    placed = [samepath.place(python, path) for python, path in zip(pythons, paths)]
    sizes = [len(where.python) + len(where.import_path or "") for where in placed]
    return [max(sizes) - size for size in sizes]


# ---------------------------------------------------------------------------------------------
# The JSON (inside a results file, and record.sh's LABEL-instructions.json)

def to_dict(runs: Sequence[CountRun]) -> dict:
    return {
        "schema": SCHEMA,
        "seeds": [run.seed for run in runs],
        "settings": runs[0].settings if runs else {},
        "runs": [{"seed": run.seed, "wall_s": round(run.wall_s, 1),
                  "cases": [{"case": c.case, "op": c.op, "instructions_per_call": round(c.per_call, 1),
                             "repeats": [round(r, 1) for r in c.repeats],
                             "spread_pct": round(c.spread_pct, 4), "error": c.error,
                             "functions": {k: round(v, 2) for k, v in c.functions.items()},
                             **({"stacks": _pack_stacks(c.stacks)} if c.stacks else {})}
                            for c in run.cases]}
                 for run in runs],
    }


def _pack_stacks(stacks: dict) -> dict:
    """Call paths as indices into one list of names: the same few hundred names recur in
    thousands of paths (10 MB a results file written out in full, for the four seed cases)."""
    names: dict[str, int] = {}
    paths = [[[names.setdefault(name, len(names)) for name in path], round(value, 3)]
             for path, value in stacks.items()]
    return {"names": list(names), "paths": paths}


def _unpack_stacks(packed: dict | None) -> dict:
    if not packed:
        return {}
    names = packed["names"]
    return {tuple(names[i] for i in path): value for path, value in packed["paths"]}


def from_dict(data: dict, source: str = "instructions") -> list[CountRun]:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UsageError(f"{source} is not an instruction-count file of this tool; "
                         "count again with --instructions")
    try:
        return [CountRun(run["seed"], tuple(
            CaseCounts(c["case"], c["op"], c["instructions_per_call"], tuple(c["repeats"]),
                       c.get("functions", {}), c.get("error"), _unpack_stacks(c.get("stacks")))
            for c in run["cases"]),
            data.get("settings", {}), run.get("wall_s", math.nan)) for run in data["runs"]]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise UsageError(f"{source} is damaged or was written by another version of this tool "
                         f"({type(exc).__name__}: {exc}); count or record it again") from None


def per_call_by_case(runs: Sequence[CountRun]) -> dict[tuple[str, str], list[float]]:
    """(case, op) -> the per-call count under each seed, in seed order."""
    out: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for c in run.cases:
            if c.error is None:
                out.setdefault((c.case, c.op), []).append(c.per_call)
    return out


# ---------------------------------------------------------------------------------------------
# Deltas between builds

@dataclasses.dataclass(frozen=True)
class CountComparison:
    case: str
    op: str
    base: float  # mean per-call count over seeds
    branch: float
    delta: float
    ci95: tuple[float, float] | None  # over matched seeds; None with one seed
    verdict: str
    seeds: int
    spread: float | None = None  # standard deviation of the per-seed deltas (two seeds or more)
    limit: float | None = None  # the threshold this case was judged against, in instructions
    exact: bool = False  # every seed's delta within EXACT_INSTRUCTIONS, counted from one path


def compare_counts(base_runs: Sequence[CountRun], branch_runs: Sequence[CountRun],
                   threshold: float = DEFAULT_THRESHOLD_INSTRUCTIONS,
                   threshold_pct: float = DEFAULT_THRESHOLD_INSTRUCTIONS_PCT) -> list[CountComparison]:
    """Per (case, op): mean delta over seeds present on both sides, its interval, a verdict.

    The interval pools the matched per-seed deltas' own spread with layout's known one
    (layout_interval). One seed: a change must also exceed SINGLE_LAYOUT_ALLOWANCE_PCT of the
    count, while "no change" may rest on the known spread alone.
    From one path on both sides, a delta within EXACT_INSTRUCTIONS on every seed is "no change"
    however few the seeds. Runs that started from different paths (no private namespace:
    overrides/builds/samepath.py) carry an offset no interval sees, so the threshold is at least
    PATH_ALLOWANCE_INSTRUCTIONS then."""
    from overrides.verdicts import judge

    branch_by_seed = {run.seed: run for run in branch_runs}
    one_path = not samepath.paths_differ([run.settings for run in (*base_runs, *branch_runs)])
    if not one_path:
        threshold = max(threshold, samepath.PATH_ALLOWANCE_INSTRUCTIONS)
    deltas: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for run in base_runs:
        other = branch_by_seed.get(run.seed)
        if other is None:
            continue
        for c in run.cases:
            b = other.get(c.case, c.op)
            if c.error is None and b is not None and b.error is None:
                deltas.setdefault((c.case, c.op), []).append((c.per_call, b.per_call))
    out = []
    for (case, op), pairs in deltas.items():
        base = sum(a for a, _ in pairs) / len(pairs)
        branch = sum(b for _, b in pairs) / len(pairs)
        diffs = [b - a for a, b in pairs]
        delta = sum(diffs) / len(diffs)
        limit = max(threshold, threshold_pct / 100 * base)
        spread = stats.stdev(diffs) if len(diffs) >= 2 else None
        exact = one_path and all(abs(d) <= EXACT_INSTRUCTIONS for d in diffs)
        ci = layout_interval(diffs, base, 0.95)
        no_change_ci = layout_interval(diffs, base, COUNTS_NO_CHANGE_CONFIDENCE)
        if exact:
            verdict = "no change"
        elif len(diffs) == 1:
            # a change on one seed must pass what one layout can move a count by; "no change"
            # needs the delta inside the threshold by the prior's interval
            allowance = SINGLE_LAYOUT_ALLOWANCE_PCT / 100 * base
            verdict = judge(delta, (delta - allowance, delta + allowance), max(limit, allowance))
            if verdict in ("regression", "improvement"):
                limit = max(limit, allowance)
            else:
                low, high = no_change_ci
                verdict = "no change" if -limit <= low and high <= limit else "inconclusive"
        else:
            verdict = judge(delta, ci, limit, no_change_ci)
        out.append(CountComparison(case, op, base, branch, delta,
                                   (min(diffs), max(diffs)) if exact else ci if len(diffs) >= 2 else None,
                                   verdict, len(diffs), spread, limit, exact))
    return out


def layout_interval(diffs: Sequence[float], base: float, confidence: float) -> tuple[float, float]:
    """The `confidence` interval of the mean of the per-seed deltas `diffs` of a case counting
    `base` instructions a call (see LAYOUT_SPREAD_PCT)."""
    mean = sum(diffs) / len(diffs)
    half = _half_width(stats.stdev(diffs) if len(diffs) >= 2 else 0.0, len(diffs), base, confidence)
    return mean - half, mean + half


def _half_width(own: float, seeds: int, base: float, confidence: float) -> float:
    """Half the interval of a mean over `seeds` per-seed deltas whose own standard deviation is
    `own`: Student's t on a variance that pools layout's known spread (LAYOUT_SPREAD_PCT of
    `base`, worth LAYOUT_SPREAD_WEIGHT seeds) with their own, or on their own alone once it is
    beyond LAYOUT_SPREAD_TRUSTED times the known one."""
    known = LAYOUT_SPREAD_PCT / 100 * abs(base)
    if own <= LAYOUT_SPREAD_TRUSTED * known:
        df = LAYOUT_SPREAD_WEIGHT + seeds - 1
        variance = (LAYOUT_SPREAD_WEIGHT * known ** 2 + (seeds - 1) * own ** 2) / df
    else:
        df, variance = seeds - 1, own ** 2
    return stats.t_quantile(confidence, df) * math.sqrt(variance / seeds)


def more_seeds_could_decide(c: CountComparison, max_seeds: int = MAX_COMPARE_SEEDS) -> bool:
    """Whether counting an undecided case under more seeds, up to `max_seeds`, could decide it,
    were the per-seed deltas to go on as they have (their mean and spread). With one seed there
    is no spread yet to go on. A case more seeds cannot decide (its delta sits near the
    threshold, or moves too much by layout) is left to the clock rather than counted on: the
    bare shim's untouched WithTorchFunction, -20 +- 25 over seeds, once took six seeds (~17 s
    each on two CPUs) to stay "inconclusive" at a threshold of 0.25%."""
    if c.spread is None or c.limit is None or c.seeds >= max_seeds:
        return c.seeds < max_seeds
    size = abs(c.delta)
    no_change = size + _half_width(c.spread, max_seeds, c.base, COUNTS_NO_CHANGE_CONFIDENCE) <= c.limit
    change = size >= c.limit and size - _half_width(c.spread, max_seeds, c.base, 0.95) > 0
    return no_change or change


def seeds_per_round(builds: int = 2) -> int:
    """How many seeds one round of counting takes: every build under each, one valgrind process
    per CPU."""
    return max(1, count_jobs() // builds)


def first_round(seeds: Sequence[int], add_seeds: bool, per_round: int | None = None) -> int:
    """How many seeds count_until_decided counts every case under first: the user's own seeds
    all at once; drawn ones a round's worth (seeds_per_round())."""
    return max(1, per_round or seeds_per_round()) if add_seeds else len(seeds)


def count_until_decided(count_builds_: Callable[[list, Sequence[int]], list[list[CountRun]]],
                        targets: list, seeds: Sequence[int], add_seeds: bool,
                        say: Callable[[str], None] | None = None, per_round: int | None = None,
                        threshold_pct: float = DEFAULT_THRESHOLD_INSTRUCTIONS_PCT,
                        ) -> tuple[list[CountRun], list[CountRun], list[CountComparison], tuple[int, ...]]:
    """Base and branch counted by `count_builds_(targets, seeds)` and compared. Returns (base
    runs, branch runs, comparisons, every seed counted).

    Without `add_seeds` (the user's own seeds) every seed is counted at once. With it, `seeds`
    are drawn ones, counted in rounds of `per_round` (seeds_per_round(): as many as fill the
    CPUs, one at a time on two): the first round counts every case, each later round only the
    cases still undecided whose counts more seeds could decide (more_seeds_could_decide), under
    the next drawn seeds, up to MAX_COMPARE_SEEDS in all. From one path an untouched case is
    exact on its first seed, so an A/A comparison counts one round.

    Stopping once the cases are decided looks at the data after every round; that cannot make a
    "regression" of an untouched case whose layouts spread by tens of instructions, as the
    estimate itself must pass the threshold (DEFAULT_THRESHOLD_INSTRUCTIONS)."""
    from overrides.verdicts import DECIDED

    if not add_seeds:
        base_runs, branch_runs = count_builds_(list(targets), tuple(seeds))
        return base_runs, branch_runs, compare_counts(base_runs, branch_runs, threshold_pct=threshold_pct), tuple(seeds)
    per_round = first_round(seeds, add_seeds, per_round)
    pool = list(seeds)
    if len(pool) < per_round:
        pool += fresh_seeds(per_round - len(pool), taken=pool)
    counted = tuple(pool[:per_round])
    round_started = time.monotonic()
    base_runs, branch_runs = count_builds_(list(targets), counted)
    comparisons = compare_counts(base_runs, branch_runs, threshold_pct=threshold_pct)
    while len(counted) < MAX_COMPARE_SEEDS:
        open_ = [c for c in comparisons if c.verdict not in DECIDED]
        undecided = [(c.case, c.op) for c in open_ if more_seeds_could_decide(c)]
        if not undecided:
            if open_ and say:
                say(f"counts cannot decide {', '.join(c.case for c in open_)} with more seeds: "
                    "the clock judges")
            break
        take = min(per_round, MAX_COMPARE_SEEDS - len(counted))
        unused = [seed for seed in pool if seed not in counted]
        new = tuple(unused[:take])
        if len(new) < take:
            new += fresh_seeds(take - len(new), taken=counted + new)
        if say:
            say(f"counts leave {', '.join(case for case, _ in undecided)} undecided: seed"
                f"{'s' if len(new) > 1 else ''} {len(counted) + 1}"
                f"{f'-{len(counted) + len(new)}' if len(new) > 1 else ''} of at most {MAX_COMPARE_SEEDS}"
                f" (the last round took {time.monotonic() - round_started:.0f} s)")
        round_started = time.monotonic()
        more_base, more_branch = count_builds_(undecided, new)
        base_runs, branch_runs = base_runs + more_base, branch_runs + more_branch
        counted += new
        comparisons = compare_counts(base_runs, branch_runs, threshold_pct=threshold_pct)
    return base_runs, branch_runs, comparisons, counted


def function_deltas(base_runs: Sequence[CountRun], branch_runs: Sequence[CountRun], case: str,
                    op: str, count_: int = 15) -> list[tuple[str, float, float]]:
    """(function, base, branch) self instructions per call, largest |change| first, from the
    first seed present on both sides."""
    branch_by_seed = {run.seed: run for run in branch_runs}
    for run in base_runs:
        other = branch_by_seed.get(run.seed)
        a, b = run.get(case, op), other.get(case, op) if other else None
        if a and b:
            names = set(a.functions) | set(b.functions)
            rows = [(n, a.functions.get(n, 0.0), b.functions.get(n, 0.0)) for n in names]
            rows.sort(key=lambda r: -abs(r[2] - r[1]))
            return [r for r in rows[:count_] if abs(r[2] - r[1]) >= 0.5]
    return []
