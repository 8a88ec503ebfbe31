"""Can the verdicts be trusted? Paired A/B against unpaired runs, on changes of known cost.

1. Builds "branch" environments that share this interpreter's packages and wrap
   `torch.Tensor.__torch_function__` in a shim at start-up (overrides/ab/shimenv.py), one per size.
2. Measures each shim's true cost without A/B: the shimmed case's twin class timed side by side
   with the case in one process (`shimenv.shim_truth_ns`), averaged over 24 processes (layouts).
3. Runs N A/A comparisons (base against base) and N A/B comparisons per size, each both ways:
   paired (`overrides.ab.paired.run_ab`, what `bench.py --compare` does) and unpaired (two separate
   `bench.py --json` runs compared with `overrides.case_comparison.compare_runs`).
4. Prints the false-positive rate, detection rate per size and case, the estimate's error
   against the truth, how often the interval holds the truth, and wall time per comparison.

Every comparison is appended to a JSON-lines log as it finishes (`--log`), so an interrupted
run keeps its data; `--summarise LOG` prints the tables from a log without measuring.
Usage: python benchmarks/ab_validation.py [-n 10] [--sizes partial bare loop10] [--unpaired-n 5]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides import case_comparison, results  # noqa: E402
from overrides.ab import shimenv  # noqa: E402
from overrides.ab.config import DEFAULT_SECONDS_PER_PAIR, ABConfig  # noqa: E402
from overrides.ab.paired import run_ab  # noqa: E402
from overrides.cases import seedcases  # noqa: E402
from overrides.cases.ops import DEFAULT_OP  # noqa: E402
from overrides.verdicts import DEFAULT_THRESHOLD_NS  # noqa: E402

FLAGS = ("regression", "improvement")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def paired(base_py: str, branch_py: str, config: ABConfig) -> tuple[list, float]:
    started = time.monotonic()
    outcome = run_ab(base_py, branch_py, seedcases.SEED_CASES, [DEFAULT_OP], config)
    return [c.to_dict() for c in outcome.comparisons], time.monotonic() - started


def unpaired(base_py: str, branch_py: str, min_time: float) -> tuple[list, float]:
    started = time.monotonic()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for side, python in (("base", base_py), ("branch", branch_py)):
            path = os.path.join(tmp, f"{side}.json")
            env = dict(os.environ, PYTHONPATH=ROOT)
            subprocess.run([python, os.path.join(ROOT, "bench.py"), "-q", "--min-time", str(min_time),
                            "--json", path], check=True, stdout=subprocess.DEVNULL, env=env)
            runs.append(results.load(path))
    comparisons = case_comparison.compare_runs(*runs)
    return [c.to_dict() for c in comparisons], time.monotonic() - started


def measure(args) -> None:
    base_py = sys.executable
    workdir = tempfile.mkdtemp(prefix="ab-validation-")
    envs = {}
    for size in args.sizes:
        envs[size] = shimenv.make_shim_env(base_py, os.path.join(workdir, size), size).python
    config = ABConfig(pairs=args.pairs, seconds_per_pair=args.pair_seconds)

    with open(args.log, "a", encoding="utf-8") as log:
        def record(entry: dict) -> None:
            log.write(json.dumps(entry) + "\n")
            log.flush()

        for size in args.sizes:
            truth = shimenv.truth_across_processes(size, processes=args.truth_processes, progress=say)
            record({"kind": "truth", "size": size, "truth_ns": truth.mean_ns,
                    "per_process_ns": list(truth.per_process_ns)})
        if args.truth_only:
            return
        plan = [("A/A", None)] + [("A/B", size) for size in args.sizes]
        for i in range(max(args.n, args.unpaired_n)):
            for kind, size in plan:
                branch_py = base_py if size is None else envs[size]
                if i < args.n:
                    say(f"{kind} {size or ''} paired {i + 1}/{args.n}")
                    comps, wall = paired(base_py, branch_py, config)
                    record({"kind": kind, "size": size, "method": "paired", "wall_s": wall,
                            "pairs": args.pairs, "comparisons": comps})
                if i < args.unpaired_n:
                    say(f"{kind} {size or ''} unpaired {i + 1}/{args.unpaired_n}")
                    comps, wall = unpaired(base_py, branch_py, args.unpaired_min_time)
                    record({"kind": kind, "size": size, "method": "unpaired", "wall_s": wall,
                            "comparisons": comps})


def summarise(log_path: str) -> None:
    entries = [json.loads(line) for line in open(log_path, encoding="utf-8") if line.strip()]
    truth = {e["size"]: e["truth_ns"] for e in entries if e["kind"] == "truth"}
    runs = [e for e in entries if e["kind"] != "truth"]
    case_names = [c.name for c in seedcases.SEED_CASES]
    print("Paired A/B vs unpaired runs, seed cases, shims on torch.Tensor.__torch_function__")
    print("\nTrue shim cost per case, ns: the case and its shimmed twin side by side in one process,"
          " mean over processes (range across processes in brackets; 0: the shim cannot reach it):")
    print(f"  {'size':10s}" + "".join(f"{n:>24s}" for n in case_names))
    spreads = {e["size"]: e.get("per_process_ns", []) for e in entries if e["kind"] == "truth"}
    for size, values in truth.items():
        cells = []
        for n in case_names:
            per = [p[n] for p in spreads[size]] or [values[n]]
            cells.append(f"{values[n]:.0f} [{min(per):.0f}..{max(per):.0f}]")
        print(f"  {size:10s}" + "".join(f"{c:>24s}" for c in cells))

    for method in ("paired", "unpaired"):
        mine = [e for e in runs if e["method"] == method]
        if not mine:
            continue
        walls = [e["wall_s"] for e in mine]
        pairs = sorted({e.get("pairs") for e in mine if e.get("pairs")})
        print(f"\n== {method}{' (' + '/'.join(map(str, pairs)) + ' pairs)' if pairs else ''} == wall per "
              f"comparison: median {statistics.median(walls):.0f} s (max {max(walls):.0f} s), {len(mine)} comparisons")
        aa = [e for e in mine if e["kind"] == "A/A"]
        if aa:
            flagged = sum(any(c["verdict"] in FLAGS for c in e["comparisons"]) for e in aa)
            print(f"A/A: {len(aa) - flagged}/{len(aa)} comparisons flag no case "
                  f"(false-positive rate {flagged / len(aa):.0%} per comparison)")
            verdicts = collections.Counter(c["verdict"] for e in aa for c in e["comparisons"])
            print(f"     verdicts over all cases: {dict(verdicts)}")
        print(f"  {'size':8s} {'case':22s} {'truth':>7s} {'flagged':>8s} {'est (median)':>13s} "
              f"{'|err| med':>10s} {'CI holds truth':>15s} {'CI width med':>13s}")
        for size in truth:
            ab_runs = [e for e in mine if e["kind"] == "A/B" and e["size"] == size]
            if not ab_runs:
                continue
            for name in case_names:
                rows = [next(c for c in e["comparisons"] if c["case"] == name) for e in ab_runs]
                t = truth[size][name]
                flagged = sum(r["verdict"] == "regression" for r in rows)
                estimates = [r["delta_ns"] for r in rows if r["delta_ns"] is not None]
                cis = [r["ci95_ns"] for r in rows if r["ci95_ns"]]
                holds = sum(lo <= t <= hi for lo, hi in cis)
                print(f"  {size:8s} {name:22s} {t:7.0f} {flagged:5d}/{len(rows):<2d} "
                      f"{statistics.median(estimates):13.0f} "
                      f"{statistics.median(abs(x - t) for x in estimates):10.0f} "
                      f"{holds:11d}/{len(cis):<3d} "
                      f"{statistics.median(hi - lo for lo, hi in cis):13.0f}")
        detected = []
        for size in truth:
            for name in case_names:
                rows = [next(c for c in e["comparisons"] if c["case"] == name)
                        for e in mine if e["kind"] == "A/B" and e["size"] == size]
                real = truth[size][name] >= DEFAULT_THRESHOLD_NS  # a change to detect
                if real and rows and sum(r["verdict"] == "regression" for r in rows) >= 0.9 * len(rows):
                    detected.append((truth[size][name], size, name))
        if detected:
            t, size, name = min(detected)
            print(f"smallest true cost flagged in >= 90% of comparisons: {t:.0f} ns ({size} on {name})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="paired comparisons per kind (default 10)")
    parser.add_argument("--unpaired-n", type=int, default=5, help="unpaired comparisons per kind (default 5)")
    parser.add_argument("--sizes", nargs="+", default=["partial", "bare", "loop10"],
                        choices=list(shimenv.SHIM_WORK),
                        help="shim sizes (default: partial bare loop10)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="fixed pairs per comparison (default: bench.py --compare's, until decided or 60 s)")
    parser.add_argument("--pair-seconds", type=float, default=DEFAULT_SECONDS_PER_PAIR)
    parser.add_argument("--unpaired-min-time", type=float, default=3.0)
    # One process's truth carries its layout's luck; averaged over processes with different hash
    # seeds the truth is as free of it as the A/B estimate it checks.
    parser.add_argument("--truth-processes", type=int, default=shimenv.TRUTH_PROCESSES,
                        help=f"processes the truth is averaged over (default {shimenv.TRUTH_PROCESSES})")
    parser.add_argument("--truth-only", action="store_true",
                        help="measure the truths only and append them to the log (later truths win)")
    parser.add_argument("--log", default="ab_validation.jsonl", help="JSON-lines log (appended)")
    parser.add_argument("--summarise", metavar="LOG", help="print the tables from a log and exit")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    measure(args)
    summarise(args.log)


if __name__ == "__main__":
    main()
