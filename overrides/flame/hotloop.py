"""What `pyspybench.py` runs under py-spy: a case's statement, over and over, and nothing else.

A flamegraph is only as clean as the process it samples: no timing, no printing, no result
kept inside the loop. The statement is pasted into a generated function (the Timer core's
`compile_hot_loop`, all on one source line so py-spy sees one frame) named after the case, so
the flamegraph's hot tower starts at a frame a reader recognises. `pyspybench.py` calls it from
its own module frame: the only harness frame above the loop is `<module>`. The clock is read
only between chunks of ~50 ms of calls, outside that function, to know when to stop. Several
cases run one after the other in one process (`Program`): each loop's frame names its case, so
one recording splits into one per case, and torch is imported once for all of them. With
`--step pkg.module:factory` the loop calls your training step instead (built by
overrides/step/flameloop.py, handed in by pyspybench.py: this wing may not import the step wing).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
import time
from typing import Callable, ContextManager, Iterator

from overrides.argtypes import OneLineParser, positive_float, positive_int
from overrides.errors import UsageError, run_command
from overrides.flame.pyspy import PYSPY_RATE_HZ, find_pyspy
from overrides.flame.watch import PACE_MAX_S, adopt_orphans, await_pace, reaped_loop, said_finished

# Long enough for 1000 samples at the rate the scripts record at (pyspy.PYSPY_RATE_HZ,
# 200 a second) after torch is imported, with 20% to spare.
DEFAULT_SECONDS = 6.0
CHUNK_S = 0.05  # calls between two clock reads: a negligible share of the samples
WARMUP_TURNS = 20  # turns of UNROLL calls before a recording forks: bytecode specialised
PACE_CHUNK_S = 0.01  # calls between two looks for the go-ahead while py-spy starts
# py-spy's --duration is a bound only: it stops when the loop's process exits, right after the
# last case. It covers the pacing and this much more.
DURATION_MARGIN_S = 2.0
# Names --record refuses: py-spy writes a flamegraph as SVG and raw stacks as text, so a picture
# format's name (`x.png`) would hold an SVG under a name that lies. (Any other name is taken:
# record.sh writes `x.folded.partial` and renames it when whole.)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".pdf")
RECORD_SUFFIX = {"flamegraph": ".svg", "raw": ".txt"}  # what the refusal suggests
# py-spy titles its flamegraph with its own command line (`py-spy record --pid 4242 ...`); the
# recording is given the case's and op's name instead.
_PYSPY_TITLE = re.compile(r'(<text id="title"[^>]*>)[^<]*(</text>)')
# Under `py-spy record -- python pyspybench.py CASE` py-spy samples the start-up too; the loop
# runs at least this many times as long as start-up took, so it holds >= 80% of the samples
# (5x: 83%; py-spy samples start-up no faster than the loop, 80-85 against 96-112 a second here).
STARTUP_FACTOR = 5.0
# Torch's CPU threads under --record, set before anything is built: bench.py times on one (its
# --threads default), and the loop is forked after its warm-up; a parallel GEMM before the fork
# starts OpenMP's pool, which is not fork-safe: the child hung, every sample one stack under
# mkl_blas_sgemm_omp_driver, where py-spy took it for a loop that ran.
LOOP_THREADS = 1


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pyspybench.py",
                     description="Run one case's hot loop and nothing else, for a profiler: "
                                 "py-spy record -o subtensor.svg --native -- python pyspybench.py SubTensor")
    parser.add_argument("case", nargs="*",
                        help="a case name (python bench.py --list) or pkg.module:factory; several run "
                             "one after the other in one process, each for --seconds (one torch "
                             "import for all)")
    parser.add_argument("--step", metavar="PKG.MODULE:FACTORY", default=None,
                        help="your training step instead of a case, built by your factory as bench.py "
                             "--step builds it (docs/step.md), called over and over")
    parser.add_argument("--plain", action="store_true",
                        help="with --step: its plain twin (the factory's plain=True step) instead")
    parser.add_argument("--op", default=None, help="the op to run (default torch.add; see bench.py --list-ops), or "
                        "your own statement over x, y, torch and F")
    from overrides.cases.casenames import add_operand_arguments

    add_operand_arguments(parser)
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


STEP_PLAIN_SUFFIX = "@plain"  # a step's plain twin, named as a case's is (units:pair@plain)


def step_name(spec: str, plain: bool) -> str:
    """What a recording calls a step (`pyspybench.py --step`): its spec, `@plain` for its twin."""
    return spec + (STEP_PLAIN_SUFFIX if plain else "")


def frame_name(case_name: str) -> str:
    """The hot loop's function name for a case: `hot_loop_SubTensor`, valid as an identifier."""
    return "hot_loop_" + re.sub(r"\W", "_", case_name)


