"""What `torch.compile` did to a function, from Dynamo's own records: a frozen `CompileRecord`
of the compile's seconds, its graph breaks (each with its place in your code), its recompiles
(with their reasons), or why it failed, in one line.

Why it exists: a subclass author asking "does compile make my overhead go away?" first needs
to know what compile did with their class: nothing (it failed), pieces (graph breaks in their
`__torch_function__`), or a new graph every few calls (recompiles). `compile_call(fn, operands)`
is the one way this tool compiles and asks; ops (`overrides/compiled/measure.py`) and training
steps reuse it, so both read the same records the same way.

Where each part comes from (torch 2.13's own records, none guessed from timings):
- seconds: the wall time of the first call (Dynamo's tracing, the backend's compile and one
  run), never part of a steady-state figure; whether Inductor's or AOTAutograd's local cache
  served it (`CompilationMetrics`' cache hit counts), since a cached compile is far shorter.
- graph breaks: Dynamo logs each on its `graph_breaks` artifact loggers ("Graph break in user
  code at FILE:LINE", the reason, the user's stack). A handler here takes those messages, and
  Dynamo's warnings with them, for the length of the compile (nothing is printed), and
  `torch._dynamo.utils.counters["graph_break"]` counts them where no message came.
- recompiles: `torch._dynamo.utils.get_compilation_metrics()`, each frame compiled again, with
  its `recompile_reason`.
- a failure: the exception of the first calls, as its type and first line (a backend's
  failure unwrapped to the error inside it), with where: compiling or running the compiled
  code, the graph's op it failed in, or your file and line. Never a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import functools
import os
import re
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

DEFAULT_BACKEND = "inductor"
# Calls after the first (which compiles) before a record is closed: a guard that fails on the
# second or third call (a counter your __torch_function__ bumps, an attribute that changes) is
# a recompile that steady-state calls would pay, so it belongs in the record, not in the timing.
WARM_CALLS = 3
# The loggers whose messages this module takes while compiling: each graph break is logged on
# one of Dynamo's `graph_breaks` artifact loggers; Dynamo's and Inductor's warnings are taken too
# (their own stderr handlers set aside meanwhile), so a compile prints nothing of its own: what
# it said that matters is in the record.
TAKEN_LOGGERS = ("torch._dynamo", "torch._inductor")
GRAPH_BREAK_LOGGERS = tuple(f"torch._dynamo.{module}.__graph_breaks"
                            for module in ("symbolic_convert", "convert_frame", "exc"))
_AT = re.compile(r"in user code at (.+):(\d+)\s*$", re.M)
_FRAME = re.compile(r'^\s*File "(.+)", line (\d+), in (\S+)', re.M)
_GRAPH_OP = re.compile(r"torch\.ops\.([\w.]+)\(")
# Dynamo keeps its last 64 frame compiles' records by default; a record here reads those since
# its compile began, and a run of many ops asks whether anything compiled while timing.
METRICS_KEPT = 4096
MAX_MESSAGE = 200  # characters of an exception's first line kept: a line in the table's notes


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    """Graph breaks of one reason: Dynamo's reason, its explanation, where in your code, how many."""

    reason: str
    explanation: str
    place: str  # "file:line in function" of your code, "" where Dynamo recorded none
    count: int

    def line(self) -> str:
        where = f" at {self.place}" if self.place else " (Dynamo recorded no place)"
        said = f"{self.reason}" + (f": {self.explanation}" if self.explanation else "")
        return f"{self.count} graph break{'s' if self.count != 1 else ''}{where}: {said}"


@dataclasses.dataclass(frozen=True)
class CompileFailure:
    """Why compiling (or running what was compiled) failed, in one line."""

    when: str  # "compiling", or "running the compiled code"
    error: str  # the exception's type
    message: str  # its first line
    where: str = ""  # the compiled graph's op, or your file:line

    def line(self) -> str:
        return f"{self.when}{' at ' + self.where if self.where else ''}: {self.error}: {self.message}"


