"""Why `--step` times its ops in the step's order: the op table's sum, each op timed alone by the
Timer core (the first method: every op repeated, hot), against the same ops timed back to back
in the step's order (overrides/step/sequence.py, today's), against the step's own overhead, all in
one process, for each step named.

    python benchmarks/op_order_probe.py dtensors:mlp steps:mlp [-n 2]   (from a folder holding them)

Each round prints, per step: the step's overhead (timing.time_steps), the table's sum with each op
alone, the table's sum in order, and the in-order sequence whole, each as a share of the step's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def alone_sum_ns(captured, time_s: float = 0.5) -> float:
    """Each op's overhead, timed alone by the Timer core (yours and its twin, round-robin), times
    its calls a step, added: the op table as its first version priced it."""
    from overrides.clock import stats
    from overrides.clock.timer import TimerConfig, time_targets
    from overrides.step.optable import _rows_unpriced, _target

    rows = _rows_unpriced(captured)
    replays = {(r.kind, r.op, r.signature): r for r in captured.replays if not r.not_applicable}
    keys = [key for key in replays if key in rows and not rows[key].nested]
    targets = []
    for index, key in enumerate(keys):
        targets += [_target(replays[key], str(index), plain=False), _target(replays[key], str(index), plain=True)]
    run = time_targets(targets, TimerConfig(min_time_s=time_s, device_figures=False))
    results = {t.name: t for t in run.targets}
    total = 0.0
    for index, key in enumerate(keys):
        mine, plain = results[f"{index} yours"], results[f"{index} plain"]  # optable._target's names
        if not (mine.error or plain.error):
            total += rows[key].calls * (stats.headline(mine.samples_ns) - stats.headline(plain.samples_ns))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", nargs="+", help="pkg.module:factory of each step, found beside you")
    parser.add_argument("-n", type=int, default=1, help="rounds (default 1)")
    args = parser.parse_args()
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_step
    from overrides.step.timing import time_steps

    print("round  step  load  step overhead ns  ops alone  ops in order  in order, whole")
    for round_ in range(args.n):
        for spec in args.spec:
            pair = build_steps(spec)
            timing = time_steps(pair)
            captured = capture_step(pair.subclass, pair.user_dir)
            alone = alone_sum_ns(captured)
            priced = price_step(captured)
            in_order = sum(r.cost_ns for r in priced.rows if r.cost_ns == r.cost_ns)
            step = timing.overhead_ns
            print(f"{round_ + 1}  {spec}  {os.getloadavg()[0]:.1f}  {step:+,.0f}  {alone / step:.0%}  {in_order / step:.0%}  "
                  f"{priced.in_order_ns / step:.0%}  ({time.strftime('%H:%M')})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
