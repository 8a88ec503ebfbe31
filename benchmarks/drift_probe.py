"""Where does bench.py's invocation-to-invocation spread come from: the process, or the clock?

`python bench.py` pins what differs between two processes of one build (address layout, hash
seed, heap behaviour; see overrides/clock/layout.py), yet its figure for a case still moves by 2-3%
from one invocation to the next on a shared machine. Two explanations predict different things:

- a per-process fixed effect (where the process's own pages land in physical memory, say):
  consecutive blocks inside one process agree closely, separate processes do not, and forked
  children (fresh physical pages for everything they write) spread like separate processes;
- a machine whose speed drifts over seconds (other tenants, frequency): consecutive blocks in
  one process spread as much as separate processes, and the four cases move together.

This script times the four seed cases round-robin with the shared Timer core in K consecutive
blocks of T seconds a case inside one process, and in K forked children, and repeats that in N
fresh processes (each pinned like bench.py). It prints, per case, how far the figure moves
(CV) across the blocks of one process, across the forks of one process, and across processes, and
how strongly the cases' block-to-block movements correlate.

Usage: python benchmarks/drift_probe.py [-n 6] [-k 4] [-t 0.5] [--save PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.argtypes import positive_float, positive_int  # noqa: E402
from overrides.files import write_json_atomic  # noqa: E402

WORKER_FLAG = "--worker"


def worker(blocks: int, seconds: float) -> None:
    """One fresh process: `blocks` forked children, then `blocks` blocks in this process."""
    from overrides.clock.layout import reexec_pinned

    reexec_pinned()  # the same pinning as bench.py, before torch is imported
    from overrides.clock import stats
    from overrides.cases.seedcases import SEED_CASES
    from overrides.single_run import target_for
    from overrides.cases.ops import resolve_ops
    from overrides.clock.timer import TimerConfig, time_targets

    op = resolve_ops(None)[0]
    targets = [target_for(case, op) for case in SEED_CASES]
    config = TimerConfig(min_time_s=seconds)

    def block() -> dict[str, float]:
        run = time_targets(targets, config, lambda _: None)
        return {case.name: stats.headline(t.samples_ns) for case, t in zip(SEED_CASES, run.targets)}

    forks = []
    for _ in range(blocks):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            os.write(write_end, json.dumps(block()).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as pipe:
            forks.append(json.loads(pipe.read()))
        os.waitpid(pid, 0)
    print(json.dumps({"forks": forks, "blocks": [block() for _ in range(blocks)]}))


def pooled_cv_pct(groups: list[list[float]]) -> float:
    """Coefficient of variation within groups, pooled: how far figures move inside one group."""
    variances = [statistics.variance(g) for g in groups if len(g) > 1]
    mean = statistics.mean(v for g in groups for v in g)
    return 100 * math.sqrt(statistics.mean(variances)) / mean if variances else 0.0


def summarise(processes: list[dict]) -> None:
    cases = list(processes[0]["blocks"][0])
    print(f"{len(processes)} processes x {len(processes[0]['blocks'])} blocks and as many forks each; "
          "CV % of a case's figure (standard deviation / mean)")
    print(f"{'case':22s} {'blocks of one process':>22s} {'forks of one process':>21s} "
          f"{'processes (1st block)':>22s}")
    for case in cases:
        within = pooled_cv_pct([[b[case] for b in p["blocks"]] for p in processes])
        forks = pooled_cv_pct([[f[case] for f in p["forks"]] for p in processes])
        across = pooled_cv_pct([[p["blocks"][0][case] for p in processes]])
        print(f"{case:22s} {within:22.2f} {forks:21.2f} {across:22.2f}")
    every = [b for p in processes for b in p["blocks"] + p["forks"]]
    logs = {c: [math.log(b[c]) for b in every] for c in cases}
    print("\ncorrelation of the cases' movements from block to block (log figures, all blocks):")
    for a, b in itertools.combinations(cases, 2):
        print(f"  {a:22s} {b:22s} {statistics.correlation(logs[a], logs[b]):+.2f}")


def main() -> None:
    if WORKER_FLAG in sys.argv:
        _, blocks, seconds = sys.argv[sys.argv.index(WORKER_FLAG):][:3]
        worker(int(blocks), float(seconds))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=positive_int, default=6, help="fresh processes (default 6)")
    parser.add_argument("-k", type=positive_int, default=4, help="blocks and forks per process (default 4)")
    parser.add_argument("-t", type=positive_float, default=0.5, help="seconds a case per block (default 0.5)")
    parser.add_argument("--save", metavar="PATH", help="also write every figure as JSON")
    args = parser.parse_args()
    processes = []
    for i in range(args.n):
        print(f"[{i + 1}/{args.n}] process ...", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), WORKER_FLAG, str(args.k),
                              str(args.t)], check=True, capture_output=True, text=True)
        processes.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.save:
        write_json_atomic(args.save, {"schema": "torch-function-overhead/drift-probe/1",
                                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                      "seconds_per_case": args.t, "processes": processes})
    summarise(processes)


if __name__ == "__main__":
    main()
