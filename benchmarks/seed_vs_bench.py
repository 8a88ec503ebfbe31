"""bench.py against the seed benchmark's method, run alternately in one benchmark run.

The seed method (PyTorch's original overrides benchmark, rebuilt here from its description):
for each case in turn, 1000 blocks of 1000 `torch.add` calls, each block timed with
`time.time`; the figure is the minimum block divided by 1000. It runs every case after the
other, so a slow spell of the machine lands on whichever case is running.

This script runs `python bench.py` and the seed method K times each, alternating (bench, seed,
bench, seed, ...) so both see the same machine over the same minutes, each invocation a fresh
process. It prints the wall time of each method and, per case, how far its figure spreads
across the K invocations. Usage: python benchmarks/seed_vs_bench.py [-k 5] [--blocks 1000] [--save PATH] [--keep DIR]
[--with-random-layout] [--variant NAME=ARGS ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.argtypes import positive_int  # noqa: E402
from overrides.clock import stats  # noqa: E402
from overrides.files import write_json_atomic  # noqa: E402

ALTERNATIVES = {
    "bench.py p1": lambda v: stats.quantile(v, 0.01),
    "bench.py p2": lambda v: stats.quantile(v, 0.02),
    "bench.py p5": lambda v: stats.quantile(v, 0.05),
    "bench.py p10": lambda v: stats.quantile(v, 0.10),
    "bench.py min": min,
}

SEED_METHOD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
import torch
from overrides.cases.seedcases import SEED_CASES
torch.set_num_threads(1)
blocks, calls = {blocks}, {calls}
out = {{}}
for case in SEED_CASES:
    x, y = case.make_operands()
    times = []
    for _ in range(blocks):
        start = time.time()
        for _ in range(calls):
            torch.add(x, y)
        times.append(time.time() - start)
    out[case.name] = min(times) / calls * 1e9
print(json.dumps(out))
"""


def run_bench(extra: list[str], keep: str | None = None) -> tuple[float, dict, dict, str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(keep or tmp, f"bench-{time.strftime('%H%M%S')}.json")
        started = time.perf_counter()
        subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "-q", "--json", path,
                        *extra], check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        with open(path) as src:
            data = json.load(src)
    figures = {r["case"]: r["per_call_ns"] for r in data["results"]}
    # The same samples under other statistics, to show what the headline's choice buys.
    samples = {r["case"]: r["samples_ns"] for r in data["results"]}
    return wall, figures, samples, data["settings"].get("stopped", "?")


def run_seed(blocks: int, calls: int) -> tuple[float, dict]:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", SEED_METHOD.format(root=ROOT, blocks=blocks, calls=calls)],
                         check=True, capture_output=True, text=True)
    return time.perf_counter() - started, json.loads(out.stdout)


def spread_pct(values: list[float]) -> float:
    return 100 * (max(values) - min(values)) / statistics.median(values)


def cv_pct(values: list[float]) -> float:
    return 100 * statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=positive_int, default=5, help="invocations of each method (default 5)")
    parser.add_argument("--blocks", type=int, default=1000, help="seed method: blocks per case")
    parser.add_argument("--calls", type=int, default=1000, help="seed method: calls per block")
    parser.add_argument("--bench-args", default="", help="extra arguments for bench.py")
    parser.add_argument("--save", metavar="PATH",
                        help="also write every invocation's figures and wall time as JSON, so "
                             "evidence can be pooled across runs")
    parser.add_argument("--keep", metavar="DIR", help="keep bench.py's results files here")
    parser.add_argument("--with-random-layout", action="store_true",
                        help="also run `bench.py --random-layout` in the rotation, to show what "
                             "pinning the layout buys")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                        help="also run `bench.py ARGS` in the rotation under NAME (repeatable), "
                             "e.g. --variant 'm1000=-m 1000' for a fixed 1000 samples a case")
    args = parser.parse_args()
    for spec in args.variant:
        if "=" not in spec or not spec.partition("=")[0]:
            parser.error(f"--variant {spec!r}: write NAME=ARGS, e.g. 'm1000=-m 1000'")

    variants = {f"bench.py {name}": extra.split()
                for name, _, extra in (v.partition("=") for v in args.variant)}
    if args.with_random_layout:
        variants["bench.py random"] = ["--random-layout"]
    methods = ["bench.py", *variants, "seed"]
    walls: dict[str, list[float]] = {method: [] for method in methods}
    stopped: list[str] = []  # why each plain bench.py invocation stopped sampling
    figures: dict[str, list[dict]] = {method: [] for method in methods}
    alternatives: dict[str, list[dict]] = {name: [] for name in ALTERNATIVES}
    for i in range(args.k):
        for method in methods:
            print(f"[{i + 1}/{args.k}] {method} ...", file=sys.stderr, flush=True)
            if method in variants:
                wall, figs, _, _ = run_bench(args.bench_args.split() + variants[method], args.keep)
            elif method == "bench.py":
                wall, figs, samples, why = run_bench(args.bench_args.split(), args.keep)
                stopped.append(why)
                for name, statistic in ALTERNATIVES.items():
                    alternatives[name].append({case: statistic(v) for case, v in samples.items()})
            else:
                wall, figs = run_seed(args.blocks, args.calls)
            walls[method].append(wall)
            figures[method].append(figs)
    figures.update(alternatives)
    if args.save:
        write_json_atomic(args.save, {"schema": "torch-function-overhead/seed-vs-bench/1",
                                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                      "walls_s": walls, "figures_ns": figures,
                                      "bench_stopped": stopped})

    print(f"bench.py vs the seed method, {args.k} invocations each, alternating, one run")
    print(f"{'method':15s} {'wall s (median)':>16s} {'wall s (range)':>16s}")
    for method in walls:
        w = walls[method]
        print(f"{method:15s} {statistics.median(w):16.1f} {min(w):8.1f}-{max(w):<7.1f}")
    reasons = {why: stopped.count(why) for why in dict.fromkeys(stopped)}
    print("bench.py stopped sampling on: " + ", ".join(f"{why} x{n}" for why, n in reasons.items()))
    print()
    width = max(13, *(len(m) for m in methods))
    print(f"{'case':22s} {'method':{width}s} {'median ns':>10s} {'range ns':>16s} {'spread %':>9s} {'CV %':>6s}")
    for case in figures["seed"][0]:
        for method in ("bench.py", *ALTERNATIVES, *methods[1:]):
            vals = [f[case] for f in figures[method]]
            print(f"{case:22s} {method:{width}s} {statistics.median(vals):10.0f} "
                  f"{min(vals):7.0f}-{max(vals):<8.0f} {spread_pct(vals):9.2f} {cv_pct(vals):6.2f}")
    print("\nspread % = (max - min) / median across invocations; bench.py's figure is its "
          f"per_call_ns (p{round(stats.HEADLINE_QUANTILE * 100)}), the seed's the minimum block / "
          "calls; 'bench.py pN'/'min': other statistics of the same bench.py samples; 'bench.py "
          "random': bench.py --random-layout; 'bench.py NAME': a --variant.")


if __name__ == "__main__":
    main()
