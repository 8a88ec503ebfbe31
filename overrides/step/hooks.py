"""One step of yours under two recorders that see every op your subclasses take: which ops, how
many a step, from which line of your code, and the operands each op was called with, kept for
the op table (optable.py).

- `__torch_function__` calls: sys.setprofile, which sees every class's hook the step reaches (a
  subclass made inside your model, a wrapper the optimizer meets) without being told which,
  and leaves your classes untouched. A hook is known by what it is, the code of a Tensor
  subclass's `__torch_function__` however it is defined (torchao's is
  `classmethod(_dispatch__torch_function__)`), never by its function's name. A call is counted
  once, at the outermost frame of its kind: `super().__torch_function__` is part of the call it
  serves.
- `__torch_dispatch__` calls: a dispatch mode, which sees each aten op with an operand of a class
  that defines `__torch_dispatch__` before that class does, whether its dispatch then runs in
  Python or in C++ (DTensor's, in torch 2.13, never reaches its Python `__torch_dispatch__`, so no
  profiler sees it). The mode sees only the outermost op: the ops the class runs inside it run
  with the mode set aside. Such an op is replayed forward alone, with grad off: it sits below
  autograd, and the ops the step's backward sends through the class are rows of their own.
  One reached from inside a `__torch_function__` is counted, marked nested: its cost is in its
  caller's, so the table does not add it twice.

torch's own tracing tensors (`torch._subclasses`: FakeTensor, FunctionalTensor) are no subclass
of yours and are passed by. Both recorders slow this one step only; it is never timed.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from typing import Any, Callable

import torch
from torch.overrides import resolve_name
from torch.utils._pytree import tree_flatten

HOOKS = ("__torch_function__", "__torch_dispatch__")
SIGNATURE_CHARS = 60  # an op's operands, as dtype[shape] ..., cut to this in the table
# Ops replayed on a leaf copy of their operand, not on the step's graph: backward through the
# step's graph cannot run twice, but the hooks' cost a call is the same on a leaf (the graph's
# own work is the plain step's too; what your subclass adds to the graph is the closure's).
ON_A_LEAF = ("torch.Tensor.backward", "torch.autograd.backward")
LEAF_MARK = " as a leaf"  # after such an op's operands in the table
GRAD_MARK = "*"  # after an operand that requires grad, in a __torch_function__ call's operands


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
    # no plain twin (not_applicable says why), but your copies are made: yours is timed alone, and
    # its dispatch priced against the kernels it runs (kernels.py), the overhead left unknown
    mine_only: bool = False


@dataclasses.dataclass(frozen=True)
class Captured:
    """Every hook call of one step, and one Replay per (kind, op, operands) seen."""

    calls: tuple[HookCall, ...]
    replays: tuple[Replay, ...]


def op_name(func: Any) -> str:
    """torch's name for an op (torch.nn.functional.linear, aten.mm.default); else its module
    and qualified name, never a repr with an address in it (a row must read alike each run)."""
    try:
        named = resolve_name(func)
    except Exception:
        named = None
    if named:
        return named
    qualified = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if qualified:
        module = getattr(func, "__module__", None) or getattr(getattr(func, "__self__", None), "__name__", None)
        return f"{module}.{qualified}" if module and not qualified.startswith(module) else qualified
    return str(func)


def short_op(op: str) -> str:
    """An op's name without its module: linear, add_, grad.__get__; an aten or prim op whole."""
    if not op.startswith("torch."):
        return op
    parts = op.split(".")
    return ".".join(parts[-2:]) if parts[-1].startswith("__") and len(parts) > 1 else parts[-1]


def _signature(args: Any, kwargs: Any, grads: bool = False) -> str:
    """The operands as dtype[shape], each; with `grads`, those that require grad marked
    (GRAD_MARK): two calls alike but for that run different backwards, so they are two rows."""
    leaves, _ = tree_flatten((args, kwargs))
    return ", ".join(f"{str(t.dtype).replace('torch.float', 'f').replace('torch.', '')}"
                     f"[{','.join(map(str, t.shape))}]{GRAD_MARK if grads and t.requires_grad else ''}"
                     for t in leaves if isinstance(t, torch.Tensor))


def shown_operands(signature: str) -> str:
    """An op's operands as the table shows them: cut to SIGNATURE_CHARS (the JSON keeps them whole)."""
    return signature if len(signature) <= SIGNATURE_CHARS else signature[:SIGNATURE_CHARS - 3] + "..."


TRACING_MODULE = "torch._subclasses"  # FakeTensor, FunctionalTensor: torch's tools, no subclass of yours


