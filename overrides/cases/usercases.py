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

`--shape`, `--dtype` and `--device` reach your case as its name's suffix (`units:pair@64x64/meta`,
casenames.FACTORY_KEYWORDS): a class named is built from plain operands of that shape; a factory
is called with the keywords its signature has (`applied` keeps in the name only what it takes,
and says what it does not, so a run never shows a shape or device it did not use).

Its plain twin, the baseline of its overhead, is made in `overrides/cases/twins.py`.

The spec is checked when it is resolved, by building the operands once, so a bad spec is a
`UsageError` naming the problem before anything is timed.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import os
import sys
from typing import Any, Callable

import torch

from overrides.cases.casenames import (DEFAULT_DEVICE, DEFAULT_DTYPE, DEFAULT_SHAPE, FACTORY_KEYWORDS, SHAPE_MARK,
                                       SPEC_FORM, USER_DIR_VARIABLE, Case, Operands, asked_suffix, is_user_spec,
                                       side_spec, split_asked, split_user_spec, twin_of, twinned, user_stem)
from overrides.cases.seedcases import X_VALUE, Y_VALUE, plain_operands
from overrides.errors import UsageError, did_you_mean

# The signature the notes and errors show for a factory that takes what is asked of it.
FACTORY_SIGNATURE = 'def pair(shape=(1,), dtype=torch.float32, device="cpu")'


def _is_tensor_subclass(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.Tensor) and obj is not torch.Tensor


def defines_torch_dispatch(cls: type) -> bool:
    """True for a class (or a base short of Tensor) with its own `__torch_dispatch__`."""
    return any("__torch_dispatch__" in vars(klass) for klass in cls.__mro__
               if klass not in (torch.Tensor, torch._C.TensorBase))


def import_module(spec: str, module_name: str, what: str = "case"):
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
                f"{what} {spec!r}: no module named {exc.name!r}; the module must be importable "
                "from the current directory or PYTHONPATH") from None
        raise UsageError(f"{what} {spec!r}: importing {module_name} failed: {exc}") from None
    except Exception as exc:  # the user's module raised while importing
        raise UsageError(
            f"{what} {spec!r}: importing {module_name} raised {type(exc).__name__}: {exc}") from None


# What a `pkg.module:factory` names, for a message: a case's (the default), or a step's.
CASE_EXPECTED = "a Tensor subclass or a zero-argument factory"


def lookup(spec: str, module, module_name: str, attribute: str, what: str = "case",
           expected: str = CASE_EXPECTED):
    value = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            names = [name for name in dir(value) if not name.startswith("_")]
            raise UsageError(
                f"{what} {spec!r}: module {module_name} has no attribute {attribute!r};"
                f"{did_you_mean(part, names)} name {expected} as {SPEC_FORM}") from None
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


def _plain(operands: Operands) -> tuple:
    """The seed's plain operands, or of the shape, dtype and device asked of a class named."""
    if operands.default:
        return plain_operands()
    kind = getattr(torch, operands.dtype)
    return tuple(torch.full(operands.shape, value, dtype=kind, device=operands.device) for value in (X_VALUE, Y_VALUE))


def _subclass_maker(cls: type, asked: dict) -> tuple[Callable[[], tuple], str]:
    operands = Operands(asked.get("shape", DEFAULT_SHAPE), asked.get("dtype", DEFAULT_DTYPE),
                        asked.get("device", DEFAULT_DEVICE))
    tensors = "the two 1-element tensors" if operands.default else f"two {operands.suffix()} tensors"
    if defines_torch_dispatch(cls):
        def make() -> tuple:
            x, y = _plain(operands)
            return cls(x), cls(y)

        return make, f"{cls.__name__}(tensor), as it defines __torch_dispatch__"

    def make() -> tuple:
        x, y = _plain(operands)
        return x.as_subclass(cls), y.as_subclass(cls)

    return make, f"as_subclass of {tensors}"


def takes(factory: Any) -> tuple[str, ...]:
    """Which of FACTORY_KEYWORDS `factory` accepts (a class built here takes all three: its
    operands are made here), by its signature: a parameter of that name, or **kwargs."""
    if _is_tensor_subclass(factory):
        return FACTORY_KEYWORDS
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: call it as it is
        return ()
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return FACTORY_KEYWORDS
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return tuple(key for key in FACTORY_KEYWORDS if key in named)


