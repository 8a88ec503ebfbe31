"""Flamegraph SVGs drawn here, from a weighted call tree: py-spy's samples or Callgrind's counts.

Why not py-spy's own SVG: its title is py-spy's command line (a temp path, for the scripts), it
shows whatever sat above the hot loop, and it cannot draw a comparison. Drawing our own lets
every picture in a report look alike: the title says what it shows (case, op, build, torch
version, source of the numbers); the root is the hot loop, at the top, so a screenshot starts
where the reader's eye does; width is the share of the whole; colour is either the kind of
frame or, in a differential view, how much a function changed against base (red: more, blue:
less, grey: not beyond its error). The SVG is static (tooltips, no script), so Chromium's
screenshot shows exactly what a browser does.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable, Mapping

SVG_WIDTH = 1600  # the screenshot window's width (overrides/flame/screenshot.py): no margin left unused
ROW_HEIGHT = 17
FONT_SIZE = 11
CHAR_WIDTH = 6.2  # average width of a FONT_SIZE character, to cut labels that would not fit
MIN_WIDTH_PX = 0.5  # frames narrower than this are not drawn
TOP_MARGIN = 64  # title, subtitle and legend
BOTTOM_MARGIN = 28  # the footer line
SIDE_MARGIN = 10
GREY = "rgb(225,225,225)"
# Time that moved while the instructions did not (the report's py-spy view set against the
# counts): neither red nor blue, since no code changed there; a pale amber a reader notices.
SAME_WORK = "rgb(245,215,140)"
# A box the caller names (a function the Python-call counts found new or changed) is drawn at
# least this wide, and labelled on top of its neighbours when its name does not fit: a 100 ns
# helper in a 4 us call is ~40 px, room for "_ch.." and no more.
NAMED_MIN_WIDTH_PX = 3.0
BOLD_WIDTH = 1.15  # a bold label's width against CHAR_WIDTH (measured on Chromium's Verdana fallback)


@dataclasses.dataclass(frozen=True)
class Frame:
    """One box: a call path (root first), its weight, and what to say and show about it."""

    path: tuple[str, ...]
    weight: float
    x: float  # left edge in weight units from the root's left edge


def layout(weights: Mapping[tuple[str, ...], float]) -> list[Frame]:
    """Boxes for inclusive `weights` per call path (every prefix present): children left to
    right inside their parent, heaviest first, so the main tower is always at the left."""
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for path in weights:
        children.setdefault(path[:-1], []).append(path)
    frames = []
    pending = [((), 0.0)]
    while pending:
        parent, x = pending.pop()
        for child in sorted(children.get(parent, []), key=lambda p: (-weights[p], p[-1])):
            frames.append(Frame(child, weights[child], x))
            pending.append((child, x))
            x += weights[child]
    return frames


def tree_from_stacks(stacks: Mapping[tuple[str, ...], float]) -> dict[tuple[str, ...], float]:
    """Inclusive weight per call path (every prefix of every stack)."""
    paths: dict[tuple[str, ...], float] = {}
    for stack, weight in stacks.items():
        for depth in range(1, len(stack) + 1):
            paths[stack[:depth]] = paths.get(stack[:depth], 0) + weight
    return paths


def escape(text: str) -> str:
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def warm_colour(name: str) -> str:
    """The classic flamegraph palette, stable per name: Python frames yellow, native orange-red."""
    digest = hashlib.md5(name.encode("utf-8", "replace")).digest()
    if name.endswith(".py)") or "(<" in name:  # a Python function, or generated code
        return f"rgb({215 + digest[0] % 40},{190 + digest[1] % 50},{60 + digest[2] % 50})"
    return f"rgb({220 + digest[0] % 35},{90 + digest[1] % 90},{40 + digest[2] % 40})"


def change_colour(delta: float, scale: float, significant: bool) -> str:
    """Red for more, blue for less, deeper the larger against `scale`; grey when not significant."""
    if not significant or scale <= 0 or delta == 0:
        return GREY
    fade = int(215 - 165 * min(1.0, abs(delta) / scale))
    return f"rgb(235,{fade},{fade})" if delta > 0 else f"rgb({fade},{fade},235)"


def short_name(label: str) -> str:
    """A frame's name without its file or library: `_check (torch/_tensor.py)` -> `_check`."""
    name = label.rsplit(" (", 1)[0] if label.endswith(")") else label
    return name.rsplit(" [", 1)[0] if name.endswith("]") else name


