"""Does `report.sh` name the cause first in "where the time went", the same way every run?

Issue "What a newcomer met" asks, for a contributor's edit of a pip-installed torch (a small
helper looping over `types` with `isinstance`, called from `Tensor.__torch_function__`) and for
the bare shim, that report.md names the added Python function first in "where the time went",
with the same rows on every run, that the differential picture shows it, that the listed rows
add up to within 2x of the case's change, and that no phantom row sits above the cause. This
runs `scripts/report.sh BASE BRANCH` N times for each kind of branch, at the defaults
(the four seed cases, counts, flamegraphs of what regressed), and checks each of those on every
regressed case, from the ZIP it wrote (differential.json, report.md, the diff SVG and PNG).

The kinds (made under --setup DIR; base is a virtualenv with this interpreter's torch version
installed by pip, each branch a second virtualenv at a path of another length, as users have):
- `helper`: `_check_types_extra(types)` (a loop over `types` with `isinstance`) called at the
  top of `Tensor.__torch_function__` (~+100 ns on SubTensor and SubWithTorchFunction);
- `twice`: `_check_types_twice(types)`, the same loop twice, counting (~+300 ns);
- `bare`: the bare shim (overrides/ab/shimenv.py): `Tensor.__torch_function__` wrapped in one
  Python function `_shim`, installed at start-up into a virtualenv sharing base's packages;
- `kept`: the helper edit as a newcomer makes it, in one environment: `record.sh --label base`,
  the edit, `record.sh --label branch`, the file restored; each report is `report.sh base
  branch` from the two kept copies.

Usage: python benchmarks/where_validation.py --setup /tmp/wv -n 3 [--kinds helper twice bare]
       python benchmarks/where_validation.py --summarise LOG
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import venv
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.ab import shimenv  # noqa: E402
from overrides.flame import flamepng  # noqa: E402
from overrides.review.runs import file_stem  # noqa: E402

# Where the helper goes (module level, before the class) and where it is called (the top of
# Tensor.__torch_function__, after its kwargs default), in torch/_tensor.py.
CLASS_LINE = "class Tensor(torch._C.TensorBase):\n"
CALL_AFTER = "        if kwargs is None:\n            kwargs = {}\n\n        if not all(issubclass(cls, t) for t in types):"
HELPERS = {
    "helper": ("_check_types_extra",
               "def _check_types_extra(types):\n"
               "    for t in types:\n"
               "        if not isinstance(t, type):\n"
               "            raise TypeError(f\"expected a type, got {t!r}\")\n\n\n"),
    "twice": ("_check_types_twice",
              "def _check_types_twice(types):\n"
              "    n = 0\n"
              "    for _ in range(2):\n"
              "        for t in types:\n"
              "            if isinstance(t, type) and issubclass(t, object):\n"
              "                n += 1\n"
              "    return n\n\n\n"),
}
CAUSES = {"helper": "_check_types_extra", "twice": "_check_types_twice", "bare": "_shim",
          "kept": "_check_types_extra"}
# The sum of the listed rows against the case's change: "within 2x" either way.
WITHIN = 2.0
REPORT_TIMEOUT_S = 1800


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _torch_pin() -> str:
    import torch

    return f"torch=={torch.__version__.split('+')[0]}"


def _venv_with_torch(path: str) -> str:
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        say(f"setup: virtualenv {path} with {_torch_pin()}")
        venv.create(path, with_pip=True)
        subprocess.run([python, "-m", "pip", "install", "-q", _torch_pin()], check=True)
    return python


def _tensor_py(python: str) -> str:
    return subprocess.run([python, "-c", "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), '_tensor.py'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _edit(python: str, kind: str) -> None:
    """Put the kind's helper into the branch's torch/_tensor.py (once; a second setup finds it)."""
    name, source = HELPERS["helper" if kind == "kept" else kind]
    path = _tensor_py(python)
    text = open(path, encoding="utf-8").read()
    if name in text:
        return
    if CLASS_LINE not in text or CALL_AFTER not in text:
        raise SystemExit(f"where_validation: {path} does not look like the torch/_tensor.py this edits")
    call = f"        {name}(types)\n" if kind == "helper" else f"        _n = {name}(types)\n"
    text = text.replace(CLASS_LINE, source + CLASS_LINE, 1)
    text = text.replace(CALL_AFTER, CALL_AFTER.replace("\n\n        if not all", "\n" + call + "\n        if not all"), 1)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
    shutil.rmtree(os.path.join(os.path.dirname(path), "__pycache__"), ignore_errors=True)


def setup(folder: str, kinds: list[str]) -> dict[str, tuple[str, str]]:
    """kind -> (base python, branch python)."""
    os.makedirs(folder, exist_ok=True)
    base = _venv_with_torch(os.path.join(folder, "main"))
    made = {}
    for kind in kinds:
        if kind == "kept":
            made[kind] = _recorded_labels(folder)
            continue
        if kind == "bare":
            path = os.path.join(folder, "shim-bare")
            if not os.path.exists(os.path.join(path, "bin", "python")):
                say(f"setup: bare shim environment {path}")
                shimenv.make_shim_env(base, path, "bare")
            made[kind] = (base, os.path.join(path, "bin", "python"))
        else:
            branch = _venv_with_torch(os.path.join(folder, f"fix-subclass-dispatch-{kind}-env"))
            _edit(branch, kind)
            made[kind] = (base, branch)
    return made


def _recorded_labels(folder: str) -> tuple[str, str]:
    """`base` and `branch` recorded by record.sh from one environment, edited between the two
    and restored after (once; a second setup finds the labels)."""
    runs = os.path.join(folder, "runs")
    if all(os.path.exists(os.path.join(runs, label, "record.json")) for label in ("base", "branch")):
        return "base", "branch"
    python = _venv_with_torch(os.path.join(folder, "contributor-env"))
    path = _tensor_py(python)
    pristine = open(path, encoding="utf-8").read()
    record = [os.path.join(ROOT, "scripts", "record.sh"), "--python", python, "--runs-dir", runs, "--force"]
    say("setup: record.sh --label base")
    subprocess.run(record + ["--label", "base"], check=True, stdout=subprocess.DEVNULL)
    try:
        _edit(python, "kept")
        say("setup: record.sh --label branch (edited)")
        subprocess.run(record + ["--label", "branch"], check=True, stdout=subprocess.DEVNULL)
    finally:
        with open(path, "w", encoding="utf-8") as out:
            out.write(pristine)
        shutil.rmtree(os.path.join(os.path.dirname(path), "__pycache__"), ignore_errors=True)
    return "base", "branch"


def _listed_rows(entry: dict) -> list[dict]:
    wall = entry.get("wall_clock") or {}
    return wall.get("functions") or [] if wall.get("listed") else []


def check_report(zip_path: str, kind: str) -> list[dict]:
    """One record per case the report lists rows for: the first row, whether it is the cause,
    the rows' sum against the change, phantoms above the cause, and the picture."""
    cause = CAUSES[kind]
    found = []
    with zipfile.ZipFile(zip_path) as z:
        diff = json.loads(z.read("differential.json"))
        names = set(z.namelist())
        report_md = z.read("report.md").decode()
        for entry in diff["cases"]:
            rows = _listed_rows(entry)
            wall = entry.get("wall_clock") or {}
            if not rows:
                if entry.get("verdict") in ("regression", "improvement"):
                    found.append({"case": entry["case"], "verdict": entry["verdict"], "rows": [],
                                  "first": None, "first_is_cause": False})
                continue
            total = wall["total_delta"]
            # the rows as the report reads them against the change: where the counts sized it,
            # the row they price at their price (report.md's "listed"); else as sampled
            sized_by_counts = wall.get("total_from") == "instructions"
            listed = sum(row.get("counted_ns", row["delta_self"]) if sized_by_counts else row["delta_self"]
                         for row in rows)
            # every row the counts price at that price (the interpreter's instructions of the one
            # Python function whose work changed, at the case's ns per instruction)
            by_counts = sum(row.get("counted_ns", row["delta_self"]) for row in rows)
            first = rows[0]["function"]
            above = [row["function"] for row in rows[:next((i for i, r in enumerate(rows) if cause in r["function"]), len(rows))]]
            stem = file_stem(entry["case"], entry["op"])
            svg_name = f"diff-{stem}.svg"
            svg = z.read(svg_name).decode() if svg_name in names else ""
            png_name = f"diff-{stem}.png"
            png_ok = False
            if png_name in names:
                tmp = os.path.join(os.path.dirname(zip_path), f".check-{png_name}")
                with open(tmp, "wb") as out:
                    out.write(z.read(png_name))
                png_ok = not flamepng.png_is_flat(tmp)
                os.unlink(tmp)
            found.append({
                "case": entry["case"], "verdict": entry["verdict"], "total_ns": total,
                "listed_ns": round(listed, 1), "ratio": round(listed / total, 2) if total else None,
                "total_from": wall.get("total_from", "clock"),
                "listed_counted_ns": round(by_counts, 1),
                "counted_ratio": round(by_counts / total, 2) if total else None,
                "rows": [row["function"] for row in rows],
                "first": first, "first_is_cause": cause in first, "phantoms_above": above,
                "cause_labelled_in_svg": bool(re.search(rf">[^<]*{re.escape(cause)}", svg)),
                "png": png_ok, "named_in_md": cause in report_md.split("## Where the time went")[-1]
                if "## Where the time went" in report_md else False})
    return found


