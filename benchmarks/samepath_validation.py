"""Do two installs of the same files count alike? Per-seed instruction counts of environments
whose paths differ, each against the first, with every side started from one path
(overrides/builds/samepath.py) and, in the same run, from its own paths (as before).

    python benchmarks/samepath_validation.py ENV1 ENV2 [ENV3 ...] [--seeds 11 22 33] [--mode both|same|own]

ENV: an interpreter or a virtualenv folder. Prints, per mode, case and seed, each environment's
count minus the first's, and the largest |delta|. The counts themselves are deterministic, so
the machine's load changes the wall time only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from overrides.builds import samepath  # noqa: E402
from overrides.builds.interpreters import resolve_interpreter  # noqa: E402
from overrides.counts import callgrind  # noqa: E402

SEED_CASE_NAMES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("envs", nargs="+")
    parser.add_argument("--seeds", nargs="+", type=int, default=[11, 22, 33])
    parser.add_argument("--mode", choices=("both", "same", "own"), default="both")
    parser.add_argument("--cases", nargs="+", default=list(SEED_CASE_NAMES))
    args = parser.parse_args()
    pythons = [resolve_interpreter(env) for env in args.envs]
    targets = [(case, "torch.add") for case in args.cases]
    modes = ("same", "own") if args.mode == "both" else (args.mode,)
    worst = {}
    for mode in modes:
        if mode == "own":
            os.environ[samepath.SWITCH_VARIABLE] = "off"
        else:
            os.environ.pop(samepath.SWITCH_VARIABLE, None)
        started = time.monotonic()
        runs = callgrind.count_builds(pythons, targets, args.seeds,
                                      say=lambda m: print(f"[{mode}] {m}", file=sys.stderr))
        print(f"\n{mode} paths ({'one fixed path per side' if mode == 'same' else 'each env its own'}),"
              f" {time.monotonic() - started:.0f} s; count minus {args.envs[0]}'s, per seed {args.seeds}")
        for env, build in zip(args.envs[1:], runs[1:]):
            print(f"  {env}")
            for case, _ in targets:
                deltas = [b.get(case, "torch.add").per_call - a.get(case, "torch.add").per_call
                          for a, b in zip(runs[0], build)]
                worst[mode] = max(worst.get(mode, 0.0), max(abs(d) for d in deltas))
                print(f"    {case:22s} " + " ".join(f"{d:+8.1f}" for d in deltas))
        same = [r.settings.get("same_path") for build in runs for r in build]
        print(f"  started from one path: {sum(bool(s) for s in same)} of {len(same)} processes")
    print("\nlargest |delta|: " + ", ".join(f"{mode} {value:.1f}" for mode, value in worst.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
