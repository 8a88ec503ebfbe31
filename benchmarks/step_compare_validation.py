"""Does `--compare BASE BRANCH --step` read a known truth (issue 48's first "Done when")?
ROUNDS rounds, each with steps built afresh, as bench.py builds and times them
(overrides/step/comparing.py, in-process, alternating, in stretches of fresh builds, the default
1 s a step each):
- the known change: steps:mlp against steps:mlp_wait (benchmarks/userlib: units.py, and the same
  class busy-waiting units_wait.WAIT_NS a `__torch_function__` call): the change must read the
  branch's calls a step x the wait within 10%. The wait overshoots by up to a clock read, so
  what one wait lasts undisturbed (the headline of 500 timed waits) is measured each round, and
  the change is quoted against both: calls x that, and calls x the nominal 20 us;
- an A/A: steps:mlp against itself (two builds): its verdict must be "no change".
Then, once, the op table of the known change (optable.price_versions, each version's calls in order): each op's
change a call against the wait. Prints each round, then the tallies.

    .venv/bin/python benchmarks/step_compare_validation.py [ROUNDS]
"""
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WITHIN = 0.10  # the "within 10%"


def measured_wait_ns(wait) -> float:
    from overrides.clock import stats

    lasted = []
    for _ in range(500):
        started = time.perf_counter_ns()
        wait()
        lasted.append(time.perf_counter_ns() - started)
    return stats.headline(lasted)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    folder = os.path.join(tempfile.mkdtemp(prefix="step-compare-validation-"), "lib")
    shutil.copytree(os.path.join(ROOT, "benchmarks", "userlib"), folder)
    os.chdir(folder)
    sys.path.insert(0, folder)
    import units_wait

    from overrides.step.comparing import compare_steps, join_ops
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.optable import price_versions
    from overrides.verdicts import NO_CHANGE

    probe = build_steps("steps:mlp_wait")
    calls = len([c for c in capture_step(probe.subclass, probe.user_dir).calls if not c.nested])
    nominal_ns = calls * units_wait.WAIT_NS
    print(f"{calls} __torch_function__ calls a step of steps:mlp_wait; known change {calls} x "
          f"{units_wait.WAIT_NS / 1000:g} us = {nominal_ns / 1000:.0f} us (nominal)", flush=True)
    read, known, aa_verdicts, aa_share = [], [], [], []
    for index in range(rounds):
        known.append(calls * measured_wait_ns(units_wait.wait))
        change = compare_steps(build_steps("steps:mlp"), build_steps("steps:mlp_wait"))
        a_a = compare_steps(build_steps("steps:mlp"), build_steps("steps:mlp"))
        read.append(change.change_ns)
        aa_verdicts.append(a_a.verdict)
        aa_share.append(a_a.change_share)
        low, high = a_a.change_ci_ns(0.99)
        print(f"round {index + 1}: change {change.change_ns / 1000:+.1f} us ({change.verdict}), "
              f"{change.change_ns / known[-1]:.3f}x the known {known[-1] / 1000:.1f} us ({calls} x the wait's "
              f"{known[-1] / calls / 1000:.2f} us), {change.change_ns / nominal_ns:.3f}x nominal; "
              f"A/A {a_a.change_ns / 1000:+.2f} us ({a_a.change_share:+.2%}, 99% CI {low / 1000:+.2f}..{high / 1000:+.2f}, "
              f"threshold {a_a.threshold / 1000:.2f}): {a_a.verdict} in {a_a.wall_s:.0f} s, {len(a_a.stretch_changes_ns)} stretches, {len(a_a.base_ns)} rounds; known change {change.wall_s:.0f} s, {len(change.stretch_changes_ns)} stretches; base step {change.base_step_ns / 1000:.1f} us, "
              f"{change.steps_per_sample} steps a sample", flush=True)
    ratios = [r / k for r, k in zip(read, known)]
    print(f"known change: median {statistics.median(ratios):.3f}x (range {min(ratios):.3f}-{max(ratios):.3f}); "
          f"within {WITHIN:.0%} of calls x the measured wait: {sum(abs(r - 1) <= WITHIN for r in ratios)}/{rounds}; "
          f"of calls x 20 us: {sum(abs(r / nominal_ns - 1) <= WITHIN for r in read)}/{rounds}")
    print(f"A/A: 'no change' {sum(v == NO_CHANGE for v in aa_verdicts)}/{rounds} (verdicts {aa_verdicts}); "
          f"change median {statistics.median(aa_share):+.2%}, range {min(aa_share):+.2%}..{max(aa_share):+.2%}")
    base, branch = build_steps("steps:mlp"), build_steps("steps:mlp_wait")
    rows = price_versions((capture_step(base.subclass, base.user_dir), capture_step(branch.subclass, branch.user_dir)))
    changes = [c for c in join_ops(*rows) if c.change_ns == c.change_ns]
    per_call = [c.change_ns / units_wait.WAIT_NS for c in changes]
    print(f"op table: {len(changes)} ops, each one's change a call {min(per_call):.3f}-{max(per_call):.3f}x the wait "
          f"(median {statistics.median(per_call):.3f}x): "
          + ", ".join(f"{c.row.op.split('.')[-1]} {c.change_ns / 1000:+.1f}" for c in changes))


if __name__ == "__main__":
    main()
