"""Does an overhead budget hold where it should, and fail where it should? (`--check-budget`)

Writes a budget of the four seed cases and a case of the user's own (`budget_units:pair`, a
module written into the work folder; `--no-user-case` leaves it out) with this interpreter, then
checks it, interleaved, N times each, a file added to the work folder every round as a CI
checkout's would differ from the author's: in this interpreter, in a second virtualenv of the same wheel at another path, and
in the bare shim environment (one Python call added to every subclass's __torch_function__);
once the reverse (a budget of the shim checked here); and times a check against
`bench.py --instructions` of the same cases and seeds, side by side.

`--library` instead asks whether a row moves only when its case's code moves: a budget of
benchmarks/userlib's units.py, units_fast.py and scaled.py (`pair`, two ops), written in a folder
of its own, then checked N times, each in a fresh copy with one harmless change (HARMLESS, in
turn: an unused function added to one module, a file added, the folder at a longer path, a new
virtualenv of the same packages): exit 0 expected every time; and N times with units_tiny.py
copied over units.py (a helper call added in `__torch_function__`): exit 1 naming `_note`, the
other modules' rows within.

    python benchmarks/budget_validation.py [-n 10] [--work DIR]
    python benchmarks/budget_validation.py --library [-n 10] [--first-round K] [--work DIR] [--rounds harmless edit]
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


RUN_TIMEOUT_S = 5400  # a write of three modules (two counts of each) took over 30 min beside 15 busy processes


def run(python: str, *args: str, cwd: str) -> tuple[int, float, str]:
    started = time.monotonic()
    done = subprocess.run([python, BENCH, *args, "-q"], cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return done.returncode, time.monotonic() - started, done.stdout + done.stderr


def verdicts(output: str) -> dict[str, str]:
    out = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 7 and parts[1] == "torch.add" and parts[0] != "case":
            out[parts[0]] = " ".join(parts[6:])
    return out


USERLIB = os.path.join(ROOT, "benchmarks", "userlib")
LIBRARY = ("units.py", "units_fast.py", "scaled.py")
LIBRARY_CASES = ("units:pair", "units_fast:pair", "scaled:pair")
LIBRARY_OPS = ("torch.add", "x.t()")
UNUSED = "\n\ndef _added_in_round_{i}(x, y=None):\n    return [x, y, {{'round': {i}}}]\n"
HARMLESS = ("unused function in units.py", "a file added", "unused function in units_fast.py",
            "folder at a longer path", "unused function in scaled.py", "a new virtualenv of the same packages")


def _library(folder: str, i: int, change: str) -> str:
    """A fresh copy of the library (and its budget) in `folder`, with `change` made; round `i`."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name in LIBRARY:
        shutil.copy(os.path.join(USERLIB, name), folder)
    if change.startswith("unused function in "):
        with open(os.path.join(folder, change.rsplit(" ", 1)[1]), "a", encoding="utf-8") as out:
            out.write(UNUSED.format(i=i))
    elif change == "a file added":
        with open(os.path.join(folder, f"results-of-round-{i}.json"), "w", encoding="utf-8") as out:
            out.write("{}\n")
    elif change == "edit":
        shutil.copy(os.path.join(USERLIB, "units_tiny.py"), os.path.join(folder, "units.py"))
    return folder


def _same_packages_venv(work: str) -> str:
    """A virtualenv made as .venv was (from the base interpreter, pip installing the same
    versions, from the local wheels), not --system-site-packages: a user's second environment."""
    import sysconfig

    folder = os.path.join(work, "a-second-virtualenv-of-the-same-packages")
    python = os.path.join(folder, "bin", "python")
    if not os.path.exists(python):
        base = os.path.join(sysconfig.get_config_var("BINDIR"), "python3")
        subprocess.run([base, "-m", "venv", folder], check=True)
        frozen = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True,
                                check=True).stdout
        with open(os.path.join(work, "requirements-frozen.txt"), "w", encoding="utf-8") as out:
            out.write(frozen)
        subprocess.run([python, "-m", "pip", "install", "-q", "-r", os.path.join(work, "requirements-frozen.txt")],
                       check=True)
    return python


