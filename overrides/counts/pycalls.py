"""Python calls per call: which Python functions a case's call runs, counted, not sampled.

Most changes in `torch/overrides.py` and `torch/_tensor.py` are Python: a helper added, a check
moved, a generator where a loop was. Callgrind sees those only as the interpreter's own work
(`_PyEval_EvalFrameDefault`), and py-spy's few hundred samples per function move by chance from
one process to the next, so a 100 ns helper can sit below both. The interpreter itself can
count what runs as exactly as Callgrind counts instructions: in a separate process per side
(never the timed one), the case's call is run CALLS times under the profiler hook
(`sys.setprofile`: every Python function entered, every C function called from Python) and a
bytecode counter (bytecodes executed per function). The same build gives the same counts, so a
function the branch calls and the base does not is a fact, however little time it takes.

The bytecode counter differs by version. Up to 3.11 it is the trace hook with opcode events
(`sys.settrace`, `f_trace_opcodes` set when a frame starts). From 3.12 on that hook is built on
`sys.monitoring` and misreads (it counted nothing on 3.12.1 and 3.12.3, and on 3.13.0 missed a
function's first call and the frame that set it), so there the counter is `sys.monitoring`'s
INSTRUCTION event, on a tool id of its own. Every process checks its counter on a known
function first (`bytecodes_counted`); where it reads wrong, the counts carry "bytecodes not
counted" rather than zeros that would read as evidence.

Each call of a Python function is also counted at its call site (the calling function and its
line then), and the source of every function that ran is kept: `counts/callsites.py` matches a
new call's line against the base's code, so py-spy's time at that line (the call itself, with
everything it runs) can be set beside the function the counts name.

A function is named `qualified name (file)`, the file relative to the `sys.path` entry it was
imported from (site-packages, a kept copy's folder, this checkout), so two installs of one build
at different paths give identical keys. Line numbers are shown but are not part of the key: a
helper added above a class moves every line below it. Two code objects with one name in one file
(two generator expressions in one function) are counted together. A generator's resumptions
count as calls, as the hooks see them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from typing import Callable, Mapping, Sequence

from overrides import ROOT
from overrides.errors import UsageError
from overrides.figures import COUNT_PLACES, json_figure

SCHEMA = "torch-function-overhead/pycalls/1"
# Calls counted per case: counts are exact, so more calls only divide out; 1000 keeps a call made
# once in a thousand visible as 0.001 and costs ~0.5 s a case under both hooks (SubTensor here).
CALLS = 1000
# Uncounted calls first: lazy imports, lru_cache fills and first-call set-up happen in them.
WARMUP_CALLS = 200
HASH_SEED = "0"  # set iteration order decides some loops' lengths: one seed for both sides
RUN_TIMEOUT_S = 600  # importing torch on a cold disk beside other work, then the counting
C_SUFFIX = " [C]"  # a C function called from Python: counted by calls, it has no bytecodes


# ---------------------------------------------------------------------------------------------
# Counting, in the process that runs the case

def relative_file(filename: str, roots: Sequence[str]) -> str:
    """`filename` relative to the longest of `roots` (sys.path entries) it lies under: the same
    for two installs at different paths. Generated code (`<string>`) and files under no root
    are kept as they are."""
    if filename.startswith("<"):
        return filename
    best = ""
    for root in roots:
        prefix = os.path.join(root, "")
        if filename.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return filename[len(best):] if best else filename


def c_function_name(function: object) -> str:
    """`builtins.isinstance [C]`, `Tensor.as_subclass [C]`: a C callable as the profiler hook
    passes it, named by its module (when it has one) and qualified name."""
    qualname = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) \
        or type(function).__name__
    module = getattr(function, "__module__", None)
    return (f"{module}.{qualname}" if module else qualname) + C_SUFFIX


# Python 3.12 added sys.monitoring; its INSTRUCTION event counts every bytecode of every frame,
# where settrace's opcode events misread there (see the docstring).
MONITORING = sys.version_info >= (3, 12)
# The tool id the bytecode counter asks sys.monitoring for first: PROFILER_ID, the one meant for
# this use; where a profiler already holds it, the first free id of the others.
_MONITORING_TOOL_IDS = (2, 3, 4, 0, 1, 5)


def _probe(x):
    """A known function for `bytecodes_counted`: the same bytecodes on every call."""
    y = x + 1
    return y * 2


class Counter:
    """Counting per function: calls (profile hook) and own bytecodes (trace hook with opcode
    events up to 3.11, sys.monitoring from 3.12). `ignore`: code objects and C callables of the
    harness itself."""

    def __init__(self, roots: Sequence[str], ignore_code: Sequence[object] = (),
                 ignore_c: Sequence[object] = ()):
        self.roots = sorted({os.path.abspath(r or os.getcwd()) for r in roots}, key=len, reverse=True)
        # the harness's own frames, which sys.monitoring sees as they switch it on and off
        self.ignore_code = set(ignore_code) | {Counter.run.__code__, Counter._start_bytecodes.__code__,
                                                Counter._stop_bytecodes.__code__}
        self.ignore_c = list(ignore_c)
        self.calls: dict[str, int] = {}
        self.bytecodes: dict[str, int] = {}
        self.lines: dict[str, int] = {}  # first line of the function's definition
        # (callee, caller, the caller's line): calls of a Python function from a Python line
        self.sites: dict[tuple[str, str, int], int] = {}
        self._keys: dict[object, str] = {}  # code object -> key
        self.codes: dict[str, object] = {}  # key -> a code object of it (for its source)

    def _key(self, code) -> str:
        key = self._keys.get(code)
        if key is None:
            name = getattr(code, "co_qualname", code.co_name)
            key = f"{name} ({relative_file(code.co_filename, self.roots)})"
            self._keys[code] = key
            self.codes[key] = code
            self.lines[key] = min(self.lines.get(key, code.co_firstlineno), code.co_firstlineno)
        return key

    def profile(self, frame, event: str, arg) -> None:
        if event == "call":
            if frame.f_code in self.ignore_code:
                return
            key = self._key(frame.f_code)
            self.calls[key] = self.calls.get(key, 0) + 1
            caller = frame.f_back
            if caller is not None and caller.f_code not in self.ignore_code:
                site = (key, self._key(caller.f_code), caller.f_lineno)
                self.sites[site] = self.sites.get(site, 0) + 1
        elif event == "c_call":
            if any(arg is c for c in self.ignore_c):
                return
            key = c_function_name(arg)
            self.calls[key] = self.calls.get(key, 0) + 1

    def trace(self, frame, event: str, arg):
        """The global trace hook (up to 3.11): opcode events for every frame but the harness's."""
        if frame.f_code in self.ignore_code:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._local

    def _local(self, frame, event: str, arg):
        if event == "opcode":
            self._count_bytecode(frame.f_code)
        return self._local

    def _instruction(self, code, offset: int) -> None:
        """sys.monitoring's INSTRUCTION callback (3.12 on)."""
        if code not in self.ignore_code:
            self._count_bytecode(code)

    def _count_bytecode(self, code) -> None:
        key = self._key(code)
        self.bytecodes[key] = self.bytecodes.get(key, 0) + 1

    def sources(self) -> dict[str, list]:
        """key -> [first line, its source lines stripped] of every Python function that ran and
        has a source file (generated code has none)."""
        import inspect

        found = {}
        for key, code in sorted(self.codes.items()):
            try:
                lines, first = inspect.getsourcelines(code)
            except (OSError, TypeError):
                continue
            found[key] = [first, [line.strip() for line in lines]]
        return found

    def run(self, body: Callable[[], None]) -> None:
        """`body()` with both counters on (and the garbage collector off: a collection runs
        finalisers whenever allocation counts say so); `body` itself is not counted."""
        import gc

        self.ignore_code.add(getattr(body, "__code__", None))
        was_enabled = gc.isenabled()
        gc.disable()
        tool = self._start_bytecodes()
        sys.setprofile(self.profile)
        try:
            body()
        finally:
            sys.setprofile(None)
            self._stop_bytecodes(tool)
            if was_enabled:
                gc.enable()

    def _start_bytecodes(self) -> int | None:
        """Switch the bytecode counter on; the sys.monitoring tool id taken (3.12 on), else None.
        No free tool id leaves the bytecodes uncounted (bytecodes_counted says so)."""
        if not MONITORING:
            sys.settrace(self.trace)
            return None
        monitoring = sys.monitoring
        for tool in _MONITORING_TOOL_IDS:
            if monitoring.get_tool(tool) is None:
                monitoring.use_tool_id(tool, "overrides pycalls")
                monitoring.register_callback(tool, monitoring.events.INSTRUCTION, self._instruction)
                monitoring.set_events(tool, monitoring.events.INSTRUCTION)
                return tool
        return None

    @staticmethod
    def _stop_bytecodes(tool: int | None) -> None:
        if not MONITORING:
            sys.settrace(None)
            return
        if tool is not None:
            sys.monitoring.set_events(tool, 0)
            sys.monitoring.register_callback(tool, sys.monitoring.events.INSTRUCTION, None)
            sys.monitoring.free_tool_id(tool)


