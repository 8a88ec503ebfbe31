"""One step of yours under a hook that sees every call of your subclass's `__torch_function__`
and `__torch_dispatch__`: which ops, how many a step, from which line of your code, and the
operands each op was called with, kept for the op table (optable.py).

Why sys.setprofile and not a wrapper on your class: it sees every class's hooks the step
reaches (a subclass made inside your model, a wrapper the optimizer meets) without being told
which, and leaves your classes untouched. A hook's call is counted once, at the outermost frame
of its kind: `super().__torch_function__` is part of the call it serves. A `__torch_dispatch__`
reached from inside a `__torch_function__` is counted, marked nested: its cost is in its
caller's, so the table does not add it twice. The profiler hook slows this one step only; it
is never timed.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Callable

import torch
from torch.overrides import resolve_name
from torch.utils._pytree import tree_flatten

from overrides.cases.usercases import defines_torch_dispatch

HOOKS = ("__torch_function__", "__torch_dispatch__")
SIGNATURE_CHARS = 60  # an op's operands, as dtype[shape] ..., cut to this in the table
# Ops replayed on a leaf copy of their operand, not on the step's graph: backward through the
# step's graph cannot run twice, but the hooks' cost a call is the same on a leaf (the graph's
# own work is the plain step's too; what your subclass adds to the graph is the closure's).
ON_A_LEAF = ("torch.Tensor.backward", "torch.autograd.backward")
LEAF_MARK = " as a leaf"  # after such an op's operands in the table


@dataclasses.dataclass(frozen=True)
class HookCall:
    """One call of a subclass's hook during the step."""

    kind: str  # one of HOOKS
    op: str  # torch.nn.functional.linear, aten.mm.default
    cls: str  # the class whose hook ran
    site: str  # the first frame in your files: steps.py:42 (step)
    signature: str  # the operands: f32[32,256], f32[256,256]
    nested: bool  # inside another hook's call: its cost is in that call's


@dataclasses.dataclass(frozen=True)
class Replay:
    """An op's operands as the step passed them, copied twice: as your subclass and as plain
    tensors (what `as_subclass(torch.Tensor)` gives), to time the op on each (optable.py)."""

    kind: str
    op: str
    signature: str
    func: Callable
    subclass_args: tuple
    subclass_kwargs: dict
    plain_args: tuple
    plain_kwargs: dict
    grad_enabled: bool  # the grad mode the op ran under (the optimizer's: off)
    not_applicable: str = ""  # why it cannot be replayed on plain tensors (then the copies are empty)
    twin: str = ""  # how a wrapper operand's plain twin was made (cases/twins.py); "" without one


@dataclasses.dataclass(frozen=True)
class Captured:
    """Every hook call of one step, and one Replay per (kind, op, operands) seen."""

    calls: tuple[HookCall, ...]
    replays: tuple[Replay, ...]


def op_name(func: Any) -> str:
    try:
        return resolve_name(func) or str(func)
    except Exception:
        return getattr(func, "__qualname__", None) or str(func)


def short_op(op: str) -> str:
    """An op's name without its module: linear, add_, grad.__get__, aten.mm.default."""
    if op.startswith("aten."):
        return op
    parts = op.split(".")
    return ".".join(parts[-2:]) if parts[-1].startswith("__") and len(parts) > 1 else parts[-1]


def _signature(args: Any, kwargs: Any) -> str:
    leaves, _ = tree_flatten((args, kwargs))
    text = ", ".join(f"{str(t.dtype).replace('torch.float', 'f').replace('torch.', '')}"
                     f"[{','.join(map(str, t.shape))}]" for t in leaves if isinstance(t, torch.Tensor))
    return text if len(text) <= SIGNATURE_CHARS else text[:SIGNATURE_CHARS - 3] + "..."


def _is_wrapper(value: Any) -> bool:
    return (isinstance(value, torch.Tensor) and type(value) not in (torch.Tensor, torch.nn.Parameter)
            and defines_torch_dispatch(type(value)))


