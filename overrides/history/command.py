"""`bench.py --history B1 B2 ...`: its flags, checked before anything runs, and the run:
builds resolved, counted in rounds (history.json kept after each), judged, drawn, written."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Callable, Sequence

from overrides.errors import INTERRUPTED_EXIT_STATUS, UsageError
from overrides.files import make_folder, write_json_atomic, write_text_atomic
from overrides.history import plot
from overrides.history.lineup import CACHE_VARIABLE, HistoryBuild, resolve_builds
from overrides.history.output import largest_step, markdown, notes, payload, per_build, table, where_section
from overrides.history.steps import count_history, steps_of, with_clock
from overrides.progress import counted

DEFAULT_OUT = "history"


def add_arguments(parser) -> None:
    group = parser.add_argument_group("history across builds")
    group.add_argument("--history", nargs="+", metavar="BUILD",
                       help="count every case in each build, oldest first, and judge each step: a "
                            "BUILD is an interpreter, a virtualenv, a record.sh label, or a pip "
                            "requirement such as torch==2.14.1 (installed once into a cached virtualenv)")
    group.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                       help=f"--history: where history.json/.md/.svg/.png go (default {DEFAULT_OUT}/)")
    group.add_argument("--clock", action="store_true",
                       help="--history: also time each step with the paired clock (a comparison per step)")
    group.add_argument("--index-url", metavar="URL",
                       help="--history: pip's --index-url for requirements (nightlies, CPU wheels)")
    group.add_argument("--cache", metavar="DIR",
                       help=f"--history: where installed requirements are kept (default: ${CACHE_VARIABLE} "
                            "or ~/.cache/torch-function-overhead/builds)")
    group.add_argument("--any-order", action="store_true",
                       help="--history: do not refuse torch versions that go backwards")


def refuse_stray_flags(args) -> None:
    """--history's own flags without --history: one line, not silence."""
    stray = [flag for flag, given in (("--clock", args.clock), ("--index-url", args.index_url),
                                      ("--cache", args.cache), ("--any-order", args.any_order),
                                      ("--out", args.out != DEFAULT_OUT)) if given]
    if stray:
        raise UsageError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} for --history; "
                         "add --history BUILD BUILD ... or drop it")


def check_arguments(args) -> None:
    """What --history itself needs, refused before anything runs (the flags that do not go with
    it: overrides/modes.py)."""
    if not args.history or len(args.history) < 2:
        raise UsageError("--history needs at least two builds, oldest first")


@dataclasses.dataclass(frozen=True)
class _Plan:
    """What one --history run counts and where it writes, settled before anything is counted."""

    builds: list[HistoryBuild]
    targets: list[tuple[str, str]]  # (case, op), the ops the first build's cases take
    cases: list  # the cases asked for (casenames.Case) and the ops (ops.Op): --clock times them
    ops: list
    out_dir: str
    json_path: str
    settings: dict  # as history.json records them
    started: float  # time.monotonic() when the run began

    def wall_s(self) -> float:
        return time.monotonic() - self.started

    def save_partial(self, runs: dict, seeds: Sequence[int], threshold_pct: float) -> None:
        """history.json as counted so far (`complete: false`): a round, or Ctrl-C, loses nothing."""
        steps = steps_of(self.builds, runs, threshold_pct)
        write_json_atomic(self.json_path, payload(self.builds, steps, per_build(self.builds, runs, self.targets),
                                                  seeds, self.settings, False, self.wall_s()))


def run_history(args, say: Callable[[str], None] | None) -> int:
    """`bench.py --history`: the table on stdout, the files in --out; 0, or
    INTERRUPTED_EXIT_STATUS after Ctrl-C (what was counted kept in history.json)."""
    say = say or (lambda message: None)
    check_arguments(args)
    plan = _plan(args, say)
    say(f"history of {len(plan.builds)} builds: {', '.join(b.name for b in plan.builds)}; "
        f"{counted(len(plan.targets), 'target')}; writing to {plan.out_dir}")
    judged = _count_and_judge(plan, args, say)
    if judged is None:
        return INTERRUPTED_EXIT_STATUS
    runs, seeds, steps = judged
    figures, written, wall = _write_outputs(plan, runs, seeds, steps, args.clock, say)
    print(table(plan.builds, steps, figures), end="")
    print(f"written: {', '.join(written)}")
    print(f"wall time {wall:.0f} s")
    return 0


