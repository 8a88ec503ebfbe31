"""Could a fork after `import torch` stand in for a hash seed? Counts from forked children against
counts from fresh processes, for the same two builds.

Most of a counting process's wall time is `import torch` under valgrind (~12 s of ~20 s for the
CPU wheel, ~20 s of ~30 s for a CUDA wheel), paid again for every hash seed. A process that
imports once and forks one child per layout would pay it once; but a fork keeps the parent's
hash seed, string hashes and every address made during the import, so each child can differ
only in what it allocates after the fork. This probe counts, under one hash seed per side, K
children that each allocate a different amount before building the cases (`PADS`), and prints
the per-child deltas (branch - base, child k against child k) beside the per-seed deltas of
fresh processes (`--seed-log`, a `verdict_validation.py` log of the same pair of builds). If
the children's deltas spread as little as one seed's repeats, a fork varies nothing a verdict
needs varied.

    python benchmarks/fork_probe.py BASE BRANCH [--seeds 2] [--seed-log LOG]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides import children  # noqa: E402
from overrides.builds import samepath  # noqa: E402
from overrides.builds.interpreters import resolve_interpreter  # noqa: E402
from overrides.counts import callgrind, rounds, valgrind  # noqa: E402
from overrides.counts.dumps import read_total  # noqa: E402
from overrides.errors import UsageError  # noqa: E402

CASES = ("Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction")
# Bytes each child allocates before its cases (a buffer; small objects worth as much, from
# pymalloc; and 1 KB blocks worth a quarter, from malloc's heap): moves every address allocated
# after the fork, as a different history would.
PADS = (0, 4_096, 65_536, 1_048_576, 3_000_017)

_WORKER = r'''
import gc, json, os, sys
spec = json.loads(sys.argv[1])
import torch
from overrides.cases import ops, registry
from overrides.clock.timer import UNROLL, compile_hot_loop
torch.set_num_threads(1)
print(json.dumps({"imported": os.getpid()}), flush=True)
for pad in spec["pads"]:
    sys.stdin.readline()
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        continue
    keep = [bytearray(pad), [object() for _ in range(pad // 64)], [bytes(1000 + i % 7) for i in range(pad // 4096)]]
    targets = []
    for case_name in spec["cases"]:
        case = registry.get_case(case_name)
        loop = compile_hot_loop(case.stmt_for(ops.get_op("torch.add")), "counted_loop")
        targets.append((case, tuple(case.make_operands()), loop))
    empty = compile_hot_loop("pass", "counted_loop", unroll=1)
    for case, operands, loop in targets:
        with case.active():
            loop(operands, spec["warmup"] // UNROLL)
    toggle, dump = torch._C._valgrind_toggle, torch._C._valgrind_toggle_and_dump_stats
    gc.collect()
    gc.disable()
    print(json.dumps({"ready": os.getpid()}), flush=True)
    sys.stdin.readline()
    order = []
    for repeat in range(spec["repeats"]):
        for index, (case, operands, loop) in enumerate(targets):
            with case.active():
                toggle(); loop(operands, spec["calls"] // UNROLL); dump()
            order.append(index)
        toggle(); empty((None, None), spec["calls"] // UNROLL); dump()
        order.append(-1)
    print(json.dumps({"dumps": order}), flush=True)
    os._exit(0)
print(json.dumps({"done": True}), flush=True)
os._exit(0)
'''


def _read(process: subprocess.Popen, key: str):
    for line in process.stdout:
        if line.startswith("{") and key in json.loads(line):
            return json.loads(line)[key]
    raise SystemExit(f"fork_probe: the worker ended early: {process.stderr.read()[-500:]}")


def forked_counts(python: str, seed: int, pad: int) -> dict:
    """One valgrind process under `seed`: the import once, then one child per PADS entry.
    Returns {"children": [[per-call count per case] per child], "import_s", "child_s"}."""
    valgrind_path, control = valgrind.find_valgrind()
    where = samepath.place(python, None, None)
    samepath.prime(where, "")
    out_dir = tempfile.mkdtemp(prefix="fork-probe-")
    spec = json.dumps({"pads": PADS, "cases": CASES, "repeats": callgrind.DEFAULT_REPEATS,
                       "calls": callgrind.CALLS_PER_REPEAT, "warmup": callgrind.WARMUP_CALLS})
    command = [valgrind_path, "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               "--compress-strings=no", "--compress-pos=no", "-q",
               f"--callgrind-out-file={out_dir}/callgrind.out.%p", where.python, "-c", _WORKER, spec]
    started = time.monotonic()
    process = subprocess.Popen(where.wrap(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=valgrind.fixed_cwd(),
                               env=valgrind.process_environment(seed, pad, where))
    parent = _read(process, "imported")
    import_s = time.monotonic() - started
    # A forked child is invisible to callgrind_control (vgdb lists the parent only, and the tool
    # exits 0 saying "not detected"), so instrumentation goes on in the parent, before the
    # forks: each child then builds and warms up its cases instrumented (slower), and collects
    # only between the toggles, as a fresh process does.
    subprocess.run([control, "-i", "on", str(parent)], capture_output=True, check=True, timeout=60)
    counts, child_s = [], []
    for _ in PADS:
        child_started = time.monotonic()
        process.stdin.write("fork\n"); process.stdin.flush()
        child = _read(process, "ready")
        process.stdin.write("go\n"); process.stdin.flush()
        order = _read(process, "dumps")
        dumps = sorted(glob.glob(os.path.join(out_dir, f"callgrind.out.{child}.*")),
                       key=lambda p: int(p.rsplit(".", 1)[1]))
        totals = [read_total(path) for path in dumps]
        width = len(CASES) + 1  # a repeat: every case, then the empty loop
        assert order == [*range(len(CASES)), -1] * (len(totals) // width), order
        repeats = [[totals[r * width + i] - totals[r * width + len(CASES)] for i in range(len(CASES))]
                   for r in range(len(totals) // width)]
        counts.append([min(rep[i] for rep in repeats[1:]) / callgrind.CALLS_PER_REPEAT
                       for i in range(len(CASES))])
        child_s.append(time.monotonic() - child_started)
    _read(process, "done")
    process.wait(timeout=60)
    return {"children": counts, "import_s": import_s, "child_s": child_s}


def seed_deltas(log: str, kind: str | None) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    with open(log, encoding="utf-8") as src:
        for line in src:
            entry = json.loads(line)
            if kind and entry.get("kind") != kind:
                continue
            for case, values in (entry.get("seed_deltas") or {}).items():
                out.setdefault(case, []).extend(values)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("branch")
    parser.add_argument("--seeds", type=int, default=2, help="hash seeds, each one process a side")
    parser.add_argument("--seed-log", help="a verdict_validation.py log of the same two builds")
    parser.add_argument("--kind", default=None, help="the log's kind to read (default: every entry)")
    args = parser.parse_args()
    try:
        pythons = [resolve_interpreter(args.base), resolve_interpreter(args.branch)]
    except UsageError as error:
        parser.error(str(error))
    pads = callgrind.pads_for(pythons)
    print(f"fork_probe: {len(PADS)} children per process, pads {PADS}", file=sys.stderr)
    by_seed = {}
    for seed in rounds.fresh_seeds(args.seeds):
        started = time.monotonic()
        base, branch = children.parallel(lambda job: forked_counts(*job),
                                         [(pythons[0], seed, pads[0]), (pythons[1], seed, pads[1])], 2)
        by_seed[seed] = (base, branch)
        print(f"seed {seed}: {time.monotonic() - started:.0f} s (imports {base['import_s']:.0f}/"
              f"{branch['import_s']:.0f} s, a child {statistics.median(base['child_s']):.1f} s)",
              file=sys.stderr, flush=True)
    fresh = seed_deltas(args.seed_log, args.kind) if args.seed_log else {}
    print(f"{'case':22}{'seed':>8}  per-child deltas (branch - base, instructions a call)      "
          f"{'sd':>6}")
    for i, case in enumerate(CASES):
        for seed, (base, branch) in by_seed.items():
            deltas = [b[i] - a[i] for a, b in zip(base["children"], branch["children"])]
            print(f"{case:22}{seed:>8}  {' '.join(f'{d:+8.1f}' for d in deltas):54}"
                  f"{statistics.stdev(deltas):6.1f}")
        if case in fresh and len(fresh[case]) > 1:
            values = fresh[case]
            print(f"{'':22}{'fresh':>8}  {len(values)} seeds, {min(values):+.1f}..{max(values):+.1f}, "
                  f"mean {statistics.mean(values):+.1f}{'':12}{statistics.stdev(values):6.1f}")
    print("\nper child: base counts "
          + "; ".join(f"seed {seed}: " + ", ".join(f"{c[1]:.0f}" for c in base["children"])
                      for seed, (base, _) in by_seed.items()) + " (SubTensor)")
    return 0 if not any(math.isnan(v) for pair in by_seed.values() for side in pair
                        for child in side["children"] for v in child) else 1


if __name__ == "__main__":
    raise SystemExit(main())
