"""Collapsed stacks: py-spy's raw output read back, frames named so that two builds agree, and
the hot loop cut out of everything else the process did.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

from overrides.flame.hotloop import frame_name

Stacks = Mapping[tuple[str, ...], int]
HOT_LOOP_PREFIX = frame_name("")  # every hot-loop frame's name starts with this

_LINE_NUMBER = re.compile(r":\d+\)$")  # "f (file.py:12)" -> "f (file.py)": lines move between builds
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_PROCESS_FRAME = re.compile(r'^process \d+:')


_TEMPLATE_ARGUMENTS = re.compile(r"<[^<>]*>")


def clean_frame(frame: str) -> str:
    """A frame name that means the same thing in two builds, short enough to read: no line
    numbers, no addresses, no directories, no C++ template arguments."""
    frame = _ADDRESS.sub("?", _LINE_NUMBER.sub(")", frame.strip()))
    match = re.match(r"^(.*) \((.+)\)$", frame)
    name, location = match.groups() if match else (frame, None)
    if location and (location.endswith(".py") or location.startswith("<")):
        return f"{name} ({'/'.join(location.split('/')[-2:])})"  # Python: <locals> are not templates
    # innermost first: "f<a<b>, c>::g" -> "f<a\x00, c>::g" -> "f\x00::g" -> "f<>::g"
    shorter = _TEMPLATE_ARGUMENTS.sub("\x00", name)
    while shorter != name:
        name, shorter = shorter, _TEMPLATE_ARGUMENTS.sub("\x00", shorter)
    name = name.replace("\x00", "<>")
    if location is None:
        return name
    # "/long/path/to/torch/_tensor.py" -> "torch/_tensor.py": one directory for context
    return f"{name} ({'/'.join(location.replace(chr(92), '/').split('/')[-2:])})"


def read_folded(path: str, keep_lines: bool = False) -> dict[tuple[str, ...], int]:
    """Collapsed stacks ("frame;frame;frame count" per line), frames cleaned, counts merged.
    With `keep_lines`, frames are left as py-spy wrote them (Python frames with the line each
    was running), for `at_call_sites`."""
    stacks: dict[tuple[str, ...], int] = {}
    with open(path, encoding="utf-8", errors="replace") as src:
        for line in src:
            line = line.rstrip("\n")
            if not line.strip():
                continue
            body, _, count = line.rpartition(" ")
            try:
                samples = int(count)
            except ValueError:
                continue
            frames = [f for f in body.split(";") if f and not _PROCESS_FRAME.match(f)]
            key = tuple(f.strip() if keep_lines else clean_frame(f) for f in frames)
            stacks[key] = stacks.get(key, 0) + samples
    return stacks


def frame_line(frame: str) -> tuple[str, int | None]:
    """(the cleaned frame, the line it was running) of a frame as py-spy wrote it; no line for
    native frames."""
    match = _LINE_NUMBER.search(frame.strip())
    return clean_frame(frame), int(match.group()[1:-1]) if match else None


def at_call_sites(stacks: Mapping[tuple[str, ...], int],
                  sites: Mapping[tuple[str, int], str]) -> dict[tuple[str, ...], int]:
    """Stacks read with their lines (`read_folded(keep_lines=True)`), cleaned, and each cut at
    the outermost frame running one of `sites` ((cleaned frame, line) -> a name): what ran at
    that line, the call made there with everything it called, becomes that name's own samples
    below the caller. With no sites, the same as `read_folded` without lines."""
    out: dict[tuple[str, ...], int] = {}
    for stack, samples in stacks.items():
        key: list[str] = []
        for frame in stack:
            name, line = frame_line(frame)
            key.append(name)
            site = sites.get((name, line)) if line is not None and sites else None
            if site is not None:
                key.append(site)
                break
        out[tuple(key)] = out.get(tuple(key), 0) + samples
    return out


# The hooks a Tensor subclass has torch call: a Python frame of one of these is "your
# subclass's" in a step's flamegraph (UnitTensor.__torch_function__ (units.py)); a plain step
# enters none. torch.Tensor's own default, which a subclass's super() runs, is left out: it sits
# right under yours, and labelling both printed one callout over the other.
SUBCLASS_HOOKS = ("__torch_function__", "__torch_dispatch__")
TENSOR_DEFAULT_HOOK_FILE = "torch/_tensor.py"


def is_subclass_hook(frame: str) -> bool:
    """Whether a cleaned frame is a subclass's Python `__torch_function__` / `__torch_dispatch__`."""
    name, _, location = frame.rpartition(" (")
    return (location.endswith(".py)") and location[:-1] != TENSOR_DEFAULT_HOOK_FILE
            and name.rsplit(".", 1)[-1] in SUBCLASS_HOOKS)


def hook_shares(stacks: Mapping[tuple[str, ...], int]) -> dict[str, float]:
    """Each subclass hook's share of the hot loop's samples, with what it calls (a sample
    counted once per hook however deep it nests), the largest first."""
    loop = hot_loop_stacks(stacks)
    total = sum(loop.values())
    inclusive, _ = frame_samples(loop)
    found = {frame: count / total for frame, count in inclusive.items() if total and is_subclass_hook(frame)}
    return dict(sorted(found.items(), key=lambda item: (-item[1], item[0])))


def hot_loop_stacks(stacks: Mapping[tuple[str, ...], int]) -> dict[tuple[str, ...], int]:
    """Only the samples taken inside the hot loop, each stack cut to start at the loop's frame
    (what ran before it, importing torch above all, is not part of any call)."""
    out: dict[tuple[str, ...], int] = {}
    for stack, samples in stacks.items():
        for depth, frame in enumerate(stack):
            if frame.startswith(HOT_LOOP_PREFIX):
                key = stack[depth:]
                out[key] = out.get(key, 0) + samples
                break
    return out


def hot_loop_total(stacks: Mapping[tuple[str, ...], int]) -> int:
    return sum(hot_loop_stacks(stacks).values())


def frame_samples(stacks: Mapping[tuple[str, ...], int]) -> tuple[dict[str, int], dict[str, int]]:
    """(inclusive, self) samples per frame name; a frame counts once per sample even if it
    recurses."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    for stack, samples in stacks.items():
        for frame in set(stack):
            inclusive[frame] = inclusive.get(frame, 0) + samples
        if stack:
            own[stack[-1]] = own.get(stack[-1], 0) + samples
    return inclusive, own


def merged(recordings: Sequence[Stacks]) -> dict[tuple[str, ...], int]:
    """Several recordings' stacks as one: samples added per stack."""
    out: dict[tuple[str, ...], int] = {}
    for stacks in recordings:
        for stack, samples in stacks.items():
            out[stack] = out.get(stack, 0) + samples
    return out
