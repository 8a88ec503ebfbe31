"""The timed loops' code: a statement pasted UNROLL times into a generated function, with the
clock reads around it (`compile_loop`), or with nothing around it for a profiler or a counter to
see (`compile_hot_loop`); and the one clock every wall-clock figure reads (`clock_ns`).

Why it is a module of its own: the Timer core (timer.py) decides what to time and when; how the
statement becomes a loop is shared by the Timer core, the counting process (counts/callgrind.py,
counts/pyhook.py), the flamegraph's loop (flame/hotloop.py) and what times itself outside the
Timer core's rounds (overrides/step/), and the generated code is what each of them measures.
"""

from __future__ import annotations

import time
from typing import Callable

from overrides.cases.ops import statement_namespace
from overrides.clock import cuda

UNROLL = 50  # statements per loop turn: a turn costs ~20 ns, so <0.5 ns per call is loop overhead
# Untimed calls before the clock starts in every sample: the previous sample ran another target
# (or, in A/B, another process), so caches and branch predictors hold its state. A few calls
# refill them; 50 (the first version) cost SubTensor a third of its sample time for nothing.
WARM_CALLS = 10
clock_ns = time.perf_counter_ns  # integer nanoseconds: the clock of every wall-clock figure
_clock = clock_ns


def _repeated(stmt: str, times: int, indent: str) -> str:
    return "\n".join(indent + stmt for _ in range(times))


def compile_loop(stmt: str, calls: int, unroll: int = UNROLL, warm_calls: int = WARM_CALLS,
                 mode: str = "cpu", names: tuple[tuple[str, object], ...] = ()) -> Callable[[tuple], int]:
    """A function `(operands) -> ns` running `stmt` exactly `calls` times, unrolled.

    `warm_calls` more run before the clock starts, so the target's code and data are hot
    after whatever ran before this sample. `mode`: "cpu", or on a CUDA device which of its
    figures the loop times ("host", "synced", "gpu": overrides/clock/cuda.py); `names`: a
    Target's own (Target.names).
    """
    turns, tail = divmod(calls, unroll)
    if stmt:
        unrolled = _repeated(stmt, unroll, "        ")
        tail_code, warm_code = _repeated(stmt, tail, "    "), _repeated(stmt, warm_calls, "    ")
    else:
        # The empty loop: one `pass` per turn, not `unroll` of them, since each `pass` is a NOP
        # the real loop does not run (~2 ns a call here, which would be wrongly subtracted).
        unrolled, tail_code, warm_code = "        pass", "", ""
    start, stop = cuda.loop_parts(mode)
    source = (
        "def _timed(_operands, _turns=%d, _clock=_clock, torch=torch, F=F%s):\n"
        "    x, y = _operands\n"
        "%s\n"
        "%s"
        "    for _ in range(_turns):\n%s\n"
        "%s\n"
        "%s"
    ) % (turns, "".join(f", {name}={name}" for name, _ in names), warm_code, start, unrolled, tail_code, stop)
    namespace = dict(statement_namespace(), _clock=_clock, **cuda.namespace(mode), **dict(names))
    exec(compile(source, f"<timed loop: {stmt or 'empty'}>", "exec"), namespace)
    return namespace["_timed"]


def compile_hot_loop(stmt: str, name: str = "hot_loop",
                     unroll: int = UNROLL) -> Callable[[tuple, int], None]:
    """A function `(operands, turns)` running `stmt` `turns * unroll` times and nothing else:
    no clock, no result kept. It is what a profiler should see (`pyspybench.py`); `name`
    becomes the frame's name in the flamegraph.

    The loop and its unrolled statements stand on ONE source line: py-spy names a Python frame
    by its line, and with one statement per line the loop split into `unroll` towers of ~2%
    each, none wide enough to label."""
    source = (
        "def %s(_operands, _turns, torch=torch, F=F):\n"
        "    x, y = _operands\n"
        "    for _ in range(_turns): %s\n"
    ) % (name, "; ".join([stmt] * unroll))
    namespace = statement_namespace()
    exec(compile(source, f"<hot loop: {stmt}>", "exec"), namespace)
    return namespace[name]