def _plan(args, say: Callable[[str], None]) -> _Plan:
    """The cases, ops and builds of the run (requirements installed), and where it writes;
    a UsageError for anything that would stop it later."""
    from overrides.ab.countfirst import countable
    from overrides.cases import casenames
    from overrides.cases import ops as ops_mod
    from overrides.counts import callgrind, judge

    cases = casenames.resolve(args.cases)
    ops = ops_mod.resolve_ops(args.op)
    callgrind.find_valgrind()  # a missing valgrind says how to install it, before any install
    out_dir = make_folder(os.path.abspath(args.out), "--out")
    started = time.monotonic()
    builds = resolve_builds(args.history, index_url=args.index_url, cache=args.cache,
                            any_order=args.any_order, say=say)
    targets = countable([(case, op) for op in ops for case in cases], builds[0].python,
                        builds[0].torch_root)
    if not targets:
        raise UsageError("none of the cases applies to the ops asked for; see bench.py --list-ops")
    settings = {"cases": [c.name for c in cases], "ops": [o.name for o in ops],
                "threshold_instructions": judge.DEFAULT_THRESHOLD_INSTRUCTIONS,
                "threshold_pct": args.threshold_pct, "clock": bool(args.clock),
                "seeds_given": bool(args.seeds)}
    return _Plan(builds, targets, cases, ops, out_dir,
                 args.json or os.path.join(out_dir, "history.json"), settings, started)


def _count_and_judge(plan: _Plan, args, say: Callable[[str], None]) -> tuple[dict, list[int], list] | None:
    """Every build counted in rounds (history.json saved after each) and every step judged,
    timed too with --clock: (runs by build name, seeds, steps). None after Ctrl-C, with what
    was counted saved."""
    from overrides.ab.config import config_from_arguments

    runs: dict = {}
    seeds: list[int] = []

    def keep(runs_: dict, seeds_: list[int]) -> None:
        runs.update(runs_)
        seeds[:] = seeds_
        plan.save_partial(runs_, seeds_, args.threshold_pct)

    try:
        runs, seeds = count_history(plan.builds, plan.targets, args.seeds, args.threshold_pct, say, keep)
        steps = steps_of(plan.builds, runs, args.threshold_pct)
        if args.clock:
            config, _ = config_from_arguments(args, threads=args.threads, counts=False)  # counted already
            steps = with_clock(steps, plan.builds, plan.cases, plan.ops, config, say)
    except KeyboardInterrupt:
        if runs:
            plan.save_partial(runs, seeds, args.threshold_pct)
            print(f"interrupted; what was counted is in {plan.json_path} (complete: false)", file=sys.stderr)
        return None
    return runs, seeds, steps


def _write_outputs(plan: _Plan, runs: dict, seeds: Sequence[int], steps: list, clock: bool,
                   say: Callable[[str], None]) -> tuple[dict, list[str], float]:
    """The picture, the largest step's call tree, history.md and the complete history.json:
    (each build's figures, the paths written, the run's wall time)."""
    figures = per_build(plan.builds, runs, plan.targets)
    svg_path, png_path = plot.draw(plan.out_dir, plan.builds, figures, steps, len(seeds), say)
    where_lines, where = where_section(largest_step(steps), runs, plan.out_dir, say)
    wall = plan.wall_s()
    md_path = os.path.join(plan.out_dir, "history.md")
    write_text_atomic(md_path, markdown(plan.builds, steps, figures, seeds, where_lines,
                                        png_path and os.path.basename(png_path), wall, notes(clock)))
    write_json_atomic(plan.json_path, payload(plan.builds, steps, figures, seeds, plan.settings, True,
                                              wall, where))
    return figures, [p for p in (plan.json_path, md_path, svg_path, png_path) if p], wall
