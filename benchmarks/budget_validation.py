"""Does an overhead budget hold where it should, and fail where it should? (`--check-budget`)

Writes a budget of the four seed cases and a case of the user's own (`budget_units:pair`, a
module written into the work folder; `--no-user-case` leaves it out) with this interpreter, then
checks it, interleaved, N times each, a file added to the work folder every round as a CI
checkout's would differ from the author's: in this interpreter, in a second virtualenv of the same wheel at another path, and
in the bare shim environment (one Python call added to every subclass's __torch_function__);
once the reverse (a budget of the shim checked here); and times a check against
`bench.py --instructions` of the same cases and seeds, side by side.

    python benchmarks/budget_validation.py [-n 10] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.ab import shimenv  # noqa: E402

BENCH = os.path.join(ROOT, "bench.py")
SEED_CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
USER_MODULE = """import torch


class UnitTensor(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def pair():
    return torch.ones(1).as_subclass(UnitTensor), torch.ones(1).as_subclass(UnitTensor)
"""


def run(python: str, *args: str, cwd: str) -> tuple[int, float, str]:
    started = time.monotonic()
    done = subprocess.run([python, BENCH, *args, "-q"], cwd=cwd, capture_output=True, text=True, timeout=1800)
    return done.returncode, time.monotonic() - started, done.stdout + done.stderr


def verdicts(output: str) -> dict[str, str]:
    out = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 7 and parts[1] == "torch.add" and parts[0] != "case":
            out[parts[0]] = " ".join(parts[6:])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--work", default="/tmp/budget-validation")
    parser.add_argument("--no-user-case", action="store_true", help="the four seed cases only")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    cases = list(SEED_CASES)
    if not args.no_user_case:
        with open(os.path.join(args.work, "budget_units.py"), "w", encoding="utf-8") as out:
            out.write(USER_MODULE)
        cases.append("budget_units:pair")
    here = sys.executable
    second = shimenv.make_shim_env(here, os.path.join(args.work, "second-venv-at-another-path"), None).python
    bare = shimenv.make_shim_env(here, os.path.join(args.work, "bare"), "bare").python
    code, wall, out = run(here, "--write-budget", "plain.json", "--cases", *cases, cwd=args.work)
    assert code == 0, out
    print(f"written in {wall:.0f} s", file=sys.stderr)
    code, _, out = run(bare, "--write-budget", "shim.json", "--cases", *cases, cwd=args.work)
    assert code == 0, out
    kinds = {"same interpreter": here, "second virtualenv": second, "bare shim": bare}
    log = {kind: [] for kind in kinds}
    for i in range(args.n):
        for kind, python in kinds.items():
            code, wall, out = run(python, "--check-budget", "plain.json", cwd=args.work)
            log[kind].append({"exit": code, "wall_s": wall, "verdicts": verdicts(out),
                              "shim_named": "_shim (_overrides_shim.py)" in out})
            print(f"[{i + 1}/{args.n}] {kind}: exit {code} in {wall:.0f} s {verdicts(out)}", file=sys.stderr)
        with open(os.path.join(args.work, f"round-{i + 1}-of-the-validation.json"), "w", encoding="utf-8") as out:
            json.dump(log, out)
    code, _, reverse = run(here, "--check-budget", "shim.json", cwd=args.work)
    timing = []
    for _ in range(3):
        _, check_s, _ = run(here, "--check-budget", "plain.json", cwd=args.work)
        _, count_s, _ = run(here, "--instructions", "--seeds", "1", "2", "3", "--cases", *cases, cwd=args.work)
        timing.append((check_s, count_s))
    print(f"\nBudget of {', '.join(cases)} (seeds 1 2 3), checked:")
    for kind, runs in log.items():
        exits = [r["exit"] for r in runs]
        over = sorted({case for r in runs for case, v in r["verdicts"].items() if v != "within"})
        print(f"  {kind:18s} exit 0 in {exits.count(0)}/{len(runs)}, exit 1 in {exits.count(1)}/{len(runs)}; "
              f"rows off: {', '.join(over) or 'none'}; shim named in {sum(r['shim_named'] for r in runs)}/{len(runs)}; "
              f"wall median {statistics.median(r['wall_s'] for r in runs):.0f} s")
    print(f"  reverse (shim's budget checked on plain): exit {code}; {verdicts(reverse)}")
    check_med = statistics.median(t[0] for t in timing)
    count_med = statistics.median(t[1] for t in timing)
    print(f"  check {check_med:.1f} s against --instructions {count_med:.1f} s (medians of 3, interleaved): "
          f"{check_med / count_med:.2f}x")
    with open(os.path.join(args.work, "log.json"), "w", encoding="utf-8") as out:
        json.dump({"log": log, "reverse": verdicts(reverse), "timing": timing}, out)


if __name__ == "__main__":
    main()
