"""The catalog beyond the four seed cases: modes, dispatch subclasses, mixed and many operands.

Real overhead comes from more than `torch.add` on the seed classes: `TorchFunctionMode` and
`TorchDispatchMode`, `__torch_dispatch__` wrapper subclasses (how FakeTensor, DTensor and many
libraries work), subclasses that switch `__torch_function__` off, calls where only some operands
override, and calls with many overloaded operands. The registry (`overrides/cases/registry.py`)
adds these cases to the seed cases, so `--cases NAME` and `--cases all` find them everywhere.
Each one's name and description are declared in `overrides/cases/casenames.py` (readable
without torch); here it gets its operands.

Operand classes and modes live at module level so that they pickle and so that a flamegraph
shows frames from this file.
"""

from __future__ import annotations

import torch
import torch.utils._pytree as pytree
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from overrides.cases.casenames import MANY_OPERANDS, Case
from overrides.cases.seedcases import (SubWithTorchFunction, X_VALUE, Y_VALUE, _subclass_operands,
                                       plain_operands, with_operands)


class ForwardingFunctionMode(TorchFunctionMode):
    """A TorchFunctionMode that only runs the call it intercepts: the cost of having a mode."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class ForwardingDispatchMode(TorchDispatchMode):
    """A TorchDispatchMode that only runs the aten op it intercepts."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class WrapperDispatchTensor(torch.Tensor):
    """A wrapper subclass in the style of DTensor and TwoTensor: no storage of its own, the data
    in an inner tensor, `__torch_dispatch__` unwraps, runs the aten op and rewraps (with
    torch.utils._pytree, as those libraries do: most of its cost is there). Like them it keeps
    the default `Tensor.__torch_function__`, so a call pays both layers."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor):
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=elem.requires_grad)
        wrapper.elem = elem
        return wrapper

    def __init__(self, elem: torch.Tensor):
        pass  # everything happens in __new__; Tensor.__init__ would not take `elem`

    def __repr__(self) -> str:
        return f"WrapperDispatchTensor({self.elem!r})"

    # The traceable-subclass protocol: names the inner tensors (cases.unwrap reads it too).
    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner_tensors, ctx, outer_size, outer_stride):
        return WrapperDispatchTensor(inner_tensors["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        args, kwargs = pytree.tree_map_only(cls, lambda t: t.elem, (args, kwargs or {}))
        out = func(*args, **kwargs)
        return pytree.tree_map_only(torch.Tensor, cls, out)


class SubWithDisabledTorchFunction(torch.Tensor):
    """A subclass that opts out of `__torch_function__` (as `nn.Parameter` does): results come
    back as plain Tensors, and the Python `Tensor.__torch_function__` is never entered."""

    __torch_function__ = torch._C._disabled_torch_function_impl


def _wrapper_operands() -> tuple:
    x, y = plain_operands()
    return WrapperDispatchTensor(x), WrapperDispatchTensor(y)


def _mixed_operands() -> tuple:
    x, y = plain_operands()
    return x, y.as_subclass(SubWithTorchFunction)


def _many_tensors() -> list[torch.Tensor]:
    return [torch.tensor([X_VALUE if i % 2 == 0 else Y_VALUE]) for i in range(MANY_OPERANDS)]


def _many_plain_operands() -> tuple:
    return _many_tensors(), None


def _many_subclass_operands() -> tuple:
    return [t.as_subclass(SubWithTorchFunction) for t in _many_tensors()], None


CATALOG_CASES: tuple[Case, ...] = (
    with_operands("TorchFunctionMode", plain_operands, context=ForwardingFunctionMode),
    with_operands("TorchDispatchMode", plain_operands, context=ForwardingDispatchMode),
    with_operands("WrapperDispatchTensor", _wrapper_operands),
    with_operands("SubWithDisabledTorchFunction", _subclass_operands(SubWithDisabledTorchFunction)),
    with_operands("MixedTensorSub", _mixed_operands),
    with_operands("Cat8Tensor", _many_plain_operands),
    with_operands("Cat8SubWithTorchFunction", _many_subclass_operands),
)