def _wrapper_copy(value: torch.Tensor) -> torch.Tensor:
    """A wrapper subclass's own copy to replay its ops on: rebuilt from clones of its inner
    tensors (`__tensor_flatten__` / `__tensor_unflatten__`), so a replayed in-place op never
    touches the step's tensor. A wrapper without them cannot be copied: its ops are n/a."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    cls = type(value)
    if not is_traceable_wrapper_subclass(value):
        raise _NotReplayable(f"{cls.__name__} is a wrapper subclass (it defines __torch_dispatch__) without "
                             "__tensor_flatten__: no copy of it can be made to replay its ops on")
    names, meta = value.__tensor_flatten__()
    inner = {name: getattr(value, name).detach().clone() for name in names}
    copy = cls.__tensor_unflatten__(inner, meta, value.shape, value.stride())
    if value.requires_grad and not copy.requires_grad:
        copy.requires_grad_(True)
    return copy


class _NotReplayable(Exception):
    """Why an operand cannot be replayed (said as its op's n/a)."""


def _copies(value: Any, twins: list) -> tuple[Any, Any]:
    """(as your subclass, as a plain tensor) copies of an operand; plain tensors copied once. A
    wrapper's twin is said in `twins` (how it was made)."""
    if not isinstance(value, torch.Tensor):
        return value, value
    cls = type(value)
    if _is_wrapper(value):
        twin, how = _wrapper_twin(value)
        twins.append(f"{cls.__name__}: {how}")
        return _wrapper_copy(value), twin
    with torch._C.DisableTorchFunctionSubclass(), torch.no_grad():
        data = value.detach().as_subclass(torch.Tensor).clone()
        grads = value.requires_grad and (data.is_floating_point() or data.is_complex())
        if cls in (torch.Tensor, torch.nn.Parameter):
            same = data.requires_grad_(grads)
            _with_grad(value, same)
            return same, same
        mine = data.clone().as_subclass(cls)
        mine.__dict__.update(vars(value))  # what your __new__ attached (a unit, a scale)
        mine.requires_grad_(grads), data.requires_grad_(grads)
        _with_grad(value, mine, data)
    return mine, data


def _with_grad(value: torch.Tensor, *copies: torch.Tensor) -> None:
    """A leaf's grad copied onto its copies: `p.grad` replayed on a copy without one returns None
    and skips what your hook does with the grad (wrapping it as your class)."""
    held = value.grad if value.is_leaf and value.requires_grad else None
    if held is not None:
        for copy in copies:
            copy.grad = held.detach().as_subclass(torch.Tensor).clone()


def _wrapper_twin(value: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A wrapper operand's plain twin, as a case's (cases/twins.py: a new plain tensor of its
    outer shape and dtype, holding its `dequantize()`'s values or an inner tensor's), and how."""
    from overrides.cases.twins import NoTwin, plain_like

    try:
        with torch.no_grad():
            twin, how = plain_like(value)
    except NoTwin as exc:
        raise _NotReplayable(f"no plain twin of {type(value).__name__}: {exc}") from None
    return twin.detach().requires_grad_(value.requires_grad), how


def _both(value: Any, twins: list) -> tuple[Any, Any]:
    """`value` (an operand, or lists, tuples and dicts of them) copied twice (`_copies`)."""
    if isinstance(value, dict):
        pairs = {key: _both(item, twins) for key, item in value.items()}
        return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
    if isinstance(value, (list, tuple)):
        pairs = [_both(item, twins) for item in value]
        return type(value)(p[0] for p in pairs), type(value)(p[1] for p in pairs)
    return _copies(value, twins)


def _replay(kind: str, op: str, signature: str, func: Callable, args: tuple, kwargs: dict) -> Replay:
    twins: list[str] = []
    try:
        (mine_args, mine_kwargs), (plain_args, plain_kwargs) = _both((tuple(args), dict(kwargs or {})), twins)
    except _NotReplayable as exc:
        return Replay(kind, op, signature, func, (), {}, (), {}, torch.is_grad_enabled(), str(exc))
    return Replay(kind, op, signature, func, mine_args, mine_kwargs, plain_args, plain_kwargs,
                  torch.is_grad_enabled(), twin="; ".join(dict.fromkeys(twins)))


class _Recorder:
    """The profile hook's state during the one step (never leaves this module)."""

    def __init__(self, user_dir: str):
        self.user_dir = os.path.join(os.path.realpath(user_dir), "")
        self.open: list[tuple[Any, str]] = []  # (frame, kind) of the hook calls under way
        self.calls: list[HookCall] = []
        self.replays: dict[tuple[str, str, str], Replay] = {}
        self.files: dict[str, bool] = {}

    def _mine(self, filename: str) -> bool:
        if filename not in self.files:
            self.files[filename] = os.path.realpath(filename).startswith(self.user_dir)
        return self.files[filename]

    def site(self, frame) -> str:
        while frame is not None:
            code = frame.f_code
            if self._mine(code.co_filename):
                return f"{os.path.relpath(code.co_filename, self.user_dir)}:{frame.f_lineno} ({code.co_name})"
            frame = frame.f_back
        return "(not in your files)"

    def __call__(self, frame, event: str, arg: Any) -> None:
        if event == "return" and self.open and self.open[-1][0] is frame:
            self.open.pop()
            return
        if event != "call" or frame.f_code.co_name not in HOOKS:
            return
        kind = frame.f_code.co_name
        local = frame.f_locals
        cls = local.get("cls")
        if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)) or any(k == kind for _, k in self.open):
            return  # a mode's hook, or super() inside a call already counted
        nested = bool(self.open)
        self.open.append((frame, kind))
        func, args, kwargs = local.get("func"), local.get("args") or (), local.get("kwargs") or {}
        op, signature = op_name(func), _signature(args, kwargs)
        signature += LEAF_MARK if op in ON_A_LEAF else ""
        self.calls.append(HookCall(kind, op, cls.__name__, self.site(frame.f_back), signature, nested))
        key = (kind, op, signature)
        if key not in self.replays and not nested:
            try:
                self.replays[key] = _replay(kind, op, signature, func, args, kwargs)
            except Exception as exc:  # operands that cannot be copied: the op is n/a, said why
                self.replays[key] = Replay(kind, op, signature, func, (), {}, (), {}, torch.is_grad_enabled(),
                                           f"its operands could not be copied ({type(exc).__name__}: {exc})")


def capture_step(step: Callable[[], object], user_dir: str) -> Captured:
    """Run `step` once under the hook; every hook call it made, and the operands to replay."""
    recorder = _Recorder(user_dir)
    previous = sys.getprofile()
    sys.setprofile(recorder)
    try:
        step()
    finally:
        sys.setprofile(previous)
    return Captured(tuple(recorder.calls), tuple(recorder.replays.values()))
