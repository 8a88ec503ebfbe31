"""`--step pkg.module:factory`: your factory found beside you, asked for both steps.

The factory builds the model, the data and the optimizer, and returns a zero-argument callable
that runs ONE step (forward, backward, update). It is called as `factory(plain=False)` for the
step with your subclass and `factory(plain=True)` for its plain twin: only you know how your
model looks on plain tensors, so the tool never guesses it. A factory that also takes `batch=`
can be swept (`--batch 8 32 128`); one that takes `device=` is built where `--device` says
(its model, data and optimizer on a CUDA device: overrides/step/device.py times it there).
Anything else is refused in one line, before a step runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
from typing import Callable, Iterator

from overrides.cases.casenames import SPEC_FORM, split_user_spec
from overrides.cases.usercases import import_module, lookup
from overrides.errors import UsageError

# How a factory is written, said wherever one is refused.
FACTORY_FORM = ("def mlp(plain=False, batch=32): build the model (plain tensors where plain), the data and "
                "the optimizer, and return a zero-argument function running one step")


@dataclasses.dataclass(frozen=True)
class StepPair:
    """Both steps of one factory at one batch size, built once, ready to run."""

    spec: str  # pkg.module:factory
    batch: int | None  # what the factory was given (None: its own default)
    device: str | None  # likewise: where the factory was asked to build both steps (None: its own)
    plain: Callable[[], object]  # factory(plain=True): the same step on plain tensors
    subclass: Callable[[], object]  # factory(plain=False): the step with your subclass
    user_dir: str  # the folder of your module: a call site is the first frame in a file under it
    description: str


def _parameters(factory: Callable) -> tuple[set[str], bool]:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return set(), False
    named = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return named, any(p.kind is p.VAR_KEYWORD for p in parameters)


def find_factory(spec: str, batches: bool = False, device: str | None = None) -> tuple[Callable, object]:
    """(the factory, its module) for `spec`; a UsageError where it cannot be asked for both
    steps (no `plain` keyword), with `batches` has no `batch` keyword, or with `device` no
    `device` keyword."""
    module_name, attribute = split_user_spec(spec)
    module = import_module(spec, module_name, what="step")
    factory = lookup(spec, module, module_name, attribute, what="step",
                     expected="a factory taking plain= that returns one step")
    if not callable(factory) or isinstance(factory, type):
        raise UsageError(f"--step {spec}: {attribute} is not a function; name a factory as {SPEC_FORM}: "
                         f"{FACTORY_FORM}")
    named, any_keyword = _parameters(factory)
    if "plain" not in named and not any_keyword:
        raise UsageError(f"--step {spec}: {attribute}() takes no `plain` keyword, so its plain twin cannot be "
                         f"asked for; write it as {FACTORY_FORM}")
    if batches and "batch" not in named and not any_keyword:
        raise UsageError(f"--step {spec} --batch: {attribute}() takes no `batch` keyword; give it one "
                         f"({FACTORY_FORM}) or drop --batch")
    if device is not None and "device" not in named and not any_keyword:
        raise UsageError(f"--step {spec} --device {device}: {attribute}() takes no `device` keyword; give it one "
                         f"(def {attribute}(plain=False, batch=32, device=\"cpu\"): build the model, data and "
                         f"optimizer there) or drop --device")
    return factory, module


def _one_step(spec: str, factory: Callable, plain: bool, batch: int | None,
              device: str | None) -> Callable[[], object]:
    keywords = {"plain": plain, "batch": batch, "device": device}
    keywords = {key: value for key, value in keywords.items() if value is not None}
    said = ", ".join(f"{key}={value!r}" for key, value in keywords.items())
    try:
        step = factory(**keywords)
    except Exception as exc:  # the user's code raised: said, not a traceback
        raise UsageError(f"--step {spec}: {split_user_spec(spec)[1]}({said}) raised "
                         f"{type(exc).__name__}: {exc}") from None
    if not callable(step):
        raise UsageError(f"--step {spec}: {split_user_spec(spec)[1]}({said}) returned a "
                         f"{type(step).__name__}; return a zero-argument function running one step")
    return step


def build_steps(spec: str, batch: int | None = None, device: str | None = None) -> StepPair:
    """Both steps of `spec` (at `batch`, on `device`, where given), each built once and run once
    here, so that a step that raises is a UsageError before anything is timed."""
    factory, module = find_factory(spec, batches=batch is not None, device=device)
    plain = _one_step(spec, factory, True, batch, device)
    subclass = _one_step(spec, factory, False, batch, device)
    for step, which in ((plain, "plain=True"), (subclass, "plain=False")):
        try:
            step()
        except Exception as exc:
            raise UsageError(f"--step {spec}: the step of {which} raised {type(exc).__name__}: {exc}") from None
    doc = (getattr(factory, "__doc__", None) or "").strip().splitlines()
    return StepPair(spec, batch, device, plain, subclass, os.path.dirname(os.path.realpath(module.__file__)),
                    doc[0] if doc else "")


def rebuilt(pair: StepPair) -> StepPair:
    """The same step built afresh: its factory called again, with the same batch and device (a
    stretch of --step or --compare --step timed on another build: step/timing.py says why)."""
    return build_steps(pair.spec, pair.batch, pair.device)


def _yours(exc: BaseException, user_dir: str) -> str | None:
    """`file.py:LINE (function)` of the innermost frame under `user_dir` that `exc` passed
    through, or None where it came from no file of yours."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        path = os.path.realpath(tb.tb_frame.f_code.co_filename)
        if path.startswith(os.path.join(user_dir, "")):
            found = f"{os.path.relpath(path, user_dir)}:{tb.tb_lineno} ({tb.tb_frame.f_code.co_name})"
        tb = tb.tb_next
    return found


@contextlib.contextmanager
def later_calls_said(spec: str) -> Iterator[None]:
    """Your factory or step raising on a later call (build_steps ran each step once): one line,
    a UsageError naming where in your code, instead of a traceback from wherever the tool was
    (the drift probe, the timing, the op table; under torch.distributed, each line prefixed)."""
    _, module = find_factory(spec)
    user_dir = os.path.dirname(os.path.realpath(module.__file__))
    try:
        yield
    except Exception as exc:
        where = None if isinstance(exc, UsageError) else _yours(exc, user_dir)
        if where is None:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise UsageError(f"--step {spec}: your code raised {type(exc).__name__}{': ' + first if first else ''} at "
                         f"{where}, on a later call than its first (which ran); fix it, or make the step "
                         "the same at every call") from None