def fitted_label(label: str, width_px: float) -> str:
    """What fits in a box `width_px` wide: the whole label, else the name without its file,
    else the name cut with "..", else nothing."""
    fits = int((width_px - 4) / CHAR_WIDTH)
    if len(label) <= fits:
        return label
    name = short_name(label)
    if len(name) <= fits:
        return name
    return name[:fits - 2] + ".." if fits > 3 else ""


def render(weights: Mapping[tuple[str, ...], float], title: str, subtitle: str, footer: str,
           colour: Callable[[tuple[str, ...]], str], tooltip: Callable[[tuple[str, ...], float], str],
           named: Callable[[tuple[str, ...]], bool] = lambda path: False) -> str:
    """The SVG text of a flamegraph of `weights` (inclusive, per call path). Boxes `named`
    says are worth finding are drawn at least NAMED_MIN_WIDTH_PX wide and, when their name does
    not fit, labelled over their neighbours (on a white ground, framed in the box's colour)."""
    frames = layout(weights)
    total = sum(f.weight for f in frames if len(f.path) == 1)
    if total <= 0:
        raise ValueError("nothing to draw: the tree has no weight")
    depth = max(len(f.path) for f in frames)
    height = TOP_MARGIN + depth * ROW_HEIGHT + BOTTOM_MARGIN
    scale = (SVG_WIDTH - 2 * SIDE_MARGIN) / total
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{height}" '
        f'viewBox="0 0 {SVG_WIDTH} {height}" font-family="Verdana, sans-serif" font-size="{FONT_SIZE}">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{SVG_WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{SVG_WIDTH / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>',
        f'<text x="{SVG_WIDTH / 2}" y="42" text-anchor="middle" fill="#555">{escape(subtitle)}</text>',
    ]
    callouts = []  # drawn last, so no box covers them
    for frame in frames:
        width = frame.weight * scale
        emphasised = named(frame.path)
        if emphasised:
            width = max(width, NAMED_MIN_WIDTH_PX)
        elif width < MIN_WIDTH_PX:
            continue
        x = SIDE_MARGIN + frame.x * scale
        y = TOP_MARGIN + (len(frame.path) - 1) * ROW_HEIGHT
        label = frame.path[-1]
        shown = fitted_label(label, width)
        fill = colour(frame.path)
        tip = escape(tooltip(frame.path, frame.weight))
        if emphasised and shown not in (label, short_name(label)):
            shown = ""
            name = short_name(label)
            text_width = len(name) * CHAR_WIDTH * BOLD_WIDTH + 6
            left = min(x, SVG_WIDTH - SIDE_MARGIN - text_width)
            callouts.append(
                f'<g><title>{tip}</title><rect x="{left:.2f}" y="{y}" width="{text_width:.2f}" '
                f'height="{ROW_HEIGHT - 1}" fill="white" stroke="{fill}" stroke-width="2"/>'
                f'<text x="{left + 3:.2f}" y="{y + ROW_HEIGHT - 5}" font-weight="bold">'
                f'{escape(name)}</text></g>')
        parts.append(
            f'<g><title>{tip}</title>'
            f'<rect x="{x:.2f}" y="{y}" width="{width:.2f}" height="{ROW_HEIGHT - 1}" '
            f'fill="{fill}" stroke="white" stroke-width="0.5"/>'
            + (f'<text x="{x + 3:.2f}" y="{y + ROW_HEIGHT - 5}">{escape(shown)}</text>' if shown else "")
            + "</g>")
    parts += callouts
    parts.append(f'<text x="{SIDE_MARGIN}" y="{height - 10}" fill="#555">{escape(footer)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