@dataclasses.dataclass(frozen=True)
class HotLoop:
    """One case's hot loop, ready to run: `pyspybench.py` calls `loop(operands, turns)` for each
    of `chunks()` from its own module frame, so py-spy sees `<module>` and the loop, nothing more."""

    loop: Callable[[tuple, int], None]
    operands: tuple
    active: Callable[[], ContextManager]  # the case's mode or context, held around the loop
    nreps: int | None
    seconds: float
    # With --record, the first case's: True once py-spy is at pace. Until then the loop runs in
    # chunks of ~PACE_CHUNK_S, its samples kept, and its `seconds` have not started.
    ready: Callable[[], bool] | None = None
    unroll: int | None = None  # calls a turn: the Timer core's UNROLL where None (a step: 1)

    def chunks(self) -> Iterator[int]:
        """Turns to run per call of the loop: exactly `nreps` calls (rounded up to whole turns),
        or chunks of ~CHUNK_S until `seconds` have passed (counted from `ready`). The clock is
        read between chunks."""
        from overrides.clock.timer import UNROLL

        if self.nreps is not None:
            yield -(-self.nreps // (self.unroll or UNROLL))
            return
        turns = 1
        while self.ready is not None and not self.ready():
            started = time.monotonic()
            yield turns
            elapsed = max(time.monotonic() - started, 1e-6)
            turns = max(1, min(4 * turns, int(turns * PACE_CHUNK_S / elapsed)))  # grows to ~PACE_CHUNK_S
        deadline = time.monotonic() + self.seconds
        while True:
            started = time.monotonic()
            yield turns
            now = time.monotonic()
            if now >= deadline:
                return
            # Grow the chunk until it lasts ~CHUNK_S, never past the deadline by much.
            elapsed = max(now - started, 1e-6)
            turns = max(1, min(int(turns * CHUNK_S / elapsed), int(turns * (deadline - now) / elapsed) + 1))


@dataclasses.dataclass(frozen=True)
class Program:
    """What `pyspybench.py` runs: the hot loops of the cases asked for, one after the other, and
    with --record the py-spy that records them (`record`, given the loops' pid)."""

    loops: tuple[HotLoop, ...]
    record: Callable[[int], None] | None = None
    output: str | None = None  # --record's file, titled once py-spy has written it
    title: str = ""

    def hand_to_recorder(self) -> None:
        """With `record`: warm every loop up, fork, and become `record(child)` (py-spy) in the
        parent; the child returns and runs the loops. Without: nothing."""
        if self.record is None:
            return
        for job in self.loops:  # specialised before py-spy looks
            with job.active():
                job.loop(job.operands, WARMUP_TURNS)
        global _FINISHED, _GO
        adopt_orphans()  # the loop's process, once py-spy is gone, is this one's to reap
        # The loop says it finished on a pipe: one that ends without saying so died (py-spy,
        # which traces it, exits 0 all the same). Pipes are not inherited by py-spy's exec.
        finished, _FINISHED = os.pipe()
        _GO, go_ahead = os.pipe()  # this process tells the loop that py-spy is at pace
        recorder = os.fork()
        if recorder:  # this process waits for py-spy and titles what it wrote: never returns
            os.close(_FINISHED)
            os.close(_GO)
            _FINISHED = _GO = None
            self._title_when_done(recorder, finished, go_ahead)
        os.close(finished)
        os.close(go_ahead)
        os.set_blocking(_GO, False)
        child = os.fork()
        if child:
            self.record(child)  # execs py-spy on the child, its parent: never returns

    def _title_when_done(self, recorder: int, finished: int, go_ahead: int) -> None:
        """Tell the loop once py-spy is at pace, wait for py-spy (Ctrl-C reaches it too, and it
        writes what it has), put the case's name in its flamegraph's title, and leave with its
        status."""
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)
        await_pace(recorder)
        os.close(go_ahead)  # the loop reads the end of the pipe as the go-ahead
        _, status = os.waitpid(recorder, 0)
        code = os.waitstatus_to_exitcode(status)
        said = said_finished(finished) if code == 0 else True
        if said is None:  # stuck: killed, never taken for a loop that ran (its samples are one stuck frame)
            import signal

            from overrides import children

            for pid in children.descendants(os.getpid()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            print(f"pyspybench.py: error: the hot loop py-spy was recording ({self.title.partition(': ')[0] or 'the cases'}) "
                  "was still running when py-spy's duration (the loop's seconds and a margin) ended: it was stuck "
                  "and is killed; what py-spy wrote shows where", file=sys.stderr)
            code = 2
        elif code == 0 and not said:  # the loop died, py-spy did not
            from overrides import children

            loop = reaped_loop()
            how = children.ended(loop) if loop else "ended (killed or crashed)"
            print(f"pyspybench.py: error: the hot loop py-spy was recording ({self.title.partition(': ')[0] or 'the cases'}) "
                  f"{how} before it finished", file=sys.stderr)
            code = 2
        if self.output and self.title and os.path.isfile(self.output):
            try:
                with open(self.output, encoding="utf-8") as src:
                    svg = src.read()
                titled = _PYSPY_TITLE.sub(lambda m: m.group(1) + _xml_text(self.title) + m.group(2), svg, count=1)
                if titled != svg:
                    from overrides.files import write_text_atomic

                    write_text_atomic(self.output, titled)
            except (OSError, UnicodeDecodeError):
                pass  # py-spy's own title stays
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if code >= 0 else 128 - code)

    def done(self) -> None:
        """Leave at once: tearing torch down takes time, which a profiler sampling the whole
        process (the seed command) would count against the loop's share (figures:
        benchmarks/history.md, 'Docstring figures')."""
        sys.stdout.flush()
        sys.stderr.flush()
        if _FINISHED is not None:
            try:
                os.write(_FINISHED, b"1")
            except OSError:
                pass  # py-spy ended first (killed, or Ctrl-C) and took the process told with it
        os._exit(0)