def _with_asked(spec: str, factory: Callable, attribute: str, asked: dict) -> Callable[[], tuple]:
    """`factory` called with what its name asks of it (torch's dtype for a dtype's name); a
    UsageError where it has no parameter for a part asked."""
    missing = [key for key in asked if key not in takes(factory)]
    if missing:
        raise UsageError(f"case {spec!r}: {attribute}() takes no {' or '.join(missing)} parameter; "
                         f"give it {', '.join(missing)} keywords ({FACTORY_SIGNATURE}) or drop "
                         f"{SHAPE_MARK}{spec.partition(SHAPE_MARK)[2]}")
    keywords = {key: getattr(torch, value) if key == "dtype" else value for key, value in asked.items()}
    return functools.partial(factory, **keywords) if keywords else factory


def asked_of(spec: str, function: Callable) -> Callable:
    """`function` (your twin, FACTORY_plain) with the keywords `spec`'s name asks that it takes."""
    keywords = {key: getattr(torch, value) if key == "dtype" else value
                for key, value in split_asked(spec)[1] if key in takes(function)}
    return functools.partial(function, **keywords) if keywords else function


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
    bare, asked_pairs = split_asked(spec)
    asked = dict(asked_pairs)
    module_name, attribute = split_user_spec(bare)
    module = import_module(spec, module_name)
    factory = lookup(spec, module, module_name, attribute)
    hint = ""
    if _is_tensor_subclass(factory):
        make, how = _subclass_maker(factory, asked)
        hint = "" if defines_torch_dispatch(factory) else construction_hint(spec, factory)
        what = f"building {factory.__name__} ({how})"
        description = f"your Tensor subclass {module_name}.{attribute}, built with {how}"
    elif callable(factory) and not isinstance(factory, type):
        make = _with_asked(spec, factory, attribute, asked)
        what = f"{attribute}({', '.join(f'{key}={value!r}' for key, value in asked_pairs)})"
        doc = (getattr(factory, "__doc__", None) or "").strip().splitlines()
        description = f"your factory {module_name}.{what} -> (x, y)" + (
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


@dataclasses.dataclass(frozen=True)
class NotApplied:
    """What --shape, --dtype or --device asked of your factory and it has no parameter for."""

    spec: str  # pkg.module:factory
    ran_as: tuple[str, ...]  # the names it ran under: with what it did take, or none of it
    asked: tuple[tuple[str, str], ...]  # (keyword, what was asked: `64x64 1`, `meta`)

    def note(self) -> str:
        keys = [key for key, _ in self.asked]
        ran = "" if self.ran_as == (self.spec,) else f" (ran as {', '.join(self.ran_as)})"
        return (f"{self.spec}: {' and '.join(f'--{key} {text}' for key, text in self.asked)} not applied: "
                f"{split_user_spec(self.spec)[1]}() has no {' or '.join(keys)} parameter, so its own "
                f"{'defaults stand' if len(keys) > 1 else 'default stands'}{ran}; to apply "
                f"{'them' if len(keys) > 1 else 'it'}, give it keywords: {FACTORY_SIGNATURE} (docs/cases.md)")

    def to_dict(self) -> dict:
        return {"spec": self.spec, "ran_as": list(self.ran_as), "not_applied": dict(self.asked), "note": self.note()}


def applied(names: list[str] | None) -> tuple[list[str] | None, tuple[NotApplied, ...]]:
    """The --cases names (after casenames.with_shapes) with, for each of your factories, only
    the parts of its name it has a parameter for, and what it was asked and has none for: one
    NotApplied per factory. Imports your modules (torch with them): where operands are built."""
    if not names:
        return names, ()
    out: list[str] = []
    dropped: dict[str, dict[str, list[str]]] = {}
    ran_as: dict[str, list[str]] = {}
    for name in names:
        if not is_user_spec(name) or twinned(name) or SHAPE_MARK not in name:
            out.append(name)
            continue
        bare, asked = split_asked(name)
        module_name, attribute = split_user_spec(bare)
        accepts = takes(lookup(name, import_module(name, module_name), module_name, attribute))
        kept = dict((key, value) for key, value in asked if key in accepts)
        suffix = asked_suffix(kept.get("shape"), kept.get("dtype"), kept.get("device"))
        shown = bare + SHAPE_MARK + suffix if suffix else bare
        for key, value in asked:
            if key not in accepts:
                texts = dropped.setdefault(bare, {}).setdefault(key, [])
                text = "x".join(map(str, value)) if key == "shape" else str(value)
                texts += [text] * (text not in texts)
        out += [shown] * (shown not in out)
        ran_as.setdefault(bare, [])
        ran_as[bare] += [shown] * (shown not in ran_as[bare])
    return out, tuple(NotApplied(spec, tuple(ran_as[spec]), tuple((key, " ".join(texts)) for key, texts in keys.items()))
                      for spec, keys in dropped.items())