@dataclasses.dataclass(frozen=True)
class CompileRecord:
    """What compile did to one function on one set of operands (see the module docstring)."""

    backend: str
    compile_s: float  # the first call's wall time: tracing, the backend's compile, one run
    frames: int  # frames Dynamo compiled (resumes after graph breaks included)
    graphs: int  # of those, the frames that produced a graph
    cache_hits: int  # Inductor / AOTAutograd local-cache hits: the compile was served from disk
    breaks: tuple[GraphBreak, ...] = ()
    recompiles: tuple[str, ...] = ()  # each recompile's reason, first line
    failure: CompileFailure | None = None
    # graphs holding ops that return nothing and write to nothing: the backend drops them as dead
    # code (a step that returns no loss, an op whose result is unused), so nothing is timed
    dead_graphs: int = 0

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def break_count(self) -> int:
        return sum(b.count for b in self.breaks)

    def lines(self) -> list[str]:
        """What compile did, a line each: the failure, the breaks, the recompiles."""
        out = [f"failed {self.failure.line()}"] if self.failure else []
        if not self.failure and not self.frames:
            out.append("Dynamo compiled no frame: every call ran the function eagerly (as under a "
                       "TorchDispatchMode)")
        elif not self.failure and self.graphs and self.dead_graphs == self.graphs:
            out.append(f"{'its graph' if self.graphs == 1 else f'all {self.graphs} graphs'} returns nothing and writes "
                       "to nothing, so the backend drops its ops as dead code and the compiled figure times none of "
                       "the work: return the step's loss or output (the eager figure stands)")
        out += [b.line() for b in self.breaks]
        if self.recompiles:
            reasons = "; ".join(dict.fromkeys(self.recompiles))
            out.append(f"{len(self.recompiles)} recompile{'s' if len(self.recompiles) != 1 else ''}: {reasons}")
        return out

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["compile_s"] = round(self.compile_s, 4)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "CompileRecord":
        failure = data.get("failure")
        return cls(data["backend"], data["compile_s"], data["frames"], data["graphs"], data["cache_hits"],
                   tuple(GraphBreak(**b) for b in data.get("breaks", ())), tuple(data.get("recompiles", ())),
                   CompileFailure(**failure) if failure else None, data.get("dead_graphs", 0))


@dataclasses.dataclass(frozen=True)
class CompiledCall:
    """A compiled function, ready for steady-state calls, and what compiling it did."""

    call: Callable | None  # None where compiling failed
    record: CompileRecord


class _Taken(logging.Handler):
    """Dynamo's log messages during one compile, kept instead of printed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def graph_breaks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.name in GRAPH_BREAK_LOGGERS]


@contextlib.contextmanager
def _dynamo_messages() -> Iterator[_Taken]:
    """Dynamo's graph-break messages (and its warnings) taken by a handler, nothing printed;
    every logger's level, propagation and handlers restored afterwards."""
    taken = _Taken()
    tops = [logging.getLogger(name) for name in TAKEN_LOGGERS]
    breaks = [logging.getLogger(name) for name in GRAPH_BREAK_LOGGERS]
    saved = [(log, log.level, log.propagate, list(log.handlers)) for log in tops + breaks]
    for log in tops:
        for handler in list(log.handlers):
            log.removeHandler(handler)
        log.addHandler(taken)
        log.propagate = False
    for log in breaks:  # on at DEBUG, up to the handler above and no other
        log.setLevel(logging.DEBUG)
        log.propagate = True
        for handler in list(log.handlers):
            log.removeHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield taken
    finally:
        for log, level, propagate, handlers in saved:
            for handler in list(log.handlers):
                log.removeHandler(handler)
            for handler in handlers:
                log.addHandler(handler)
            log.setLevel(level)
            log.propagate = propagate


def _torch_folder() -> str:
    import torch

    return os.path.dirname(os.path.realpath(torch.__file__)) + os.sep


@functools.lru_cache(maxsize=1)
def _not_yours() -> tuple[str, ...]:
    """Folders whose files are nobody's own code: torch's, and Python's standard library (a
    failure inside `functools.py` was once named as the user's line)."""
    import sysconfig

    paths = sysconfig.get_paths()
    return (_torch_folder(), *{os.path.realpath(paths[key]) + os.sep for key in ("stdlib", "platstdlib")})


