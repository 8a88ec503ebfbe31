"""Do files that come and go beside the code move the counts? Python's own finder (which lists
each folder on the path) against counts/statfinder.py (which stats the names imported), in one run.

A budget is written in one checkout and checked in another (a CI clone), and the user's folder
gains files between two runs (`--json` outputs, budgets, flamegraphs). For each finder this
counts seed 1 of `Tensor`, `SubTensor` and a user case (`probe_units:pair`, written into a fresh
folder) three times: as it is, with files added to the user's folder, and with one file added
to this checkout's root (removed afterwards); and prints each count's change from the first.
"exact" means every change is +0.

    python benchmarks/listing_probe.py [--files 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides import entry  # noqa: E402
from overrides.counts import callgrind  # noqa: E402

TARGETS = (("Tensor", "torch.add"), ("SubTensor", "torch.add"), ("probe_units:pair", "torch.add"))
from budget_validation import USER_MODULE as UNITS  # noqa: E402  (beside this script)
# The method beaten: the same start (overrides/entry.py, loaded by its path), with the folders
# put on the path and left to Python's finder, which lists each one the first time it is searched.
LISTING_ENTRY = """import importlib.util, os, sys
del sys.path[0]
spec = importlib.util.spec_from_file_location("overrides_entry", {entry!r})
entry = importlib.util.module_from_spec(spec); spec.loader.exec_module(entry)
load = entry._load
def _load(tool_dir, *parts):
    module = load(tool_dir, *parts)
    if parts[-1] == "statfinder.py":
        module.install = lambda *a, **k: None
    return module
entry._load = _load
entry.main(sys.argv)
"""


def _count() -> dict:
    run = callgrind.count_once(sys.executable, TARGETS, 1)
    return {c.case: c.per_call for c in run.cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=5, help="files added to the user's folder")
    args = parser.parse_args()
    stat_command = entry.command
    rows = []
    with tempfile.TemporaryDirectory(prefix="listing-probe-") as folder, \
            tempfile.TemporaryDirectory(prefix="listing-probe-entry-") as elsewhere:
        listing_script = os.path.join(elsewhere, "listing_entry.py")
        with open(listing_script, "w") as out:
            out.write(LISTING_ENTRY.format(entry=os.path.join(ROOT, entry.SCRIPT)))

        def listing_command(python, role, *args, **kwargs):
            command = stat_command(python, role, *args, **kwargs)
            return [listing_script if part.endswith(entry.SCRIPT) else part for part in command]

        with open(os.path.join(folder, "probe_units.py"), "w") as out:
            out.write(UNITS)
        os.chdir(folder)
        for name, command in (("Python's finder (lists)", listing_command), ("statfinder (stats)", stat_command)):
            entry.command = command
            print(f"{name}: counting as it is", file=sys.stderr, flush=True)
            first = _count()
            added = [os.path.join(folder, f"output-{i}-of-a-run.json") for i in range(args.files)]
            for path in added:
                with open(path, "w") as out:
                    out.write("{}")
            print(f"{name}: counting with {args.files} files added to the user's folder", file=sys.stderr, flush=True)
            user = _count()
            for path in added:
                os.remove(path)
            untracked = os.path.join(ROOT, "listing-probe-untracked.svg")
            with open(untracked, "w") as out:
                out.write("<svg/>")
            try:
                print(f"{name}: counting with a file added to the checkout", file=sys.stderr, flush=True)
                tool = _count()
            finally:
                os.remove(untracked)
            rows.append((name, first, user, tool))
    print(f"{'finder':<26}{'case':<18}{'as it is':>10}{'user folder':>13}{'checkout':>10}")
    for name, first, user, tool in rows:
        for case, _ in TARGETS:
            print(f"{name:<26}{case:<18}{first[case]:>10,.1f}{user[case] - first[case]:>+13,.1f}"
                  f"{tool[case] - first[case]:>+10,.1f}")
    for name, first, user, tool in rows:
        exact = all(user[c] == first[c] and tool[c] == first[c] for c, _ in TARGETS)
        print(f"{name}: {'exact' if exact else 'moved'}")


if __name__ == "__main__":
    main()
