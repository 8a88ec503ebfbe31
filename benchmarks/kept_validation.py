"""The one-checkout workflow, validated: record base, edit the build in place, record branch,
`report.sh base branch`, N times, on real torch builds.

The kinds (made under --setup DIR from the torch wheel pip would install for this interpreter's
torch version):
- `develop`: the wheel unpacked into DIR/unpacked and imported through PYTHONPATH by a
  virtualenv that has no torch of its own (a `python setup.py develop` build, simulated);
- `venv`: a virtualenv with torch pip-installed, edited in its site-packages.
Each iteration of a kind records `base` from the pristine build, records `unchanged` with
nothing changed (the A/A, in the first --aa iterations: `report.sh base unchanged` must flag
nothing; a label of another length than `base`, so the kept copies' paths differ in length as
`base` and `branch` do), then adds one call of an empty
Python function at the top of `Tensor.__torch_function__` in torch/_tensor.py (about +1% on
SubTensor and SubWithTorchFunction, nothing on Tensor or WithTorchFunction, whose
`__torch_function__` is their own), records `branch`, runs `report.sh base branch` (which must
flag SubTensor, never Tensor or WithTorchFunction, and exit 1), and restores the file.

Everything runs at the scripts' defaults but without flamegraphs (`--no-flamegraphs`: they do
not change a verdict, and they cost a minute a recording). One JSON line per report goes to the
log as it finishes; `--summarise LOG` prints the tables.

Usage: python benchmarks/kept_validation.py --setup /tmp/kv -n 10 --aa 5 [--kinds develop venv]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import venv
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ("regression", "improvement", "disagree", "clock only")
EXTRA = "def _validation_extra_call():\n    return None\n\n\n"
CALL_BEFORE = "        if kwargs is None:\n            kwargs = {}\n\n        if not all(issubclass(cls, t) for t in types):"
PACKAGES = ("numpy", "typing_extensions", "sympy", "networkx", "jinja2", "fsspec", "filelock")
# The A/A's second label. Not `same`: equal in length to `base`, it hid that the kept copies'
# path lengths reached the counts (fixed in overrides/builds/placement.py).
AA_LABEL = "unchanged"


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _torch_version() -> str:
    import torch

    return torch.__version__.split("+")[0]


def setup(folder: str) -> dict[str, dict]:
    """Both kinds' builds under `folder` (made once, reused when present)."""
    os.makedirs(folder, exist_ok=True)
    wheels = os.path.join(folder, "wheels")
    if not glob.glob(os.path.join(wheels, "torch-*.whl")):
        say(f"downloading the torch {_torch_version()} wheel")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels,
                        f"torch=={_torch_version()}"], check=True)
    wheel = glob.glob(os.path.join(wheels, "torch-*.whl"))[0]
    kinds = {}
    notorch, unpacked = os.path.join(folder, "notorch"), os.path.join(folder, "unpacked")
    if not os.path.exists(os.path.join(notorch, "bin", "python")):
        say(f"making {notorch}: a virtualenv without torch")
        venv.EnvBuilder(with_pip=True, symlinks=True).create(notorch)
        subprocess.run([os.path.join(notorch, "bin", "python"), "-m", "pip", "install", "-q", *PACKAGES],
                       check=True)
    if not os.path.isdir(os.path.join(unpacked, "torch")):
        say(f"unpacking {wheel} into {unpacked}")
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(unpacked)
    kinds["develop"] = {"python": os.path.join(notorch, "bin", "python"), "pythonpath": unpacked,
                        "tensor_py": os.path.join(unpacked, "torch", "_tensor.py")}
    env = os.path.join(folder, "venv")
    if not os.path.exists(os.path.join(env, "bin", "python")):
        say(f"making {env} with torch {_torch_version()}")
        venv.EnvBuilder(with_pip=True, symlinks=True).create(env)
        subprocess.run([os.path.join(env, "bin", "python"), "-m", "pip", "install", "-q", wheel,
                        "numpy"], check=True)
    site = glob.glob(os.path.join(env, "lib", "python3*", "site-packages"))[0]
    kinds["venv"] = {"python": os.path.join(env, "bin", "python"), "pythonpath": None,
                     "tensor_py": os.path.join(site, "torch", "_tensor.py")}
    for kind in kinds.values():  # a pristine copy to restore from
        pristine = kind["tensor_py"] + ".pristine"
        if not os.path.exists(pristine):
            shutil.copy2(kind["tensor_py"], pristine)
        kind["pristine"] = pristine
    return kinds


