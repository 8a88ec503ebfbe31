"""Your case's plain twin (`units:pair@plain`): plain tensors like those your operands present,
the baseline your case's overhead is quoted against, run beside it.

This is more than unwrapping. A wrapper subclass (`_make_wrapper_subclass`) presents one tensor,
its outer shape, strides, dtype and device, and holds others: an int8 payload and a scale, two
copies, values and indices. The op timed on it sees the outer tensor, so the twin must be that
one; with its int8 payload as the twin, a float32 F.linear on the subclass read as faster than
plain. A twin is, in this order:

1. yours, where the case's module defines `FACTORY_plain` beside `FACTORY` (`pair256_plain`
   for `pair256`, HOOK_SUFFIX): a zero-argument function returning the plain operands (x, y);
2. else, operand by operand: a plain tensor as it is; a tensor-like, the tensor it holds
   (seedcases.unwrap); a subclass without `__torch_dispatch__` (its data is its own),
   `as_subclass(torch.Tensor)`, sharing its data; a DTensor, this rank's local shard
   (`to_local()`, copied: what its ops run their kernels on, so the overhead is DTensor's
   placement logic, not the kernel on every rank's rows; a Replicate DTensor's is the whole); a
   subclass with `__torch_dispatch__` (a wrapper, FakeTensor), a new plain tensor of its outer
   shape, strides, dtype, device and requires_grad, holding the values of the class's own
   `dequantize()`, else of an inner tensor (`__tensor_flatten__`) of the outer shape and dtype,
   else ones (valid for every op).

A DTensor op that must redistribute first (a Shard(0) operand added to a Replicate one) raises on
the local shards (their shapes differ), and is n/a with that reason: the twin of the global shape
(the first version) read a Shard(0) matmul as ~22x plain, its kernel on all four ranks' rows
against DTensor's on one rank's.

Which twin was used is the twin's description (the notes under the table, the JSON); where a
twin of yours differs from the case's operands in dtype or shape, its warning says so. A twin
that cannot be built (a jagged dimension no plain tensor has, a `dequantize()` that raises) is
that reason on every op: its case's figure stands, only its overhead cell is lost.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import torch

from overrides.cases.casenames import Case, described, split_asked, split_user_spec, twin_of
from overrides.cases.seedcases import unwrap
from overrides.cases.usercases import (asked_of, case_from_spec, check_operands, defines_torch_dispatch, import_module,
                                       lookup)
from overrides.errors import UsageError

# Why an op that raises on a DTensor's local shards is n/a: DTensor redistributes an operand
# before it (a Replicate one sliced to Shard(0)), which the local shards as they lie do not.
SHARDED_NOT_APPLICABLE = "not on this rank's local shards as they lie: DTensor redistributes an operand first"
HOOK_SUFFIX = "_plain"  # `pair256_plain` is the twin of `pair256`, when your module defines it
_TORCH_BASES = (torch.Tensor, torch._C.TensorBase)


class NoTwin(Exception):
    """Why no plain twin could be built for an operand (said on every op of the twin)."""


def _own(cls: type, name: str) -> bool:
    """Whether `cls` (or a base short of Tensor) defines `name` itself."""
    return any(name in vars(klass) for klass in cls.__mro__ if klass not in _TORCH_BASES)


def _values(value: torch.Tensor) -> tuple[torch.Tensor | None, str]:
    """(the values the twin of a wrapper holds, where they come from); None for ones."""
    cls = type(value)
    if _own(cls, "dequantize"):
        try:
            values = value.dequantize()
        except Exception as exc:
            raise NoTwin(f"{cls.__name__}.dequantize() raised {type(exc).__name__}: {exc}") from None
        if type(values) is torch.Tensor and values.shape == value.shape and values.dtype == value.dtype:
            return values, f"{cls.__name__}.dequantize()'s values"
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    if is_traceable_wrapper_subclass(value):
        names, _ = value.__tensor_flatten__()
        for name in names:
            inner = getattr(value, name)
            if type(inner) is torch.Tensor and inner.shape == value.shape and inner.dtype == value.dtype:
                return inner, f"the values of its inner .{name}"
    return None, "ones"


def _outer_twin(value: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A new plain tensor like the one `value` presents, and how it was made."""
    cls = type(value)
    shape, strides = tuple(value.shape), tuple(value.stride())
    ragged = [size for size in shape + strides if not isinstance(size, int)]
    if ragged:
        raise NoTwin(f"{cls.__name__}'s shape {shape} has a ragged dimension "
                     f"({ragged[0]}), which no plain tensor has")
    values, source = _values(value)
    try:
        twin = torch.empty_strided(shape, strides, dtype=value.dtype, device=value.device)
        if torch._debug_has_internal_overlap(twin) == 1:
            # an expanded tensor (a stride of 0, as a DTensor's mean backward makes): its elements
            # share memory, so nothing can be copied into it; its storage is filled, then viewed
            size = twin.untyped_storage().nbytes() // twin.element_size()
            filled = (torch.ones(size, dtype=value.dtype, device=value.device) if values is None
                      else values.detach().reshape(-1)[:size].clone())
            twin = filled.as_strided(shape, strides)
        elif values is None:
            twin.fill_(1)
        else:
            twin.copy_(values)
    except Exception as exc:
        raise NoTwin(f"a plain {value.dtype} {shape} tensor with strides {strides} on "
                     f"{value.device} raised {type(exc).__name__}: {str(exc).splitlines()[0]}") from None
    if value.requires_grad:
        twin.requires_grad_(True)
    strided = "" if twin.is_contiguous() else f", strides {strides}"
    device = "" if value.device.type == "cpu" else f" on {value.device}"
    return twin, (f"new {_described(twin)}{strided}{device}, as {cls.__name__} presents them, "
                  f"holding {source}")