def rows_of(output: str) -> dict[str, str]:
    """`case [op]` -> 'delta margin verdict' from a check's table."""
    out = {}
    for line in output.splitlines():
        for op in LIBRARY_OPS:
            if f"  {op}  " in line and not line.startswith("case"):
                parts = line.split()
                at = parts.index(op)
                out[f"{parts[0]} [{op}]"] = " ".join(parts[at + 3:])
    return out


def library(args) -> None:
    """--library: the harmless changes and the edit, each in a fresh copy (see the docstring)."""
    os.makedirs(args.work, exist_ok=True)
    written = _library(os.path.join(args.work, "lib"), 0, "")
    code, wall, out = run(sys.executable, "--write-budget", "budget.json", "--cases", *LIBRARY_CASES,
                          "--op", *LIBRARY_OPS, "--seeds", *map(str, args.seeds), cwd=written)
    assert code == 0, out
    print(f"written in {wall:.0f} s\n{out}", file=sys.stderr, flush=True)
    log = []
    for i in range(args.first_round - 1, args.n):
        for kind in args.rounds:
            change = HARMLESS[i % len(HARMLESS)] if kind == "harmless" else "edit"
            python = _same_packages_venv(args.work) if change.startswith("a new virtualenv") else sys.executable
            where = (os.path.join(args.work, "a-folder-at-a-much-longer-path-than-the-one-the-budget-was-written-in",
                                  "lib") if change == "folder at a longer path" else os.path.join(args.work, f"check-{kind}"))
            folder = _library(where, i + 1, change)
            shutil.copy(os.path.join(written, "budget.json"), folder)
            started = time.strftime("%H:%M:%S")
            code, wall, out = run(python, "--check-budget", "budget.json", cwd=folder)
            entry = {"round": i + 1, "kind": kind, "change": change, "exit": code, "wall_s": round(wall),
                     "started": started, "rows": rows_of(out), "names_note": "_note (units.py)" in out,
                     "load": os.getloadavg()[0]}
            if kind == "harmless":  # --instructions of the same cases and seeds, right after, same folder
                _, entry["instructions_wall_s"], _ = run(python, "--instructions", "--cases", *LIBRARY_CASES,
                                                         "--op", *LIBRARY_OPS, "--seeds", *map(str, args.seeds),
                                                         cwd=folder)
                entry["instructions_wall_s"] = round(entry["instructions_wall_s"])
            log.append(entry)
            print(json.dumps(entry), file=sys.stderr, flush=True)
            with open(os.path.join(args.work, "library-log.json"), "w", encoding="utf-8") as out_file:
                json.dump(log, out_file, indent=1)
    for kind in args.rounds:
        runs = [e for e in log if e["kind"] == kind]
        exits = [e["exit"] for e in runs]
        print(f"{kind}: exit 0 in {exits.count(0)}/{len(runs)}, exit 1 in {exits.count(1)}/{len(runs)}; "
              f"_note named in {sum(e['names_note'] for e in runs)}; wall median "
              f"{statistics.median(e['wall_s'] for e in runs):.0f} s")
    paired = [(e["wall_s"], e["instructions_wall_s"]) for e in log if "instructions_wall_s" in e]
    if paired:
        check_med, count_med = (statistics.median(p[0] for p in paired), statistics.median(p[1] for p in paired))
        print(f"check {check_med:.0f} s against --instructions {count_med:.0f} s of the same cases and seeds "
              f"(medians of {len(paired)}, each right after its check): {check_med / count_med:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10)
    parser.add_argument("--work", default="/tmp/budget-validation")
    parser.add_argument("--no-user-case", action="store_true", help="the four seed cases only")
    parser.add_argument("--library", action="store_true", help="benchmarks/userlib: harmless changes and an edit")
    parser.add_argument("--rounds", nargs="+", choices=("harmless", "edit"), default=["harmless", "edit"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="--library: the budget's seeds")
    parser.add_argument("--first-round", type=int, default=1,
                        help="--library: start at this round (its harmless change is HARMLESS[(K-1) %% 6])")
    args = parser.parse_args()
    if args.library:
        return library(args)
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
