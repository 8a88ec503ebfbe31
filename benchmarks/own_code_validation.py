"""Do verdicts on two versions of your own code hold? `bench.py --compare SPEC SPEC`, N times each.

Runs the command a subclass author runs, from a folder of their own holding the library in
`benchmarks/userlib/` (copied there), with `--cases Tensor SubTensor` beside it (untouched: the
same on both sides). The kinds, interleaved (one comparison of each in turn, so the machine's
mood lands on all alike):
- `optimised`: `units:pair units_fast:pair`, expected improvement on units:pair;
- `itself`: `units:pair units:pair`, expected no change anywhere;
- `edit`: `units:pair units_slow:pair` (an edit in `__torch_function__`: a helper that builds a
  list of type names, ~+300 ns a call on the loaded host it was run on), expected regression;
- `edit-small`: `units:pair units_tiny:pair` (a call of a two-line helper that does nothing,
  tens of ns), expected regression;
- `builds` (with --second-python): `--compare THIS_PY SECOND_PY --cases units:pair Tensor
  SubTensor`, two builds of one torch on the same cases: the wall time the kinds above are set
  against.

Each comparison also says what it named as changed in your case (`changed_functions`, first the
function the edit added): the edits' helpers (`_audit`, `_note`) must come first, and a
comparison of your code with itself must name nothing (`named` in the summary).

Every comparison is appended to a JSON-lines log as it finishes (`--log`); `--summarise LOG`
prints the table without measuring.

Usage: python benchmarks/own_code_validation.py --folder /tmp/oc/lib -n 10
       [--second-python /tmp/oc/venv2/bin/python] [--log FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBRARY = os.path.join(ROOT, "benchmarks", "userlib")
UNTOUCHED = ("Tensor", "SubTensor")
YOURS = "units:pair"
# kind -> (the two --compare arguments, the verdict expected on your case)
KINDS = {
    "optimised": (("units:pair", "units_fast:pair"), "improvement"),
    "itself": (("units:pair", "units:pair"), "no change"),
    "edit": (("units:pair", "units_slow:pair"), "regression"),
    "edit-small": (("units:pair", "units_tiny:pair"), "regression"),
}
FLAGS = ("regression", "improvement", "clock only", "disagree")
# kind -> the function that edit added, which `changed_functions` must name first on your case;
# a kind not here must name nothing (itself) or is not checked (optimised: a rewrite, no one helper)
ADDED = {"edit": "_audit (units_slow.py)", "edit-small": "_note (units_tiny.py)"}
NAMES_NOTHING = ("itself",)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def commands(second_python: str | None, kinds=None) -> dict[str, tuple[list[str], str | None]]:
    """kind -> (the bench.py arguments, the verdict expected on your case), for `kinds` (all)."""
    out = {kind: (["--compare", *sides, "--cases", *UNTOUCHED], expected)
           for kind, (sides, expected) in KINDS.items() if not kinds or kind in kinds}
    if second_python:
        out["builds"] = (["--compare", sys.executable, second_python, "--cases", YOURS, *UNTOUCHED], "no change")
    return out


def measure(folder: str, n: int, log: str, second_python: str | None, kinds=None) -> None:
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(LIBRARY):
        if name.endswith(".py"):
            shutil.copy(os.path.join(LIBRARY, name), folder)
    with open(log, "a", encoding="utf-8") as out:
        for round_ in range(n):
            for kind, (arguments, expected) in commands(second_python, kinds).items():
                say(f"round {round_ + 1}/{n}: {kind}")
                started = time.monotonic()
                done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), *arguments, "-q",
                                       "--json", "out.json"], cwd=folder, capture_output=True, text=True)
                wall = time.monotonic() - started
                try:
                    payload = json.load(open(os.path.join(folder, "out.json"), encoding="utf-8"))
                    os.remove(os.path.join(folder, "out.json"))
                except (OSError, ValueError):
                    payload = {"comparisons": [], "settings": {}}
                entry = {"kind": kind, "expected": expected, "exit": done.returncode, "wall_s": round(wall, 1),
                         "error": done.stderr.strip().splitlines()[-1:] if done.returncode not in (0, 1) else [],
                         "pairs": payload["settings"].get("pairs"),
                         "rows": {c["case"]: {k: c.get(k) for k in ("verdict", "delta_ns", "ci95_ns",
                                                                      "delta_instructions", "clock_verdict")}
                                  for c in payload["comparisons"]},
                         "named": {c["case"]: _named(c.get("changed_functions")) for c in payload["comparisons"]}}
                out.write(json.dumps(entry) + "\n")
                out.flush()
                yours = entry["rows"].get(YOURS, {})
                say(f"  {kind}: exit {done.returncode}, {wall:.0f} s, {YOURS} {yours.get('verdict')} "
                    f"{yours.get('delta_ns')} ns {yours.get('ci95_ns')}; "
                    + ", ".join(f"{case} {entry['rows'].get(case, {}).get('verdict')}" for case in UNTOUCHED))


def _named(changed: dict | None) -> dict | None:
    """What a row named as changed: whether it looked, and the functions in order (None: no list)."""
    if changed is None:
        return None
    return {"looked_for": changed.get("looked_for"),
            "functions": [f"{f['change']} {f['function']}" for f in changed.get("functions", [])]}


def named_right(entry: dict) -> bool | None:
    """Whether the comparison named what its kind expects on your case (None: not checked)."""
    named = (entry.get("named") or {}).get(YOURS)
    if entry["kind"] in ADDED:
        return bool(named and named["functions"]) and named["functions"][0] == f"new {ADDED[entry['kind']]}"
    if entry["kind"] in NAMES_NOTHING:
        return not (named and named.get("functions"))
    return None


def _interval(ci) -> str:
    return "-" if not ci else f"{ci[0]:+,.0f}..{ci[1]:+,.0f}"


def summarise(log: str) -> None:
    by_kind = collections.defaultdict(list)
    for line in open(log, encoding="utf-8"):
        entry = json.loads(line)
        by_kind[entry["kind"]].append(entry)
    print("| kind | expected on units:pair | got | units:pair delta ns (median, CI of the median run) "
          "| delta instructions (median) | untouched flagged | named | exit | wall median (max) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, runs in by_kind.items():
        expected = runs[0]["expected"]
        yours = [r["rows"].get(YOURS, {}) for r in runs]
        right = sum(1 for y in yours if y.get("verdict") == expected)
        deltas = [y["delta_ns"] for y in yours if y.get("delta_ns") is not None]
        instr = [y["delta_instructions"] for y in yours if y.get("delta_instructions") is not None]
        middle = sorted(yours, key=lambda y: y.get("delta_ns") or 0)[len(yours) // 2]
        flagged = sum(1 for r in runs for case in UNTOUCHED if r["rows"].get(case, {}).get("verdict") in FLAGS)
        others = collections.Counter(y.get("verdict") for y in yours if y.get("verdict") != expected)
        walls = [r["wall_s"] for r in runs]
        exits = collections.Counter(r["exit"] for r in runs)
        checked = [named_right(r) for r in runs]
        named = ("-" if None in checked else
                 f"{sum(checked)}/{len(runs)} " + ("nothing" if kind in NAMES_NOTHING else f"`{ADDED[kind]}` first"))
        print(f"| {kind} | {expected} | {right}/{len(runs)}"
              + (f" ({', '.join(f'{v} {k}' for k, v in others.items())})" if others else "")
              + f" | {statistics.median(deltas):+,.0f} ({_interval(middle.get('ci95_ns'))}) | "
              + (f"{statistics.median(instr):+,.0f}" if instr else "-")
              + f" | {flagged}/{len(runs) * len(UNTOUCHED)} | {named} | "
              + ", ".join(f"{k}: {v}" for k, v in sorted(exits.items()))
              + f" | {statistics.median(walls):.0f} s ({max(walls):.0f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="comparisons per kind")
    parser.add_argument("--folder", help="the user's folder: the library is copied here and the tool run from it")
    parser.add_argument("--second-python", help="a second build of this torch, for the `builds` kind")
    parser.add_argument("--log", default="own_code_validation.jsonl")
    parser.add_argument("--kind", action="append", choices=list(KINDS), help="only these kinds (default: all)")
    parser.add_argument("--summarise", metavar="LOG", help="print the table of a log, measure nothing")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    if not args.folder:
        parser.error("give --folder DIR (the user's folder) or --summarise LOG")
    measure(os.path.abspath(args.folder), args.n, os.path.abspath(args.log), args.second_python, args.kind)
    summarise(os.path.abspath(args.log))


if __name__ == "__main__":
    main()
