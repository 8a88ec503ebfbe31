"""Every case by name and what it is, without importing torch.

`import torch` takes seconds (figures: benchmarks/history.md, 'Docstring figures'), and not
every process needs it: `bench.py` checks `--cases` here before torch is imported, so a typo is
refused at once; `--list` prints these names and descriptions; and the parent of `--compare`
never imports torch at all (each side's worker does, in its own interpreter), so it works from
a Python without torch. A case here is a `Case` without operands: `overrides/cases/seedcases.py` (the seed cases)
and `overrides/cases/catalog.py` (the rest) give each its operands, by name, and tests check that
both lists name the same cases. A user's own case, `pkg.module:factory`, can only be built where
torch is (`overrides/cases/usercases.py`); here only its form is checked.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable, ContextManager

from overrides.errors import UsageError, did_you_mean
from overrides import variables

BASELINE_CASE = "Tensor"  # overheads are quoted against plain tensors
SPEC_FORM = "pkg.module:factory"
USER_DIR_VARIABLE = variables.USER_DIR  # the user's directory, for worker processes run elsewhere
ALL = "all"  # `--cases all`: the whole catalog

# Operands of the many-operands case: the example (torch.cat of 8 subclass tensors). With
# 8 overloaded operands, the per-operand part of dispatch (collecting overloaded arguments and
# their types) is several times the fixed part, so a change there shows up.
MANY_OPERANDS = 8


@dataclasses.dataclass(frozen=True)
class Case:
    """A named way to build the operands `(x, y)` of the timed op."""

    name: str
    description: str
    # None for a case known by name only (this module): the process that times it builds its
    # operands (`overrides.cases.registry.get_case`), where torch is.
    make_operands: Callable[[], tuple] | None
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
    baseline: str = BASELINE_CASE
    # Said after an n/a where an operand lacks an attribute: how to build the operands so it has
    # it (a user's class with a constructor of its own, built with as_subclass, which skips it).
    construction_hint: str = ""
    # Why no operands could be built (a plain twin of a ragged tensor): every op is n/a with it.
    unbuildable: str = ""
    # Said under the table and on stderr: a twin unlike its case's operands in dtype or shape.
    warning: str = ""
    # Where an op that raises on these operands is n/a, not a failure, and why (a twin of a
    # DTensor's local shards, on which an op DTensor redistributes for first does not run).
    raises_not_applicable: str = ""

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


SEED: tuple[Case, ...] = (
    Case("Tensor", "plain torch.Tensor operands: the baseline every overhead is measured against",
         None, "tensor"),
    Case("SubTensor", "a torch.Tensor subclass that overrides nothing", None, "subtensor"),
    Case("WithTorchFunction", "a tensor-like (not a Tensor) whose __torch_function__ answers the call",
         None, "overridden",
         # It has no methods, operators or attributes: these ops say so instead of failing.
         not_applicable=(("x.add", "not a Tensor"), ("x+y", "not a Tensor"),
                         ("x.shape", "not a Tensor"))),
    Case("SubWithTorchFunction", "a torch.Tensor subclass whose __torch_function__ defers to super()",
         None, "suboverridden"),
)

# The many-operands cases bring their own statements: torch.cat for the function call, and the
# same Python function as the broadcast_tensors op, over all 8 operands. A method, an operator
# or an attribute has no 8-operand form.
_MANY_STMTS = (("torch.add", "torch.cat(x)"), ("broadcast_tensors", "torch.broadcast_tensors(*x)"))
_MANY_NOT_APPLICABLE = tuple(
    (op, f"x is a list of {MANY_OPERANDS}") for op in ("x.add", "x+y", "x.shape"))

CATALOG: tuple[Case, ...] = (
    Case("TorchFunctionMode",
         "plain tensors under an active TorchFunctionMode that forwards every call",
         None, "functionmode"),
    Case("TorchDispatchMode",
         "plain tensors under an active TorchDispatchMode that forwards every aten op",
         None, "dispatchmode"),
    Case("WrapperDispatchTensor",
         "a _make_wrapper_subclass tensor whose __torch_dispatch__ unwraps, runs and rewraps "
         "with pytree (default __torch_function__, like DTensor)",
         None, "wrapperdispatch"),
    Case("SubWithDisabledTorchFunction",
         "a torch.Tensor subclass with __torch_function__ = torch._C._disabled_torch_function_impl",
         None, "subdisabled"),
    Case("MixedTensorSub",
         "x a plain Tensor, y a SubWithTorchFunction: only one operand overrides",
         None, "mixed"),
    Case("Cat8Tensor",
         f"{MANY_OPERANDS} plain tensors: torch.cat(x) for torch.add, "
         f"torch.broadcast_tensors(*x) for broadcast_tensors (baseline of Cat8SubWithTorchFunction)",
         None, "cat8tensor",
         stmts=_MANY_STMTS, not_applicable=_MANY_NOT_APPLICABLE, baseline="Cat8Tensor"),
    Case("Cat8SubWithTorchFunction",
         f"{MANY_OPERANDS} SubWithTorchFunction tensors, statements as Cat8Tensor: many "
         "overloaded operands in one call (overhead against Cat8Tensor)",
         None, "cat8suboverridden",
         stmts=_MANY_STMTS, not_applicable=_MANY_NOT_APPLICABLE, baseline="Cat8Tensor"),
)

_BY_NAME: dict[str, Case] = {case.name: case for case in SEED + CATALOG}


def case_names() -> list[str]:
    return list(_BY_NAME)


def all_described() -> tuple[Case, ...]:
    return tuple(_BY_NAME.values())


# A built-in case with operands of another shape, dtype or device is named
# `CASE@SHAPE[/DTYPE][/DEVICE]` (`SubTensor@64x64`, `Tensor@1000/bfloat16`, `SubTensor@1/meta`):
# the name travels to every process that builds the operands (timing workers, valgrind, the
# Python-call counter, py-spy), and its baseline is plain tensors of the same shape, dtype and
# device (`Tensor@64x64`), never the 1-element CPU default.
SHAPE_MARK = "@"
DEFAULT_SHAPE = (1,)  # the seed benchmark's: one element, so the kernel is negligible
DEFAULT_DTYPE = "float32"
DEFAULT_DEVICE = "cpu"
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8",
          "complex64", "complex128")  # torch's own names, checked without torch
# meta: tensors with shapes and no data, so an op dispatches and runs no kernel at all: the
# purest overhead figure, and one any machine can measure. cuda (and cuda:N): the GPU.
DEVICES = ("cpu", "meta", "cuda")
MAX_ELEMENTS = 1 << 28  # a 1 GiB float32 operand: beyond, a typo more likely than a benchmark


@dataclasses.dataclass(frozen=True)
class Operands:
    """What a built-in case's operands are made of: their shape, dtype and device."""

    shape: tuple[int, ...] = DEFAULT_SHAPE
    dtype: str = DEFAULT_DTYPE
    device: str = DEFAULT_DEVICE

    @property
    def default(self) -> bool:
        return self == Operands()

    def suffix(self) -> str:
        """`64x64`, `64x64/bfloat16`, `1/meta`: what follows SHAPE_MARK in a case's name."""
        parts = ["x".join(map(str, self.shape))]
        parts += [self.dtype] if self.dtype != DEFAULT_DTYPE else []
        parts += [self.device] if self.device != DEFAULT_DEVICE else []
        return "/".join(parts)