def run(kinds: dict[str, tuple[str, str]], n: int, log: str, workdir: str) -> None:
    for iteration in range(1, n + 1):
        for kind, (base, branch) in kinds.items():
            out = os.path.join(workdir, f"report-{kind}-{iteration}.zip")
            say(f"{kind} {iteration}/{n}: report.sh")
            started = time.monotonic()
            with open(os.path.join(workdir, f"report-{kind}-{iteration}.log"), "w") as err:
                runs = ["--runs-dir", os.path.join(os.path.dirname(workdir), "runs")] if kind == "kept" else []
                done = subprocess.run([os.path.join(ROOT, "scripts", "report.sh"), base, branch, "-o", out,
                                       "--force", *runs], cwd=workdir, stdout=subprocess.PIPE, stderr=err,
                                      text=True, timeout=REPORT_TIMEOUT_S)
            wall = time.monotonic() - started
            with open(os.path.join(workdir, f"report-{kind}-{iteration}.log")) as log_text:
                thirds = log_text.read().count("one more a side")
            record = {"kind": kind, "iteration": iteration, "exit": done.returncode,
                      "wall_s": round(wall, 1), "third_recordings": thirds,
                      "cases": check_report(out, kind) if os.path.exists(out) else []}
            with open(log, "a") as dst:
                dst.write(json.dumps(record) + "\n")
            for case in record["cases"]:
                say(f"  {case['case']}: first {case['first']!r}, listed {case.get('listed_ns')} of "
                    f"{case.get('total_ns')} ns ({case.get('ratio')}x); with the counts' prices "
                    f"{case.get('listed_counted_ns')} ({case.get('counted_ratio')}x)")


