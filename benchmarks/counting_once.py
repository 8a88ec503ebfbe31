"""Does counting once pay? Today's tree against an older one (default 7e31db8), side by side on
one host, alternating, on what issue 58 timed: a budget of your own (2 modules x 2 ops) written
and checked, the bare shim's `--compare` and `scripts/report.sh`, and a `--compare` repeated
against the same base; and whether today's verdicts stay right.

Kinds (each run in turn by both trees, the order alternating between rounds):
  budget:  `--write-budget` then `--check-budget` of units:pair and units_fast:pair on torch.add
           and x+y, from a folder of their own; today's write counts into an empty cache
           (`write`), its check after it reuses (`check`), and a check with no cache (`check-cold`)
  shim:    `--compare PY BARE` of the four seed cases, today's with no cache (nothing reused)
  repeat:  the same `--compare` again, today's reusing the counts the first one kept
  report:  `scripts/report.sh PY BARE` twice, today's into one cache (the second
           reuses); the older one has no cache
  verdicts (today only): `--compare` of the bare shim, an A/A, and your own edit (units_slow: a
           helper call added), each with no cache; and a budget check after a harmless change
           (an unused function in a module, a file in the folder), each counted anew

    python benchmarks/counting_once.py [--commit 7e31db8] [-n 2] [--kinds budget shim repeat report]
           [--verdicts 10] [--work DIR]

Prints each run as a JSON line on stderr (kept in DIR/log.json) and a table of medians.
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
from speed_vs_commit import export  # noqa: E402  (beside this script: an older tree's files, made anew)

CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
SHIM = {"Tensor": "no change", "SubTensor": "regression", "WithTorchFunction": "no change",
        "SubWithTorchFunction": "regression"}
BUDGET_CASES = ("units:pair", "units_fast:pair")
BUDGET_OPS = ("torch.add", "x+y")
USER_FILES = ("units.py", "units_fast.py", "units_slow.py")
RUN_TIMEOUT_S = 3600
OFF = "off"


def user_folder(work: str, name: str) -> str:
    folder = os.path.join(work, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for file in USER_FILES:
        shutil.copy(os.path.join(ROOT, "benchmarks", "userlib", file), folder)
    return folder


def run(command: list[str], cwd: str, cache: str | None) -> dict:
    """One command: wall, exit, the reuse lines it said, the load around it."""
    env = dict(os.environ)
    env.pop("OVERRIDES_COUNTS_CACHE", None)
    if cache is not None:
        env["OVERRIDES_COUNTS_CACHE"] = cache
    load = os.getloadavg()[0]
    started = time.monotonic()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env)
    return {"wall_s": round(time.monotonic() - started, 1), "exit": done.returncode,
            "reused": [line for line in done.stderr.splitlines() if " reused from " in line][:2],
            "load": [round(load, 1), round(os.getloadavg()[0], 1)],
            **({"error": done.stderr[-800:]} if done.returncode not in (0, 1) else {})}


def verdicts(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as src:
            data = json.load(src)
    except (OSError, ValueError):
        return {}
    counts = (data.get("settings") or {}).get("instructions") or {}
    return {"verdicts": {c["case"]: c.get("verdict") for c in data.get("comparisons", [])},
            "seeds": len(counts.get("seeds") or ()), "counting_s": counts.get("counted_first_s")}


class Bench:
    def __init__(self, args):
        self.work = args.work
        os.makedirs(self.work, exist_ok=True)
        self.trees = {"today": export("HEAD", os.path.join(self.work, "today")),
                      args.commit: export(args.commit, os.path.join(self.work, "older"))}
        self.python = sys.executable
        self.bare = shimenv.make_shim_env(self.python, os.path.join(self.work, "bare"), "bare").python
        self.log: list[dict] = []

    def note(self, entry: dict) -> None:
        entry["at"] = time.strftime("%H:%M:%S")
        self.log.append(entry)
        print(json.dumps(entry), file=sys.stderr, flush=True)
        with open(os.path.join(self.work, "log.json"), "w", encoding="utf-8") as out:
            json.dump(self.log, out, indent=1)

    def bench(self, tree: str, *args: str) -> list[str]:
        return [self.python, os.path.join(self.trees[tree], "bench.py"), *args]

    def cache(self, tree: str, name: str) -> str | None:
        """Today's cache `name` (a folder, or off); the older tree has none."""
        if tree != "today":
            return None
        return OFF if name == OFF else os.path.join(self.work, "caches", name)

    def budget(self, tree: str, i: int) -> None:
        folder = user_folder(self.work, f"user-{tree}-{i}")
        cache = self.cache(tree, f"budget-{i}")
        wrote = run(self.bench(tree, "--write-budget", "b.json", "--cases", *BUDGET_CASES, "--op", *BUDGET_OPS),
                    folder, cache)
        self.note(dict(wrote, kind="write", tree=tree, round=i))
        checked = run(self.bench(tree, "--check-budget", "b.json"), folder, cache)
        self.note(dict(checked, kind="check", tree=tree, round=i))
        if tree == "today":
            cold = run(self.bench(tree, "--check-budget", "b.json"), folder, OFF)
            self.note(dict(cold, kind="check-cold", tree=tree, round=i))

    def compare(self, tree: str, kind: str, i: int, base: str, branch: str, cache: str | None,
                cases=CASES, cwd: str | None = None, expected=None) -> dict:
        out = os.path.join(self.work, f"{kind}-{tree}-{i}.json")
        done = run(self.bench(tree, "--compare", base, branch, *(("--cases", *cases) if cases else ()),
                              "--json", out, "-q"), cwd or self.work, cache)
        entry = dict(done, **verdicts(out), kind=kind, tree=tree, round=i)
        if expected is not None:
            entry["right"] = entry.get("verdicts") == expected
        self.note(entry)
        return entry

    def shim(self, tree: str, i: int) -> None:
        self.compare(tree, "shim", i, self.python, self.bare, self.cache(tree, OFF), expected=SHIM)

    def repeat(self, tree: str, i: int) -> None:
        cache = self.cache(tree, f"repeat-{i}")
        self.compare(tree, "repeat-first", i, self.python, self.bare, cache, expected=SHIM)
        self.compare(tree, "repeat", i, self.python, self.bare, cache, expected=SHIM)

    def report(self, tree: str, i: int) -> None:
        cache = self.cache(tree, "report")
        script = os.path.join(self.trees[tree], "scripts", "report.sh")
        out = os.path.join(self.work, f"report-{tree}-{i}.zip")
        done = run(["bash", script, self.python, self.bare, "-o", out, "--force", "-q"],
                   self.work, cache)
        self.note(dict(done, kind="report", tree=tree, round=i))

    def verdict_runs(self, n: int) -> None:
        folder = user_folder(self.work, "user-verdicts")
        expected_own = {"units:pair": "regression"}
        for i in range(n):
            self.compare("today", "v-shim", i, self.python, self.bare, OFF, expected=SHIM)
            self.compare("today", "v-aa", i, self.python, self.python, OFF, expected={c: "no change" for c in CASES})
            self.compare("today", "v-own", i, "units:pair", "units_slow:pair", OFF, cases=(), cwd=folder,
                         expected=expected_own)
        budget_folder = user_folder(self.work, "user-harmless")
        cache = self.cache("today", "harmless")
        self.note(dict(run(self.bench("today", "--write-budget", "b.json", "--cases", *BUDGET_CASES, "--op",
                                      *BUDGET_OPS), budget_folder, cache), kind="h-write", tree="today"))
        for i in range(n):
            module = os.path.join(budget_folder, USER_FILES[i % 2])
            with open(module, "a", encoding="utf-8") as src:
                src.write(f"\n\ndef _harmless_{i}(x):\n    return [x, {i}]\n")
            with open(os.path.join(budget_folder, f"notes-{i}.txt"), "w", encoding="utf-8") as out:
                out.write("a file beside the modules\n")
            entry = run(self.bench("today", "--check-budget", "b.json"), budget_folder, cache)
            self.note(dict(entry, kind="h-check", tree="today", round=i, right=entry["exit"] == 0))


