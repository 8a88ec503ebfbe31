"""A step on a CUDA device: the host's time a step, the synchronized time and the GPU's own, for
the plain twin and yours, and what they say together (issue "Eager against compiled, and the
step on the GPU").

On a GPU a subclass's cost is the host's: it adds Python and dispatch before each kernel is
queued, and no GPU work. So it costs the step only while the GPU waits for the host. Three
figures a step, each from its own burst of steps, as overrides/clock/cuda.py times an op:
- **host**: the Python thread's time to queue the burst (the queue emptied before and after,
  outside the clock);
- **synced**: the burst with the final synchronize inside the clock: what a training loop pays;
- **gpu**: the burst queued behind a spin kernel long enough for the host to queue it all,
  timed with CUDA events: the GPU's own work, with no wait for the host in it.
Each figure is the median of its samples (FIGURE_QUANTILE says why). The step's overhead is the synced one (the share of the step that is your subclass); the host
figure is where it comes from, and the op table (timed on the host) is closed against it. Where
the host's time exceeds the GPU's the step is host-bound, and the GPU idles for the rest.

Plain and yours alternate in the balanced order of timing.py, every mode of a round back to
back, so the machine's slow spells land on both alike.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from overrides.clock import cuda as cuda_clock
from overrides.clock.timer import clock_ns, paused_gc
from overrides.step import timing
from overrides.step.factory import StepPair

# Steps a sample at most: a small CNN's step queues ~40 kernels (forward, backward, SGD), so 5
# steps stay well inside the ~1,024-kernel launch queue; more and the host would wait for the
# GPU, folding the GPU's time into the host's figure. Below that, calibrated to ~1 ms as on the
# CPU (timing.SAMPLE_NS): 1 step of steps:cnn on an H100. Always 5 read wider intervals: the
# host's slow spells outlast a step, so 5 steps a sample averaged nothing away and left a fifth
# of the samples (60 against 330: benchmarks/README.md).
MAX_STEPS_PER_SAMPLE = 5
# Each step's figure on a GPU: the median of its samples, with its interval. The host's time a
# step jitters by +-25% (p10-p90) both ways on an H100's 16-CPU host, so the low quantile (the
# CPU's headline: the undisturbed cost) is a rare fast step: over seven batch sizes it read the
# subclass's host cost +209..+328 us, the median +285..+335 us, and an A/A's median intervals
# held zero where its low quantile read +101 us.
FIGURE_QUANTILE = 0.5
MODES = cuda_clock.MODES  # host, synced, gpu
# A spin kernel this much longer than the host's calibrated time to queue the burst: the host's
# time varies from sample to sample (a busy host core), and a short spin would let the GPU wait.
SLEEP_MARGIN = 2.0


@dataclasses.dataclass(frozen=True)
class DeviceStepTiming:
    """One factory's two steps at one batch size on a CUDA device: one StepTiming a mode, each
    with its own samples, paired by position across the modes of a round."""

    device: str  # as given, e.g. "cuda" or "cuda:1"
    device_name: str  # torch.cuda.get_device_name
    host: timing.StepTiming
    synced: timing.StepTiming
    gpu: timing.StepTiming

    @property
    def batch(self) -> int | None:
        return self.synced.batch

    def gpu_idle(self, which: str) -> float:
        """The share of the synced step the GPU spends waiting for the host, for `which` step."""
        synced = self.synced.plain_step_ns if which == "plain" else self.synced.subclass_step_ns
        gpu = self.gpu.plain_step_ns if which == "plain" else self.gpu.subclass_step_ns
        return max(0.0, 1.0 - gpu / synced) if synced > 0 else float("nan")

    def bound(self, which: str) -> str:
        """"host" where the host's time a step exceeds the GPU's, else "gpu"."""
        host = self.host.plain_step_ns if which == "plain" else self.host.subclass_step_ns
        gpu = self.gpu.plain_step_ns if which == "plain" else self.gpu.subclass_step_ns
        return "host" if host > gpu else "gpu"


class _Sampler:
    """One step's three ways of being timed, over a burst of `steps` steps."""

    def __init__(self, step: Callable, steps: int, host_ns: float):
        import torch

        self.step, self.steps = step, steps
        self.sync = torch.cuda.synchronize
        self.sleep = torch.cuda._sleep
        self.cycles = int(SLEEP_MARGIN * cuda_clock.sleep_cycles(host_ns, steps))
        self.events = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def burst(self) -> None:
        for _ in range(self.steps):
            self.step()

    def sample(self, mode: str) -> float:
        self.sync()
        if mode == "gpu":
            start, end = self.events
            self.sleep(self.cycles)
            start.record()
            self.burst()
            end.record()
            self.sync()
            return start.elapsed_time(end) * 1e6 / self.steps
        started = clock_ns()
        self.burst()
        if mode == "synced":
            self.sync()
        ended = clock_ns()
        self.sync()
        return (ended - started) / self.steps