def _yours(filename: str) -> bool:
    """A frame of your code: not torch's, not the standard library's, not Python's own
    (`<frozen ...>`)."""
    return not os.path.realpath(filename).startswith(_not_yours()) and not filename.startswith("<")


def _short(filename: str) -> str:
    """A path as a person reads it: relative to here when below it, else as it is."""
    relative = os.path.relpath(filename) if not filename.startswith("<") else filename
    return relative if not relative.startswith("..") else filename


def _break_parts(message: str) -> tuple[str, str, str]:
    """(reason, explanation, place) of one graph-break message Dynamo logged."""
    head, _, rest = message.partition("Graph Break Reason:")
    body, _, stack = rest.partition("User code traceback:")
    lines = [line.strip() for line in body.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Encountered graph break"):
        lines = lines[1:]  # what Dynamo was tracing; the reason itself follows
    reason = lines[0] if lines else (message.strip().splitlines() or [""])[0]
    explanation = next((line.removeprefix("Explanation:").strip() for line in lines
                        if line.startswith("Explanation:")), "")
    at = _AT.search(head)  # where Dynamo says it broke; its stack (the first time only) names the function
    places = ([(at.group(1), int(at.group(2)), "")] if at else []) + [
        (f, int(n), name) for f, n, name in _FRAME.findall(stack)]
    place = next((f"{_short(f)}:{n}" + (f" in {name}" if name else "") for f, n, name in reversed(places)
                  if _yours(f)), "")
    if not place and at:
        place = f"{_short(at.group(1))}:{at.group(2)}"
    return reason, explanation, place


def graph_breaks(messages: Sequence[str], counted: dict[str, int]) -> tuple[GraphBreak, ...]:
    """The breaks of one compile, grouped by reason, each at the first place in your code Dynamo
    named for it; `counted` (Dynamo's counters["graph_break"]) where no message came."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for message in messages:
        reason, explanation, place = _break_parts(message)
        groups.setdefault(reason, []).append((explanation, place))
    out = [GraphBreak(reason, next((e for e, _ in found if e), ""), next((p for _, p in found if p), ""), len(found))
           for reason, found in groups.items()]
    said = sum(b.count for b in out)
    unsaid = sum(counted.values()) - said
    if unsaid > 0 and not out:
        for key, count in counted.items():
            reason, explanation, _ = _break_parts(f"Graph Break Reason: {key}")
            out.append(GraphBreak(reason, explanation, "", count))
    return tuple(out)


def _unwrapped(exc: BaseException) -> BaseException:
    """The error inside a backend's failure (BackendCompilerFailed) or Dynamo's wrapper."""
    inner = getattr(exc, "inner_exception", None)
    if inner is not None:
        return inner
    if type(exc).__name__ == "InternalTorchDynamoError" and exc.__cause__ is not None:
        return exc.__cause__
    return exc


def failure_of(exc: BaseException, compiling: bool) -> CompileFailure:
    """`exc` in one line: its type and first line, when it happened and where."""
    import traceback

    inner = _unwrapped(exc)
    compiling = compiling or inner is not exc
    first = next((line.strip() for line in str(inner).splitlines() if line.strip()), "")
    if len(first) > MAX_MESSAGE:
        first = first[:MAX_MESSAGE - 3] + "..."
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        op = _GRAPH_OP.search(frame.line or "") if frame.filename.startswith("<eval_with_key>") else None
        if op:
            where = f"{op.group(1)} in the compiled graph"
            break
    if not where:
        yours = [frame for frame in traceback.extract_tb(inner.__traceback__) if _yours(frame.filename)]
        if yours and not yours[-1].filename.startswith("<op:"):
            where = f"{_short(yours[-1].filename)}:{yours[-1].lineno} in {yours[-1].name}"
    return CompileFailure("compiling" if compiling else "running the compiled code", type(inner).__name__,
                          first, where)


def _metrics_since(count_before: int) -> list[Any]:
    from torch._dynamo.utils import get_compilation_metrics

    return get_compilation_metrics()[count_before:]


def compilations() -> int:
    """How many frame compiles Dynamo has recorded so far (a later count above it: something
    compiled again, e.g. while timing)."""
    from torch._dynamo.utils import get_compilation_metrics

    return len(get_compilation_metrics())


def _dead(graph) -> bool:
    """An FX graph whose ops nothing uses: it outputs nothing, and no op writes in place (an
    optimizer's `add_`, a `copy_` back into an input keep a graph alive without outputs)."""
    from torch.utils._pytree import tree_flatten

    ops = [n for n in graph.nodes if n.op in ("call_function", "call_method")]
    outputs = [n for n in graph.nodes if n.op == "output"]
    returned = tree_flatten(outputs[0].args)[0] if outputs else []
    writes = any(str(getattr(n.target, "__name__", n.target)).rstrip("'>").endswith("_")
                 or "setitem" in str(n.target) for n in ops)
    return bool(ops) and not returned and not writes


def _watching(backend: str, seen: list) -> Callable:
    """`backend` as Dynamo hands it each graph, noting first whether the graph is dead code."""
    from torch._dynamo import lookup_backend

    compile_graph = lookup_backend(backend)

    @functools.wraps(compile_graph)
    def watched(gm, example_inputs, **kwargs):
        seen.append(_dead(gm.graph))
        return compile_graph(gm, example_inputs, **kwargs)

    return watched


def compile_call(fn: Callable, operands: Sequence = (), backend: str = DEFAULT_BACKEND,
                 warm_calls: int = WARM_CALLS, reset: bool = True) -> CompiledCall:
    """`torch.compile(fn, backend=backend)`, called once on `operands` (compiling) and
    `warm_calls` times more, and what compile did: a CompiledCall. With `reset` Dynamo is reset
    first (torch._dynamo.reset()), so nothing compiled before weighs on this compile, and what was
    compiled before compiles again if called; without it, earlier compiled functions stay
    compiled (the record is this function's alone either way). `fn` may take no operands (a
    zero-argument step). A failure is recorded, never raised."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters, set_compilation_metrics_limit

    if reset:
        torch._dynamo.reset()
    counters.clear()
    set_compilation_metrics_limit(METRICS_KEPT)
    before = compilations()
    graphs_seen: list[bool] = []  # per graph the backend compiled: is it dead code?
    compiled = torch.compile(fn, backend=_watching(backend, graphs_seen))
    failure = None
    started = time.perf_counter()
    compile_s = float("nan")
    with _dynamo_messages() as taken:
        for call in range(1 + warm_calls):
            try:
                compiled(*operands)
            except Exception as exc:  # a finding, said in one line; the eager figures stand
                failed = any(m.fail_type for m in _metrics_since(before))
                failure = failure_of(exc, compiling=failed)
                break
            finally:
                if call == 0:
                    compile_s = time.perf_counter() - started
    metrics = _metrics_since(before)
    hits = sum((m.inductor_fx_local_cache_hit_count or 0) + (m.aotautograd_local_cache_hit_count or 0)
               for m in metrics)
    recompiles = tuple(" ".join(m.recompile_reason.strip().splitlines()[0].split()) for m in metrics
                       if (m.recompile_reason or "").strip())
    record = CompileRecord(backend, compile_s, len(metrics), sum(1 for m in metrics if m.graph_op_count),
                           hits, graph_breaks(taken.graph_breaks(), dict(counters["graph_break"])),
                           recompiles, failure, sum(graphs_seen))
    return CompiledCall(None if failure else compiled, record)


def op_function(stmt: str, name: str = "op") -> Callable:
    """`def op(x, y): return STMT`, a fresh function (its own code object, so that Dynamo keeps
    a cache of its own for each one compiled) over the names a statement may use."""
    from overrides.cases.ops import statement_namespace

    namespace = statement_namespace()
    exec(compile(f"def {name}(x, y):\n    return {stmt}\n", f"<op: {stmt}>", "exec"), namespace)
    return namespace[name]
