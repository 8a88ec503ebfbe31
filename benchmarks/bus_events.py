"""Atomic (bus-locking) instructions per call beside instructions per call, per build.

    python benchmarks/bus_events.py ENV1 ENV2 ... [--cases ...] [--seed 11]

Why: an instruction count treats a `lock`-prefixed instruction (an atomic reference count, a
compare-and-swap) like any other, while on a real core it costs tens of cycles. Callgrind counts
them as "global bus events" (`--collect-bus=yes`, event Ge). A clock change far larger than
the instruction change (torch 2.12.1 -> 2.14.1: SubTensor -544 ns with -162 instructions) may
be atomics that went away; this measures it with the project's own counting process (one
valgrind per build, instrumentation switched on after the imports), with that one option added.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from overrides import callgrind  # noqa: E402
from overrides.ab import resolve_interpreter  # noqa: E402

SEED_CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
_bus_by_dump: dict[str, int] = {}


def _with_bus(launch):
    def patched(*args, **kwargs):
        real_popen = callgrind.subprocess.Popen

        def popen(command, *args, **kwargs):
            if "--tool=callgrind" in command:
                at = command.index("--tool=callgrind")
                command = command[:at + 1] + ["--collect-bus=yes"] + command[at + 1:]
            return real_popen(command, *args, **kwargs)

        callgrind.subprocess.Popen = popen
        try:
            return launch(*args, **kwargs)
        finally:
            callgrind.subprocess.Popen = real_popen
    return patched


def _reading_bus(read):
    def patched(path, stacks=None):
        with open(path, encoding="utf-8", errors="replace") as src:
            for line in src:
                if line.startswith("events:"):
                    names = line.split()[1:]
                elif line.startswith(("summary:", "totals:")):
                    values = line.split(":", 1)[1].split()
                    if "Ge" in names:
                        at = names.index("Ge")  # trailing zero columns are left out
                        _bus_by_dump[path] = int(values[at]) if at < len(values) else 0
        return read(path, stacks)
    return patched


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("envs", nargs="+")
    parser.add_argument("--cases", nargs="+", default=list(SEED_CASES))
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    callgrind._launch = _with_bus(callgrind._launch)
    callgrind.read_dump = _reading_bus(callgrind.read_dump)
    targets = [(case, "torch.add") for case in args.cases]
    print(f"{'build':40s} {'case':22s} {'instr/call':>11s} {'bus events/call':>16s}")
    for env in args.envs:
        python = resolve_interpreter(env)
        _bus_by_dump.clear()
        run = callgrind.count(python, targets, [args.seed], say=lambda m: print(m, file=sys.stderr))[0]
        dumps = sorted(_bus_by_dump, key=lambda p: int(p.rsplit(".", 1)[1]))
        # Dump order per repeat: every target, then the empty loop (callgrind._worker_main).
        per_repeat = len(targets) + 1
        calls = run.settings["calls_per_repeat"]
        for index, case in enumerate(run.cases):
            bus = []
            for repeat in range(1, run.settings["repeats"]):
                base = repeat * per_repeat
                bus.append((_bus_by_dump[dumps[base + index]] - _bus_by_dump[dumps[base + len(targets)]]) / calls)
            print(f"{env:40s} {case.case:22s} {case.per_call:11,.1f} {min(bus):16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
