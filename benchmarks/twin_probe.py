"""Is bench.py's run-to-run drift the machine's? Two processes at once, one per CPU, same case.

`drift_probe.py` showed that the four cases move together from one block of a run to the next,
and `seed_vs_bench.py --keep` shows the speed of one run stepping by 1-2% between stretches of a
second or two. Two explanations remain: something in the process (its pages moved by the kernel,
say) or the machine (another tenant on the host, the host's own clock). They predict different
things for two processes of the same build running at the same time, one on each CPU:

- the machine: both slow down and speed up together, so their window-by-window speeds correlate,
  and the correlation fades when one series is shifted in time against the other;
- the process: each steps on its own, and the two series do not correlate.

Each worker pins itself like bench.py (overrides/clock/layout.py) and to one CPU, calibrates ~1 ms
samples with the Timer core, waits for a start time both share (CLOCK_MONOTONIC is one clock
for the whole machine), and then times the case back to back for the given seconds. The
parent cuts both series into windows and prints how much a window's figure moves within each
process, and how the two processes' windows correlate at the same moment and shifted apart.

Usage: python benchmarks/twin_probe.py [--case SubTensor] [-t 30] [-w 0.2] [--save PATH] [--load PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.argtypes import positive_float  # noqa: E402
from overrides.files import write_json_atomic  # noqa: E402

WORKER_FLAG = "--worker"
START_DELAY_S = 6.0  # both workers import torch and calibrate before this; ~2 s each here
WINDOW_QUANTILE = 0.1  # a window's figure: its low tail, like the headline, but ~20 samples deep
LAGS_S = (0.0, 1.0, 3.0, 10.0)  # shifts between the two series; the unshifted one is the test


def worker(case_name: str, cpu: int, start_ns: int, seconds: float) -> None:
    """Time `case_name` on `cpu` from `start_ns` (CLOCK_MONOTONIC) for `seconds`; print
    [(sample start ns, per-call ns), ...] as JSON."""
    from overrides.clock.layout import reexec_pinned

    reexec_pinned()  # the same pinning as bench.py, before torch is imported
    os.sched_setaffinity(0, {cpu})
    import torch

    from overrides.cases.registry import get_case
    from overrides.cases.ops import resolve_ops
    from overrides.clock.timer import UNROLL, calibrate_calls, compile_loop

    torch.set_num_threads(1)
    case, op = get_case(case_name), resolve_ops(None)[0]
    operands = tuple(case.make_operands())
    stmt = case.stmt_for(op)
    with case.active():
        calls = calibrate_calls(compile_loop(stmt, UNROLL), operands)
        loop = compile_loop(stmt, calls)
        while time.monotonic_ns() < start_ns:
            loop(operands)  # warm, and keep the CPU's state as it will be while timing
        end_ns = start_ns + int(seconds * 1e9)
        series = []
        while (now := time.monotonic_ns()) < end_ns:
            series.append((now, loop(operands) / calls))
    print(json.dumps({"cpu": cpu, "calls": calls, "series": series}))


def windows(series: list, start_ns: int, width_ns: int) -> list[float]:
    """Per window of `width_ns` from `start_ns`: the WINDOW_QUANTILE of its per-call samples."""
    buckets: dict[int, list[float]] = {}
    for t, value in series:
        buckets.setdefault((t - start_ns) // width_ns, []).append(value)
    count = max(buckets) + 1 if buckets else 0
    out = []
    for index in range(count):
        values = sorted(buckets.get(index, []))
        out.append(values[int(WINDOW_QUANTILE * (len(values) - 1))] if values else math.nan)
    return out


def correlation_at(a: list[float], b: list[float], shift: int) -> float:
    pairs = [(x, y) for x, y in zip(a, b[shift:]) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 3:
        return math.nan
    return statistics.correlation([math.log(x) for x, _ in pairs], [math.log(y) for _, y in pairs])


def summarise(data: dict) -> None:
    width_ns = int(data["window_s"] * 1e9)
    a, b = (windows(w["series"], data["start_ns"], width_ns) for w in data["workers"])
    print(f"case {data['case']}, two processes at once (CPUs {data['workers'][0]['cpu']} and "
          f"{data['workers'][1]['cpu']}), {data['seconds']:g} s, windows of {data['window_s']:g} s "
          f"(figure: p{round(WINDOW_QUANTILE * 100)} of a window's ~1 ms samples)")
    for name, series in (("process A", a), ("process B", b)):
        values = [v for v in series if not math.isnan(v)]
        print(f"  {name}: median {statistics.median(values):7.1f} ns, window-to-window CV "
              f"{100 * statistics.stdev(values) / statistics.mean(values):.2f}%, range "
              f"{100 * (max(values) - min(values)) / statistics.median(values):.2f}%")
    print("  correlation of A's and B's window figures (log), with B shifted later by:")
    for lag in LAGS_S:
        shift = round(lag / data["window_s"])
        both = correlation_at(a, b, shift)
        print(f"    {lag:5.1f} s   {both:+.2f}")
    print("  a correlation at 0 s well above the shifted ones: the two processes drift together, "
          "so the drift is the machine's, not either process's")


def main() -> None:
    if WORKER_FLAG in sys.argv:
        _, case_name, cpu, start_ns, seconds = sys.argv[sys.argv.index(WORKER_FLAG):][:5]
        worker(case_name, int(cpu), int(start_ns), float(seconds))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="SubTensor", help="the case both time (default SubTensor)")
    parser.add_argument("-t", type=positive_float, default=30.0, help="seconds of timing (default 30)")
    parser.add_argument("-w", type=positive_float, default=0.2, help="window in seconds (default 0.2)")
    parser.add_argument("--save", metavar="PATH", help="also write both series as JSON")
    parser.add_argument("--load", metavar="PATH", help="summarise a file written by --save and exit")
    args = parser.parse_args()
    if args.load:
        try:
            with open(args.load) as src:
                data = json.load(src)
        except (OSError, ValueError) as exc:
            parser.error(f"--load {args.load}: {exc}; give a file written by --save")
        summarise(data)
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        parser.error("two CPUs are needed: one per process")
    from overrides.cases.registry import get_case
    from overrides.errors import UsageError

    try:
        get_case(args.case)
    except UsageError as exc:
        parser.error(str(exc))
    start_ns = time.monotonic_ns() + int(START_DELAY_S * 1e9)
    print(f"two workers on CPUs {cpus[0]} and {cpus[1]}: timing {args.case} for {args.t:g} s from "
          f"{START_DELAY_S:g} s on", file=sys.stderr, flush=True)
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), WORKER_FLAG, args.case,
                               str(cpu), str(start_ns), str(args.t)], stdout=subprocess.PIPE, text=True)
             for cpu in cpus[:2]]
    outs = [proc.communicate()[0] for proc in procs]
    if any(proc.returncode for proc in procs):
        sys.exit("a worker failed; see its error above")
    data = {"schema": "torch-function-overhead/twin-probe/1", "case": args.case, "seconds": args.t,
            "window_s": args.w, "start_ns": start_ns,
            "workers": [json.loads(out.strip().splitlines()[-1]) for out in outs]}
    if args.save:
        write_json_atomic(args.save, data)
    summarise(data)


if __name__ == "__main__":
    main()
