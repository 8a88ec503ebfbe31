"""Does a step's A/A move with the build? Issue 48: `--compare A B --step` of one step against a
second build of itself read "no change" 10/10, 5/10 and 9/10, once +1.02% "regression" with a
99% interval of +0.62..+7.44 us: an interval taken from the samples of one run, which does not
see what differs from one build of the step to the next (where its tensors and objects landed).

ROUNDS rounds, each timing the base's plain twin, the base's step and a second build of it in
one alternation (overrides/step/timing.alternate, as comparing.py does) for SECONDS a step, in
two kinds taking turns:
  rebuilt: both versions built afresh for the round (a layout drawn per round);
  kept:    the first round's builds timed again (one layout, only the machine's time differs).
For each kind it prints the A/A change of every round (% of the step), their spread, and the
spread the rounds' own 95% intervals imply (half-width / 1.96): if `rebuilt` spreads beyond
`kept`, and beyond what the intervals say, the build moves a step, and a verdict's interval must
come from rounds of fresh builds.

    .venv/bin/python benchmarks/step_rebuild_probe.py [ROUNDS] [SECONDS] [SPEC]
"""
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    spec = sys.argv[3] if len(sys.argv) > 3 else "steps:mlp"
    folder = os.path.join(tempfile.mkdtemp(prefix="step-rebuild-probe-"), "lib")
    shutil.copytree(os.path.join(ROOT, "benchmarks", "userlib"), folder)
    os.chdir(folder)
    sys.path.insert(0, folder)
    import torch

    from overrides.clock import stats
    from overrides.step import drift
    from overrides.step.factory import build_steps
    from overrides.step.timing import SAME_COUNT, alternate

    torch.set_num_threads(1)

    def built():
        base, branch = build_steps(spec), build_steps(spec)
        for step in (base.plain, base.subclass, branch.subclass):
            for _ in range(drift.PROBE_STEPS):
                step()
        return base, branch

    kept = built()
    changes = {"rebuilt": [], "kept": []}
    implied = {"rebuilt": [], "kept": []}
    for index in range(rounds):
        kind = "rebuilt" if index % 2 == 0 else "kept"
        base, branch = built() if kind == "rebuilt" else kept
        _, (plain, mine, other) = alternate((base.plain, base.subclass, branch.subclass), seconds,
                                            same_count=SAME_COUNT)
        change, (low, high) = stats.headline_difference([other], [mine])
        step = stats.headline(mine)
        changes[kind].append(change / step)
        implied[kind].append((high - low) / 2 / 1.96 / step)
        print(f"round {index + 1:2d} {kind:7s}: step {step / 1000:7.1f} us, A/A {change / step:+.3%} "
              f"(95% CI {low / step:+.3%}..{high / step:+.3%}), {len(mine)} samples", flush=True)
    for kind in ("rebuilt", "kept"):
        values = changes[kind]
        print(f"{kind:7s}: {len(values)} rounds, A/A mean {statistics.mean(values):+.3%}, sd {statistics.stdev(values):.3%} "
              f"between rounds; the rounds' intervals imply sd {statistics.median(implied[kind]):.3%} (median)")


if __name__ == "__main__":
    main()