def bytecode_counter() -> str | None:
    """What counts bytecodes in this interpreter ("sys.monitoring INSTRUCTION" or "sys.settrace
    opcodes"), or None where it reads the known function wrong (bytecodes_counted)."""
    if not bytecodes_counted():
        return None
    return "sys.monitoring INSTRUCTION" if MONITORING else "sys.settrace opcodes"


def bytecodes_counted() -> bool:
    """Whether this interpreter's bytecode counter counts every bytecode of every call: a known
    function called three times must read three times one call's count, above zero (settrace's
    opcode events read 0 on 3.12.1 and 16 of 24 on 3.13.0)."""
    counter = Counter(sys.path)

    def three_calls():
        for value in range(3):
            _probe(value)

    counter.run(three_calls)
    once = Counter(sys.path)
    once.run(lambda: _probe(0))
    key = next((k for k in counter.bytecodes if k.startswith("_probe ")), None)
    return key is not None and once.bytecodes.get(key, 0) > 0 \
        and counter.bytecodes[key] == 3 * once.bytecodes[key] and counter.calls.get(key) == 3


def count_case(case, op, calls: int = CALLS, warmup_calls: int = WARMUP_CALLS) -> dict:
    """One case's counts in this process: {"case", "op", "calls", "functions": {key: [calls,
    bytecodes, line]}, "sites": [[callee, caller, line, calls]], "sources": {key: [first line,
    lines]}} in totals over `calls` calls of the case's statement."""
    from overrides.clock.timer import compile_hot_loop

    loop = compile_hot_loop(case.stmt_for(op), "counted_loop", unroll=1)
    operands = tuple(case.make_operands())
    counter = Counter(sys.path, ignore_code=[loop.__code__], ignore_c=[sys.setprofile, sys.settrace])
    with case.active():
        loop(operands, warmup_calls)
        counter.run(lambda: loop(operands, calls))
    functions = {key: [counter.calls.get(key, 0), counter.bytecodes.get(key, 0), counter.lines.get(key)]
                 for key in sorted(set(counter.calls) | set(counter.bytecodes))}
    sites = [[callee, caller, line, n] for (callee, caller, line), n in sorted(counter.sites.items())]
    return {"case": case.name, "op": op.name, "calls": calls, "functions": functions,
            "sites": sites, "sources": counter.sources()}