def parse_shape(text: str) -> tuple[int, ...]:
    """`64x64` -> (64, 64); a UsageError naming the problem otherwise."""
    try:
        shape = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        shape = ()
    if not shape or any(n < 1 for n in shape):
        raise UsageError(f"shape {text!r} is not sizes joined by x; write it like 64x64 or 1000")
    elements = math.prod(shape)
    if elements > MAX_ELEMENTS:
        raise UsageError(f"shape {text!r} is {elements:,} elements an operand, more than {MAX_ELEMENTS:,}; "
                         "use a smaller one")
    return shape


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise UsageError(f"dtype {name!r} is not one of torch's;{did_you_mean(name, DTYPES)} "
                         f"valid: {', '.join(DTYPES)}")
    return name


NO_CUDA_HINT = "--device meta times dispatch with no kernel on any machine"


def check_device(name: str, no_cuda_hint: str = NO_CUDA_HINT) -> str:
    """`name` if this tool can time on it here; a UsageError naming why not otherwise: CUDA
    where this machine has no NVIDIA device, before any work (overrides/clock/cuda.py times it
    where there is one)."""
    kind, _, index = name.partition(":")
    if kind not in DEVICES or (index and (kind != "cuda" or not index.isdigit())):
        raise UsageError(f"device {name!r} is not one of cpu, meta, cuda, cuda:N;"
                         f"{did_you_mean(name, DEVICES)}".rstrip(";"))
    if kind == "cuda":
        import glob

        if not glob.glob("/dev/nvidia[0-9]*"):
            raise UsageError(f"device {name!r}: this machine has no CUDA device (no /dev/nvidia*); {no_cuda_hint}")
    return name


