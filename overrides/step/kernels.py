"""What an op of a wrapper subclass runs inside its dispatch: the aten work it adds (a
dequantize, the rank's local shard of a DTensor), told apart from the dispatch itself.

An op row's overhead is your op less its plain twin's. For a wrapper that holds other tensors
(an int8 payload and a scale; a DTensor's local shard) part of that is not dispatch at all but
kernels the subclass runs instead of, or beside, the twin's: the int8 weight's `.to()` and the
scale's `mul`; a sharded DTensor's `mm` on its local rows, cheaper than the twin's on the whole.
So each replayed op is run once more, untimed, under a dispatch mode that lets the subclass
handle its own ops (it answers NotImplemented to them, and stays set while the subclass runs)
and records each aten op the subclass then runs on plain tensors, with a copy of its operands.
Its plain twin is run the same way. Where the two ran the same ops on the same operands (a
metadata subclass, a Replicate DTensor), the subclass adds no kernels: all of its overhead is
dispatch, exactly. Where they differ, the subclass's recorded ops are timed in sequence beside
the twin's op (forward alone, grad off: what the kernels cost), and the op's overhead splits
into its own kernels (recorded ops less the twin's) and dispatch (the rest: Python, the
library's logic, wrapping the output). Ops with no tensor operand (the empty outputs a wrapper
allocates) are the wrapper's construction, so dispatch, and are left out of its kernels.

An op whose dispatch redistributes its operands (DTensor's `redistribute_local_tensor` ran:
a Shard(0) operand beside a Shard(1) one, a Replicate one sharded to match) is said so, with the
collectives it ran (`c10d` or `_c10d_functional`: all_gather, all_reduce, ...) or, where it
only sliced its local tensor, `locally`: its cost is the library's placement logic and the
communication, not the twin's kernel.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from overrides.step.hooks import TRACING_MODULE, Replay, _signature, first_wrapper, op_name

COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")
COLLECTIVE_BOOKKEEPING = ("wait_tensor", "_wrap_tensor_autograd")  # around a collective, not one
REDISTRIBUTING = ("redistribute_local_tensor",)  # DTensor's one path that moves a tensor's placement
LOCALLY = "locally"  # a redistribution with no collective: its local tensor sliced
# Recorded kernels past this many are not timed (a dispatch that runs a loop of ops is no single
# op's kernels): the row keeps its overhead whole, said.
MAX_KERNELS = 64


@dataclasses.dataclass(frozen=True)
class KernelOp:
    """One aten op a wrapper's dispatch ran on plain tensors, with copies of its operands."""

    func: Any
    args: tuple
    kwargs: dict

    @property
    def name(self) -> str:
        return op_name(self.func)

    @property
    def key(self) -> str:
        return f"{self.name}({_signature(self.args, self.kwargs)})"


@dataclasses.dataclass(frozen=True)
class Kernels:
    """The aten ops your op ran inside its dispatch, and those its plain twin ran."""

    ops: tuple[KernelOp, ...]
    twin_ops: tuple[str, ...]  # KernelOp.key of each op the twin ran
    why_not: str = ""  # why they cannot be timed ("" where they can)
    redistributed: bool = False  # a redistribution ran inside (REDISTRIBUTING)

    @property
    def same(self) -> bool:
        """The same aten ops on the same operands as the twin: no kernels of its own."""
        return tuple(op.key for op in self.ops) == self.twin_ops

    @property
    def redistributes(self) -> tuple[str, ...]:
        """The collectives a redistribution ran, or (LOCALLY,) for one that ran none; () for none."""
        found = tuple(dict.fromkeys(op.name.split(".")[1] for op in self.ops
                                    if op.name.split(".")[0] in COLLECTIVE_NAMESPACES
                                    and op.name.split(".")[1] not in COLLECTIVE_BOOKKEEPING))
        return found or ((LOCALLY,) if self.redistributed else ())

    def described(self) -> str:
        """`_to_copy, mm, mul against mm`: what ran inside, each op once; where the names are the
        twin's own, with their operands (`mm(f32[16,64], f32[64,64]) against mm(f32[64,64], ...)`)."""
        mine = list(dict.fromkeys(_short(op.name) for op in self.ops))
        twin = list(dict.fromkeys(_short(key.split("(")[0]) for key in self.twin_ops))
        if mine == twin:
            mine = list(dict.fromkeys(_short(op.key.split("(")[0]) + "(" + op.key.split("(", 1)[1] for op in self.ops))
            twin = list(dict.fromkeys(_short(key.split("(")[0]) + "(" + key.split("(", 1)[1] for key in self.twin_ops))
        if not self.twin_ops:  # no twin ran (it has none): what yours ran, alone
            return ", ".join(mine) or "none"
        return f"{', '.join(mine) or 'none'} against {', '.join(twin) or 'none'}"


def _short(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 else name


def _tracing(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and type(value).__module__.startswith(TRACING_MODULE)


def _kept(value: Any) -> Any:
    """A copy of an operand as it stood before the op (in-place ops write to theirs); a tensor
    whose elements share memory (an expand) cannot be copied alike, and no op writes to one."""
    if not isinstance(value, torch.Tensor):
        return value
    with torch.no_grad():
        if torch._debug_has_internal_overlap(value) == 1:  # 1: it overlaps for sure
            return value.detach()
        return value.detach().clone()


def _recorder(ops: list, wrappers: bool):
    from torch.utils._python_dispatch import TorchDispatchMode

    class KernelsRan(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if wrappers and first_wrapper(args, kwargs) is not None:
                return NotImplemented  # the subclass's own dispatch runs, this mode still set
            leaves, _ = tree_flatten((args, kwargs))
            tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
            if tensors and not any(_tracing(t) for t in tensors):
                ops.append(KernelOp(func, tree_map(_kept, tuple(args)), tree_map(_kept, dict(kwargs))))
            return func(*args, **kwargs)

    return KernelsRan()


def _ran(call: Callable[[], object], wrappers: bool) -> tuple[list[KernelOp], bool]:
    """(the aten ops `call` ran on plain tensors, whether a redistribution ran among them)."""
    ops: list[KernelOp] = []
    redistributed = []

    def watch(frame, event, arg) -> None:
        if event == "call" and frame.f_code.co_name in REDISTRIBUTING:
            redistributed.append(frame.f_code.co_name)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        with _recorder(ops, wrappers):
            call()
    finally:
        sys.setprofile(previous)
    return ops, bool(redistributed)


def record(replay: Replay) -> Kernels | None:
    """What the op of `replay` runs inside on your copies and on its twin (each once, forward
    alone, in the grad mode the step ran it in); None where its replay raises."""
    grad = torch.enable_grad if replay.grad_enabled else torch.no_grad
    try:
        with grad():
            mine, redistributed = _ran(lambda: replay.func(*replay.subclass_args, **replay.subclass_kwargs), True)
            twin, _ = ([], False) if replay.mine_only else _ran(lambda: replay.func(*replay.plain_args,
                                                                                 **replay.plain_kwargs), False)
    except Exception:  # the timing says how it fails
        return None
    if len(mine) > MAX_KERNELS:
        return Kernels((), tuple(op.key for op in twin), f"its dispatch ran {len(mine)} aten ops, over {MAX_KERNELS}",
                       redistributed)
    return Kernels(tuple(mine), tuple(op.key for op in twin), redistributed=redistributed)


def in_sequence(kernels: Kernels) -> Callable[[], None]:
    """The recorded ops, run one after another on their recorded operands, grad off."""
    ops = kernels.ops

    def run() -> None:
        for op in ops:
            op.func(*op.args, **op.kwargs)

    return run
