"""Reading Callgrind's output: one dump's total and self instructions per function, and, with
`--separate-callers`, per call path; function names cleaned so that they mean the same in two
builds. The dumps are written with `--compress-strings=no --compress-pos=no` (callgrind.py).
"""

from __future__ import annotations

import os
import re

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def clean_function(name: str, object_file: str | None) -> str:
    """A function name that means the same in two builds: no addresses, no argument lists, no
    directories (the object file's base name is kept for context)."""
    # "(anonymous namespace)" is part of the name, not an argument list: keep it, or every
    # function in an anonymous namespace of at:: would be cut to the same "at::".
    name = _ADDRESS.sub("?", name.strip()).replace("(anonymous namespace)", "{anonymous}")
    depth, cut = 0, len(name)
    for i, char in enumerate(name):  # drop the outermost argument list: "f(int, ...)" -> "f"
        if char == "(":
            if depth == 0 and i > 0:
                cut = i
                break
            depth += 1
        elif char == ")":
            depth -= 1
    name = name[:cut] or name
    if object_file:
        name += f" [{os.path.basename(object_file)}]"
    return name


# Callgrind writes a dump's total in its header (`summary:`), within the first lines.
HEADER_LINES = 64


def read_total(path: str) -> int:
    """A dump's total instructions from its header alone; the whole dump when the header has
    none. A count's repeats need only their totals until one is chosen: parsing every repeat's
    call paths took a noticeable time per counting process, in the parent, one process's after
    the other's (figures: benchmarks/history.md, 'Docstring figures')."""
    with open(path, encoding="utf-8", errors="replace") as src:
        for number, line in enumerate(src):
            if line.startswith(("summary:", "totals:")):
                return int(line.split(":", 1)[1].split()[0])
            if number >= HEADER_LINES:
                break
    return read_dump(path)[0]


def read_dump(path: str, stacks: dict | None = None) -> tuple[int, dict[str, int]]:
    """(total instructions, self instructions per function) of one callgrind dump; with
    `stacks`, self instructions per call path are added to it (root first), from the caller
    chains `--separate-callers` writes as `callee'caller'caller...`."""
    total = 0
    functions: dict[str, int] = {}
    current, current_object, object_file = None, None, None
    chain: tuple[str, ...] = ()
    # (callee-first raw names, the callee's object file) -> count; cleaned at the end
    raw_stacks: dict[tuple[tuple[str, ...], str | None], int] = {}
    objects: dict[str, str | None] = {}  # raw function name -> an object file it is in
    skip_next_cost = False
    with open(path, encoding="utf-8", errors="replace") as src:
        for line in src:
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split(":", 1)[1].split()[0]))
            elif line.startswith("ob="):
                object_file = line[3:].strip()
            elif line.startswith("fn="):
                names = split_chain(line[3:].strip())
                current, current_object = names[0], object_file
                objects.setdefault(current, current_object)
                chain = tuple(names)
            elif line.startswith("calls="):
                skip_next_cost = True  # the next cost line is the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                if skip_next_cost:
                    skip_next_cost = False
                    continue
                parts = line.split()
                if current is not None and len(parts) >= 2:
                    key = clean_function(current, current_object)
                    functions[key] = functions.get(key, 0) + int(parts[1])
                    if stacks is not None:
                        key = (chain, current_object)
                        raw_stacks[key] = raw_stacks.get(key, 0) + int(parts[1])
    if stacks is not None:
        # A caller's object file is known only where it was a callee itself: look it up there
        # (an inline function can sit in two libraries; the callee's own is always exact).
        for (raw, leaf_object), value in raw_stacks.items():
            path = tuple(clean_function(name, leaf_object if i == len(raw) - 1 else objects.get(name))
                         for i, name in enumerate(reversed(raw)))
            stacks[path] = stacks.get(path, 0) + value
    return total, functions


def split_chain(name: str) -> list[str]:
    """`callee'2'caller'caller` -> [callee, caller, caller]: the caller chain of a context
    (`--separate-callers`), recursion levels (`'2`) dropped."""
    return [part for part in name.split("'") if part and not part.isdigit()]