_FINISHED: int | None = None  # in the loop's process under --record: where it says it finished
_GO: int | None = None  # in the loop's process under --record: ends once py-spy is at pace


def _recorder_at_pace() -> bool:
    """In the loop's process: whether py-spy is at pace (the go-ahead pipe has ended)."""
    if _GO is None:
        return True
    try:
        return os.read(_GO, 1) == b""
    except BlockingIOError:
        return False


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def check_record_output(output: str, fmt: str) -> None:
    """A UsageError where --record's file name is a picture format's (IMAGE_SUFFIXES)."""
    stem, suffix = os.path.splitext(output)
    if suffix.lower() in IMAGE_SUFFIXES:
        raise UsageError(f"--record {output}: py-spy writes --format {fmt} as "
                         f"{'SVG' if fmt == 'flamegraph' else 'text'}, not {suffix[1:].upper()}; "
                         f"name it {stem}{RECORD_SUFFIX[fmt]}")


def prepare(case_name: str, op_name: str | None, nreps: int | None, seconds: float) -> HotLoop:
    """The hot loop of a case and op; a UsageError when the op does not apply."""
    from overrides.cases import ops, registry
    from overrides.cases.ops import not_applicable_reason
    from overrides.clock.timer import compile_hot_loop

    case = registry.get_case(case_name)
    op = ops.get_op(op_name) if op_name else ops.DEFAULT_OP
    if case.unbuildable:  # a plain twin that cannot be built (overrides/cases/twins.py)
        raise UsageError(f"case {case.name}: {case.unbuildable}; nothing to record (your own twin: docs/cases.md)")
    reason = not_applicable_reason(case, op)
    if reason:
        raise UsageError(f"op {op.name} does not apply to case {case.name}: {reason}; pick another --op")
    return HotLoop(compile_hot_loop(case.stmt_for(op), frame_name(case.name)),
                   tuple(case.make_operands()), case.active, nreps, seconds)


def run(case_name: str, op_name: str | None, nreps: int | None, seconds: float | None) -> int:
    """Run the hot loop in this process (for tests and callers other than pyspybench.py);
    returns the number of calls made."""
    from overrides.clock.timer import UNROLL

    job = prepare(case_name, op_name, nreps, seconds if seconds is not None else DEFAULT_SECONDS)
    turns = 0
    with job.active():
        for chunk in job.chunks():
            job.loop(job.operands, chunk)
            turns += chunk
    return turns * UNROLL


