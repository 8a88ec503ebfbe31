import torch


class UnitTensor(torch.Tensor):
    """A tensor with a physical unit, checked on add."""

    @staticmethod
    def __new__(cls, data, unit):
        t = torch.Tensor._make_subclass(cls, torch.as_tensor(data))
        t.unit = unit
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        _note(func, types)  # the ~100 ns edit: a hook that does nothing yet
        units = [a.unit for a in args if isinstance(a, UnitTensor)]
        if func in (torch.add, torch.Tensor.add, torch.Tensor.__add__) and len(set(units)) > 1:
            raise ValueError(f"adding {units[0]} to {units[1]}")
        out = super().__torch_function__(func, types, args, kwargs)
        if isinstance(out, UnitTensor) and units:
            out.unit = units[0]
        return out


def _note(func, types):
    return func is None or not types


def pair():
    return UnitTensor(torch.ones(1), "m"), UnitTensor(torch.ones(1), "m")


def pair64():
    return UnitTensor(torch.ones(64, 64), "m"), UnitTensor(torch.ones(64, 64), "m")
