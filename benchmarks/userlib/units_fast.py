import torch


class UnitTensor(torch.Tensor):
    """A tensor with a physical unit, checked on add: the optimised version."""

    @staticmethod
    def __new__(cls, data, unit):
        t = torch.Tensor._make_subclass(cls, torch.as_tensor(data))
        t.unit = unit
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        unit = None
        for a in args:
            if type(a) is UnitTensor:
                if unit is not None and a.unit != unit and func in _ADDS:
                    raise ValueError(f"adding {unit} to {a.unit}")
                unit = unit or a.unit
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        if type(out) is torch.Tensor and unit is not None:
            out = out.as_subclass(UnitTensor)
            out.unit = unit
        return out


_ADDS = (torch.add, torch.Tensor.add, torch.Tensor.__add__)


def pair():
    return UnitTensor(torch.ones(1), "m"), UnitTensor(torch.ones(1), "m")


def pair64():
    return UnitTensor(torch.ones(64, 64), "m"), UnitTensor(torch.ones(64, 64), "m")