def on_cuda(name: str) -> bool:
    """Whether the case `name` has its operands on a CUDA device: a built-in CASE@SHAPE/cuda, or
    your factory asked for a device (`mod:pair@cuda`, `mod:pair@64x64/cuda:1`, its `...@plain` twin)."""
    base, mark, suffix = name.partition(SHAPE_MARK)
    return bool(mark) and any(part.partition(":")[0] == "cuda" for part in suffix.replace("@", "/").split("/"))


def elements_of(name: str) -> int:
    """Elements per operand of the built-in case `name`, its device unchecked (a run read back
    on a machine without that device); of your own case, those of the shape asked of it (its
    factory's own shape is unknown here: one element)."""
    base, mark, suffix = name.partition(SHAPE_MARK)
    if is_user_spec(base):
        shape = dict(split_asked(twinned(name) or name)[1]).get("shape")
        return math.prod(shape or DEFAULT_SHAPE)
    return math.prod(parse_shape(suffix.split("/")[0])) if mark else math.prod(DEFAULT_SHAPE)


def refuse_counting_on_cuda(names, what: str) -> None:
    """One line where `what` would count instructions of a case on CUDA: valgrind cannot run the
    CUDA runtime (and its host instructions vary with the toolkit); meta counts the dispatch."""
    found = [name for name in names or () if on_cuda(name)]
    if found:
        raise UsageError(f"{what} counts instructions under valgrind, which cannot run CUDA ({found[0]}); "
                         "count the same cases with --device meta (dispatch with no kernel) and time "
                         "them on cuda without counts")


def parse_operands(suffix: str) -> Operands:
    """The Operands of a name's suffix: a shape, then a dtype and a device in either order."""
    shape_text, *rest = suffix.split("/")
    dtype, device = DEFAULT_DTYPE, DEFAULT_DEVICE
    for part in rest:
        if part.partition(":")[0] in DEVICES:
            device = check_device(part)
        else:
            dtype = check_dtype(part)
    return Operands(parse_shape(shape_text), dtype, device)


def shaped_name(name: str, operands: Operands) -> str:
    """`name` with `operands`; the plain name for the defaults."""
    return name if operands.default else f"{name}{SHAPE_MARK}{operands.suffix()}"


def add_operand_arguments(parser) -> None:
    """--shape, --dtype and --device, as bench.py and pyspybench.py take them (with_shapes)."""
    parser.add_argument("--shape", nargs="+", metavar="SHAPE",
                        help="operands of this shape for the built-in cases, several for a sweep "
                             "(e.g. 1 64x64 1024x1024; default: the seed's 1 element); each "
                             "case's overhead is against plain tensors of the same shape (CASE@SHAPE); "
                             "your factory gets it where it takes a shape keyword")
    parser.add_argument("--dtype", metavar="DTYPE",
                        help=f"operands of this dtype (your factory's where it takes dtype; default "
                             f"{DEFAULT_DTYPE}; one of {', '.join(DTYPES)})")
    parser.add_argument("--device", metavar="DEVICE",
                        help="operands on this device (your factory's where it takes device): cpu (default), meta "
                             "(shapes, no data, on any machine: dispatch alone for ops whose meta function "
                             "is C++, such as x.view(-1)), or cuda / cuda:N (the host's cost a call, the "
                             "synchronized cost and the GPU's own, each per call)")


