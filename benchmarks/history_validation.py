"""`bench.py --history` against `bench.py --compare` of each step, on real builds.

Runs the history over the builds given (twice: the first run installs any requirement into the
cache, the second takes it from there), then `--compare BEFORE AFTER` of every neighbouring
pair, and prints, step by step and case by case, the history's count delta and verdict beside
the comparison's count delta, interval and verdict. A step agrees when its delta lies within
the comparison's 95% interval of the count delta (or both are exact) and the two flag the same
steps (regression or improvement). Wall times of both history runs are printed too.

    python3 benchmarks/history_validation.py torch==2.12.0 torch==2.12.1 torch==2.14.1 torch==2.15.0 \\
        --cache /tmp/hcache --out /tmp/hval
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ("regression", "improvement")
SINGLE_SEED_ALLOWANCE_PCT = 1.0  # overrides/counts: a change on one seed must pass 1% of the count


def run(args: list[str], log: str) -> tuple[int, float]:
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as err:
        done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), *args], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=err)
    return done.returncode, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="+")
    parser.add_argument("--cache", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--runs", type=int, default=2, help="history runs (the first installs)")
    parser.add_argument("--skip-compare", action="store_true")
    parser.add_argument("--from-json", metavar="PATH", help="check this history.json instead of running it")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    history = None
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as src:
            history = json.load(src)
    for k in range(1, 1 if args.from_json else args.runs + 1):
        out = os.path.join(args.out, f"history{k}")
        status, wall = run(["--history", *args.builds, "--cache", args.cache, "--out", out],
                           os.path.join(args.out, f"history{k}.err"))
        print(f"history run {k}: exit {status}, wall {wall:.0f} s", flush=True)
        if status == 0:
            with open(os.path.join(out, "history.json"), encoding="utf-8") as src:
                history = json.load(src)
    if history is None:
        print("no history to check")
        return 1
    builds = history["builds"]
    rows = [("step", "case", "history delta", "verdict", "--compare delta", "95% CI", "verdict", "agree")]
    agree_all = True
    for before, after in zip(builds, builds[1:]):
        if args.skip_compare:
            break
        path = os.path.join(args.out, f"compare-{before['name']}-{after['name']}.json")
        if not os.path.exists(path):
            status, wall = run(["--compare", before["python"], after["python"], "--json", path],
                               path[:-5] + ".err")
            print(f"--compare {before['name']} {after['name']}: exit {status}, wall {wall:.0f} s", flush=True)
        with open(path, encoding="utf-8") as src:
            compared = {c["case"]: c for c in json.load(src)["comparisons"]}
        for step in history["steps"]:
            if (step["from"], step["to"]) != (before["name"], after["name"]):
                continue
            c = compared.get(step["case"])
            if c is None or c.get("delta_instructions") is None:
                continue
            if c.get("instructions_ci95"):
                low, high = c["instructions_ci95"]
            else:  # one seed: what one layout may move a count by (callgrind's 1%) is its interval
                allowance = SINGLE_SEED_ALLOWANCE_PCT / 100 * c["base_instructions"]
                low, high = c["delta_instructions"] - allowance, c["delta_instructions"] + allowance
            within = low - 2 <= step["delta_instructions"] <= high + 2
            flagged = (step["verdict"] if step["verdict"] in FLAGS else None,
                       c.get("counts_verdict") if c.get("counts_verdict") in FLAGS else None)
            same_flag = flagged[0] == flagged[1]
            # a step at the threshold may be flagged by one and left undecided by the other; a
            # flag against a "no change", or opposite flags, is a disagreement
            undecided = "inconclusive" in (step["verdict"], c.get("counts_verdict"))
            ok = within and (same_flag or undecided)
            mark = "yes" if ok and same_flag else "at the threshold" if ok else "NO"
            agree_all &= ok
            rows.append((f"{before['name']}->{after['name']}", step["case"],
                         f"{step['delta_instructions']:+,.1f}", step["verdict"],
                         f"{c['delta_instructions']:+,.1f}", f"{low:+,.1f}..{high:+,.1f}",
                         f"{c.get('counts_verdict')} ({c['verdict']})", mark))
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(r, widths)))
    print("every step agrees" if agree_all else "some step disagrees")
    return 0 if agree_all else 1


if __name__ == "__main__":
    sys.exit(main())
