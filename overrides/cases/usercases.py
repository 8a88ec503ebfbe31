"""User cases: `--cases pkg.module:factory` points the harness at a class it has never seen.

Subclass authors want to know what their own `__torch_function__` / `__torch_dispatch__` costs
without editing this project. `registry.get_case` sends any name with a `:` here, so every tool
that resolves case names (bench.py, pyspybench.py, record.sh, report.sh, the A/B workers)
accepts the same spec.

What the spec may name:
- a `torch.Tensor` subclass: it is built from the two 1-element plain operands, with
  `as_subclass` (no constructor runs, as for the seed subclasses), or, for a class that defines
  `__torch_dispatch__` (a wrapper subclass, which has no storage of its own), as `cls(tensor)`;
- any other zero-argument callable returning the operands `(x, y)`.

Its plain twin, the baseline of its overhead, is made in `overrides/cases/twins.py`.

The spec is checked when it is resolved, by building the operands once, so a bad spec is a
`UsageError` naming the problem before anything is timed.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Callable

import torch

from overrides.cases.casenames import (SPEC_FORM, USER_DIR_VARIABLE, Case, side_spec, split_user_spec, twin_of,
                                       twinned, user_stem)
from overrides.cases.seedcases import plain_operands
from overrides.errors import UsageError


def _is_tensor_subclass(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.Tensor) and obj is not torch.Tensor


def defines_torch_dispatch(cls: type) -> bool:
    """True for a class (or a base short of Tensor) with its own `__torch_dispatch__`."""
    return any("__torch_dispatch__" in vars(klass) for klass in cls.__mro__
               if klass not in (torch.Tensor, torch._C.TensorBase))


def import_module(spec: str, module_name: str):
    # `python bench.py` puts the checkout on sys.path, not the directory it is run from; a user
    # naming `mymodule:MyTensor` means the module beside them. Their directory goes at the END
    # of sys.path: run from a PyTorch checkout, a `torch/` folder there must not shadow the
    # installed torch. Worker processes run elsewhere and get the user's directory passed on.
    for folder in (os.environ.get(USER_DIR_VARIABLE), os.getcwd()):
        if folder and folder not in sys.path:
            sys.path.append(folder)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise UsageError(
                f"case {spec!r}: no module named {exc.name!r}; the module must be importable "
                "from the current directory or PYTHONPATH") from None
        raise UsageError(f"case {spec!r}: importing {module_name} failed: {exc}") from None
    except Exception as exc:  # the user's module raised while importing
        raise UsageError(
            f"case {spec!r}: importing {module_name} raised {type(exc).__name__}: {exc}") from None


def lookup(spec: str, module, module_name: str, attribute: str):
    value = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UsageError(
                f"case {spec!r}: module {module_name} has no attribute {attribute!r}; "
                f"name a Tensor subclass or a zero-argument factory as {SPEC_FORM}") from None
    return value


def _own_constructor(cls: type) -> str | None:
    """`__new__` or `__init__` where the class (or a base short of Tensor) defines its own."""
    for klass in cls.__mro__:
        if klass in (torch.Tensor, torch._C.TensorBase):
            return None
        for name in ("__new__", "__init__"):
            if name in vars(klass):
                return name
    return None


def factory_to_write(spec: str, cls: type) -> str:
    """The way out where a class named directly cannot be built as this tool builds it."""
    module_name, _ = split_user_spec(spec)
    return (f"give a factory that builds the operands as you do, e.g. in {module_name}.py `def pair(): "
            f"return {cls.__name__}(torch.ones(1), ...), {cls.__name__}(torch.ones(1), ...)`, and "
            f"pass {module_name}:pair")


def construction_hint(spec: str, cls: type) -> str:
    """What to do when a class built with as_subclass lacks what its constructor sets."""
    own = _own_constructor(cls)
    if own is None:
        return ""
    return f"{cls.__name__} defines {own}, which as_subclass skips: {factory_to_write(spec, cls)}"


def _subclass_maker(cls: type) -> tuple[Callable[[], tuple], str]:
    if defines_torch_dispatch(cls):
        def make() -> tuple:
            x, y = plain_operands()
            return cls(x), cls(y)

        return make, f"{cls.__name__}(tensor), as it defines __torch_dispatch__"

    def make() -> tuple:
        x, y = plain_operands()
        return x.as_subclass(cls), y.as_subclass(cls)

    return make, "as_subclass of the two 1-element tensors"


def _overrides_something(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_overrides_something(v) for v in value)
    return isinstance(value, torch.Tensor) or hasattr(value, "__torch_function__")


def check_operands(spec: str, what: str, operands: Any) -> None:
    if not isinstance(operands, (tuple, list)) or len(operands) != 2:
        shape = (f"a {type(operands).__name__} of {len(operands)}"
                 if isinstance(operands, (tuple, list)) else f"a {type(operands).__name__}")
        raise UsageError(
            f"case {spec!r}: {what} returned {shape}; it must return the operands (x, y)")
    if not any(_overrides_something(v) for v in operands):
        raise UsageError(
            f"case {spec!r}: {what} returned ({type(operands[0]).__name__}, "
            f"{type(operands[1]).__name__}): neither is a Tensor or has __torch_function__, "
            "so there is nothing to benchmark")


def module_files(names) -> dict[str, str]:
    """{spec: the file its module was imported from} for the user cases among `names` that this
    process has resolved: what each side's processes say they ran, so a comparison can tell
    whether the two sides ran one file of yours or each its own."""
    out = {}
    for name in names:
        if ":" in name:
            # a plain twin (`units:pair@plain`) is built from its case's module, on each side its own
            module = sys.modules.get(split_user_spec(side_spec(twinned(name) or name))[0])
            if module is not None and getattr(module, "__file__", None):
                out[name] = os.path.realpath(module.__file__)
    return out


def case_from_spec(spec: str) -> Case:
    """The Case for `pkg.module:factory`; a UsageError naming what is wrong with a bad spec."""
    module_name, attribute = split_user_spec(spec)
    module = import_module(spec, module_name)
    factory = lookup(spec, module, module_name, attribute)
    hint = ""
    if _is_tensor_subclass(factory):
        make, how = _subclass_maker(factory)
        hint = "" if defines_torch_dispatch(factory) else construction_hint(spec, factory)
        what = f"building {factory.__name__} ({how})"
        description = f"your Tensor subclass {module_name}.{attribute}, built with {how}"
    elif callable(factory) and not isinstance(factory, type):
        make = factory
        what = f"{attribute}()"
        doc = (getattr(factory, "__doc__", None) or "").strip().splitlines()
        description = f"your factory {module_name}.{attribute}() -> (x, y)" + (
            f": {doc[0]}" if doc else "")
    else:
        kind = "a class that is not a torch.Tensor subclass" if isinstance(factory, type) \
            else f"a {type(factory).__name__}"
        raise UsageError(
            f"case {spec!r}: {attribute} is {kind}; name a torch.Tensor subclass or a "
            "zero-argument function returning the operands (x, y)")
    try:
        operands = make()
    except Exception as exc:
        # A wrapper class named directly is built as cls(tensor); a constructor that wants more
        # (a scale, a second tensor) cannot be, and only the author's factory can say how.
        way_out = (f"; {factory_to_write(spec, factory)}" if _is_tensor_subclass(factory)
                   and defines_torch_dispatch(factory) else "")
        raise UsageError(f"case {spec!r}: {what} raised {type(exc).__name__}: {exc}{way_out}") from None
    check_operands(spec, what, operands)
    return Case(spec, description, make, user_stem(spec), construction_hint=hint, baseline=twin_of(spec))
