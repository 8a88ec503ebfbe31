"""What `pyspybench.py` runs under py-spy: one case's statement, over and over, and nothing else.

A flamegraph is only as clean as the process it samples: no timing, no printing, no result
kept inside the loop. The statement is pasted into a generated function (the Timer core's
`compile_hot_loop`) named after the case, so the flamegraph's hot tower starts at a frame a
reader recognises. The clock is read only between chunks of ~50 ms of calls, outside that
function, to know when to stop.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Callable

from overrides.argtypes import OneLineParser, positive_float, positive_int
from overrides.errors import UsageError, run_command

# Long enough for 1000 samples at the rate the scripts record at (flamegraph.PYSPY_RATE_HZ,
# 200 a second) after torch is imported, with 20% to spare.
DEFAULT_SECONDS = 6.0
CHUNK_S = 0.05  # calls between two clock reads: a negligible share of the samples
WARMUP_TURNS = 20  # turns of UNROLL calls before a recording forks: bytecode specialised
LOOP_MARGIN_S = 1.0  # the recorded loop runs this much longer than py-spy records


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pyspybench.py",
                     description="Run one case's hot loop and nothing else, for a profiler: "
                                 "py-spy record -o subtensor.svg --native -- python pyspybench.py SubTensor")
    parser.add_argument("case", help="a case name (python bench.py --list) or pkg.module:factory")
    parser.add_argument("--op", default=None, help="the op to run (default torch.add; see bench.py --list-ops)")
    how_long = parser.add_mutually_exclusive_group()
    how_long.add_argument("--nreps", type=positive_int, metavar="N",
                          help="run exactly N calls (rounded up to a multiple of 50)")
    how_long.add_argument("--seconds", type=positive_float, metavar="S",
                          help=f"run for S seconds (default {DEFAULT_SECONDS:g})")
    profile = parser.add_argument_group(
        "record itself with py-spy, after the imports (what scripts/record.sh uses): the graph "
        "then holds the hot loop only, and importing torch is not slowed by sampling")
    profile.add_argument("--record", metavar="OUTPUT", help="write py-spy's output here")
    profile.add_argument("--format", default="flamegraph", choices=("flamegraph", "raw"),
                         help="py-spy's output format (default flamegraph: an SVG)")
    profile.add_argument("--rate", type=positive_int, default=None, metavar="HZ",
                         help="py-spy samples per second (default: the scripts' rate)")
    profile.add_argument("--pyspy", default=None, metavar="PATH", help="the py-spy to use (default: found)")
    return parser


def frame_name(case_name: str) -> str:
    """The hot loop's function name for a case: `hot_loop_SubTensor`, valid as an identifier."""
    return "hot_loop_" + re.sub(r"\W", "_", case_name)


def run(case_name: str, op_name: str | None, nreps: int | None, seconds: float | None,
        record: Callable[[int], None] | None = None) -> int:
    """Run the hot loop; returns the number of calls made. With `record`, the loop runs in a
    forked child once everything is imported and warm, and this process becomes
    `record(child_pid)` (which does not return: it execs py-spy)."""
    from overrides import cases, ops
    from overrides.measure import not_applicable_reason
    from overrides.timer import compile_hot_loop

    case = cases.get_case(case_name)
    op = ops.get_op(op_name) if op_name else ops.DEFAULT_OP
    reason = not_applicable_reason(case, op)
    if reason:
        raise UsageError(f"op {op.name} does not apply to case {case.name}: {reason}; pick another --op")
    operands = tuple(case.make_operands())
    loop = compile_hot_loop(case.stmt_for(op), frame_name(case.name))
    with case.active():
        if record is None:
            return _spin(loop, operands, nreps, seconds)
        loop(operands, WARMUP_TURNS)  # specialised before py-spy looks
        child = os.fork()
        if child:
            record(child)  # execs py-spy on the child: never returns
        try:
            _spin(loop, operands, nreps, seconds)
        finally:
            os._exit(0)


def _spin(loop: Callable[[tuple, int], None], operands: tuple, nreps: int | None,
          seconds: float | None) -> int:
    """Call the loop for exactly `nreps` calls (rounded up to whole turns) or for `seconds`."""
    from overrides.timer import UNROLL

    if nreps is not None:
        turns = -(-nreps // UNROLL)
        loop(operands, turns)
        return turns * UNROLL
    deadline = time.monotonic() + (seconds if seconds is not None else DEFAULT_SECONDS)
    calls, turns = 0, 1
    while True:
        started = time.monotonic()
        loop(operands, turns)
        calls += turns * UNROLL
        now = time.monotonic()
        if now >= deadline:
            return calls
        # Grow the chunk until it lasts ~CHUNK_S, never past the deadline by much.
        elapsed = max(now - started, 1e-6)
        turns = max(1, min(int(turns * CHUNK_S / elapsed), int(turns * (deadline - now) / elapsed) + 1))


def exec_pyspy(pyspy: str, output: str, fmt: str, rate: int, seconds: float) -> Callable[[int], None]:
    """What `run` calls with the loop's pid: replace this process by py-spy recording it. py-spy
    is then the loop's parent, so the kernel lets it trace it without root (Yama scope 1)."""
    def become_pyspy(pid: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(pyspy, [pyspy, "record", "--pid", str(pid), "--native", "--rate", str(rate),
                         "--format", fmt, "--output", output, "--duration", f"{max(1, round(seconds))}"])

    return become_pyspy


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        record = None
        if args.record:
            from overrides import flamegraph

            if args.nreps:
                raise UsageError("--record runs for --seconds; drop --nreps")
            seconds = args.seconds or DEFAULT_SECONDS
            record = exec_pyspy(args.pyspy or flamegraph.find_pyspy(sys.executable), args.record,
                                args.format, args.rate or flamegraph.PYSPY_RATE_HZ, seconds)
            # The loop outlives py-spy's --duration a little, so py-spy never samples an exit.
            args.seconds = seconds + LOOP_MARGIN_S
        run(args.case, args.op, args.nreps, args.seconds, record)
        return 0

    return run_command("pyspybench.py", body)