_WORKER_CODE = "import sys; from overrides.counts.pycalls import _worker_main; _worker_main(sys.argv[1])"


def _worker_main(spec_json: str) -> None:
    """Count every target of the spec; one JSON line on stdout."""
    spec = json.loads(spec_json)
    import torch

    from overrides.cases import ops, registry
    from overrides.cases.ops import not_applicable_reason

    torch.set_num_threads(1)
    counter = bytecode_counter()
    counted = []
    for case_name, op_name in spec["targets"]:
        try:
            case, op = registry.get_case(case_name), ops.get_op(op_name)
            reason = not_applicable_reason(case, op)
            if reason:
                counted.append({"case": case_name, "op": op_name, "error": f"n/a: {reason}"})
                continue
            counted.append(count_case(case, op, spec["calls"], spec["warmup_calls"]))
        except Exception as exc:  # one failing case must not cost the others their counts
            counted.append({"case": case_name, "op": op_name, "error": f"{type(exc).__name__}: {exc}"})
    print(json.dumps({"schema": SCHEMA, "python": sys.version.split()[0], "bytecode_counter": counter,
                      "cases": counted}), flush=True)
    sys.stdout.flush()
    os._exit(0)  # torch's teardown adds seconds and nothing to count


# ---------------------------------------------------------------------------------------------
# Running it in a side's interpreter