def _host_ns(step: Callable, sync: Callable) -> tuple[float, float]:
    """(the host's, the synced) fastest time of one step, of a few: the host's is what the spin
    kernel must outlast, the synced one sizes a sample."""
    host, synced = [], []
    for _ in range(timing.CALIBRATION_STEPS):
        sync()
        started = clock_ns()
        step()
        queued = clock_ns()
        sync()
        host.append(queued - started)
        synced.append(clock_ns() - started)
    return min(host), min(synced)


def time_on_device(pair: StepPair, device: str, time_s: float = timing.DEFAULT_TIME_S, threads: int = 1,
                   pairs: int | None = None, progress: Callable[[str], None] | None = None) -> DeviceStepTiming:
    """Both steps of `pair` (built on `device`) timed three ways in alternation for `time_s`
    each (or `pairs` rounds), after the drift probe; see the module docstring."""
    import torch

    say = progress or (lambda message: None)
    label = timing.step_label(pair)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    started = clock_ns()
    try:
        say(f"{label}: warming up both steps on {device} and looking for drift")
        drifts = timing.check_drift(pair)
        for line in drifts:
            say(line)
        # One count of steps a sample for both, the cheaper step's (as timing.SAME_COUNT: a count of
        # each step's own read a known wait 1.06-1.08x on the CPU)
        first = [_host_ns(step, torch.cuda.synchronize) for step in (pair.plain, pair.subclass)]
        steps = min(max(1, min(MAX_STEPS_PER_SAMPLE, round(timing.SAMPLE_NS / max(synced_ns, 1.0))))
                    for _, synced_ns in first)
        samplers = [_Sampler(step, steps, host_ns) for step, (host_ns, _) in zip((pair.plain, pair.subclass), first)]
        samples = {mode: ([], []) for mode in MODES}
        orders = timing.balanced_orders(2)
        budget_ns = int(2 * len(MODES) * time_s * 1e9)
        with paused_gc():
            begun = next_report = clock_ns()
            while True:
                rounds = len(samples["host"][0])
                for mode in MODES:
                    for index in orders[rounds % len(orders)]:
                        samples[mode][index].append(samplers[index].sample(mode))
                now = clock_ns()
                done = (rounds + 1 >= pairs if pairs is not None
                        else now - begun >= budget_ns and rounds + 1 >= timing.MIN_PAIRS)
                if done or now >= next_report:
                    say(f"{label}: timing both steps on {device} (host, synced, gpu), "
                        f"{samplers[0].steps} and {samplers[1].steps} steps a sample: {rounds + 1} rounds")
                    next_report = now + timing.PROGRESS_EVERY_NS
                if done:
                    break
    finally:
        torch.set_num_threads(previous_threads)
    wall_s = (clock_ns() - started) / 1e9
    counts = (samplers[0].steps, samplers[1].steps)
    by_mode = {mode: timing.StepTiming(pair.spec, pair.batch, counts, tuple(plain), tuple(yours),
                                       tuple(drifts), threads, wall_s, FIGURE_QUANTILE)
               for mode, (plain, yours) in samples.items()}
    return DeviceStepTiming(device, torch.cuda.get_device_name(torch.device(device)), by_mode["host"],
                            by_mode["synced"], by_mode["gpu"])