def with_shapes(cases: list[str] | None, shapes: list[str] | None, dtype: str | None,
                device: str | None = None) -> list[str] | None:
    """The --cases names with --shape, --dtype and --device applied: each built-in case once per
    shape, as `CASE@SHAPE[/DTYPE][/DEVICE]` (SHAPE_MARK); your own with what was asked of it,
    and only that (`units:pair@64x64`, `units:pair@meta`: FACTORY_KEYWORDS).
    Unchanged without any of the three."""
    if not shapes and not dtype and not device:
        return cases
    parsed = [parse_shape(text) for text in shapes or ["1"]]
    dtype = check_dtype(dtype) if dtype else DEFAULT_DTYPE
    device = check_device(device) if device else DEFAULT_DEVICE
    named = resolve(cases)
    out = []
    for text, shape in zip(shapes or [None], parsed):
        operands = Operands(shape, dtype, device)
        asked = asked_suffix(text and shape, dtype if dtype != DEFAULT_DTYPE else None,
                             device if device != DEFAULT_DEVICE else None)
        out += [(case.name + SHAPE_MARK + asked if asked and not twinned(case.name) else case.name)
                if is_user_spec(case.name) else shaped_name(case.name, operands) for case in named]
    return list(dict.fromkeys(out))


# Your own factory takes what --shape, --dtype and --device asked where its signature has a
# parameter of that name (or **kwargs): `def pair(shape=(1,), dtype=torch.float32, device="cpu")`.
# Its name then says what was asked of it, and only that (`units:pair@64x64/meta`,
# `units:pair@meta`: a part not asked is the factory's own default); a factory without the
# parameter keeps its own and the run says so (overrides/cases/usercases.py, `applied`).
FACTORY_KEYWORDS = ("shape", "dtype", "device")


def asked_suffix(shape: tuple[int, ...] | None, dtype: str | None, device: str | None) -> str:
    """`64x64/meta`, `meta`, `64x64/bfloat16`: what follows SHAPE_MARK in your case's name."""
    parts = ["x".join(map(str, shape))] if shape else []
    return "/".join(parts + [part for part in (dtype, device) if part])


def split_asked(spec: str) -> tuple[str, tuple[tuple[str, object], ...]]:
    """(`pkg.module:factory`, ((keyword, value), ...)) of your case's name: what its suffix asks
    of its factory (FACTORY_KEYWORDS order); a UsageError naming a part that is none of them."""
    bare, mark, suffix = spec.partition(SHAPE_MARK)
    asked: dict[str, object] = {}
    for part in suffix.split("/") if mark else ():
        if part[:1].isdigit():
            key, value = "shape", parse_shape(part)
        elif part.partition(":")[0] in DEVICES:
            key, value = "device", check_device(part)
        elif part in DTYPES:
            key, value = "dtype", part
        else:
            raise UsageError(f"case {spec!r}: {part!r} is not a shape, dtype or device; write your case "
                             f"as {SPEC_FORM}{SHAPE_MARK}64x64/bfloat16/meta (any of the three, once each)")
        if key in asked:
            raise UsageError(f"case {spec!r} gives its {key} twice; give it once")
        asked[key] = value
    return bare, tuple((key, asked[key]) for key in FACTORY_KEYWORDS if key in asked)


# Your own case's plain twin, `units:pair@plain`: its operands unwrapped into plain tensors
# (same shape, dtype and device), the baseline its overhead is quoted against, run beside it.
TWIN_SUFFIX = SHAPE_MARK + "plain"


def twin_of(spec: str) -> str:
    return spec + TWIN_SUFFIX


def twinned(name: str) -> str | None:
    """The user case whose plain twin `name` is, or None."""
    if name.endswith(TWIN_SUFFIX) and is_user_spec(name[:-len(TWIN_SUFFIX)]):
        return name[:-len(TWIN_SUFFIX)]
    return None