def process_age_s() -> float:
    """Seconds since this process started (from /proc; 0 where there is none)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as uptime:
            return max(0.0, float(uptime.read().split()[0]) - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def exec_pyspy(pyspy: str, output: str, fmt: str, rate: int, seconds: float) -> Callable[[int], None]:
    """What `run` calls with the loop's pid: replace this process by py-spy recording it. py-spy
    is then the loop's parent, so the kernel lets it trace it without root (Yama scope 1).
    `seconds` bounds the recording; py-spy stops as the loop's process exits, after the last case."""
    def become_pyspy(pid: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(pyspy, [pyspy, "record", "--pid", str(pid), "--native", "--rate", str(rate),
                         "--format", fmt, "--output", output, "--duration", f"{max(1, round(seconds))}"])

    return become_pyspy


# What --step does not go with: a step is your own code, with its own operands and ops.
STEP_REFUSES = (("case", "a case"), ("op", "--op"), ("shape", "--shape"), ("dtype", "--dtype"),
                ("device", "--device"))


def _step_refusal(args) -> str | None:
    """Why these arguments cannot run, where --step or --plain is among them; else None."""
    if args.plain and not args.step:
        return "--plain records a step's plain twin; name the step: --step pkg.module:factory --plain"
    if not args.step:
        return None if args.case else ("name a case (python bench.py --list) or your step "
                                       "(--step pkg.module:factory)")
    said = [what for name, what in STEP_REFUSES if getattr(args, name)]
    if said:
        return (f"--step {args.step} runs your step alone; drop {', '.join(said)} (record a case "
                "in a run of its own)")
    return None


def from_command_line(argv: list[str] | None = None,
                      step_loop: Callable[..., HotLoop] | None = None) -> Program:
    """`pyspybench.py`'s arguments as a ready program; bad input exits 2 with one line.
    `step_loop(spec, plain, nreps, seconds)`: --step's hot loop (overrides/step/flameloop.py,
    handed in by pyspybench.py: this wing sits below the step wing)."""
    job: list[Program] = []

    def body() -> int:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        refused = _step_refusal(args)
        if refused:
            raise UsageError(refused)
        if args.step and step_loop is None:
            raise UsageError("--step is pyspybench.py's: run python pyspybench.py --step ...")
        from overrides.cases.casenames import with_shapes

        args.case = with_shapes(args.case, args.shape, args.dtype, args.device)
        if args.shape or args.dtype or args.device:  # what your factories have no parameter for, said
            from overrides.cases.usercases import applied

            args.case, not_applied = applied(args.case)
            for entry in not_applied:
                print(f"pyspybench.py: {entry.note()}", file=sys.stderr)
        record = None
        seconds = args.seconds
        if args.record:
            if args.nreps:
                raise UsageError("--record runs for --seconds; drop --nreps")
            check_record_output(args.record, args.format)
            seconds = args.seconds or DEFAULT_SECONDS
            record = exec_pyspy(args.pyspy or find_pyspy(sys.executable), args.record,
                                args.format, args.rate or PYSPY_RATE_HZ,
                                seconds * max(1, len(args.case)) + PACE_MAX_S + DURATION_MARGIN_S)
        if record:
            # before any operand or step is built: --record forks the loop, and OpenMP's pool,
            # once started, does not survive a fork (torchao's int8 F.linear hung in the child)
            import torch

            torch.set_num_threads(LOOP_THREADS)
        if args.step:
            loops = [step_loop(args.step, args.plain, args.nreps, seconds or DEFAULT_SECONDS)]
        else:
            loops = [prepare(case, args.op, args.nreps, seconds or DEFAULT_SECONDS) for case in args.case]
        if seconds is None:  # measured now that torch is imported: start-up is behind us
            loops = [dataclasses.replace(loop, seconds=default_seconds(process_age_s())) for loop in loops]
        if record:  # the first case's seconds start once py-spy is at pace
            loops[0] = dataclasses.replace(loops[0], ready=_recorder_at_pace)
        from overrides.cases.ops import DEFAULT_OP

        if args.step:
            title = (f"{args.step}{' (its plain twin)' if args.plain else ''} · a training step: py-spy, "
                     "the step alone (pyspybench.py --step --record)")
        else:
            title = (f"{', '.join(args.case)} · {args.op or DEFAULT_OP.name}: py-spy, the hot loop "
                     "alone (pyspybench.py --record)")
        job.append(Program(tuple(loops), record, args.record, title))
        return 0

    status = run_command("pyspybench.py", body)
    if status:
        sys.exit(status)
    return job[0]


def default_seconds(started_s_ago: float) -> float:
    """How long the loop runs when not told: DEFAULT_SECONDS, or long enough that a profiler
    sampling since the process started (`py-spy record -- python pyspybench.py CASE`) finds the
    loop in at least ~80% of its samples: start-up under py-spy --native took seconds, a large
    part of a short loop's recording (figures: benchmarks/history.md, 'Docstring figures')."""
    return max(DEFAULT_SECONDS, STARTUP_FACTOR * started_s_ago)
