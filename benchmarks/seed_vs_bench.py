"""bench.py against the seed benchmark's method, run alternately in one benchmark run.

The seed method (PyTorch's original overrides benchmark, rebuilt here from its description):
for each case in turn, 1000 blocks of 1000 `torch.add` calls, each block timed with
`time.time`; the figure is the minimum block divided by 1000. It runs every case after the
other, so a slow spell of the machine lands on whichever case is running.

This script runs `python bench.py` and the seed method K times each, alternating (bench, seed,
bench, seed, ...) so both see the same machine over the same minutes, each invocation a fresh
process. It prints the wall time of each method (and each invocation's against the seed's of the
same turn) and, per case, how far its figure spreads across the K invocations: all of them, and
with the invocations bench.py marked slow (its speed reference, docs/timing.md) set aside.
`--base DIR` also runs another checkout's bench.py in the rotation (the commit before a change).
Usage: python benchmarks/seed_vs_bench.py [-k 5] [--blocks 1000] [--save PATH] [--keep DIR]
[--with-random-layout] [--variant NAME=ARGS ...] [--base DIR]
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


def run_bench(extra: list[str], keep: str | None = None, root: str = ROOT) -> dict:
    """One `root/bench.py` invocation: its wall time, figures, samples, why it stopped sampling
    and whether its speed reference marked it slow."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(keep or tmp, f"bench-{time.strftime('%H%M%S')}.json")
        started = time.perf_counter()
        subprocess.run([sys.executable, os.path.join(root, "bench.py"), "-q", "--json", path,
                        *extra], check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        with open(path) as src:
            data = json.load(src)
    return {"wall": wall, "figures": {r["case"]: r["per_call_ns"] for r in data["results"]},
            # The same samples under other statistics, to show what the headline's choice buys.
            "samples": {r["case"]: r["samples_ns"] for r in data["results"]},
            "stopped": data["settings"].get("stopped", "?"),
            "slow": bool((data.get("speed") or {}).get("slow"))}


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
    parser.add_argument("--base", metavar="DIR",
                        help="also run DIR/bench.py (another checkout of this tool, e.g. `git archive "
                             "COMMIT | tar -x -C DIR`) in the rotation as 'base', with the same "
                             "arguments and interpreter")
    args = parser.parse_args()
    for spec in args.variant:
        if "=" not in spec or not spec.partition("=")[0]:
            parser.error(f"--variant {spec!r}: write NAME=ARGS, e.g. 'm1000=-m 1000'")
    if args.base and not os.path.isfile(os.path.join(args.base, "bench.py")):
        parser.error(f"--base {args.base!r}: no bench.py there; give a checkout of this tool")

    variants = {f"bench.py {name}": extra.split()
                for name, _, extra in (v.partition("=") for v in args.variant)}
    if args.with_random_layout:
        variants["bench.py random"] = ["--random-layout"]
    methods = ["bench.py", *(["base"] if args.base else []), *variants, "seed"]
    walls: dict[str, list[float]] = {method: [] for method in methods}
    stopped: dict[str, list[str]] = {method: [] for method in methods[:-1]}  # why each bench stopped
    slow: dict[str, list[bool]] = {method: [] for method in methods}  # marked slow (the seed: never)
    figures: dict[str, list[dict]] = {method: [] for method in methods}
    alternatives: dict[str, list[dict]] = {name: [] for name in ALTERNATIVES}
    for i in range(args.k):
        for method in methods:
            print(f"[{i + 1}/{args.k}] {method} ... (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
            if method == "seed":
                wall, figs = run_seed(args.blocks, args.calls)
                walls[method].append(wall)
                figures[method].append(figs)
                slow[method].append(False)
                continue
            extra = args.bench_args.split() + variants.get(method, [])
            run = run_bench(extra, args.keep, args.base if method == "base" else ROOT)
            if method == "bench.py":
                for name, statistic in ALTERNATIVES.items():
                    alternatives[name].append({case: statistic(v) for case, v in run["samples"].items()})
            walls[method].append(run["wall"])
            figures[method].append(run["figures"])
            stopped[method].append(run["stopped"])
            slow[method].append(run["slow"])
    figures.update(alternatives)
    slow.update({name: slow["bench.py"] for name in ALTERNATIVES})
    if args.save:
        write_json_atomic(args.save, {"schema": "torch-function-overhead/seed-vs-bench/2",
                                      "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                      "walls_s": walls, "figures_ns": figures,
                                      "stopped": stopped, "slow": slow, "base": args.base})

    print(f"bench.py vs the seed method, {args.k} invocations each, alternating, one run")
    print(f"{'method':15s} {'wall s (median)':>16s} {'wall s (range)':>16s} "
          f"{'/ seed (median, max)':>21s}  stopped, marked slow")
    for method in walls:
        w = walls[method]
        ratios = [mine / seed for mine, seed in zip(w, walls["seed"])]
        why = ", ".join(f"{reason} x{n}" for reason, n in
                        ((r, stopped[method].count(r)) for r in dict.fromkeys(stopped.get(method, []))))
        marked = f"; slow x{sum(slow[method])}" if any(slow[method]) else ""
        print(f"{method:15s} {statistics.median(w):16.1f} {min(w):8.1f}-{max(w):<7.1f} "
              f"{statistics.median(ratios):10.2f}x {max(ratios):5.2f}x   {why}{marked}")
    print()
    width = max(13, *(len(m) for m in methods))
    print(f"{'case':22s} {'method':{width}s} {'median ns':>10s} {'range ns':>16s} {'spread %':>9s} "
          f"{'CV %':>6s} {'slow aside: n':>14s} {'spread %':>9s} {'CV %':>6s}")
    for case in figures["seed"][0]:
        for method in ("bench.py", *ALTERNATIVES, *methods[1:]):
            vals = [f[case] for f in figures[method]]
            kept = [v for v, marked in zip(vals, slow[method]) if not marked]
            aside = (f"{len(kept):14d} {spread_pct(kept):9.2f} {cv_pct(kept):6.2f}" if len(kept) > 1
                     else f"{len(kept):14d} {'-':>9s} {'-':>6s}")
            print(f"{case:22s} {method:{width}s} {statistics.median(vals):10.0f} "
                  f"{min(vals):7.0f}-{max(vals):<8.0f} {spread_pct(vals):9.2f} {cv_pct(vals):6.2f} {aside}")
    print("\nspread % = (max - min) / median across invocations; bench.py's figure is its "
          f"per_call_ns (p{round(stats.HEADLINE_QUANTILE * 100)}), the seed's the minimum block / "
          "calls; 'bench.py pN'/'min': other statistics of the same bench.py samples; 'base': "
          "--base DIR's bench.py; 'bench.py random': bench.py --random-layout; 'bench.py NAME': a "
          "--variant; 'slow aside': without the invocations bench.py's speed reference marked slow "
          "(the seed's: all of them, it has no such mark); '/ seed': each invocation's wall over the "
          "seed's of the same turn.")


if __name__ == "__main__":
    main()
