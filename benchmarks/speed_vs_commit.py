"""Is a comparison as fast as it was at an older commit? Today's tree and REV's, side by side,
alternating, on the same cases and interpreters (issue 47: counting a seed cost 1.45x f69f8e7's).

Each round runs, for each kind asked and in turn for each tree (the order alternating between
rounds, so drift in the machine's speed falls on both):
  shim: `bench.py --compare PY BARE` of the four seed cases, BARE the bare shim (one Python call
        added to every subclass's __torch_function__): SubTensor and SubWithTorchFunction
        should read regression, Tensor and WithTorchFunction no change;
  aa:   `bench.py --compare PY PY` of the same cases: no change everywhere.
and prints each tree's wall time and counting time (the comparison's own counted_first_s, the
counts made before the clock) with its seeds, medians over the rounds, and how often each tree's
verdicts were the expected ones.

    python benchmarks/speed_vs_commit.py [--commit f69f8e7] [-n 5] [--kinds shim aa] [--work DIR]

Both trees are exported (`git archive`) to folders of the same length, so neither's paths make
it slower; the interpreter is this one, the bare shim a virtualenv of it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.ab import shimenv  # noqa: E402

CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
EXPECTED = {"shim": {"Tensor": "no change", "SubTensor": "regression", "WithTorchFunction": "no change",
                     "SubWithTorchFunction": "regression"},
            "aa": {case: "no change" for case in CASES}}
RUN_TIMEOUT_S = 1800  # one comparison beside other work; a stuck one must not hold the rest


def export(rev: str, folder: str) -> str:
    """The tree of `rev` (a commit, or HEAD) in `folder`, made anew."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return folder


def compare(tree: str, base: str, branch: str, out: str) -> dict:
    """One `bench.py --compare` from `tree`: its wall time, counting time, seeds and verdicts."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, os.path.join(tree, "bench.py"), "--compare", base, branch,
                           "--cases", *CASES, "--json", out, "-q"], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=os.path.dirname(out))
    wall = time.monotonic() - started
    try:
        with open(out, encoding="utf-8") as src:
            data = json.load(src)
    except (OSError, ValueError):
        return {"wall_s": wall, "exit": done.returncode, "error": done.stderr[-500:]}
    counts = (data.get("settings") or {}).get("instructions") or {}
    return {"wall_s": wall, "exit": done.returncode, "counting_s": counts.get("counted_first_s"),
            "seeds": len(counts.get("seeds") or ()),
            "verdicts": {c["case"]: c.get("verdict") for c in data.get("comparisons", [])}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="f69f8e7", help="the older tree (default f69f8e7)")
    parser.add_argument("-n", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--kinds", nargs="+", choices=("shim", "aa"), default=["shim", "aa"])
    parser.add_argument("--work", default="/tmp/speed-vs-commit")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    trees = {"today": export("HEAD", os.path.join(args.work, "today")),  # same length as "older"
             args.commit: export(args.commit, os.path.join(args.work, "older"))}
    here = sys.executable
    bare = shimenv.make_shim_env(here, os.path.join(args.work, "bare"), "bare").python
    sides = {"shim": (here, bare), "aa": (here, here)}
    log = []
    for i in range(args.n):
        order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
        for kind in args.kinds:
            for name, tree in order:
                entry = dict(compare(tree, *sides[kind], os.path.join(args.work, f"{kind}.json")),
                             round=i + 1, kind=kind, tree=name, load=round(os.getloadavg()[0], 1))
                entry["right"] = entry.get("verdicts") == EXPECTED[kind]
                log.append(entry)
                print(json.dumps(entry), file=sys.stderr, flush=True)
                with open(os.path.join(args.work, "log.json"), "w", encoding="utf-8") as out:
                    json.dump(log, out, indent=1)
    print(f"{'kind':5}  {'tree':10}  {'wall s (median)':>15}  {'counting s':>10}  {'seeds':>5}  "
          f"{'s a seed':>8}  right")
    for kind in args.kinds:
        for name in trees:
            runs = [e for e in log if e["kind"] == kind and e["tree"] == name]
            counting = [e["counting_s"] for e in runs if e.get("counting_s")]
            seeds = [e["seeds"] for e in runs if e.get("seeds")]
            per_seed = [e["counting_s"] / e["seeds"] for e in runs if e.get("counting_s") and e.get("seeds")]
            print(f"{kind:5}  {name:10}  {statistics.median(e['wall_s'] for e in runs):>15.1f}  "
                  f"{statistics.median(counting) if counting else float('nan'):>10.1f}  "
                  f"{statistics.median(seeds) if seeds else 0:>5.0f}  "
                  f"{statistics.median(per_seed) if per_seed else float('nan'):>8.1f}  "
                  f"{sum(e['right'] for e in runs)}/{len(runs)}")


if __name__ == "__main__":
    main()