@dataclasses.dataclass(frozen=True)
class CaseCalls:
    """One case's counts on one side: per function, calls and own bytecodes in total over
    `calls` calls of the case."""

    case: str
    op: str
    calls: int
    functions: Mapping[str, tuple[int, int, int | None]]  # key -> (calls, bytecodes, line)
    error: str | None = None
    # (callee, caller, the caller's line, calls) of Python functions called from Python lines
    sites: tuple[tuple[str, str, int, int], ...] = ()
    sources: Mapping[str, tuple[int, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    # what counted the bytecodes (bytecode_counter()); None: not counted by this interpreter, and
    # every bytecode figure is 0, which is no evidence
    bytecode_counter: str | None = "sys.settrace opcodes"
    python: str = ""  # the side's Python version

    @property
    def bytecodes_counted(self) -> bool:
        return self.bytecode_counter is not None

    def per_call(self, key: str) -> tuple[float, float]:
        calls, bytecodes, _ = self.functions.get(key, (0, 0, None))
        return calls / self.calls, bytecodes / self.calls

    def totals(self) -> tuple[float, float]:
        """(Python function calls, bytecodes) per call of the case; C functions not counted."""
        python = [v for k, v in self.functions.items() if not k.endswith(C_SUFFIX)]
        return (sum(v[0] for v in python) / self.calls, sum(v[1] for v in python) / self.calls)


def from_dict(payload: Mapping) -> list[CaseCalls]:
    if payload.get("schema") != SCHEMA:
        raise ValueError(f"not a Python-calls count ({payload.get('schema')!r})")
    counter = payload.get("bytecode_counter", "sys.settrace opcodes")  # older files: 3.11's hook
    return [CaseCalls(c["case"], c["op"], c.get("calls", 0),
                      {k: tuple(v) for k, v in c.get("functions", {}).items()}, c.get("error"),
                      tuple(tuple(site) for site in c.get("sites", ())),
                      {k: (first, tuple(lines)) for k, (first, lines) in c.get("sources", {}).items()},
                      counter, payload.get("python", ""))
            for c in payload["cases"]]


def count_build(python: str, targets: Sequence[tuple[str, str]], *, import_path: str | None = None,
                calls: int = CALLS, warmup_calls: int = WARMUP_CALLS) -> list[CaseCalls]:
    """Count every (case, op) in one process of `python` (with `import_path` first on its
    path: a kept copy of a build), this checkout on PYTHONPATH, from the caller's working
    directory (for user cases). A process that fails is a UsageError with its last line."""
    from overrides.builds.interpreters import with_import_path

    env = with_import_path(dict(os.environ, PYTHONHASHSEED=HASH_SEED, PYTHONDONTWRITEBYTECODE="1"),
                           ROOT, import_path)
    spec = json.dumps({"targets": [list(t) for t in targets], "calls": calls,
                       "warmup_calls": warmup_calls})
    try:
        done = subprocess.run([python, "-c", _WORKER_CODE, spec], capture_output=True, text=True,
                              env=env, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UsageError(f"counting Python calls under {python} took over {RUN_TIMEOUT_S} s") from None
    lines = done.stdout.strip().splitlines()
    try:
        return from_dict(json.loads(lines[-1]))
    except (IndexError, ValueError, KeyError):
        last = done.stderr.strip().splitlines()
        raise UsageError(f"counting Python calls under {python} failed: "
                         f"{last[-1] if last else 'no output'}") from None


# ---------------------------------------------------------------------------------------------
# Base against branch

@dataclasses.dataclass(frozen=True)
class CallDelta:
    """One function's calls and own bytecodes per call of the case, base and branch."""

    function: str
    line: int | None  # where it is defined: in the branch, or in base when the branch has none
    base_calls: float
    branch_calls: float
    base_bytecodes: float
    branch_bytecodes: float
    bytecodes_counted: bool = True  # False: both bytecode figures are 0 and mean nothing

    @property
    def delta_calls(self) -> float:
        return self.branch_calls - self.base_calls

    @property
    def delta_bytecodes(self) -> float:
        return self.branch_bytecodes - self.base_bytecodes

    @property
    def is_c(self) -> bool:
        return self.function.endswith(C_SUFFIX)

    @property
    def has_bytecodes(self) -> bool:
        return self.bytecodes_counted and not self.is_c

    @property
    def new(self) -> bool:
        return self.base_calls == 0 and self.branch_calls > 0

    @property
    def gone(self) -> bool:
        return self.branch_calls == 0 and self.base_calls > 0

    @property
    def weight(self) -> float:
        """How much interpreter work the change is, for the order: the change of calls times
        the function's own bytecodes per call of it (a C function: its calls alone, its cost is
        not in bytecodes), or the change of its bytecodes where that is larger (a function that
        runs more of its own code, called as often)."""
        if self.is_c:
            return abs(self.delta_calls)
        per_call = max(self.base_bytecodes / self.base_calls if self.base_calls else 0.0,
                       self.branch_bytecodes / self.branch_calls if self.branch_calls else 0.0, 1.0)
        return max(abs(self.delta_calls) * per_call, abs(self.delta_bytecodes))

    @property
    def tag(self) -> str:
        if self.new:
            return "new"
        if self.gone:
            return "gone"
        if self.delta_calls:
            return "more calls" if self.delta_calls > 0 else "fewer calls"
        return "more bytecodes" if self.delta_bytecodes > 0 else "fewer bytecodes"

    def to_dict(self) -> dict:
        return {"function": self.function, "line": self.line, "change": self.tag,
                "base_calls": json_figure(self.base_calls, COUNT_PLACES), "branch_calls": json_figure(self.branch_calls, COUNT_PLACES),
                "delta_calls": json_figure(self.delta_calls, COUNT_PLACES),
                "base_bytecodes": json_figure(self.base_bytecodes, COUNT_PLACES) if self.has_bytecodes else None,
                "branch_bytecodes": json_figure(self.branch_bytecodes, COUNT_PLACES) if self.has_bytecodes else None,
                "delta_bytecodes": json_figure(self.delta_bytecodes, COUNT_PLACES) if self.has_bytecodes else None}



def order(rows: Sequence[CallDelta]) -> list[CallDelta]:
    """New functions first, then by weight (change of calls x own bytecodes per call), largest
    first; ties by name: the same rows in the same order on every run."""
    return sorted(rows, key=lambda d: (not d.new, -round(d.weight, 6), d.function))


def compare(base: CaseCalls, branch: CaseCalls) -> list[CallDelta]:
    """Every function whose calls or own bytecodes per call of the case differ, in `order`.
    Where either side did not count bytecodes, calls alone."""
    both = base.bytecodes_counted and branch.bytecodes_counted
    rows = []
    for key in set(base.functions) | set(branch.functions):
        b_calls, b_codes = base.per_call(key)
        r_calls, r_codes = branch.per_call(key)
        if not both:
            b_codes = r_codes = 0.0
        if (b_calls, b_codes) == (r_calls, r_codes):
            continue
        line = (branch.functions.get(key) or base.functions[key])[2]
        rows.append(CallDelta(key, line, b_calls, r_calls, b_codes, r_codes, both))
    return order(rows)


def not_counted_note(base: CaseCalls, branch: CaseCalls) -> str:
    """'' where both sides counted bytecodes, else the sentence that says which did not."""
    missing = [f"{role} (Python {calls.python or '?'})" for role, calls in
               (("base", base), ("branch", branch)) if not calls.bytecodes_counted]
    if not missing:
        return ""
    return (f"Bytecodes were not counted on {' and '.join(missing)}: this interpreter's bytecode "
            "counter read a known function wrong, so only calls are compared.")


def find(runs: Sequence[CaseCalls], case: str, op: str) -> CaseCalls | None:
    return next((r for r in runs if r.case == case and r.op == op and not r.error), None)


def pyspy_frame(function: str) -> str | None:
    """The name py-spy gives the same Python function (`flame.stacks.clean_frame`: qualified name,
    the file's last two path parts); None for a C function, which py-spy names by its symbol."""
    if function.endswith(C_SUFFIX):
        return None
    name, _, location = function.rpartition(" (")
    return f"{name} ({'/'.join(location.rstrip(')').split('/')[-2:])})"

