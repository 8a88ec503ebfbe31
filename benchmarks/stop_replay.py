"""Where would another stopping rule have stopped, and would the figures have spread less?

Replays stopping rules on bench.py runs kept whole: results files of runs that sampled to the
time cap, or with a fixed `-m` long enough (`seed_vs_bench.py --keep DIR`, `bench.py -m 2000
--json F`). A run's samples are in the order taken, one per case a round, so a rule can be
applied to the first n rounds as the Timer core would have (overrides/clock/timer.py): from the
floor on, checked every 0.2 s, precision first, then the rule. A round's time is rebuilt from
its samples (calls x per-call time, loop cost and the speed reference's samples added); the
rounds of a run cut where the rule stops give that rule's figures for the run. Across the runs,
each rule's seconds a case and how far each case's figure spreads (range and CV over the runs,
runs marked slow set aside unless --with-slow).

Usage: python benchmarks/stop_replay.py FILE... [--min-rounds 1700] [--with-slow]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.clock import stats, timer  # noqa: E402

CHECK_S = timer.PRECISION_CHECK_EVERY_NS / 1e9
SAMPLE_OVERHEAD_NS = 3_000  # a sample's own Python around the timed loop, roughly


def load(path: str) -> dict:
    with open(path) as src:
        data = json.load(src)
    timed = [r for r in data["results"] if r["samples_ns"]]
    rounds = min(len(r["samples_ns"]) for r in timed)
    reference = data.get("speed") or {}
    ref_samples, ref_calls = reference.get("samples_ns", []), reference.get("calls_per_sample", 0)
    elapsed, spent = [], 0.0
    for i in range(rounds):
        for r in timed:
            spent += (r["samples_ns"][i] + 2 * r["loop_overhead_ns"]) * r["calls_per_sample"] + SAMPLE_OVERHEAD_NS
        if i % timer.REFERENCE_EVERY == 0 and i // timer.REFERENCE_EVERY < len(ref_samples):
            spent += ref_samples[i // timer.REFERENCE_EVERY] * ref_calls + SAMPLE_OVERHEAD_NS
        elapsed.append(spent / 1e9)
    return {"path": path, "cases": [r["case"] for r in timed], "samples": [r["samples_ns"][:rounds] for r in timed],
            "elapsed": elapsed, "slow": bool(reference.get("slow")), "rounds": rounds}


def width(samples) -> float:
    if len(samples) < stats.MIN_TRUSTED_SAMPLES:
        return math.inf
    low, high = stats.quantile_ci95(samples)
    return (high - low) / 2 / stats.headline(samples)


def stop_at(run: dict, floor_s: float, rule: str, max_width: float = timer.DRIFT_MAX_WIDTH) -> tuple[int, str]:
    """Rounds the rule keeps, and why it stopped ("end": the run ended first)."""
    targets = len(run["cases"])
    next_check = 0.0
    for i, spent in enumerate(run["elapsed"]):
        if spent >= timer.DEFAULT_MAX_TIME_S * targets:
            return i + 1, "time cap"
        if spent < floor_s * targets or spent < next_check:
            continue
        next_check = spent + CHECK_S
        if rule == "fixed":
            return i + 1, "fixed"
        widths = [width(s[:i + 1]) for s in run["samples"]]
        if all(w <= timer.DEFAULT_PRECISION for w in widths):
            return i + 1, "precision"
        if rule == "drift":
            moved = stats.drift([s[:i + 1] for s in run["samples"]])
            if moved is not None and moved.seen and all(w <= min(abs(moved.shift), max_width) for w in widths):
                return i + 1, "drift"
    return run["rounds"], "end"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="bench.py results files of runs kept whole")
    parser.add_argument("--min-rounds", type=int, default=1700,
                        help="leave out runs with fewer rounds (default 1700: ~3 s a case here)")
    parser.add_argument("--with-slow", action="store_true", help="keep the runs marked slow too")
    args = parser.parse_args()
    runs = [run for run in map(load, args.files)
            if run["rounds"] >= args.min_rounds and (args.with_slow or not run["slow"])]
    if len(runs) < 2:
        parser.error(f"{len(runs)} run(s) left of {len(args.files)}: give at least two runs kept whole")
    cases = runs[0]["cases"]
    print(f"{len(runs)} runs kept whole ({', '.join(cases)}); seconds a case from the rebuilt round times")
    rules = [("today: precision, else the cap", 1.0, "precision", math.inf)]
    rules += [(f"fixed {floor:g} s", floor, "fixed", math.inf) for floor in (0.5, 0.75, 1.0, 1.5, 2.0)]
    rules += [(f"drift, floor {floor:g} s{'' if math.isinf(ceiling) else f', within {ceiling:.0%}'}",
               floor, "drift", ceiling) for floor in (0.75, 1.0) for ceiling in (math.inf, timer.DRIFT_MAX_WIDTH)]
    print(f"{'rule':34s} {'s a case: median':>16s} {'mean':>5s} {'max':>5s}   range % by case"
          f"{'':{max(0, 6 * len(cases) - 15)}s}   CV % by case")
    for name, floor, rule, ceiling in rules:
        stops = [stop_at(run, floor, rule, ceiling) for run in runs]
        seconds = [run["elapsed"][n - 1] / len(cases) for run, (n, _) in zip(runs, stops)]
        figures = [[stats.headline(s[:n]) for s in run["samples"]] for run, (n, _) in zip(runs, stops)]
        by_case = [[f[c] for f in figures] for c in range(len(cases))]
        spread = " ".join(f"{100 * (max(v) - min(v)) / statistics.median(v):5.2f}" for v in by_case)
        cv = " ".join(f"{100 * statistics.stdev(v) / statistics.mean(v):5.2f}" for v in by_case)
        why = ", ".join(f"{w} x{n}" for w, n in ((w, [s for _, s in stops].count(w)) for w in dict.fromkeys(s for _, s in stops)))
        print(f"{name:34s} {statistics.median(seconds):16.2f} {statistics.mean(seconds):5.2f} {max(seconds):5.2f}   "
              f"{spread}   {cv}   {why}")


if __name__ == "__main__":
    main()
