"""Is a run slowed as a whole marked, and a quiet one not? `python bench.py` runs beside a
CPU-heavy process that starts and stops.

The issue: one of five runs read every case 1.64x slower with no `!` on any row, and the footer
said the machine's speed drifts 1-2% from run to run. `bench.py` now times a reference loop
beside the cases and marks a run whose reference ran past `speed.SLOW_RUN_RATIO` of this
machine's fastest kept run (overrides/clock/speed.py). This script runs `bench.py` N times, the
hog on for some runs and off for the others, interleaved (off first), all against one fresh
speed cache (seeded by one quiet run that is not counted), and prints per run: the hog, the load,
each case's figure, the figures' mean ratio to the quiet runs' medians, the reference's ratio
and whether the run was marked. It passes when every run whose figures read more than
`SLOWER_BY` above the quiet runs' is marked and no quiet run is.

Hogs (`--hog`):
- `ticker`: on each core, a real-time (SCHED_FIFO) process that spins TICK_SPIN_US every
  TICK_EVERY_US: every ~1 ms sample is interrupted, so the whole run is slowed evenly, as by
  another tenant sharing the core underneath the VM (needs root: `chrt`);
- `spin`: one ordinary CPU-bound process (`while 1: pass`), the issue's test-suite neighbour;
  the scheduler hands it whole time slices, so most samples run undisturbed and the figures
  should not move.

Usage: python benchmarks/slow_run_validation.py [-n 5] [--hog ticker|spin] [--save PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.argtypes import positive_int  # noqa: E402
from overrides.files import write_json_atomic  # noqa: E402

SLOWER_BY = 0.10  # the issue's line: figures this far above the quiet runs' must be marked
TICK_SPIN_US, TICK_EVERY_US = 5, 500  # the seed cases ~2.2x slower here; --tick-every-us 1000 slows them less
TICKER = ("import sys, time\nclock = time.perf_counter\nspin, pause = float(sys.argv[1]) * 1e-6, "
          "float(sys.argv[2]) * 1e-6\nwhile True:\n    end = clock() + spin\n    while clock() < end:\n"
          "        pass\n    time.sleep(pause)\n")


def start_hog(kind: str, every_us: int) -> list[subprocess.Popen]:
    if kind == "spin":
        return [subprocess.Popen([sys.executable, "-c", "while 1: pass"])]
    if shutil.which("chrt") is None or os.geteuid() != 0:
        sys.exit("slow_run_validation.py: --hog ticker needs root and chrt (a real-time process per core); "
                 "run as root or pass --hog spin")
    return [subprocess.Popen(["taskset", "-c", str(cpu), "chrt", "-f", "1", sys.executable, "-c", TICKER,
                              str(TICK_SPIN_US), str(every_us)]) for cpu in sorted(os.sched_getaffinity(0))]


def stop_hog(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()
        hog.wait()


def bench(folder: str, cache: str, label: str, extra: tuple[str, ...] = ()) -> dict:
    path = os.path.join(folder, f"{label}.json")
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "-q", "--json", path, *extra],
                          cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(f"bench.py failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    with open(path, encoding="utf-8") as file:
        data = json.load(file)
    data["table"] = done.stdout
    return data


def load() -> str:
    with open("/proc/loadavg", encoding="utf-8") as file:
        return " ".join(file.read().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=positive_int, default=5, help="runs (default 5), hog off, on, off, ...")
    parser.add_argument("--hog", choices=("ticker", "spin"), default="ticker")
    parser.add_argument("--tick-every-us", type=positive_int, default=TICK_EVERY_US,
                        help=f"ticker: its period in microseconds (default {TICK_EVERY_US}; longer slows less)")
    parser.add_argument("--save", metavar="PATH", help="write the runs' figures as JSON")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="slowrun-")
    cache = os.path.join(folder, "cache")
    bench(folder, cache, "seed", ("--min-time", "0.5"))  # the machine's first kept run: not counted
    runs = []
    for index in range(args.n):
        hog_on = index % 2 == 1
        hogs = start_hog(args.hog, args.tick_every_us) if hog_on else []
        try:
            time.sleep(0.5 if hog_on else 0)
            before = load()
            data = bench(folder, cache, f"run{index + 1}")
        finally:
            stop_hog(hogs)
        figures = {r["case"]: r["per_call_ns"] for r in data["results"] if r["per_call_ns"]}
        runs.append({"run": index + 1, "hog": args.hog if hog_on else "off", "load": before, "figures": figures,
                     "speed": data["speed"], "flagged": sum(bool(r["too_spread"]) for r in data["results"])})
        print(f"run {index + 1} ({runs[-1]['hog']}, load {before}): reference "
              f"{data['speed']['ratio']}x, slow {data['speed']['slow']}", file=sys.stderr)
    quiet = [run for run in runs if run["hog"] == "off"]
    medians = {case: statistics.median(run["figures"][case] for run in quiet) for case in quiet[0]["figures"]}
    ok = True
    print(f"{'run':>3}  {'hog':6}  {'load (1, 5, 15 min)':19}  " + "  ".join(f"{c[:12]:>12}" for c in medians)
          + "  figures/quiet  reference  marked  !rows")
    for run in runs:
        ratio = statistics.mean(run["figures"][case] / medians[case] for case in medians)
        run["figures_over_quiet"] = round(ratio, 4)
        marked = run["speed"]["slow"]
        wrong = (ratio > 1 + SLOWER_BY and not marked) or (run["hog"] == "off" and marked)
        ok = ok and not wrong
        print(f"{run['run']:>3}  {run['hog']:6}  {run['load']:19}  "
              + "  ".join(f"{run['figures'][case]:>12,.0f}" for case in medians)
              + f"  {ratio:>12.3f}x  {run['speed']['ratio']:>8.3f}x  {'yes' if marked else 'no':>6}  {run['flagged']:>5}"
              + ("  <- wrong" if wrong else ""))
    print(f"\nevery run more than {SLOWER_BY:.0%} above the quiet runs marked, no quiet run marked: "
          f"{'yes' if ok else 'NO'} (limit {runs[0]['speed']['slow_ratio']}x; results in {folder})")
    if args.save:
        write_json_atomic(args.save, {"hog": args.hog, "tick_every_us": args.tick_every_us, "runs": runs,
                                      "passed": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
