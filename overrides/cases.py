"""The benchmark cases: which operands a torch call is made on, and the registry of their names.

A case is a named factory for the operands `(x, y)` of the op being timed. The four seed cases
are those of PyTorch's original overrides benchmark; they sit in `SEED_CASES` and are what
`python bench.py` runs with no flags. Every other tool (pyspybench.py, record.sh, report.sh)
resolves names through `get_case`, so a name means the same thing everywhere.

The operand classes live at module level so that they pickle and so that a flamegraph shows
frames from this file.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from overrides.errors import UsageError

# The seed benchmark's operands: 1-element float tensors holding 1.0 and 2.0. One element keeps
# the kernel itself negligible, so what is measured is the dispatch around it.
X_VALUE = 1.0
Y_VALUE = 2.0


def plain_operands() -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh plain tensors; every case builds its operands from these."""
    return torch.tensor([X_VALUE]), torch.tensor([Y_VALUE])


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
    if isinstance(value, WithTorchFunction):
        return value._tensor
    if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
        return value.as_subclass(torch.Tensor)
    return value


@dataclasses.dataclass(frozen=True)
class Case:
    """A named way to build the operands `(x, y)` of the timed op."""

    name: str
    description: str
    make_operands: Callable[[], tuple]
    # Flamegraph file stem; the original README names the seed cases' SVGs this way.
    file_stem: str = ""

    @property
    def stem(self) -> str:
        return self.file_stem or self.name.lower()


def _subclass_operands(cls: type) -> Callable[[], tuple]:
    def make() -> tuple:
        x, y = plain_operands()
        return x.as_subclass(cls), y.as_subclass(cls)

    return make


def _tensor_like_operands() -> tuple:
    x, y = plain_operands()
    return WithTorchFunction(x), WithTorchFunction(y)


SEED_CASES: tuple[Case, ...] = (
    Case("Tensor", "plain torch.Tensor operands: the baseline every overhead is measured against",
         plain_operands, "tensor"),
    Case("SubTensor", "a torch.Tensor subclass that overrides nothing",
         _subclass_operands(SubTensor), "subtensor"),
    Case("WithTorchFunction", "a tensor-like (not a Tensor) whose __torch_function__ answers the call",
         _tensor_like_operands, "overridden"),
    Case("SubWithTorchFunction", "a torch.Tensor subclass whose __torch_function__ defers to super()",
         _subclass_operands(SubWithTorchFunction), "suboverridden"),
)

BASELINE_CASE = "Tensor"  # overheads are quoted against plain tensors

_REGISTRY: dict[str, Case] = {case.name: case for case in SEED_CASES}


def all_cases() -> tuple[Case, ...]:
    return tuple(_REGISTRY.values())


def case_names() -> list[str]:
    return list(_REGISTRY)


def get_case(name: str) -> Case:
    """The case called `name`; a UsageError listing the valid names if there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(
            f"unknown case {name!r}; valid cases: {', '.join(case_names())}"
        ) from None


def resolve_cases(names: list[str] | None) -> tuple[Case, ...]:
    """Cases for a `--cases` list: None means the seed cases, `all` the whole catalog."""
    if not names:
        return SEED_CASES
    if names == ["all"]:
        return all_cases()
    resolved = []
    for name in names:
        case = get_case(name)
        if case in resolved:
            raise UsageError(f"case {name!r} is named twice in --cases; name each case once")
        resolved.append(case)
    return tuple(resolved)
