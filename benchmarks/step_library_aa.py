"""A/As of real libraries' steps, and whether `--step` and `--compare --step` agree on a share.

Each round runs, from a folder of the user's own and alternating: `bench.py --step SPEC` and
`bench.py --compare SPEC SPEC --step` (the same factory on both sides: an A/A). It records the
A/A's verdict, each mode's share of the step with its interval, and whether the two shares agree
within the larger of their intervals (the base's share, in `--compare`; the difference of the two
shares no larger than the wider interval's half width plus the other's). One JSON line per round
to `--log`; the summary at the end.

    python benchmarks/step_library_aa.py --python /tmp/libenv/bin/python --folder DIR \\
        --spec dtensors:mlp torchao_mlp:step -n 10

DIR holds the step modules (benchmarks/shipped_libraries.py leaves one; benchmarks/userlib has
dtensors.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench.py")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def bench_json(python: str, folder: str, *args: str) -> tuple[dict | None, int, float]:
    path = os.path.join(tempfile.gettempdir(), f"aa-{os.getpid()}-{time.monotonic_ns()}.json")
    started = time.monotonic()
    out = subprocess.run([python, BENCH, *args, "--json", path, "-q"], cwd=folder, capture_output=True, text=True,
                         timeout=3600)
    data = None
    if os.path.exists(path):
        with open(path) as src:
            data = json.load(src)
        os.remove(path)
    return data, out.returncode, time.monotonic() - started


def agree(one: tuple[float, list], other: tuple[float, list]) -> bool:
    """Two shares agree within the larger of their intervals: their difference is no more than the
    wider interval's width (each interval's half widths added, the larger of the two pairs)."""
    (a, (a_low, a_high)), (b, (b_low, b_high)) = one, other
    return abs(a - b) <= max(a_high - a_low, b_high - b_low)


def one_round(python: str, folder: str, spec: str) -> dict:
    step, step_exit, step_s = bench_json(python, folder, "--step", spec)
    compared, compare_exit, compare_s = bench_json(python, folder, "--compare", spec, spec, "--step")
    row = {"spec": spec, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), "load": round(os.getloadavg()[0], 2),
           "step_exit": step_exit, "compare_exit": compare_exit, "step_s": round(step_s, 1),
           "compare_s": round(compare_s, 1)}
    if step and step.get("timings"):
        timing = step["timings"][0]
        row.update(step_share=timing["share"], step_share_ci=timing["share_ci"],
                   explained=(step.get("closure") or {}).get("explained"))
    if compared and compared.get("change"):
        change = compared["change"]
        base = compared.get("base") or {}
        row.update(verdict=change["verdict"], change_ns=change["ns"], change_ci_ns=change["ci95_ns"],
                   change_ci99_ns=change.get("ci99_ns"), threshold_ns=change.get("threshold_ns"),
                   stretches_ns=change.get("stretches_ns"),
                   stretches=len(change.get("stretches_ns") or ()), compare_share=base.get("share"),
                   compare_share_ci=base.get("share_ci"))
    if "step_share" in row and row.get("compare_share") is not None:
        row["shares_agree"] = agree((row["step_share"], row["step_share_ci"]),
                                    (row["compare_share"], row["compare_share_ci"]))
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--folder", required=True, help="the user's folder holding the step modules")
    parser.add_argument("--spec", nargs="+", required=True, help="pkg.module:factory of each step")
    parser.add_argument("-n", type=int, default=10, help="rounds of each spec (default 10)")
    parser.add_argument("--log", default=os.path.join(tempfile.gettempdir(), "step_library_aa.jsonl"))
    args = parser.parse_args()
    rows = []
    with open(args.log, "a") as log:
        for round_ in range(args.n):
            for spec in args.spec:
                row = one_round(args.python, args.folder, spec)
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                say(f"{spec} round {round_ + 1}: A/A {row.get('verdict')} ({row.get('stretches')} stretches), share "
                    f"--step {row.get('step_share')} {row.get('step_share_ci')}, --compare {row.get('compare_share')} "
                    f"{row.get('compare_share_ci')}: agree {row.get('shares_agree')} (load {row['load']})")
    for spec in args.spec:
        mine = [r for r in rows if r["spec"] == spec]
        verdicts = [r.get("verdict") for r in mine]
        print(f"{spec}: A/A no change {verdicts.count('no change')}/{len(mine)} ({', '.join(map(str, verdicts))}); "
              f"shares agree {sum(bool(r.get('shares_agree')) for r in mine)}/{len(mine)}; loads "
              f"{min(r['load'] for r in mine)}-{max(r['load'] for r in mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
