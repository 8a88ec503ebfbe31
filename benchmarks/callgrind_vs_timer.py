"""Instruction counts: `bench.py --instructions` against torch.utils.benchmark's collect_callgrind.

Both count `torch.add(x, y)` for the four seed cases with Callgrind. Printed side by side, from
one run: wall time for the four cases, and each case's count and its spread (the range over
every repeat of every invocation, as a percent of the median).

- ours: `python bench.py --instructions` K times (one valgrind process, one hash seed, each);
  its figure per invocation is the minimum of repeats 2-5 of 1000 calls.
- torch: `Timer(...).collect_callgrind(number=1000, repeats=R)` per case, K times; its figure per
  repeat is `counts(denoise=True) / 1000`.

Usage: python benchmarks/callgrind_vs_timer.py [-k 2] [--repeats 3]
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
CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
CALLS = 1000


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ours() -> tuple[float, dict[str, list[float]]]:
    """One `bench.py --instructions` invocation: (wall s, case -> [per-call count])."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "counts.json")
        started = time.monotonic()
        subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "-q", "--instructions",
                        "--json", path], check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - started
        data = json.load(open(path, encoding="utf-8"))
    figures = {r["case"]: [r["instructions_per_call"]] for r in data["results"]}
    return wall, figures


def torch_timer(repeats: int) -> tuple[float, dict[str, list[float]]]:
    """collect_callgrind for each case: (wall s, case -> [per-call count per repeat])."""
    from torch.utils.benchmark import Timer

    started = time.monotonic()
    figures = {}
    for case in CASES:
        timer = Timer("torch.add(x, y)",
                      setup=f"import torch\nfrom overrides.cases.registry import get_case\n"
                            f"x, y = get_case({case!r}).make_operands()")
        stats = timer.collect_callgrind(number=CALLS, repeats=repeats)
        figures[case] = [s.counts(denoise=True) / CALLS for s in stats]
    return time.monotonic() - started, figures


def spread_pct(values: list[float]) -> float:
    return 100.0 * (max(values) - min(values)) / statistics.median(values)


def main() -> None:
    # collect_callgrind's subprocess must find overrides/; set once, before either method runs,
    # because counts move with the environment's content and ours must see the same one each time.
    os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", type=int, default=2, help="invocations of each method (default 2)")
    parser.add_argument("--repeats", type=int, default=3, help="collect_callgrind repeats (default 3)")
    args = parser.parse_args()
    walls = {"ours": [], "torch": []}
    counts = {"ours": {c: [] for c in CASES}, "torch": {c: [] for c in CASES}}
    for k in range(args.k):
        for method in ("ours", "torch"):
            say(f"{method} {k + 1}/{args.k}")
            wall, figures = ours() if method == "ours" else torch_timer(args.repeats)
            walls[method].append(wall)
            for case in CASES:
                counts[method][case] += figures[case]
    print(f"Instruction counts of torch.add, four seed cases: bench.py --instructions vs "
          f"Timer.collect_callgrind, {args.k} invocations each, alternating, one run")
    print(f"{'method':8s} {'wall s, 4 cases (each invocation)':>36s}")
    for method in walls:
        print(f"{method:8s} {', '.join(f'{w:.0f}' for w in walls[method]):>36s}")
    print()
    print(f"{'case':22s} {'method':8s} {'instr/call (median)':>20s} {'spread %':>9s} {'values':>7s}")
    for case in CASES:
        for method in walls:
            values = counts[method][case]
            print(f"{case:22s} {method:8s} {statistics.median(values):20,.0f} "
                  f"{spread_pct(values):9.3f} {len(values):7d}")
    print("\nspread % = (max - min) / median over every figure of that method: ours one per "
          f"invocation, torch one per repeat ({args.repeats} per invocation).")


if __name__ == "__main__":
    main()