def table(log: list[dict]) -> str:
    lines = ["| what | tree | runs | wall s (median) | walls | right |", "|---|---|---:|---:|---|---|"]
    for kind in dict.fromkeys(e["kind"] for e in log):
        for tree in dict.fromkeys(e["tree"] for e in log):
            runs = [e for e in log if e["kind"] == kind and e["tree"] == tree]
            if not runs:
                continue
            right = [e["right"] for e in runs if "right" in e]
            lines.append(f"| {kind} | {tree} | {len(runs)} | {statistics.median(e['wall_s'] for e in runs):.0f} | "
                         f"{', '.join(str(round(e['wall_s'])) for e in runs)} | "
                         f"{f'{sum(right)}/{len(right)}' if right else ''} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default="7e31db8", help="the older tree (default 7e31db8)")
    parser.add_argument("-n", type=int, default=2, help="rounds of the timed kinds (default 2)")
    parser.add_argument("--kinds", nargs="*", choices=("budget", "shim", "repeat", "report"),
                        default=["budget", "shim", "repeat", "report"])
    parser.add_argument("--verdicts", type=int, default=0, help="today's verdict runs of each kind (default 0)")
    parser.add_argument("--work", default="/tmp/counting-once")
    args = parser.parse_args()
    bench = Bench(args)
    names = list(bench.trees)
    for i in range(args.n):
        order = names if i % 2 == 0 else names[::-1]
        for kind in args.kinds:
            for tree in order:
                getattr(bench, kind)(tree, i)
    if args.verdicts:
        bench.verdict_runs(args.verdicts)
    print(table(bench.log))


if __name__ == "__main__":
    main()
