"""Timing on a CUDA device: what the host pays per call, the synchronized cost, and the GPU's own.

A CUDA op returns once its kernel is queued, not once it ran. So a per-call time on CUDA is
three figures, and the Timer core (`overrides/clock/timer.py`) takes each from its own burst
of calls, every sample:
- **host**: the Python thread's cost per call (dispatch, `__torch_function__`, the launch). The
  queue is emptied (synchronize) before the clock starts and again after it stops, outside the
  clock, so a sample never ends with work queued that the next one pays for. This is the
  overhead figure on CUDA: what a subclass adds to every op of a training step's host thread.
- **synced**: the same burst with the synchronize inside the clock: host and GPU together, what
  a loop of these calls costs when nothing else hides either.
- **gpu**: the GPU's own time per call, with CUDA events around the burst. A spin kernel
  (`torch.cuda._sleep`) is queued first, long enough for the host to queue the whole burst
  behind it, so the kernels run back to back and the events time the GPU's work, not the
  host's launches.

A burst is at most CUDA_MAX_CALLS calls: more kernels than the launch queue holds would make
the host wait for the GPU and fold the GPU's time into the host's figure.
"""

from __future__ import annotations

# Calls a CUDA sample: the launch queue holds ~1,024 kernels on current drivers; 200 calls leave
# room for ops that launch several kernels each. A multiple of the Timer's unroll (50).
CUDA_MAX_CALLS = 200
# The spin kernel's length, in GPU clock cycles per nanosecond of the host's expected time to
# queue the burst: 4 covers a clock up to 2 GHz twice over (an H100 boosts to ~1.98 GHz). Longer
# only waits; shorter would let the GPU idle between launches and read the host's time.
SLEEP_CYCLES_PER_NS = 4
# The host's cost a call assumed for the spin kernel's length where calls were given, not
# calibrated (an A/B branch worker): generous, as the seed cases cost 7-12 us a call on an H200.
UNCALIBRATED_HOST_NS = 50_000
MODES = ("host", "synced", "gpu")  # the figures of a CUDA target; "host" is its headline


def device_of(operands) -> str:
    """"cuda" where any operand (or a tensor in a list of them) lives on a CUDA device, else "cpu"."""
    import torch

    def on_cuda(value) -> bool:
        if isinstance(value, (list, tuple)):
            return any(on_cuda(v) for v in value)
        tensor = value if isinstance(value, torch.Tensor) else getattr(value, "_tensor", None)
        return isinstance(tensor, torch.Tensor) and tensor.is_cuda

    return "cuda" if on_cuda(operands) else "cpu"


def loop_parts(mode: str) -> tuple[str, str]:
    """(the code before the timed loop, the code that ends it and returns ns) for `mode`; the
    names they use are `namespace()`'s. "cpu": the plain clock, as everywhere else."""
    if mode == "cpu":
        return "    _t0 = _clock()\n", "    return _clock() - _t0\n"
    if mode == "host":
        return ("    _sync()\n    _t0 = _clock()\n",
                "    _t1 = _clock()\n    _sync()\n    return _t1 - _t0\n")
    if mode == "synced":
        return "    _sync()\n    _t0 = _clock()\n", "    _sync()\n    return _clock() - _t0\n"
    if mode == "gpu":
        return ("    _sync()\n    _sleep(_sleep_cycles[0])\n    _e0.record()\n",
                "    _e1.record()\n    _sync()\n    return int(_e0.elapsed_time(_e1) * 1e6)\n")
    raise ValueError(f"unknown timing mode {mode!r}")


def namespace(mode: str) -> dict:
    """What a loop of `mode` calls besides the statement's names: the synchronize, the events and
    the spin kernel (its length set later, by `set_sleep`, once the host's cost is known)."""
    if mode == "cpu":
        return {}
    import torch

    out = {"_sync": torch.cuda.synchronize}
    if mode == "gpu":
        out.update(_sleep=torch.cuda._sleep, _sleep_cycles=[1_000_000],
                   _e0=torch.cuda.Event(enable_timing=True), _e1=torch.cuda.Event(enable_timing=True))
    return out


def sleep_cycles(host_ns_per_call: float, calls: int) -> int:
    """The spin kernel's length for a burst of `calls` that the host queues at `host_ns_per_call`."""
    return max(10_000, int(SLEEP_CYCLES_PER_NS * host_ns_per_call * calls))


def capped_calls(calls: int, unroll: int) -> int:
    """Calls a CUDA sample: as calibrated, at most CUDA_MAX_CALLS (see there)."""
    return max(unroll, min(calls, CUDA_MAX_CALLS) // unroll * unroll)
