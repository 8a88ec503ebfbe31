"""Why `--compare --step` reads a step's share lower than `--step` does under load: one step's
share, in one process, by each method in turn, with the one thing each arm changes.

    python benchmarks/share_probe.py dtensors:mlp [-n 4] [--arms step long step2 compare compare2]
        (from the folder holding the step, in the interpreter that has its library)

Arms (each a fresh build of the step, in a turned order every other round):
  step      `--step` as it times: 10 builds sharing timing.DEFAULT_TIME_S a step
  long      the same with 10x the time: each build's stretch as long as `--compare`'s (3 s a step)
  step2     `--step` with two untimed steps before each sample, not one (timing.EAGER_LEAD)
  compare   the base's share of an A/A `--compare --step` (8 stretches of comparing.STRETCH_S)
  compare2  the same with two untimed steps before each sample

Prints one JSON line a round: each arm's share, its 95% interval and seconds, and the load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ARMS = ("step", "long", "step2", "compare", "compare2")
LONG_FACTOR = 10  # `long`: each of the 10 builds timed as long as one of --compare's stretches
COMPARE_STRETCHES = 8  # the least --compare --step takes, and where an A/A usually stops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec")
    parser.add_argument("-n", type=int, default=4, help="rounds (default 4)")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    args = parser.parse_args()
    sys.path.insert(0, os.getcwd())
    from overrides.step import comparing, timing
    from overrides.step.factory import build_steps

    comparing.MIN_STRETCHES = comparing.MAX_STRETCHES = COMPARE_STRETCHES
    one_lead = timing._sample

    def two_leads(step, steps, lead=False):
        if lead:
            step()
        return one_lead(step, steps, lead)

    for round_ in range(args.n):
        row = {"spec": args.spec, "round": round_ + 1, "load": round(os.getloadavg()[0], 2)}
        for arm in (args.arms if round_ % 2 == 0 else args.arms[::-1]):
            timing._sample = two_leads if arm.endswith("2") else one_lead
            started = time.monotonic()
            try:
                if arm.startswith("compare"):
                    timed = comparing.compare_steps(build_steps(args.spec), build_steps(args.spec)).timings.base
                else:
                    time_s = timing.DEFAULT_TIME_S * (LONG_FACTOR if arm == "long" else 1)
                    timed = timing.time_steps(build_steps(args.spec), time_s)
            finally:
                timing._sample = one_lead
            low, high = timed.share_ci
            row[arm] = {"share": round(timed.share, 4), "ci": [round(low, 4), round(high, 4)],
                        "s": round(time.monotonic() - started)}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