def dispatches(cls: type) -> bool:
    """Whether `cls` takes aten ops in a `__torch_dispatch__` of its own (in Python or in C++),
    short of torch's own tracing tensors and of a dispatch it disables."""
    if cls in (torch.Tensor, torch.nn.Parameter) or cls.__module__.startswith(TRACING_MODULE):
        return False
    own = next((vars(klass)["__torch_dispatch__"] for klass in cls.__mro__
                if klass not in (torch.Tensor, torch._C.TensorBase) and "__torch_dispatch__" in vars(klass)), None)
    return own is not None and own is not torch._C._disabled_torch_dispatch_impl


def _is_wrapper(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and dispatches(type(value))


def first_wrapper(args: Any, kwargs: Any) -> torch.Tensor | None:
    """The first operand of a class with a dispatch of its own (`dispatches`), else None."""
    leaves, _ = tree_flatten((args, kwargs))
    return next((leaf for leaf in leaves if _is_wrapper(leaf)), None)


def _wrapper_copy(value: torch.Tensor) -> torch.Tensor:
    """A wrapper subclass's own copy to replay its ops on: rebuilt from clones of its inner
    tensors (`__tensor_flatten__` / `__tensor_unflatten__`), so a replayed in-place op never
    touches the step's tensor. A wrapper without them cannot be copied: its ops are n/a."""
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    cls = type(value)
    if not is_traceable_wrapper_subclass(value):
        # its own clone() where it gives one of its kind (MaskedTensor's does): a copy as it makes them
        try:
            with torch.no_grad():
                copy = value.detach().clone()
        except Exception:
            copy = None
        if type(copy) is not cls:
            raise _NotReplayable(f"{cls.__name__} is a wrapper subclass (it defines __torch_dispatch__) without "
                                 "__tensor_flatten__: no copy of it can be made to replay its ops on")
        return copy.requires_grad_(value.requires_grad) if value.requires_grad and copy.is_leaf else copy
    names, meta = value.__tensor_flatten__()
    # DTensor names its device mesh among them: what is no tensor is passed on as it is
    inner = {name: getattr(value, name) for name in names}
    inner = {name: item.detach().clone() if isinstance(item, torch.Tensor) else item for name, item in inner.items()}
    copy = cls.__tensor_unflatten__(inner, meta, value.shape, value.stride())
    if value.requires_grad and not copy.requires_grad:
        copy.requires_grad_(True)
    return copy


class _NotReplayable(Exception):
    """Why an operand cannot be replayed (said as its op's n/a)."""


class _NoTwin(_NotReplayable):
    """Why a wrapper operand has no plain twin (NestedTensor's ragged dimension); your copy stands."""


def _copies(value: Any, twins: list) -> tuple[Any, Any]:
    """(as your subclass, as a plain tensor) copies of an operand; plain tensors copied once. A
    wrapper's twin is said in `twins` (how it was made)."""
    if not isinstance(value, torch.Tensor):
        return value, value
    cls = type(value)
    if _is_wrapper(value):
        try:
            twin, how = _wrapper_twin(value)
        except _NoTwin as exc:  # your copy still made: its dispatch can be priced against its kernels
            twins.append(_NoTwin(str(exc)))
            return _wrapper_copy(value), None
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
            twin, how = plain_like(value, local_shards=False)  # the step's plain twin computes the whole
    except NoTwin as exc:
        raise _NoTwin(f"no plain twin of {type(value).__name__}: {exc}") from None
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


def _replay(kind: str, op: str, signature: str, func: Callable, args: tuple, kwargs: dict, grad: bool) -> Replay:
    twins: list = []  # how each wrapper operand's twin was made, or _NoTwin where none can be
    try:
        (mine_args, mine_kwargs), (plain_args, plain_kwargs) = _both((tuple(args), dict(kwargs or {})), twins)
        missing = [str(t) for t in twins if isinstance(t, _NoTwin)]
        if missing:  # timed as yours alone, its dispatch against the kernels it runs (optable.py)
            return Replay(kind, op, signature, func, mine_args, mine_kwargs, (), {}, grad, missing[0], mine_only=True)
    except _NotReplayable as exc:
        return Replay(kind, op, signature, func, (), {}, (), {}, grad, str(exc))
    except Exception as exc:  # operands that cannot be copied: the op is n/a, said why
        return Replay(kind, op, signature, func, (), {}, (), {}, grad,
                      f"its operands could not be copied ({type(exc).__name__}: {exc})")
    return Replay(kind, op, signature, func, mine_args, mine_kwargs, plain_args, plain_kwargs, grad,
                  twin="; ".join(dict.fromkeys(twins)))


def _first_code(function: Any) -> Any:
    """The code that runs for a hook as its class holds it: a classmethod's or staticmethod's
    function, unwrapped past decorators that keep `__wrapped__`; None for one written in C."""
    function = getattr(function, "__func__", function)
    try:
        function = inspect.unwrap(function)
    except Exception:  # a __wrapped__ chain that loops: the outermost then
        pass
    return getattr(function, "__code__", None)


def hook_codes() -> dict:
    """{code: hook kind} of every `__torch_function__` and `__torch_dispatch__` of torch.Tensor and
    its subclasses as they stand: a hook known by what it is, whatever its function is named."""
    codes, seen, stack = {}, set(), [torch.Tensor]
    while stack:
        cls = stack.pop()
        for kind in HOOKS:
            code = _first_code(inspect.getattr_static(cls, kind, None))
            if code is not None:
                codes.setdefault(code, kind)
        for sub in type.__subclasses__(cls):
            if sub not in seen:
                seen.add(sub)
                stack.append(sub)
    return codes


def _hook_arguments(frame) -> tuple[Any, Any, Any, Any]:
    """(cls, func, args, kwargs) of a hook's frame, by position: the protocol passes them so
    (`__torch_function__(cls, func, types, args=(), kwargs=None)`), whatever they are named."""
    code, local = frame.f_code, frame.f_locals
    value = [local.get(name) for name in code.co_varnames[:code.co_argcount]] + [None] * 5
    return value[0], value[1], value[3] or (), value[4] or {}


class _Recorder:
    """Both recorders' state during the one step (never leaves this module)."""

    def __init__(self, user_dir: str):
        self.user_dir = os.path.join(os.path.realpath(user_dir), "")
        # (frame, kind) of the hook calls under way; a dispatched op's frame is None
        self.open: list[tuple[Any, str]] = []
        self.calls: list[HookCall] = []
        self.replays: dict[tuple[str, str, str], Replay] = {}
        self.files: dict[str, bool] = {}
        self.codes = hook_codes()
        self.not_hooks: set = set()  # codes named like a hook that no class holds as one (a mode's)

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

    def _kind(self, code) -> str | None:
        kind = self.codes.get(code)
        if kind is None and code.co_name in HOOKS and code not in self.not_hooks:
            self.codes = hook_codes()  # a class made since the step began
            kind = self.codes.get(code)
            if kind is None:
                self.not_hooks.add(code)
        return kind

    def record(self, kind: str, cls: type, func: Any, args: Any, kwargs: Any, caller, grad: bool) -> None:
        """One hook call; its replay where it is the first of its op and operands, outermost."""
        nested = bool(self.open)
        # a dispatched op runs below autograd: whether its operands require grad changes nothing
        op, signature = op_name(func), _signature(args, kwargs, grads=kind == "__torch_function__")
        signature += LEAF_MARK if op in ON_A_LEAF else ""
        self.calls.append(HookCall(kind, op, cls.__name__, self.site(caller), signature, nested))
        key = (kind, op, signature)
        if key not in self.replays and not nested:
            self.replays[key] = _replay(kind, op, signature, func, args, kwargs, grad)

    def __call__(self, frame, event: str, arg: Any) -> None:
        if event == "return" and self.open and self.open[-1][0] is frame:
            self.open.pop()
            return
        if event != "call" or self._kind(frame.f_code) != "__torch_function__":
            return  # a __torch_dispatch__ in Python is seen by the dispatch mode, as one in C++ is
        cls, func, args, kwargs = _hook_arguments(frame)
        cls = cls if isinstance(cls, type) else type(cls)
        if not issubclass(cls, torch.Tensor) or any(k == "__torch_function__" for _, k in self.open):
            return  # a mode's hook, or super() inside a call already counted
        self.record("__torch_function__", cls, func, args, kwargs, frame.f_back, torch.is_grad_enabled())
        self.open.append((frame, "__torch_function__"))


def _dispatch_mode(recorder: _Recorder):
    """A dispatch mode that records each aten op with an operand of a class with a dispatch of
    its own (`dispatches`), then lets the op run as it would (the mode set aside inside it)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class SubclassOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            wrapper = first_wrapper(args, kwargs)
            if wrapper is None:
                return func(*args, **kwargs)
            # below autograd: replayed forward alone, grad off (backward's ops are rows of their own);
            # the profile hook set aside meanwhile: copying an operand (MaskedTensor's clone()) calls
            # its class's __torch_function__, which is the recorder's, not the step's
            profiler = sys.getprofile()
            sys.setprofile(None)
            try:
                recorder.record("__torch_dispatch__", type(wrapper), func, args, kwargs, sys._getframe(1), False)
            finally:
                sys.setprofile(profiler)
            recorder.open.append((None, "__torch_dispatch__"))
            try:
                return func(*args, **kwargs)
            finally:
                recorder.open.pop()

    return SubclassOps()


def capture_step(step: Callable[[], object], user_dir: str) -> Captured:
    """Run `step` once under both recorders; every hook call it made, and the operands to replay."""
    recorder = _Recorder(user_dir)
    previous = sys.getprofile()
    sys.setprofile(recorder)
    try:
        with _dispatch_mode(recorder):
            step()
    finally:
        sys.setprofile(previous)
    return Captured(tuple(recorder.calls), tuple(recorder.replays.values()))
