"""Where a counting process's seconds go, today against an older commit (issue 47, item 1).

One counting process (`callgrind.count_once`: the four seed cases, `torch.add`, call paths on as
in `--compare`) per tree per round, the trees alternating, each timed by its parent in phases:

  imports    valgrind started, Python up, its imports set up, torch imported, the cases built
             and warmed up, until the worker says it is ready
  switch-on  callgrind_control switching instrumentation on
  counting   the counted repeats and their dumps, until the worker says it is done, and its exit
  reading    the parent reading the dumps

and two reference processes under the same valgrind options (no tree): `python -c pass` and
`python -c "import torch"`, so the import's share is priced apart from the tool's own start.
With --rounds, a comparison's round of counting instead: both builds under one seed at once
(`callgrind.count_builds`), timed whole.

    python benchmarks/count_phases.py [--commit f69f8e7] [-n 3] [--rounds]

Both trees are exported (`git archive`) to folders of the same length.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = [["Tensor", "torch.add"], ["SubTensor", "torch.add"], ["WithTorchFunction", "torch.add"],
           ["SubWithTorchFunction", "torch.add"]]
PHASES = ("imports", "switch-on", "counting", "reading", "total")
CHILD_TIMEOUT_S = 900


def _tree_modules(tree: str):
    """callgrind from `tree`, never from this checkout: speed_vs_commit (imported by the parent
    for `export`) imports this checkout's `overrides`, and a child that had imported it too
    timed this checkout's code under both trees' names."""
    sys.path.insert(0, tree)
    os.chdir(tree)
    from overrides.counts import callgrind

    if not os.path.realpath(callgrind.__file__).startswith(os.path.realpath(tree) + os.sep):
        sys.exit(f"count_phases: callgrind came from {callgrind.__file__}, not from {tree}")
    return callgrind


def child(tree: str) -> None:
    """In a fresh process: count once from `tree`, timing each phase from the parent's side."""
    callgrind = _tree_modules(tree)
    stamps: dict = {"reading": 0.0, "switch-on": 0.0}
    marks = []

    def timed(name, function):
        def wrapper(*args, **kwargs):
            started = time.monotonic()
            try:
                return function(*args, **kwargs)
            finally:
                stamps[name] += time.monotonic() - started
        return wrapper

    callgrind.read_total = timed("reading", callgrind.read_total)
    callgrind.read_dump = timed("reading", callgrind.read_dump)
    try:
        from overrides.counts import valgrind  # today's tree: switch_on lives there
        valgrind.switch_on = timed("switch-on", valgrind.switch_on)
    except ImportError:  # the older tree ran callgrind_control through subprocess.run
        callgrind.subprocess.run = timed("switch-on", callgrind.subprocess.run)
    started = time.monotonic()
    run = callgrind.count_once(sys.executable, [tuple(t) for t in TARGETS], 1, tree=True,
                               say=lambda message: marks.append((time.monotonic(), message)))
    total = time.monotonic() - started
    imports = next(at for at, message in marks if "imports done" in message) - started
    print(json.dumps({"imports": imports, "switch-on": stamps["switch-on"], "reading": stamps["reading"],
                      "counting": total - imports - stamps["switch-on"] - stamps["reading"],
                      "total": total, "per_call": {c.case: c.per_call for c in run.cases}}))


def child_round(tree: str) -> None:
    """In a fresh process: one round of a comparison's counting from `tree` (both builds under
    one seed at once, call paths on), timed whole, with each process's own figures."""
    callgrind = _tree_modules(tree)
    marks = []
    started = time.monotonic()
    runs = callgrind.count_builds([sys.executable, sys.executable], [tuple(t) for t in TARGETS], [1], tree=True,
                                  say=lambda message: marks.append((time.monotonic() - started, message)))
    imports = [float(m.split("imports done in ")[1].split(" s")[0]) for _, m in marks if "imports done in" in m]
    print(json.dumps({"total": time.monotonic() - started, "imports": max(imports),
                      "process": max(getattr(run, "wall_s", None) or getattr(run, "seconds", 0.0) for build in runs for run in build)}))


def reference(code: str) -> float:
    """Seconds for `python -c CODE` under valgrind with the counting processes' options."""
    started = time.monotonic()
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
                    "--separate-threads=yes", "-q", "--callgrind-out-file=/dev/null",
                    sys.executable, "-c", code], capture_output=True, check=True, timeout=CHILD_TIMEOUT_S,
                   env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="f69f8e7")
    parser.add_argument("-n", type=int, default=3, help="rounds")
    parser.add_argument("--rounds", action="store_true",
                        help="time a comparison's counting round (both builds at once) instead")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-round", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.child_round:
        child_round(args.child_round)
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from speed_vs_commit import export  # beside this script: the trees made alike

    work = os.path.join(os.environ.get("TMPDIR", "/tmp"), "count-phases")
    trees = {"today": export("HEAD", os.path.join(work, "today")),
             args.commit: export(args.commit, os.path.join(work, args.commit[:5].ljust(5, "_")))}
    figures: dict = {name: [] for name in (*trees, "python -c pass", "import torch")}
    for round_ in range(-1, args.n):  # round -1 warms up: each tree's bytecode primed, the disk cache
        order = list(trees.items()) if round_ % 2 == 0 else list(trees.items())[::-1]
        for name, tree in order:
            print(f"round {round_ + 1}/{args.n}{' (warm-up)' if round_ < 0 else ''}: {name}", file=sys.stderr,
                  flush=True)
            done = subprocess.run([sys.executable, __file__, "--child-round" if args.rounds else "--child", tree],
                                  capture_output=True, text=True,
                                  timeout=CHILD_TIMEOUT_S)
            if done.returncode:
                sys.exit(f"{name}: {done.stderr.strip().splitlines()[-1:]}")
            if round_ >= 0:
                figures[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        if round_ < 0 or args.rounds:
            continue
        figures["python -c pass"].append({"total": reference("pass")})
        figures["import torch"].append({"total": reference("import torch")})
    shown = ("imports", "process", "total") if args.rounds else PHASES
    print(f"seconds, median of {args.n} rounds ({'both builds at once' if args.rounds else 'one process at a time'};"
          f" load {os.getloadavg()[0]:.1f})")
    print(f"{'':<16}" + "".join(f"{phase:>11}" for phase in shown))
    for name, rows in figures.items():
        if not rows:
            continue
        cells = [statistics.median(r[p] for r in rows) if p in rows[0] else None for p in shown]
        print(f"{name:<16}" + "".join(f"{c:>11.1f}" if c is not None else f"{'':>11}" for c in cells))


if __name__ == "__main__":
    main()
