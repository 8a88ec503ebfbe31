"""What costs cycles without costing instructions, per call and build: atomics, cache misses,
mispredicted branches (Callgrind's simulations), beside instructions per call.

    python benchmarks/cycle_events.py ENV1 ENV2 ... [--cases ...] [--seed 11] [--sim bus cache branch]

Why: an instruction count treats a `lock`-prefixed instruction (an atomic reference count, a
compare-and-swap) like any other, while on a real core it costs tens of cycles. Callgrind counts
them as "global bus events" (`--collect-bus=yes`, event Ge). A clock change far larger than
the instruction change (torch 2.12.1 -> 2.14.1: SubTensor -544 ns with -162 instructions) may
be atomics that went away, memory that stopped missing the caches (`--cache-sim=yes`: first-
level and last-level misses, reads and writes) or branches that stopped mispredicting
(`--branch-sim=yes`: conditional and indirect mispredictions). This measures them with the
project's own counting process (one valgrind per build, instrumentation switched on after the
imports), with those options added. Each figure is the minimum over repeats 2..n, as the counts.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from overrides.builds.interpreters import resolve_interpreter  # noqa: E402
from overrides.counts import callgrind, valgrind  # noqa: E402

SEED_CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
_events_by_dump: dict[str, dict[str, int]] = {}
OPTIONS = {"bus": ["--collect-bus=yes"], "cache": ["--cache-sim=yes"], "branch": ["--branch-sim=yes"]}
SHOWN = ("Ge", "D1mr", "D1mw", "DLmr", "DLmw", "ILmr", "Bcm", "Bim")


def _with(options, launch):
    def patched(*args, **kwargs):
        real_popen = valgrind.subprocess.Popen

        def popen(command, *args, **kwargs):
            if "--tool=callgrind" in command:
                at = command.index("--tool=callgrind")
                command = command[:at + 1] + options + command[at + 1:]
            return real_popen(command, *args, **kwargs)

        valgrind.subprocess.Popen = popen
        try:
            return launch(*args, **kwargs)
        finally:
            valgrind.subprocess.Popen = real_popen
    return patched


def _reading_events(read):
    def patched(path, stacks=None):
        with open(path, encoding="utf-8", errors="replace") as src:
            for line in src:
                if line.startswith("events:"):
                    names = line.split()[1:]
                elif line.startswith(("summary:", "totals:")):
                    values = line.split(":", 1)[1].split()
                    values += ["0"] * (len(names) - len(values))  # trailing zeros are left out
                    _events_by_dump[path] = dict(zip(names, map(int, values)))
        return read(path, stacks)
    return patched


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("envs", nargs="+")
    parser.add_argument("--cases", nargs="+", default=list(SEED_CASES))
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--sim", nargs="+", choices=sorted(OPTIONS), default=["bus"])
    args = parser.parse_args()
    valgrind.launch = _with([o for sim in args.sim for o in OPTIONS[sim]], valgrind.launch)
    callgrind.read_dump = _reading_events(callgrind.read_dump)  # the name count_once calls
    targets = [(case, "torch.add") for case in args.cases]
    rows = []
    for env in args.envs:
        python = resolve_interpreter(env)
        _events_by_dump.clear()
        run = callgrind.count(python, targets, [args.seed], say=lambda m: print(m, file=sys.stderr))[0]
        dumps = sorted(_events_by_dump, key=lambda p: int(p.rsplit(".", 1)[1]))
        # Dump order per repeat: every target, then the empty loop (callgrind._worker_main).
        per_repeat = len(targets) + 1
        calls = run.settings["calls_per_repeat"]
        shown = [name for name in SHOWN if name in _events_by_dump[dumps[0]]]
        for index, case in enumerate(run.cases):
            figures = {}
            for name in shown:
                per_call = []
                for repeat in range(1, run.settings["repeats"]):
                    at = repeat * per_repeat
                    per_call.append((_events_by_dump[dumps[at + index]][name]
                                     - _events_by_dump[dumps[at + len(targets)]][name]) / calls)
                figures[name] = min(per_call)
            rows.append((env, case.case, case.per_call, figures))
    names = list(rows[0][3]) if rows else []
    print(f"{'build':32s} {'case':22s} {'instr/call':>11s} " + " ".join(f"{n:>8s}" for n in names))
    for env, case, per_call, figures in rows:
        print(f"{env:32s} {case:22s} {per_call:11,.1f} " + " ".join(f"{figures[n]:8.2f}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
