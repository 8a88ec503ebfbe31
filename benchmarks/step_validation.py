"""Does `--step` read a known truth? Three steps of one tiny MLP, timed as bench.py --step times
them (overrides/step, in-process, alternating), ROUNDS times, interleaved:
- an A/A: the plain step on both sides (its overhead must be ~0);
- a known cost: a subclass whose __torch_function__ busy-waits SPIN_US a call: its overhead must
  be its calls a step x the wait (plus what the bare subclass costs, measured beside it). The
  wait is calibrated: it overshoots by up to a clock read (~0.2 us in this VM), so what one wait
  lasts undisturbed (the headline of 500 timed waits) is measured in each round;
- the bare subclass (the same class without the wait).
Prints each round, then medians. Run from anywhere: it writes its step module to a temp folder.

    .venv/bin/python benchmarks/step_validation.py [ROUNDS]
"""
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SPIN_US = 20
MODULE = '''
import time
import torch
import torch.nn.functional as F


class Bare(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def spin():
    end = time.perf_counter_ns() + %d
    while time.perf_counter_ns() < end:
        pass


class Spinning(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        spin()
        return super().__torch_function__(func, types, args, kwargs or {})


def _mlp(cls, plain):
    torch.manual_seed(0)
    w1, w2 = torch.randn(256, 256) * 0.05, torch.randn(10, 256) * 0.05
    if cls is not None and not plain:
        w1, w2 = w1.as_subclass(cls), w2.as_subclass(cls)
    w1.requires_grad_(), w2.requires_grad_()
    x, target = torch.randn(32, 256), torch.randn(32, 10)
    opt = torch.optim.SGD([w1, w2], lr=0.01)

    def step():
        opt.zero_grad()
        (F.linear(F.linear(x, w1).relu(), w2) - target).square().mean().backward()
        opt.step()

    return step


def same(plain=False):
    return _mlp(None, plain)


def bare(plain=False):
    return _mlp(Bare, plain)


def spinning(plain=False):
    return _mlp(Spinning, plain)
''' % (SPIN_US * 1000)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    folder = tempfile.mkdtemp(prefix="step-validation-")
    with open(os.path.join(folder, "stepcheck.py"), "w") as out:
        out.write(MODULE)
    os.chdir(folder)
    from overrides.step.factory import build_steps
    from overrides.step.hooks import capture_step
    from overrides.step.timing import time_steps

    pairs = {name: build_steps(f"stepcheck:{name}") for name in ("same", "bare", "spinning")}
    calls = len([c for c in capture_step(pairs["spinning"].subclass, folder).calls if not c.nested])
    print(f"{calls} __torch_function__ calls a step; known extra {calls} x {SPIN_US} us = {calls * SPIN_US} us")
    import importlib
    import time

    from overrides.clock import stats

    waits = importlib.import_module("stepcheck").spin
    seen = {name: [] for name in pairs}
    known_us = []
    for index in range(rounds):
        lasted = []
        for _ in range(500):
            started = time.perf_counter_ns()
            waits()
            lasted.append(time.perf_counter_ns() - started)
        known_us.append(calls * stats.headline(lasted) / 1000)
        line = []
        for name, pair in pairs.items():
            timing = time_steps(pair, time_s=2.0)
            seen[name].append(timing.overhead_ns / 1000)
            line.append(f"{name} {timing.overhead_ns / 1000:+.1f} us ({timing.share:+.1%}, CI "
                        f"{timing.overhead_ci_ns[0] / 1000:+.1f}..{timing.overhead_ci_ns[1] / 1000:+.1f})")
        spin_read = seen["spinning"][-1] - seen["bare"][-1]
        print(f"round {index + 1}: " + "; ".join(line) + f"; spin read {spin_read:+.1f} us "
              f"({spin_read / known_us[-1]:.2f}x the known {known_us[-1]:.1f} us: {calls} x the wait's "
              f"{known_us[-1] / calls:.2f} us)", flush=True)
    spin = [s - b for s, b in zip(seen["spinning"], seen["bare"])]
    print(f"medians: A/A {statistics.median(seen['same']):+.1f} us, bare {statistics.median(seen['bare']):+.1f} us, "
          f"spin read {statistics.median(spin):+.1f} us against {statistics.median(known_us):.1f} us known; "
          f"within 10%: {sum(abs(s / k - 1) <= 0.10 for s, k in zip(spin, known_us))}/{rounds}")


if __name__ == "__main__":
    main()
