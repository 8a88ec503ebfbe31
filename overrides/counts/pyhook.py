"""The Python-call counter itself: the profiler hook and the bytecode counter that run inside a
side's own interpreter, around CALLS calls of a case (`count_case`), and the worker process
that counts every target and says what it counted in one message (`serve`: entry.py's `pycalls`
role, started by pycalls.count_build).

The bytecode counter differs by version. Up to 3.11 it is the trace hook with opcode events
(`sys.settrace`, `f_trace_opcodes` set when a frame starts). From 3.12 on that hook is built on
`sys.monitoring` and misreads (it counted nothing on 3.12 and missed a function's first call on
3.13), so there the counter is `sys.monitoring`'s INSTRUCTION event, on a tool id of its own.
Every process checks its counter on a known function first (`bytecodes_counted`); where it
reads wrong, the counts carry "bytecodes not counted" rather than zeros that would read as
evidence. Why counting and not sampling, and how functions are named: `pycalls.py`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Callable, Sequence

SCHEMA = "torch-function-overhead/pycalls/1"
# Calls counted per case: counts are exact, so more calls only divide out; 1000 keeps a call made
# once in a thousand visible as 0.001 and costs ~0.5 s a case under both hooks (SubTensor here).
CALLS = 1000
# Uncounted calls first: lazy imports, lru_cache fills and first-call set-up happen in them.
WARMUP_CALLS = 200
C_SUFFIX = " [C]"  # a C function called from Python: counted by calls, it has no bytecodes


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
    opcode events read nothing on 3.12.1 and missed some on 3.13.0; figures:
    benchmarks/history.md, 'Docstring figures')."""
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




@dataclasses.dataclass(frozen=True)
class Spec:
    """What a `pycalls` process counts (pycalls.count_build writes it on its command line): each
    (case, op) of `targets`, over `calls` calls after `warmup_calls` uncounted ones."""

    targets: tuple[tuple[str, str], ...]
    calls: int = CALLS
    warmup_calls: int = WARMUP_CALLS

    def to_dict(self) -> dict:
        return {"targets": [list(t) for t in self.targets], "calls": self.calls, "warmup_calls": self.warmup_calls}

    @classmethod
    def from_dict(cls, data: dict) -> "Spec":
        return cls(tuple(tuple(t) for t in data["targets"]), data["calls"], data["warmup_calls"])


def serve(channel, spec_json: str) -> None:
    """Count every target of the spec (a Spec's JSON); one message (`channel`: entry.Channel)."""
    spec = Spec.from_dict(json.loads(spec_json))
    import torch

    from overrides.cases import ops, registry
    from overrides.cases.ops import not_applicable_reason

    torch.set_num_threads(1)
    counter = bytecode_counter()
    counted = []
    for case_name, op_name in spec.targets:
        try:
            case, op = registry.get_case(case_name), ops.get_op(op_name)
            reason = not_applicable_reason(case, op)
            if reason:
                counted.append({"case": case_name, "op": op_name, "error": f"n/a: {reason}"})
                continue
            counted.append(count_case(case, op, spec.calls, spec.warmup_calls))
            from overrides.cases.usercases import module_files

            counted[-1]["module_file"] = module_files([case_name]).get(case_name)
        except Exception as exc:  # one failing case must not cost the others their counts
            counted.append({"case": case_name, "op": op_name, "error": f"{type(exc).__name__}: {exc}"})
    channel.say({"schema": SCHEMA, "python": sys.version.split()[0], "bytecode_counter": counter,
                 "cases": counted})
    os._exit(0)  # torch's teardown adds seconds and nothing to count
