"""A/A of `bench.py --step --compiled`: `steps:mlp_plain` (the same plain MLP step on both
sides), eager and compiled, N runs.

Each run builds the plain step twice (and twice more to compile), so every overhead ought to be
nothing. Prints, per run, the eager overhead and what stays (compiled less compiled), each with
its interval and as a share of its plain step, and how many of the N intervals hold zero.

    python benchmarks/step_compiled_aa.py --runs 10 [--backend inductor] [--min-time S]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_run(backend: str, min_time: float | None) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        shutil.copytree(os.path.join(ROOT, "benchmarks", "userlib"), folder, dirs_exist_ok=True)
        command = [sys.executable, os.path.join(ROOT, "bench.py"), "--step", "steps:mlp_plain", "--compiled",
                   "--compile-backend", backend, "--json", "aa.json", "-q"]
        if min_time:
            command += ["--min-time", str(min_time)]
        subprocess.run(command, check=True, capture_output=True, text=True, cwd=folder)
        with open(os.path.join(folder, "aa.json"), encoding="utf-8") as src:
            return json.load(src)["compiled"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--min-time", type=float)
    args = parser.parse_args()
    held = {"eager_overhead": 0, "stays": 0}
    for run in range(1, args.runs + 1):
        result = one_run(args.backend, args.min_time)
        said = []
        for key, plain in (("eager_overhead", "eager plain"), ("stays", "compiled plain")):
            value, (low, high) = result[key]["ns"], result[key]["ci95_ns"]
            held[key] += low <= 0 <= high
            said.append(f"{key} {value:+,.0f} ({low:+,.0f}..{high:+,.0f}, "
                        f"{value / result['figures'][plain]['step_ns']:+.1%})")
        print(f"run {run}: " + "; ".join(said), flush=True)
    print(f"intervals holding zero: eager overhead {held['eager_overhead']}/{args.runs}, "
          f"stays {held['stays']}/{args.runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
