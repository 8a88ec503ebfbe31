"""A/A of `bench.py --compiled`: plain Tensor against itself, eager and compiled, N runs.

Each run times Tensor as its own case: its "subclass" figures are a second, separately built
(and separately compiled) copy of the plain ones, so every overhead ought to be nothing. Prints,
per run, what stays (compiled Tensor less compiled Tensor) and what compile "removed", each with
its interval, and how many of the N intervals hold zero.

    python benchmarks/compiled_aa.py --runs 10 [--backend inductor] [--min-time S]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_run(backend: str, min_time: float | None, op: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "aa.json")
        command = [sys.executable, os.path.join(ROOT, "bench.py"), "--compiled", "--cases", "Tensor", "--op", op,
                   "--compile-backend", backend, "--json", path, "-q"]
        if min_time:
            command += ["--min-time", str(min_time)]
        subprocess.run(command, check=True, capture_output=True, text=True)
        with open(path, encoding="utf-8") as src:
            return json.load(src)["results"][0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--min-time", type=float)
    parser.add_argument("--op", default="torch.add")
    args = parser.parse_args()
    held = {"eager_overhead": 0, "stays": 0, "removed": 0}
    for run in range(1, args.runs + 1):
        result = one_run(args.backend, args.min_time, args.op)
        cells = []
        for key in held:
            low, high = result[key]["ci95_ns"]
            held[key] += low <= 0 <= high
            cells.append(f"{key} {result[key]['ns']:+.0f} ({low:+.0f}..{high:+.0f})")
        plain = result["figures"]["compiled plain"]["per_call_ns"]
        print(f"run {run}: compiled plain {plain:,.0f} ns; " + "; ".join(cells), flush=True)
    print("intervals holding zero: " + ", ".join(f"{key} {count}/{args.runs}" for key, count in held.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