def edit(tensor_py: str, pristine: str) -> None:
    """The branch's change: one call of an empty Python function in Tensor.__torch_function__."""
    with open(pristine, encoding="utf-8") as src:
        text = src.read()
    assert text.count(CALL_BEFORE) == 1, "torch/_tensor.py changed shape; update CALL_BEFORE"
    text = text.replace(CALL_BEFORE, "        _validation_extra_call()\n" + CALL_BEFORE)
    text = text.replace("class Tensor(torch._C.TensorBase):", EXTRA + "class Tensor(torch._C.TensorBase):", 1)
    with open(tensor_py, "w", encoding="utf-8") as out:
        out.write(text)


def restore(tensor_py: str, pristine: str) -> None:
    shutil.copyfile(pristine, tensor_py)


def _env(kind: dict) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if kind["pythonpath"]:
        env["PYTHONPATH"] = kind["pythonpath"]
    return env


def record(kind: dict, label: str, runs: str) -> dict:
    started = time.monotonic()
    done = subprocess.run([os.path.join(ROOT, "scripts", "record.sh"), "--label", label, "--python",
                           kind["python"], "--runs-dir", runs, "--no-flamegraphs", "--force"],
                          env=_env(kind), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"record.sh --label {label} failed: {done.stderr.strip().splitlines()[-1:]}")
    with open(os.path.join(runs, label, "record.json"), encoding="utf-8") as src:
        kept = json.load(src).get("kept", {})
    return {"seconds": round(time.monotonic() - started, 1), "kept": kept}


