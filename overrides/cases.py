"""The benchmark cases: which operands a torch call is made on, and the registry of their names.

A case is a named factory for the operands `(x, y)` of the op being timed. The four seed cases
are those of PyTorch's original overrides benchmark; they sit in `SEED_CASES` and are what
`python bench.py` runs with no flags. The rest of the catalog (modes, dispatch subclasses,
mixed and many operands) lives in `overrides/catalog.py` and registers itself here; a user's
own class or factory is named `pkg.module:factory` (`overrides/usercases.py`). Every tool
(bench.py, pyspybench.py, record.sh, report.sh) resolves names through `get_case` /
`resolve_cases`, so a name means the same thing everywhere.

The operand classes live at module level so that they pickle and so that a flamegraph shows
frames from this file.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ContextManager

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


@dataclasses.dataclass(frozen=True)
class Case:
    """A named way to build the operands `(x, y)` of the timed op."""

    name: str
    description: str
    make_operands: Callable[[], tuple]
    # Flamegraph file stem; the original README names the seed cases' SVGs this way.
    file_stem: str = ""
    # A fresh context manager (a TorchFunctionMode, a TorchDispatchMode) to hold active while
    # the statement runs; the Timer core enters it around each sample, outside the clock.
    context: Callable[[], ContextManager] | None = None
    # (op name, statement) pairs: this case's own statement for an op, e.g. torch.cat over 8
    # operands for the function-call op. Pairs, not a dict, so that a Case stays hashable.
    stmts: tuple[tuple[str, str], ...] = ()
    # (op name, reason) pairs: ops that make no sense for these operands; shown as "n/a: reason".
    not_applicable: tuple[tuple[str, str], ...] = ()
    # The case whose figure for the same op this one's overhead is quoted against.
    baseline: str = "Tensor"

    @property
    def stem(self) -> str:
        return self.file_stem or self.name.lower()

    def stmt_for(self, op) -> str:
        """The statement timed for `op` on this case: the case's own, else the op's."""
        return dict(self.stmts).get(op.name, op.stmt)

    def not_applicable_to(self, op) -> str | None:
        """Why `op` makes no sense for this case, or None if it does."""
        return dict(self.not_applicable).get(op.name)

    def active(self) -> ContextManager:
        """The context to hold while running a statement on this case (for one-off runs)."""
        import contextlib

        return self.context() if self.context is not None else contextlib.nullcontext()


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
         _tensor_like_operands, "overridden",
         # It has no methods, operators or attributes: these ops say so instead of failing.
         not_applicable=(("x.add", "not a Tensor"), ("x+y", "not a Tensor"),
                         ("x.shape", "not a Tensor"))),
    Case("SubWithTorchFunction", "a torch.Tensor subclass whose __torch_function__ defers to super()",
         _subclass_operands(SubWithTorchFunction), "suboverridden"),
)

BASELINE_CASE = "Tensor"  # overheads are quoted against plain tensors

_REGISTRY: dict[str, Case] = {case.name: case for case in SEED_CASES}


def register(case: Case) -> Case:
    """Add a case to the catalog (overrides/catalog.py does this for its cases on import)."""
    if case.name in _REGISTRY and _REGISTRY[case.name] is not case:
        raise ValueError(f"case {case.name!r} is registered twice")
    _REGISTRY[case.name] = case
    return case


def _load_catalog() -> None:
    # Imported here, not at the top: catalog.py imports this module for Case and the seed
    # operand classes, so either module can be imported first.
    import overrides.catalog  # noqa: F401


def all_cases() -> tuple[Case, ...]:
    _load_catalog()
    return tuple(_REGISTRY.values())


def case_names() -> list[str]:
    _load_catalog()
    return list(_REGISTRY)


def get_case(name: str) -> Case:
    """The case called `name`, or a user case `pkg.module:factory`; a UsageError if neither."""
    if ":" in name:
        from overrides.usercases import case_from_spec

        return case_from_spec(name)
    _load_catalog()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(
            f"unknown case {name!r}; valid cases: {', '.join(case_names())}, "
            "or your own as pkg.module:factory"
        ) from None


def resolve_cases(names: list[str] | None) -> tuple[Case, ...]:
    """Cases for a `--cases` list: None means the seed cases, `all` the whole catalog (and may
    sit beside user cases: `all mypkg.mod:MyTensor`)."""
    if not names:
        return SEED_CASES
    resolved: list[Case] = []
    for name in names:
        for case in (all_cases() if name == "all" else (get_case(name),)):
            if case.name in [c.name for c in resolved]:
                raise UsageError(f"case {case.name!r} is named twice in --cases; name each case once")
            resolved.append(case)
    return tuple(resolved)