def split_shaped(name: str) -> tuple[str, Operands]:
    """(the built-in case, its Operands) of a case name (see SHAPE_MARK)."""
    base, mark, suffix = name.partition(SHAPE_MARK)
    return (base, parse_operands(suffix)) if mark else (name, Operands())


def described(name: str) -> Case:
    """The built-in case `name` (or `CASE@SHAPE[/DTYPE][/DEVICE]`, or a user case's plain twin),
    without operands; a UsageError (with the nearest name) if none."""
    spec = twinned(name)
    if spec is not None:
        split_user_spec(spec)
        return Case(name, f"{spec}'s own operands as plain tensors: its baseline", None,
                    user_stem(spec) + "-plain", baseline=name)
    base, operands = split_shaped(name)
    if base != name:
        case = described(base)
        suffix = name[len(base) + 1:]
        return dataclasses.replace(
            case, name=name, description=f"{case.description}; operands {suffix}",
            file_stem=f"{case.stem}-{re.sub(r'[^a-z0-9]+', '', suffix.lower())}",
            baseline=shaped_name(case.baseline, operands))
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(
            f"unknown case {name!r};{did_you_mean(name, case_names() + [ALL])} valid cases: "
            f"{', '.join(case_names())}, or your own as {SPEC_FORM}") from None


def is_user_spec(name: str) -> bool:
    return ":" in name


def split_user_spec(spec: str) -> tuple[str, str]:
    """(module, attribute) of `pkg.module:factory`; a UsageError if it is not of that form."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute or ":" in attribute:
        raise UsageError(f"case {spec!r} is not of the form {SPEC_FORM}")
    return module_name, attribute


def user_stem(spec: str) -> str:
    """A file stem for a user case: its spec, lower case, safe in a file name."""
    return re.sub(r"[^a-z0-9_.-]+", "_", spec.lower())


# Two versions of your own code in one environment (`bench.py --compare units:pair
# units_fast:pair`): both sides time, count and name one case, the base's spec, and every process
# of the branch builds it from the branch's spec. The parent says so to each process of a side in
# this variable, `SHOWN=BUILT` (the base's processes get `SHOWN=SHOWN`, so both sides' environments
# hold the same variable); everything that builds a case reads it (`side_spec`).
YOUR_CODE_VARIABLE = variables.YOUR_CODE


def your_code_env(shown: str, built: str) -> dict:
    """The variable a side's processes get when its `shown` case is built from `built`."""
    return {YOUR_CODE_VARIABLE: f"{shown}={built}"}


def env_bytes(pairs) -> int:
    """What (name, value) pairs add to a process's environment block, for padding both sides alike."""
    return sum(len(name) + len(value) for name, value in pairs)


def side_spec(spec: str) -> str:
    """The spec this process builds for the user case `spec` (YOUR_CODE_VARIABLE), else `spec`."""
    import os

    shown, mark, built = os.environ.get(YOUR_CODE_VARIABLE, "").partition("=")
    bare, at, asked = spec.partition(SHAPE_MARK)  # what is asked of the factory goes with it
    return built + at + asked if mark and shown == bare else spec


def resolve(names: list[str] | None) -> tuple[Case, ...]:
    """The cases a `--cases` list names, without operands: None means the seed cases, `all` the
    whole catalog (and may sit beside user cases: `all mypkg.mod:MyTensor`). A user case is
    checked for its form only; whatever builds its operands checks the rest."""
    if not names:
        return SEED
    resolved: list[Case] = []
    for name in names:
        if name == ALL:
            found = all_described()
        elif is_user_spec(name) and not twinned(name):
            split_user_spec(split_asked(name)[0])
            found = (Case(name, f"your case {name}", None, user_stem(name), baseline=twin_of(name)),)
        else:
            found = (described(name),)
        for case in found:
            if case.name in [c.name for c in resolved]:
                raise UsageError(f"case {case.name!r} is named twice in --cases; name each case once")
            resolved.append(case)
    return tuple(resolved)
