"""Do `bench.py --compare` verdicts hold between two installs? Kinds of comparison, N times each.

The kinds (built under --setup DIR from the torch version this interpreter has, or named with
--kind NAME=BASE,BRANCH):
- `aa-same`: the same virtualenv on both sides;
- `aa-venvs`: two virtualenvs, each with its own install of the same torch wheel;
- `aa-copy`: a virtualenv against its `cp -a` copy (byte-identical files, other pages);
- `aa-made-apart`: the first virtualenv against one made another way, as users' environments
  are: its interpreter copied (`venv --copies`) where the first's is linked, and a prompt of its
  own (`--prompt`, a line more in its pyvenv.cfg);
- `NAME=BASE,kept:ENV` (with --kind): ENV's interpreter importing a record.sh-style kept copy of
  its torch (made once beside ENV), as report.sh runs a recorded label;
- `bare`: the first virtualenv against a shim environment sharing its packages whose start-up
  hook wraps `torch.Tensor.__torch_function__` in a Python function that only calls the
  original (overrides/ab/shimenv.py): a real ~1-1.5% cost on the subclass cases, none elsewhere.

The kinds run interleaved (one comparison of each in turn), so the machine's mood lands on all
alike. Every comparison is appended to a JSON-lines log as it finishes (`--log`); an
interrupted run keeps its data, and `--summarise LOG` prints the tables without measuring.

Like `bench.py --compare`, it counts instructions too where valgrind is installed
(`--no-instructions`: the clock alone, as the figures before that default were measured).

Usage: python benchmarks/verdict_validation.py --setup /tmp/vv -n 20 [--log FILE] [--no-instructions]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
import venv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.ab import shimenv  # noqa: E402
from overrides.ab.config import ABConfig  # noqa: E402
from overrides.ab.paired import run_ab  # noqa: E402
from overrides.builds import interpreters  # noqa: E402
from overrides.cases import seedcases  # noqa: E402
from overrides.cases.ops import DEFAULT_OP  # noqa: E402
from overrides.counts import records, rounds  # noqa: E402

# Every verdict that claims something moved; "clock only" too: a claim, even if not a regression.
FLAGS = ("regression", "improvement", "clock only", "disagree")
REACHED = shimenv.REACHED  # the cases the bare shim slows; the others are untouched


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _torch_pin() -> str:
    import torch

    return f"torch=={torch.__version__.split('+')[0]}"


def setup(folder: str) -> dict[str, tuple[str, str]]:
    """The five kinds' environments under `folder` (made once, reused when present)."""
    os.makedirs(folder, exist_ok=True)
    env_a, env_b, env_c = (os.path.join(folder, name) for name in ("va", "vb", "vc"))
    for env in (env_a, env_b):
        if not os.path.exists(os.path.join(env, "bin", "python")):
            say(f"making {env} with {_torch_pin()}")
            venv.EnvBuilder(with_pip=True, symlinks=True).create(env)
            subprocess.run([os.path.join(env, "bin", "python"), "-m", "pip", "install", "-q",
                            _torch_pin(), "numpy"], check=True)
    if not os.path.exists(env_c):
        subprocess.run(["cp", "-a", env_a, env_c], check=True)
    env_d = os.path.join(folder, "vd-made-apart")
    if not os.path.exists(os.path.join(env_d, "bin", "python")):
        say(f"making {env_d} with {_torch_pin()}, its interpreter copied, a prompt of its own")
        venv.EnvBuilder(with_pip=True, symlinks=False, prompt="fix-subclass-dispatch").create(env_d)
        subprocess.run([os.path.join(env_d, "bin", "python"), "-m", "pip", "install", "-q",
                        _torch_pin(), "numpy"], check=True)
    bare = os.path.join(folder, "bare")
    if not os.path.exists(os.path.join(bare, "bin", "python")):
        subprocess.run([os.path.join(env_a, "bin", "python"), "-m", "overrides.ab.shimenv", bare, "bare"],
                       check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    return {"aa-same": (env_a, env_a), "aa-venvs": (env_a, env_b), "aa-copy": (env_a, env_c),
            "aa-made-apart": (env_a, env_d), "bare": (env_a, bare)}


def _side(spec: str) -> "str | interpreters.Build":
    """`kept:ENV`: ENV's interpreter with a record.sh-style kept copy of its torch (made once,
    beside ENV, by overrides/builds/keep.py), as report.sh runs a recorded label; else the spec itself."""
    if not spec.startswith("kept:"):
        return spec
    from overrides.builds import keep

    env = spec[len("kept:"):]
    interpreter = interpreters.probe_interpreter(env)
    label_dir = env.rstrip("/") + "-label"
    root = os.path.join(label_dir, keep.KEPT_DIR)
    if not os.path.isdir(os.path.join(root, "torch")):
        say(f"keeping a copy of {interpreter.torch_dir} in {label_dir}")
        keep.keep(interpreter.torch_dir, label_dir)
    return interpreters.Build(interpreter.executable, root)


def _seed_deltas(outcome) -> dict:
    """Per case, branch minus base instructions per call on every seed counted on both sides."""
    if not outcome.base_run.instructions or not outcome.branch_run.instructions:
        return {}
    sides = [list(run.instructions) for run in (outcome.base_run, outcome.branch_run)]
    branch_by_seed = {run.seed: run for run in sides[1]}
    out: dict[str, list] = {}
    for run in sides[0]:
        other = branch_by_seed.get(run.seed)
        for counted in run.cases:
            mate = other.get(counted.case, counted.op) if other else None
            if mate is not None and counted.error is None and mate.error is None:
                out.setdefault(counted.case, []).append(round(mate.per_call - counted.per_call, 1))
    return out


def measure(kinds: dict[str, tuple[str, str]], n: int, log: str, config: ABConfig) -> None:
    for round_ in range(n):
        for kind, (base, branch) in kinds.items():
            say(f"round {round_ + 1}/{n}: {kind}")
            started = time.monotonic()
            if config.instruction_seeds:  # as bench.py --compare: each comparison its own seeds
                config = dataclasses.replace(config, instruction_seeds=rounds.fresh_seeds())
            outcome = run_ab(_side(base), _side(branch), seedcases.SEED_CASES, [DEFAULT_OP], config)
            entry = {"kind": kind, "wall_s": time.monotonic() - started,
                     "counted": outcome.settings.instructions is not None,
                     "pairs": outcome.settings.pairs, "stopped": outcome.settings.stopped,
                     "placement_matched": outcome.settings.placement.matched if outcome.settings.placement else None,
                     "seeds": list(outcome.settings.instructions.seeds) if outcome.settings.instructions else [],
                     "seed_deltas": _seed_deltas(outcome),
                     "same_path": outcome.settings.same_path.fixed if outcome.settings.same_path else None,
                     "comparisons": [c.to_dict() for c in outcome.comparisons]}
            with open(log, "a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")


def summarise(log: str) -> None:
    entries = [json.loads(line) for line in open(log, encoding="utf-8") if line.strip()]
    by_kind = collections.defaultdict(list)
    for entry in entries:
        by_kind[entry["kind"]].append(entry)
    print("Verdicts of bench.py --compare (defaults) by kind of comparison\n")
    for kind, runs in by_kind.items():
        walls = [r["wall_s"] for r in runs]
        flagged_any = sum(any(c["verdict"] in FLAGS for c in r["comparisons"]) for r in runs)
        counted = sum(bool(r.get("counted")) for r in runs)
        print(f"{kind}: {len(runs)} comparisons ({counted} with instruction counts), wall median "
              f"{statistics.median(walls):.0f} s "
              f"(max {max(walls):.0f}), pairs median {statistics.median(r['pairs'] for r in runs):.0f}, "
              f"stopped {dict(collections.Counter(r['stopped'] for r in runs))}, any case flagged in "
              f"{flagged_any}/{len(runs)}, placement matched in "
              f"{sum(bool(r.get('placement_matched')) for r in runs)}/{len(runs)}, seeds counted "
              f"{dict(sorted(collections.Counter(len(r.get('seeds') or []) for r in runs).items()))}")
        moves = [c["delta_instructions"] for r in runs for c in r["comparisons"]
                 if c.get("delta_instructions") is not None]
        if moves:
            others = [m for m in moves if m != 0]
            print(f"  counts: +0 instructions on {len(moves) - len(others)}/{len(moves)} cases" +
                  (f", the rest {min(others):+.0f}..{max(others):+.0f}" if others else ""))
        per_seed = [abs(d) for r in runs for deltas in (r.get("seed_deltas") or {}).values() for d in deltas]
        if per_seed:
            within = sum(d <= 2 for d in per_seed)
            print(f"  per-seed count deltas: {within}/{len(per_seed)} within +-2 instructions, largest "
                  f"{max(per_seed):.1f}; started from one path in "
                  f"{sum(bool(r.get('same_path')) for r in runs)}/{len(runs)}")
        print(f"  {'case':<22}{'verdicts':<52}{'CI holds 0':>11}{'delta med':>11}{'CI width med':>14}")
        for case in seedcases.SEED_CASES:
            rows = [c for r in runs for c in r["comparisons"] if c["case"] == case.name]
            counts = collections.Counter(c["verdict"] for c in rows)
            holds = sum(c["ci95_ns"] is not None and c["ci95_ns"][0] <= 0 <= c["ci95_ns"][1] for c in rows)
            deltas = [c["delta_ns"] for c in rows if c["delta_ns"] is not None]
            widths = [c["ci95_ns"][1] - c["ci95_ns"][0] for c in rows if c["ci95_ns"]]
            verdicts = ", ".join(f"{v} {k}" for k, v in counts.most_common())
            print(f"  {case.name:<22}{verdicts:<52}{holds:>5}/{len(rows):<5}"
                  f"{statistics.median(deltas) if deltas else float('nan'):>+11.0f}"
                  f"{statistics.median(widths) if widths else float('nan'):>14.0f}")
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="comparisons per kind")
    parser.add_argument("--setup", metavar="DIR", help="build the five kinds' environments here")
    parser.add_argument("--kind", action="append", default=[], metavar="NAME=BASE,BRANCH")
    parser.add_argument("--log", default=None, help="JSON-lines log (default: verdicts-TIME.jsonl)")
    parser.add_argument("--summarise", metavar="LOG", help="print the tables of a log and exit")
    parser.add_argument("--no-placement", action="store_true", help="views off, to show why they are on")
    parser.add_argument("--no-instructions", action="store_true",
                        help="the wall clock alone (bench.py --compare --no-instructions); by default "
                             "instructions are counted where valgrind is installed, as bench.py does")
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    kinds = setup(args.setup) if args.setup else {}
    for spec in args.kind:
        name, _, sides = spec.partition("=")
        kinds[name] = tuple(sides.split(","))
    if not kinds:
        parser.error("give --setup DIR or --kind NAME=BASE,BRANCH")
    log = args.log or f"verdicts-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    say(f"logging to {log}")
    seeds, _ = rounds.counting_plan(False, args.no_instructions, None)
    config = ABConfig(match_placement=not args.no_placement, instruction_seeds=seeds, add_seeds=True,
                         instructions_optional=True)
    try:
        measure(kinds, args.n, log, config)
    except KeyboardInterrupt:
        say("interrupted; summarising what was measured")
    summarise(log)


if __name__ == "__main__":
    main()
