"""A training step on a GPU, with and without a tensor subclass: the host's time a step against the
GPU's, over batch sizes, and from which batch the GPU's work hides what the subclass adds.

Groundwork for the step and the GPU (issues "Your step, priced" and "Eager against compiled"):
a probe with figures, not the tool's feature. The step is a small CNN's forward, cross-entropy,
backward and SGD update; the subclass is fastai-style (`TensorImage` / `TensorCategory` on the
inputs: a classmethod `__torch_function__` that calls `super()` and copies the inputs' metadata
onto the results). Each step is timed three ways, as overrides/clock/cuda.py times an op:
- host: the Python thread's time to queue a burst of steps (the queue emptied before and after,
  outside the clock);
- synced: the same burst with the final synchronize inside the clock (what a training loop pays);
- gpu: the burst queued behind a spin kernel, timed with CUDA events (the GPU's own work).
Plain and subclass samples alternate (which goes first too), so drift lands on both.

    python benchmarks/step_cuda_probe.py --device cuda --batches 1 8 32 128 512 --json out.json
    python benchmarks/step_cuda_probe.py --device cpu --batches 1 8 --rounds 3     # host only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

STEPS_PER_SAMPLE = 5  # ~40 kernels a step: 5 steps stay well inside the ~1,024-kernel launch queue
SLEEP_CYCLES_PER_NS = 4  # as overrides/clock/cuda.py: covers a GPU clock up to 2 GHz twice over
HIDDEN_SHARE = 0.05  # the subclass is "hidden" where it adds under 5% to the synced step (fastai's question)


# The user's library (benchmarks/userlib): fastai's pattern (images.py) and the small CNN
# (steps.py), as `bench.py --step steps:cnn --device cuda` times them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "userlib"))
from images import TensorCategory, TensorImage  # noqa: E402
from steps import SmallCNN  # noqa: E402


def make_step(batch: int, device: str, subclass: bool, compiled: bool = False):
    torch.manual_seed(0)
    model = SmallCNN().to(device)
    if compiled:
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    if subclass:
        x, y = x.as_subclass(TensorImage), y.as_subclass(TensorCategory)
        x.img_size = (32, 32)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step


def _sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def sample(step, device: str, mode: str, host_ns_hint: float) -> float:
    """ns a step, by `mode` (host, synced, gpu), over one burst of STEPS_PER_SAMPLE steps."""
    clock = time.perf_counter_ns
    if mode == "gpu":
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        _sync(device)
        torch.cuda._sleep(int(SLEEP_CYCLES_PER_NS * host_ns_hint * STEPS_PER_SAMPLE * 1.5))
        e0.record()
        for _ in range(STEPS_PER_SAMPLE):
            step()
        e1.record()
        _sync(device)
        return e0.elapsed_time(e1) * 1e6 / STEPS_PER_SAMPLE
    _sync(device)
    t0 = clock()
    for _ in range(STEPS_PER_SAMPLE):
        step()
    if mode == "synced":
        _sync(device)
    t1 = clock()
    _sync(device)
    return (t1 - t0) / STEPS_PER_SAMPLE


def measure(batch: int, device: str, rounds: int, compiled: bool) -> dict:
    steps = {"plain": make_step(batch, device, False), "subclass": make_step(batch, device, True)}
    if compiled:
        steps.update(compiled_plain=make_step(batch, device, False, True),
                     compiled_subclass=make_step(batch, device, True, True))
    modes = ("host", "synced", "gpu") if device.startswith("cuda") else ("host",)
    out = {"batch": batch}
    for k, step in list(steps.items()):  # warm-up: compile, cuDNN's choice, the allocator's pools
        t0 = time.perf_counter()
        try:
            step()
            _sync(device)
        except Exception as exc:  # compile's failure is a finding, said in one line
            out[f"{k}_failed"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
            del steps[k]
            continue
        out[f"{k}_first_step_s"] = time.perf_counter() - t0
        for _ in range(3 * STEPS_PER_SAMPLE):
            step()
    _sync(device)
    hint = {k: sample(s, device, "host", 0) for k, s in steps.items()}
    samples = {k: {m: [] for m in modes} for k in steps}
    for r in range(rounds):
        order = list(steps) if r % 2 == 0 else list(reversed(steps))
        for mode in modes:
            for k in order:
                samples[k][mode].append(sample(steps[k], device, mode, hint[k]))
    for k in steps:
        for mode in modes:
            xs = sorted(samples[k][mode])
            out[f"{k}_{mode}_ns"] = statistics.median(xs)
            q = statistics.quantiles(xs, n=4) if len(xs) >= 4 else [xs[0], 0, xs[-1]]
            out[f"{k}_{mode}_iqr_ns"] = q[2] - q[0]
    return out


def summarize(rows: list[dict], cuda: bool) -> list[str]:
    lines = []
    head = f"{'batch':>6} {'host plain':>11} {'host sub':>9} {'+host':>8}"
    if cuda:
        head += f" {'gpu plain':>10} {'gpu sub':>8} {'synced plain':>13} {'synced sub':>11} {'+synced':>8} {'share':>6} {'gpu idle':>8}  bound"
    lines.append(head)
    for r in rows:
        line = (f"{r['batch']:>6} {r['plain_host_ns']/1e3:>9.1f}us {r['subclass_host_ns']/1e3:>7.1f}us "
                f"{(r['subclass_host_ns']-r['plain_host_ns'])/1e3:>+6.1f}us")
        if cuda:
            add = r["subclass_synced_ns"] - r["plain_synced_ns"]
            share = add / r["subclass_synced_ns"]
            idle = 1 - r["subclass_gpu_ns"] / r["subclass_synced_ns"]
            bound = "host" if r["subclass_host_ns"] > r["subclass_gpu_ns"] else "gpu"
            r.update(subclass_share=share, gpu_idle_share_with_subclass=idle, bound_with_subclass=bound)
            line += (f" {r['plain_gpu_ns']/1e3:>8.1f}us {r['subclass_gpu_ns']/1e3:>6.1f}us "
                     f"{r['plain_synced_ns']/1e3:>11.1f}us {r['subclass_synced_ns']/1e3:>9.1f}us "
                     f"{add/1e3:>+6.1f}us {share:>6.1%} {idle:>8.1%}  {bound}")
        lines.append(line)
    if cuda:
        hidden = None
        for r in reversed(rows):  # the smallest batch from which every larger one stays under
            if r["subclass_share"] < HIDDEN_SHARE:
                hidden = r["batch"]
            else:
                break
        lines.append(f"the subclass adds under {HIDDEN_SHARE:.0%} of the synced step from batch {hidden}"
                     if hidden is not None else
                     f"the subclass adds {HIDDEN_SHARE:.0%} or more of the synced step at every batch timed")
    return lines


def compiled_lines(rows: list[dict], mode: str) -> list[str]:
    """The four figures a step (eager and compiled, each with and without the subclass), by `mode`;
    the first step's seconds (compile included) apart, never in the steady-state figures."""
    names = ("plain", "subclass", "compiled_plain", "compiled_subclass")
    lines = ["", f"{mode} us a step   " + "  ".join(f"{n:>17}" for n in names) + "   first step s (compiled plain / sub)"]
    for r in rows:
        cells = [f"{r[f'{n}_{mode}_ns']/1e3:>17.1f}" if f"{n}_{mode}_ns" in r else f"{'failed':>17}" for n in names]
        first = " / ".join(f"{r[f'{n}_first_step_s']:.1f}" if f"{n}_first_step_s" in r else "-"
                           for n in names[2:])
        lines.append(f"batch {r['batch']:>6}      " + "  ".join(cells) + f"   {first}")
        for n in names:
            if f"{n}_failed" in r:
                lines.append(f"  {n} failed: {r[f'{n}_failed']}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 128, 512])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--compile", action="store_true",
                        help="also the model under torch.compile, with and without the subclass")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("step_cuda_probe: no CUDA device; pass --device cpu for the host figures", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    rows = []
    for b in args.batches:
        t0 = time.time()
        rows.append(measure(b, args.device, args.rounds, args.compile))
        print(f"batch {b}: {time.time() - t0:.1f} s", file=sys.stderr)
    lines = summarize(rows, args.device.startswith("cuda"))
    if args.compile:
        lines += compiled_lines(rows, "synced" if args.device.startswith("cuda") else "host")
    print("\n".join(lines))
    env = {"torch": torch.__version__, "python": sys.version.split()[0], "device": args.device,
           "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
           "steps_per_sample": STEPS_PER_SAMPLE, "rounds": args.rounds}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "step-cuda-probe/1", "environment": env, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
