"""`bench.py --history B1 B2 ...`: its flags, checked before anything runs, and the run:
builds resolved, counted in rounds (history.json kept after each), judged, drawn, written."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Sequence

from overrides.errors import UsageError
from overrides.files import make_folder, write_json_atomic, write_text_atomic
from overrides.history.builds import CACHE_VARIABLE, resolve_builds
from overrides.history.output import largest_step, markdown, payload, per_build, table, where_section
from overrides.history.steps import count_history, steps_of, with_clock

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
    """Flags that do not go with --history, refused before anything runs."""
    clash = [flag for flag, given in (("--compare", args.compare), ("--load", args.load),
                                      ("-n", args.nreps), ("-m", args.nrepreps),
                                      ("--no-instructions", args.no_instructions),
                                      ("--min-time", args.min_time)) if given]
    if clash:
        raise UsageError(f"--history counts instructions in each build; drop {', '.join(clash)}")
    if not args.history or len(args.history) < 2:
        raise UsageError("--history needs at least two builds, oldest first")


def run_history(args, say: Callable[[str], None] | None) -> int:
    from overrides.ab.config import config_from_arguments
    from overrides.ab.countfirst import countable
    from overrides.cases import casenames
    from overrides.cases import ops as ops_mod
    from overrides.counts import callgrind, judge
    from overrides.errors import INTERRUPTED_EXIT_STATUS
    from overrides.flame import screenshot
    from overrides.history import plot

    say = say or (lambda message: None)
    check_arguments(args)
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
    json_path = args.json or os.path.join(out_dir, "history.json")
    settings = {"cases": [c.name for c in cases], "ops": [o.name for o in ops],
                "threshold_instructions": judge.DEFAULT_THRESHOLD_INSTRUCTIONS,
                "threshold_pct": args.threshold_pct, "clock": bool(args.clock),
                "seeds_given": bool(args.seeds)}

    def save(runs: dict, seeds: Sequence[int], steps=None, complete: bool = False, where=None) -> None:
        steps = steps if steps is not None else steps_of(builds, runs, args.threshold_pct)
        write_json_atomic(json_path, payload(builds, steps, per_build(builds, runs, targets), seeds,
                                             settings, complete, time.monotonic() - started, where))

    say(f"history of {len(builds)} builds: {', '.join(b.name for b in builds)}; "
        f"{len(targets)} target{'s' if len(targets) != 1 else ''}; writing to {out_dir}")
    runs: dict = {}
    seeds: list[int] = []

    def keep(runs_: dict, seeds_: list[int]) -> None:
        runs.update(runs_)
        seeds[:] = seeds_
        save(runs_, seeds_)

    try:
        runs, seeds = count_history(builds, targets, args.seeds, args.threshold_pct, say, keep)
        steps = steps_of(builds, runs, args.threshold_pct)
        if args.clock:
            config = config_from_arguments(args, (), threads=args.threads)
            steps = with_clock(steps, builds, cases, ops, config, say)
    except KeyboardInterrupt:
        if runs:
            save(runs, seeds)
            print(f"interrupted; what was counted is in {json_path} (complete: false)", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    figures = per_build(builds, runs, targets)
    svg_path = os.path.join(out_dir, "history.svg")
    versions = sorted({b.torch_version for b in builds})
    write_text_atomic(svg_path, plot.render(
        builds, figures, steps, "__torch_function__ overhead across builds",
        f"Callgrind instructions per call, hash seeds matched build to build ({len(seeds)} in all; a "
        f"step's undecided cases get more); torch {', '.join(versions)}; oldest first"))
    picture = None
    try:
        screenshot.screenshot(svg_path, os.path.join(out_dir, "history.png"))
        picture = "history.png"
    except screenshot.ScreenshotError as exc:
        say(f"no history.png: {exc}")
    notes = [f"- Counted from one start-up path for every build (`overrides/builds/samepath.py`); "
             f"a step whose counts are within {judge.EXACT_INSTRUCTIONS:g} instructions on every "
             "seed is `no change (exact)`.",
             "- Each step's verdict is what `bench.py --compare BEFORE AFTER` gives on its counts"
             + (" together with the paired clock (`--clock`)." if args.clock else
                "; the clock was not run (`--clock` times every step).")]
    where_lines, where, _ = where_section(largest_step(steps), runs, out_dir, say)
    wall = time.monotonic() - started
    write_text_atomic(os.path.join(out_dir, "history.md"),
                      markdown(builds, steps, figures, seeds, where_lines, picture, wall, notes))
    write_json_atomic(json_path, payload(builds, steps, figures, seeds, settings, True, wall, where))
    print(table(builds, steps, figures), end="")
    print(f"written: {json_path}, {os.path.join(out_dir, 'history.md')}, {svg_path}"
          + (f", {os.path.join(out_dir, picture)}" if picture else ""))
    print(f"wall time {wall:.0f} s")
    return 0