def summarise(log: str) -> None:
    records = [json.loads(line) for line in open(log) if line.strip()]
    print(f"{'kind':7} {'case':22} {'runs':>4} {'cause first':>11} {'no phantom':>10} "
          f"{'within 2x':>9} {'ratio (median, range)':>22} {'counts-priced 2x':>16} "
          f"{'in SVG+PNG':>10} {'same rows':>9}  wall s")
    by = {}
    for rec in records:
        for case in rec["cases"]:
            by.setdefault((rec["kind"], case["case"]), []).append((rec, case))
    for (kind, name), items in sorted(by.items()):
        cases = [c for _, c in items]
        ratios = [c["ratio"] for c in cases if c.get("ratio") is not None]
        within = sum(1 for r in ratios if 1 / WITHIN <= r <= WITHIN)
        priced = [c.get("counted_ratio", c.get("ratio")) for c in cases]
        priced_within = sum(1 for r in priced if r is not None and 1 / WITHIN <= r <= WITHIN)
        same = len({tuple(c["rows"]) for c in cases}) == 1
        walls = sorted(rec["wall_s"] for rec, _ in items)
        print(f"{kind:7} {name:22} {len(cases):>4} {sum(c['first_is_cause'] for c in cases):>6}/{len(cases):<4} "
              f"{sum(not c.get('phantoms_above') for c in cases):>5}/{len(cases):<4} "
              f"{within:>4}/{len(cases):<4} "
              f"{(f'{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})' if ratios else '-'):>22} "
              f"{priced_within:>11}/{len(cases):<4} "
              f"{sum(bool(c.get('cause_labelled_in_svg') and c.get('png')) for c in cases):>5}/{len(cases):<4} "
              f"{'yes' if same else 'no':>9}  {statistics.median(walls):.0f}")
    for rec in records:
        for case in rec["cases"]:
            print(f"  {rec['kind']} #{rec['iteration']} {case['case']}: {case.get('listed_ns')} of "
                  f"{case.get('total_ns')} ns (from the {case.get('total_from', 'clock')}); with the "
                  f"counts' prices {case.get('listed_counted_ns', case.get('listed_ns'))}; rows: "
                  f"{', '.join(case['rows'])}")
    thirds = [rec for rec in records if rec.get("third_recordings")]
    print(f"reports that recorded a third time a side (two recordings disagreed on the cause): "
          f"{len(thirds)} of {len(records)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3, help="reports per kind")
    parser.add_argument("--setup", metavar="DIR", help="make the environments here (reused when present)")
    parser.add_argument("--kinds", nargs="+", default=list(CAUSES), choices=list(CAUSES))
    parser.add_argument("--log", default=None, help="JSON-lines log (default: where-TIME.jsonl in DIR)")
    parser.add_argument("--summarise", metavar="LOG", help="print the tables of a log and exit")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    if not args.setup:
        parser.error("--setup DIR is needed (or --summarise LOG)")
    if args.n < 1:
        parser.error("-n must be at least 1")
    folder = os.path.abspath(args.setup)
    kinds = setup(folder, args.kinds)
    log = args.log or os.path.join(folder, f"where-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
    workdir = os.path.join(folder, "reports")
    os.makedirs(workdir, exist_ok=True)
    say(f"log: {log}")
    run(kinds, args.n, log, workdir)
    summarise(log)


if __name__ == "__main__":
    main()
