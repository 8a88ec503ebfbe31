"""units.py with a known cost: each `__torch_function__` call busy-waits WAIT_NS first, on the
wall clock (a perf_counter_ns spin: preempted, it still ends on time), so a step of it costs
its calls x WAIT_NS more than units.py's: the known truth of `--compare steps:mlp steps:mlp_wait
--step` (benchmarks/step_compare_validation.py)."""
import time

import torch

WAIT_NS = 20_000


def wait():
    end = time.perf_counter_ns() + WAIT_NS
    while time.perf_counter_ns() < end:
        pass


class UnitTensor(torch.Tensor):
    """A tensor with a physical unit, checked on add; each call waits WAIT_NS."""

    @staticmethod
    def __new__(cls, data, unit):
        t = torch.Tensor._make_subclass(cls, torch.as_tensor(data))
        t.unit = unit
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        wait()
        kwargs = kwargs or {}
        units = [a.unit for a in args if isinstance(a, UnitTensor)]
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__) and len(set(units)) > 1:
            raise ValueError(f"adding {units[0]} to {units[1]}")
        out = super().__torch_function__(func, types, args, kwargs)
        if isinstance(out, UnitTensor) and units:
            out.unit = units[0]
        return out


def pair():
    return UnitTensor(torch.ones(1), "m"), UnitTensor(torch.ones(1), "m")
