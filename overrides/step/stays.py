"""What stays once compiled, named: the Python calls a compiled step with your subclass makes
beyond the compiled plain step, by owner (your subclass's `__tensor_flatten__`, Dynamo's guards
on its metadata, AOTAutograd's wrapping and unwrapping, the runtime wrappers).

`--step --compiled` times what stays (compiled yours less compiled plain, in ns, with its
interval: compiling.py). A time says how much, not where; a sampling profiler at a few
microseconds a step cannot say either. Counting can, exactly: both compiled steps run
COUNTED_STEPS times under the project's Python-call counter (overrides/counts/pyhook.py: calls
through the profile hook, bytecodes executed), and the difference a step, by function, is the
Python work your subclass leaves in the compiled step. Guards that run in C++ and the kernels'
own time are not Python calls: they are in the timed figure, not in these counts.

Inductor's generated modules and kernels are named by a hash of their source, and FX's graph
code by a running number, different for the two steps; their calls are pooled under one name
each so that they cancel where alike. Both steps share code (your factory's inner function), so
Dynamo keeps both compiled entries on one code object and a step may test the other's guards
first: two compiled copies of one plain step differ by a few calls so (2 of ~500 a step, a
`_TorchCompileWrapper.__eq__` guard), which a program holding one of them would not make.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable

# Steps counted on each side (after WARM_STEPS uncounted): the counts are exact, so more steps
# only divide out; 20 keeps a call made once in 20 steps visible as 0.05.
COUNTED_STEPS = 20
WARM_STEPS = 3
# Owners, by where the function's code lives: the first that matches names it. Your files are
# matched first (by folder), C functions apart (they have no file).
OWNERS = (
    ("Dynamo's guards", ("/torch/_dynamo/guards.py",)),
    ("Dynamo, other", ("/torch/_dynamo/",)),
    ("AOTAutograd's subclass wrapping", ("/torch/_functorch/_aot_autograd/subclass_", "subclass_codegen")),
    ("AOTAutograd's runtime wrappers", ("/torch/_functorch/",)),
    ("the compiled graph's code", ("torchinductor", "/torch/_inductor/", "<eval_with_key>")),
    ("torch, other", ("/torch/",)),
)
YOURS = "your code"
C_FUNCTIONS = "C functions called from Python"
OTHER = "the standard library and others"
SHOWN_FUNCTIONS = 8  # the functions that add most calls, named in the output


@dataclasses.dataclass(frozen=True)
class Stays:
    """Per step, what the compiled step with your subclass runs beyond the compiled plain one."""

    steps: int  # counted on each side
    plain_calls: float  # Python and C calls a step, the compiled plain step
    subclass_calls: float
    plain_bytecodes: float
    subclass_bytecodes: float
    by_owner: tuple[tuple[str, float, float], ...]  # (owner, calls, bytecodes) added a step, largest first
    # (function, owner, calls added a step), most first: the SHOWN_FUNCTIONS adding most, and every
    # one of yours that adds calls (what you can change)
    functions: tuple[tuple[str, str, float], ...]
    bytecodes_counted: bool
    compiled_while_counting: int = 0  # frames compiled under the counter: then these are not a step's


def _generated(key: str, filename: str) -> str:
    """One name for Inductor's hash-named modules and kernels, and FX's numbered graph code."""
    if key.endswith(".kernel.kernel [C]"):
        return "Inductor kernel [C]"
    if "torchinductor" in filename:
        return f"{key.split(' (')[0]} (Inductor's generated code)"
    if filename.startswith("<eval_with_key>"):
        return f"{key.split(' (')[0]} (FX's generated graph code)"
    return key


def owner_of(filename: str, key: str, user_dir: str) -> str:
    if key.endswith(" [C]"):
        return C_FUNCTIONS
    if filename and not filename.startswith("<") and os.path.realpath(filename).startswith(os.path.join(user_dir, "")):
        return YOURS
    for owner, parts in OWNERS:
        if any(part in filename for part in parts):
            return owner
    return OTHER


def _count(step: Callable[[], object], steps: int) -> tuple[dict, dict, dict, bool]:
    """(calls, bytecodes, filename) by function name for `steps` steps, and whether bytecodes
    were counted right in this interpreter."""
    from overrides.counts.pyhook import Counter, bytecodes_counted

    for _ in range(WARM_STEPS):
        step()
    # One step counted and dropped: Dynamo meets the counter's own frames once a process (its
    # frame hook offers them for compiling, and skips them), and that work (~450 calls: dis,
    # convert_frame) must not land on whichever side is counted first. It did on Python 3.13:
    # an A/A read the plain step 23 calls a step above its own copy.
    Counter(sys.path, ignore_c=[sys.setprofile, sys.settrace]).run(step)
    counter = Counter(sys.path, ignore_c=[sys.setprofile, sys.settrace])

    def body() -> None:
        for _ in range(steps):
            step()

    counter.run(body)
    calls: dict[str, int] = {}
    bytecodes: dict[str, int] = {}
    files: dict[str, str] = {}
    for key in set(counter.calls) | set(counter.bytecodes):
        code = counter.codes.get(key)
        filename = getattr(code, "co_filename", "") if code is not None else ""
        name = _generated(key, filename)
        files[name] = filename
        calls[name] = calls.get(name, 0) + counter.calls.get(key, 0)
        bytecodes[name] = bytecodes.get(name, 0) + counter.bytecodes.get(key, 0)
    return calls, bytecodes, files, bytecodes_counted()


def count_stays(plain: Callable[[], object], subclass: Callable[[], object], user_dir: str,
                steps: int = COUNTED_STEPS) -> Stays:
    """Both compiled steps counted, `steps` each; their difference a step, by owner and function."""
    from overrides.compiled import dynamo

    before = dynamo.compilations()
    plain_calls, plain_bytecodes, plain_files, counted = _count(plain, steps)
    calls, bytecodes, files, counted_again = _count(subclass, steps)
    compiled = dynamo.compilations() - before
    files = {**plain_files, **files}
    by_owner: dict[str, list[float]] = {}
    added: list[tuple[str, str, float]] = []
    for name in set(calls) | set(plain_calls):
        owner = owner_of(files.get(name, ""), name, user_dir)
        more_calls = (calls.get(name, 0) - plain_calls.get(name, 0)) / steps
        more_bytecodes = (bytecodes.get(name, 0) - plain_bytecodes.get(name, 0)) / steps
        totals = by_owner.setdefault(owner, [0.0, 0.0])
        totals[0] += more_calls
        totals[1] += more_bytecodes
        if more_calls:
            added.append((name, owner, more_calls))
    owners = tuple(sorted(((owner, c, b) for owner, (c, b) in by_owner.items() if c or b),
                          key=lambda row: (-abs(row[2]), -abs(row[1]))))
    ranked = sorted(added, key=lambda row: (-row[2], row[0]))
    functions = tuple(row for index, row in enumerate(ranked) if index < SHOWN_FUNCTIONS or row[1] == YOURS)
    return Stays(steps, sum(plain_calls.values()) / steps, sum(calls.values()) / steps,
                 sum(plain_bytecodes.values()) / steps, sum(bytecodes.values()) / steps,
                 owners, functions, counted and counted_again, compiled)


def stays_lines(stays: Stays) -> list[str]:
    """The counts as text: the totals, by owner, the functions that add most."""
    from overrides.tables import ruled

    more_calls = stays.subclass_calls - stays.plain_calls
    more_bytecodes = stays.subclass_bytecodes - stays.plain_bytecodes
    lines = [f"what stays, counted (Python's calls and bytecodes a step, {stays.steps} steps each): the compiled "
             f"step with your subclass makes {stays.subclass_calls:,.0f} calls against the compiled plain step's "
             f"{stays.plain_calls:,.0f} ({more_calls:+,.0f})"
             + (f" and runs {more_bytecodes:+,.0f} bytecodes" if stays.bytecodes_counted else
                " (bytecodes not counted in this interpreter)")]
    if stays.compiled_while_counting:
        lines.append(f"  {stays.compiled_while_counting} frame(s) compiled while counting: these counts hold a "
                     "compile's calls, not a step's alone")
    rows = [["owner", "calls a step", "bytecodes a step"]]
    rows += [[owner, f"{calls:+,.1f}", f"{bytecodes:+,.0f}" if stays.bytecodes_counted else "-"]
             for owner, calls, bytecodes in stays.by_owner]
    lines += ruled(rows) if len(rows) > 1 else ["  none: both compiled steps make the same calls"]
    if stays.functions:
        lines += ruled([["adding most calls", "owner", "calls a step"]]
                       + [[name, owner, f"{calls:+,.1f}"] for name, owner, calls in stays.functions])
    lines.append("  guards run in C++ and kernels' own time are no Python calls: they are in the timed figure "
                 "above, not in these counts")
    return lines
