"""The seed cases: the operands of PyTorch's original overrides benchmark, and how cases are built.

A case is a named factory for the operands `(x, y)` of the op being timed. The four seed cases
are those of PyTorch's original overrides benchmark; they sit in `SEED_CASES` and are what
`python bench.py` runs with no flags. The rest of the catalog (modes, dispatch subclasses,
mixed and many operands, `overrides/cases/catalog.py`) builds its operands from the ones here.
Every tool finds a case by its name in `overrides/cases/registry.py`; what each built-in case is
called and means is declared without torch in `overrides/cases/casenames.py`, and this module
and the catalog give each its operands.

The operand classes live at module level so that they pickle and so that a flamegraph shows
frames from this file.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ContextManager

import torch

from overrides.cases import casenames
from overrides.cases.casenames import Case

# The seed benchmark's operands: 1-element float tensors holding 1.0 and 2.0. One element keeps
# the kernel itself negligible, so what is measured is the dispatch around it.
X_VALUE = 1.0
Y_VALUE = 2.0


# What plain_operands() makes: the seed's 1-element CPU float tensors unless a case named with
# other operands (`CASE@64x64`, `CASE@1/meta`: with_operands_of) is building its own. Every
# case builds on plain_operands(), so one setting shapes them all, catalog cases included.
_making: casenames.Operands = casenames.Operands()


def plain_operands() -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh plain tensors; every case builds its operands from these."""
    spec = _making
    if spec.default:
        return torch.tensor([X_VALUE]), torch.tensor([Y_VALUE])
    kind = getattr(torch, spec.dtype)
    return (torch.full(spec.shape, X_VALUE, dtype=kind, device=spec.device),
            torch.full(spec.shape, Y_VALUE, dtype=kind, device=spec.device))


def with_operands_of(case: Case, named: Case, operands: casenames.Operands) -> Case:
    """`case` with `operands`, under the named case's name, stem and baseline (`named`, from
    casenames.described)."""
    make = case.make_operands

    def make_them() -> tuple:
        global _making
        before, _making = _making, operands
        try:
            return make()
        finally:
            _making = before

    return dataclasses.replace(case, name=named.name, description=named.description,
                               file_stem=named.file_stem, baseline=named.baseline, make_operands=make_them)


class SubTensor(torch.Tensor):
    """A Tensor subclass that overrides nothing: it still goes through the Python
    `torch.Tensor.__torch_function__`, which re-wraps results in the subclass."""


class WithTorchFunction:
    """A tensor-like that is not a Tensor: it holds one and answers torch calls itself."""

    def __init__(self, tensor: torch.Tensor):
        self._tensor = tensor

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if func is torch.add and not kwargs and len(args) == 2:
            # The seed's behaviour, kept as the fast path so the figure stays comparable.
            return cls(args[0]._tensor + args[1]._tensor)
        unwrapped = [a._tensor if isinstance(a, WithTorchFunction) else a for a in args]
        result = func(*unwrapped, **kwargs)
        return cls(result) if isinstance(result, torch.Tensor) else result

    def __repr__(self) -> str:
        return f"WithTorchFunction({self._tensor!r})"


class SubWithTorchFunction(torch.Tensor):
    """A Tensor subclass whose `__torch_function__` only defers to the base class's."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        return super().__torch_function__(func, types, args, kwargs)


def unwrap(value: Any) -> Any:
    """The plain-tensor view of a case's result, so results of all cases can be compared."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if type(value) in (tuple, list):  # not torch.Size, a tuple subclass that is already plain
        return type(value)(unwrap(v) for v in value)
    if isinstance(value, WithTorchFunction):
        return value._tensor
    if isinstance(value, torch.Tensor) and is_traceable_wrapper_subclass(value):
        # A wrapper subclass holds its data in inner tensors (__tensor_flatten__ names them).
        inner_names, _ = value.__tensor_flatten__()
        return unwrap(getattr(value, inner_names[0]))
    if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
        return value.as_subclass(torch.Tensor)
    return value


def with_operands(name: str, make_operands: Callable[[], tuple],
                  context: Callable[[], ContextManager] | None = None) -> Case:
    """The built-in case `name` (`overrides/cases/casenames.py` says what it is) with its operands
    and, for a mode, the context to hold active."""
    return dataclasses.replace(casenames.described(name), make_operands=make_operands,
                               context=context)


def _subclass_operands(cls: type) -> Callable[[], tuple]:
    def make() -> tuple:
        x, y = plain_operands()
        return x.as_subclass(cls), y.as_subclass(cls)

    return make


def _tensor_like_operands() -> tuple:
    x, y = plain_operands()
    return WithTorchFunction(x), WithTorchFunction(y)


SEED_CASES: tuple[Case, ...] = (
    with_operands("Tensor", plain_operands),
    with_operands("SubTensor", _subclass_operands(SubTensor)),
    with_operands("WithTorchFunction", _tensor_like_operands),
    with_operands("SubWithTorchFunction", _subclass_operands(SubWithTorchFunction)),
)