def report(kind: dict, base: str, branch: str, runs: str, workdir: str) -> dict:
    output = os.path.join(workdir, f"{base}-{branch}.zip")
    started = time.monotonic()
    done = subprocess.run([os.path.join(ROOT, "scripts", "report.sh"), base, branch, "--runs-dir", runs,
                           "--no-flamegraphs", "-q", "--force", "-o", output],
                          env=_env(kind), capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode not in (0, 1):
        raise RuntimeError(f"report.sh {base} {branch} failed: {done.stderr.strip().splitlines()[-1:]}")
    with zipfile.ZipFile(output) as zf:
        comparisons = json.loads(zf.read("comparison.json"))
        base_json = json.loads(zf.read("base.json"))
    settings = base_json.get("settings", {})
    return {"exit": done.returncode, "seconds": round(wall, 1), "mode": settings.get("mode"),
            "pairs": settings.get("pairs"), "stopped": settings.get("stopped"),
            "placement": (settings.get("placement") or {}).get("matched"),
            "cases": {c["case"]: {"verdict": c["verdict"], "clock_verdict": c.get("clock_verdict", c.get("wall_verdict")),
                                  "delta_ns": c.get("delta_ns"),
                                  "delta_instructions": c.get("delta_instructions")}
                      for c in comparisons}}


def measure(kinds: dict[str, dict], chosen: list[str], n: int, aa: int, log: str) -> None:
    runs = tempfile.mkdtemp(prefix="kept-validation-runs-")
    workdir = tempfile.mkdtemp(prefix="kept-validation-zips-")
    try:
        for i in range(n):
            for name in chosen:
                kind = kinds[name]
                restore(kind["tensor_py"], kind["pristine"])
                say(f"{name} {i + 1}/{n}: record base")
                recorded = {"base": record(kind, "base", runs)}
                if i < aa:
                    say(f"{name} {i + 1}/{n}: record {AA_LABEL} (nothing changed)")
                    recorded[AA_LABEL] = record(kind, AA_LABEL, runs)
                edit(kind["tensor_py"], kind["pristine"])
                try:
                    say(f"{name} {i + 1}/{n}: record branch (one extra Python call)")
                    recorded["branch"] = record(kind, "branch", runs)
                finally:
                    restore(kind["tensor_py"], kind["pristine"])
                for test, branch in (("aa", AA_LABEL), ("change", "branch")) if i < aa else (("change", "branch"),):
                    say(f"{name} {i + 1}/{n}: report.sh base {branch}")
                    outcome = report(kind, "base", branch, runs, workdir)
                    entry = {"kind": name, "test": test, "run": i, "records": recorded, **outcome}
                    with open(log, "a", encoding="utf-8") as out:
                        out.write(json.dumps(entry) + "\n")
                    verdicts = ", ".join(f"{c} {v['verdict']}" for c, v in outcome["cases"].items())
                    say(f"  exit {outcome['exit']}, {outcome['seconds']:.0f} s: {verdicts}")
    finally:
        shutil.rmtree(runs, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)


def summarise(log: str) -> None:
    with open(log, encoding="utf-8") as src:
        entries = [json.loads(line) for line in src if line.strip()]
    groups = collections.defaultdict(list)
    for entry in entries:
        groups[(entry["kind"], entry["test"])].append(entry)
    for (kind, test), group in sorted(groups.items()):
        cases = list(group[0]["cases"])
        print(f"\n{kind}, {'A/A (nothing changed)' if test == 'aa' else 'one extra Python call'}: "
              f"{len(group)} reports, exit 1 in {sum(e['exit'] == 1 for e in group)}, paired in "
              f"{sum(e['mode'] == 'paired A/B' for e in group)}, median "
              f"{statistics.median(e['seconds'] for e in group):.0f} s a report")
        print(f"  {'case':22} {'flagged':>8} {'regression':>10} {'no change':>9} {'inconcl.':>8} "
              f"{'median ns':>9} {'median instr':>12}")
        for case in cases:
            rows = [e["cases"][case] for e in group]
            verdicts = collections.Counter(r["verdict"] for r in rows)
            flagged = sum(verdicts[f] for f in FLAGS)
            instr = [r["delta_instructions"] for r in rows if r["delta_instructions"] is not None]
            print(f"  {case:22} {flagged:>5}/{len(rows):<2} {verdicts['regression']:>10} "
                  f"{verdicts['no change']:>9} {verdicts['inconclusive']:>8} "
                  f"{statistics.median(r['delta_ns'] for r in rows):>+9.0f} "
                  f"{(statistics.median(instr) if instr else float('nan')):>+12.0f}")
    kept = [r["kept"] for e in entries for r in e["records"].values() if r["kept"].get("bytes")]
    if kept:
        print(f"\nkept copies: {statistics.median(k['bytes'] for k in kept) / 2**20:,.0f} MB, "
              f"copied in {statistics.median(k['seconds'] for k in kept):.1f} s (median of {len(kept)}); "
              f"record.sh --no-flamegraphs took a median "
              f"{statistics.median(r['seconds'] for e in entries for r in e['records'].values()):.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="iterations per kind")
    parser.add_argument("--setup", metavar="DIR", help="build the kinds here (reused when present)")
    parser.add_argument("--aa", type=int, default=None,
                        help="A/A reports in the first AA iterations of each kind (default: all)")
    parser.add_argument("--kinds", nargs="+", default=["develop", "venv"], choices=["develop", "venv"])
    parser.add_argument("--log", default=None, help="JSON-lines log (default: kept-TIME.jsonl)")
    parser.add_argument("--summarise", metavar="LOG", help="print the tables of a log and exit")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    if not args.setup:
        parser.error("--setup DIR is required to measure")
    log = args.log or f"kept-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    kinds = setup(args.setup)
    try:
        measure(kinds, args.kinds, args.n, args.n if args.aa is None else args.aa, log)
    except KeyboardInterrupt:
        say("interrupted; the log keeps every finished report")
    summarise(log)


if __name__ == "__main__":
    main()