def _dtensor(value: Any) -> bool:
    """Whether `value` is a DTensor (torch.distributed.tensor, loaded only where one was made)."""
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    return dtensor is not None and isinstance(value, dtensor)


def _local_shard(value: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A DTensor's twin: this rank's local shard, copied, and how it was made."""
    try:
        local = value.to_local().detach().clone()
    except Exception as exc:
        raise NoTwin(f"DTensor.to_local() raised {type(exc).__name__}: {exc}") from None
    if type(local) is not torch.Tensor:
        raise NoTwin(f"DTensor.to_local() returned a {type(local).__name__}, not a plain tensor")
    if value.requires_grad:
        local.requires_grad_(True)
    placements = ", ".join(str(p) for p in value.placements)
    if tuple(local.shape) == tuple(value.shape):
        return local, f"its local tensor ({placements}: {_described(local)}, the whole on every rank)"
    return local, f"this rank's local shard ({placements}: {_described(local)} of the global {tuple(value.shape)})"


def plain_like(value: Any, local_shards: bool = True) -> tuple[Any, str]:
    """(the plain twin of one operand, how it was made), read past your `__torch_function__`:
    building a twin must not run it (it may want what only your constructor sets). With
    `local_shards` off, a DTensor's twin is of its global shape, as any wrapper's: a step's op
    table (step/hooks.py), whose plain twin step computes the whole, and whose own-kernel column
    shows the local shard's kernels apart (step/kernels.py)."""
    with torch._C.DisableTorchFunctionSubclass():
        return _plain_like_inside(value, local_shards)


def _plain_like_inside(value: Any, local_shards: bool = True) -> tuple[Any, str]:
    if type(value) in (tuple, list):
        made = [_plain_like_inside(v, local_shards) for v in value]
        return type(value)(twin for twin, _ in made), "; ".join(dict.fromkeys(how for _, how in made))
    if not isinstance(value, torch.Tensor):
        inner = unwrap(value)
        return inner, ("as they are" if inner is value else "the tensor it holds")
    if type(value) is torch.Tensor:
        return value, "as they are"
    if not defines_torch_dispatch(type(value)):
        return value.as_subclass(torch.Tensor), "as_subclass(torch.Tensor), sharing their data"
    if local_shards and _dtensor(value):
        return _local_shard(value)
    return _outer_twin(value)


def _described(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    return type(value).__name__


def _leaves(value: Any) -> list:
    if type(value) in (tuple, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def unlike(spec: str, operands: tuple, twins: tuple) -> str:
    """A warning where the twin's tensors differ from the case's in dtype or shape, else ""."""
    found = []
    with torch._C.DisableTorchFunctionSubclass():
        for name, mine, twin in zip(("x", "y"), operands, twins):
            found += _unlike(spec, name, mine, twin)
    return "; ".join(found) + ": the overhead is against unlike tensors" if found else ""


def _unlike(spec: str, name: str, mine: Any, twin: Any) -> list[str]:
    """Where one operand's twin differs from it in dtype or shape (the first leaf that does)."""
    for a, b in zip(_leaves(mine), _leaves(twin)):
        if isinstance(a, torch.Tensor) and _dtensor(a):  # its twin is its local shard, said so
            a = a.to_local()
        if isinstance(a, torch.Tensor) and (not isinstance(b, torch.Tensor) or a.dtype != b.dtype
                                            or str(tuple(a.shape)) != str(tuple(b.shape))):
            return [f"its {name} is {_described(b)} where {spec}'s is {_described(a)}"]
    return []


def _hook(spec: str) -> tuple[str, Any] | None:
    """(name, function) of your own twin, FACTORY_plain beside FACTORY, if your module has one."""
    module_name, attribute = split_user_spec(split_asked(spec)[0])  # `pair@64x64`'s twin is pair_plain's
    module = import_module(spec, module_name)
    name = attribute + HOOK_SUFFIX
    try:
        return name, lookup(spec, module, module_name, name)
    except UsageError:
        return None


def _from_hook(spec: str, name: str, function) -> tuple:
    what = f"{name}() (its plain twin)"
    try:
        twins = function()
    except Exception as exc:
        raise UsageError(f"case {spec!r}: {what} raised {type(exc).__name__}: {exc}") from None
    check_operands(spec, what, twins)
    odd = [leaf for leaf in _leaves(tuple(twins)) if type(leaf) is not torch.Tensor]
    if odd:
        raise UsageError(f"case {spec!r}: {what} returned a {type(odd[0]).__name__}; a twin is plain "
                         "torch.Tensor operands: build them with torch.ones, torch.randn, or as_subclass(torch.Tensor)")
    return tuple(twins)


def plain_twin(spec: str) -> Case:
    """`spec@plain`: plain tensors like those `spec`'s operands present (see the module's
    docstring), built afresh from the case's own operands each time, as its overhead's baseline."""
    case = case_from_spec(spec)
    named = described(twin_of(spec))
    operands = tuple(case.make_operands())
    hook = _hook(spec)
    if hook is not None:
        name, function = hook
        function = asked_of(spec, function)  # the keywords your case was asked, where your twin takes them
        twins = _from_hook(spec, name, function)
        module_name, _ = split_user_spec(spec)
        return dataclasses.replace(
            named, description=f"{spec}'s twin of your own, {module_name}.{name}()",
            make_operands=lambda: tuple(function()), warning=unlike(spec, operands, twins))
    make = case.make_operands
    try:
        made = [plain_like(operand) for operand in operands]
    except Exception as exc:  # NoTwin says why; anything else, what raised
        why = str(exc) if isinstance(exc, NoTwin) else f"building it raised {type(exc).__name__}: {exc}"
        reason = f"no plain twin: {why.splitlines()[0] if why else type(exc).__name__}"

        def none_built() -> tuple:  # never timed (every op is n/a), but a Case has operands
            raise RuntimeError(reason)

        return dataclasses.replace(named, description=f"{spec}'s own operands as plain tensors: none built",
                                   make_operands=none_built, unbuildable=reason)
    how = "; ".join(dict.fromkeys(how for _, how in made))
    sharded = any(_dtensor(leaf) and tuple(leaf.to_local().shape) != tuple(leaf.shape) for leaf in _leaves(operands))
    return dataclasses.replace(
        named, description=f"{spec}'s own operands as plain tensors: {how}",
        make_operands=lambda: tuple(plain_like(o)[0] for o in make()),
        warning=unlike(spec, operands, tuple(twin for twin, _ in made)),
        raises_not_applicable=SHARDED_NOT_APPLICABLE if sharded else "")
