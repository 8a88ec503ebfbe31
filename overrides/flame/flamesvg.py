"""Flamegraph SVGs drawn here, from a weighted call tree: py-spy's samples or Callgrind's counts.

Why not py-spy's own SVG: its title is py-spy's command line (a temp path, for the scripts), it
shows whatever sat above the hot loop, and it cannot draw a comparison. Drawing our own lets
every picture in a report look alike: the title says what it shows (case, op, build, torch
version, source of the numbers); the root is the hot loop, at the top, so a picture starts
where the reader's eye does; width is the share of the whole; colour is either the kind of
frame or, in a differential view, how much a function changed against base (red: more, blue:
less, grey: not beyond its error). The SVG is static (a tooltip per box, no script): its PNG
(overrides/flame/flamepng.py, for a PR page that shows no SVG) is drawn from the same layout
by matplotlib, read back from the SVG itself, so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Callable, Mapping

SVG_WIDTH = 1600  # and its PNG's: as wide as a PR page shows a picture, no margin left unused
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
BOLD_WIDTH = 1.15  # a bold label's width against CHAR_WIDTH (DejaVu Sans: browsers' Verdana fallback, matplotlib's font)


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


# ---------------------------------------------------------------------------------------------
# The drawing: every box, label and line of text with its place, laid out once (`draw`), then
# written as SVG (`svg_text`) or, read back from that SVG (`read_svg`), drawn as a PNG
# (overrides/flame/flamepng.py). Both pictures are made from one record, so they cannot differ
# in what they show or where.

LABEL_PAD_PX = 3  # a label starts this far right of its box's left edge
LABEL_BASELINE_UP_PX = 4  # ... and sits this far above its box's bottom edge
FRAME_STROKE = ("white", 0.5)  # a hairline between neighbouring frames
CALLOUT_STROKE_WIDTH = 2.0  # a callout is framed in its box's colour
TITLE_SIZE = 15
GREY_TEXT = "#555"


@dataclasses.dataclass(frozen=True)
class Box:
    """A filled rectangle and its label (empty: none), in pixels from the top left: a frame,
    or a named frame's callout drawn over its neighbours (white, framed in the frame's colour,
    its label bold)."""

    x: float
    y: float
    width: float
    height: float
    fill: str
    stroke: str
    stroke_width: float
    label: str
    bold: bool
    tooltip: str

    @property
    def label_x(self) -> float:
        return round(self.x + LABEL_PAD_PX, 2)

    @property
    def label_baseline(self) -> float:
        return self.y + self.height - LABEL_BASELINE_UP_PX


@dataclasses.dataclass(frozen=True)
class Text:
    """A line of text outside the boxes (title, subtitle, footer); `y` is its baseline."""

    x: float
    y: float
    text: str
    size: int
    anchor: str  # SVG's text-anchor: "start" or "middle"
    colour: str


@dataclasses.dataclass(frozen=True)
class Drawing:
    """A whole flamegraph: its size in pixels, its title (the SVG's <title>), the lines of text
    and the boxes in the order they are drawn (frames, then callouts over them)."""

    width: int
    height: int
    title: str
    texts: tuple[Text, ...]
    boxes: tuple[Box, ...]


def draw(weights: Mapping[tuple[str, ...], float], title: str, subtitle: str, footer: str,
         colour: Callable[[tuple[str, ...]], str], tooltip: Callable[[tuple[str, ...], float], str],
         named: Callable[[tuple[str, ...]], bool] = lambda path: False) -> Drawing:
    """The flamegraph of `weights` (inclusive, per call path), laid out. Boxes `named` says are
    worth finding are drawn at least NAMED_MIN_WIDTH_PX wide and, when their name does not fit,
    labelled over their neighbours (on a white ground, framed in the box's colour)."""
    frames = layout(weights)
    total = sum(f.weight for f in frames if len(f.path) == 1)
    if total <= 0:
        raise ValueError("nothing to draw: the tree has no weight")
    depth = max(len(f.path) for f in frames)
    height = TOP_MARGIN + depth * ROW_HEIGHT + BOTTOM_MARGIN
    scale = (SVG_WIDTH - 2 * SIDE_MARGIN) / total
    boxes, callouts = [], []  # callouts drawn last, so no box covers them
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
        tip = tooltip(frame.path, frame.weight)
        if emphasised and shown not in (label, short_name(label)):
            shown = ""
            name = short_name(label)
            text_width = len(name) * CHAR_WIDTH * BOLD_WIDTH + 6
            left = min(x, SVG_WIDTH - SIDE_MARGIN - text_width)
            # One callout where two would print over each other on a row (a step calls the same
            # hook from neighbouring ops): the box stays, and its tooltip names it.
            if not any(c.y == y and c.x < left + text_width and left < c.x + c.width for c in callouts):
                callouts.append(Box(round(left, 2), y, round(text_width, 2), ROW_HEIGHT - 1, "white", fill,
                                    CALLOUT_STROKE_WIDTH, name, True, tip))
        boxes.append(Box(round(x, 2), y, round(width, 2), ROW_HEIGHT - 1, fill, *FRAME_STROKE, shown,
                         False, tip))
    texts = (Text(SVG_WIDTH / 2, 22, title, TITLE_SIZE, "middle", "black"),
             Text(SVG_WIDTH / 2, 42, subtitle, FONT_SIZE, "middle", GREY_TEXT),
             Text(SIDE_MARGIN, height - 10, footer, FONT_SIZE, "start", GREY_TEXT))
    return Drawing(SVG_WIDTH, height, title, texts, tuple(boxes + callouts))


def svg_text(drawing: Drawing) -> str:
    """The SVG of `drawing`: static (a tooltip per box, no script), one element a line."""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{drawing.width}" height="{drawing.height}" '
        f'viewBox="0 0 {drawing.width} {drawing.height}" font-family="Verdana, sans-serif" '
        f'font-size="{FONT_SIZE}">',
        f"<title>{escape(drawing.title)}</title>",
        f'<rect x="0" y="0" width="{drawing.width}" height="{drawing.height}" fill="white"/>',
    ]
    texts = [_svg_line(t) for t in drawing.texts]
    parts += texts[:-1]  # the footer last, as a reader meets it
    for box in drawing.boxes:
        parts.append(
            f'<g><title>{escape(box.tooltip)}</title>'
            f'<rect x="{box.x:.2f}" y="{box.y:g}" width="{box.width:.2f}" height="{box.height:g}" '
            f'fill="{box.fill}" stroke="{box.stroke}" stroke-width="{box.stroke_width:g}"/>'
            + (f'<text x="{box.label_x:.2f}" y="{box.label_baseline:g}"'
               + (' font-weight="bold"' if box.bold else "") + f'>{escape(box.label)}</text>'
               if box.label else "")
            + "</g>")
    parts += texts[-1:]
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _svg_line(text: Text) -> str:
    attributes = f'x="{text.x:g}" y="{text.y:g}"'
    if text.anchor != "start":
        attributes += f' text-anchor="{text.anchor}"'
    if text.size != FONT_SIZE:
        attributes += f' font-size="{text.size}"'
    if text.colour != "black":
        attributes += f' fill="{text.colour}"'
    return f"<text {attributes}>{escape(text.text)}</text>"


def render(weights: Mapping[tuple[str, ...], float], title: str, subtitle: str, footer: str,
           colour: Callable[[tuple[str, ...]], str], tooltip: Callable[[tuple[str, ...], float], str],
           named: Callable[[tuple[str, ...]], bool] = lambda path: False) -> str:
    """The SVG text of a flamegraph of `weights`: `svg_text(draw(...))`."""
    return svg_text(draw(weights, title, subtitle, footer, colour, tooltip, named))


class NotOurs(ValueError):
    """An SVG that `svg_text` did not write (py-spy's own, a hand-edited one): no drawing in it."""


_SVG = "{http://www.w3.org/2000/svg}"


def read_svg(text: str) -> Drawing:
    """The Drawing an SVG written by `svg_text` holds, exactly: read_svg(svg_text(d)) == d."""
    import xml.etree.ElementTree as ElementTree

    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise NotOurs(f"not well-formed XML ({exc})") from None
    if root.tag != _SVG + "svg" or root.get("width") is None:
        raise NotOurs("its root is not an <svg> with a width")
    try:
        return _read(root)
    except NotOurs:
        raise
    except (TypeError, ValueError) as exc:  # an attribute missing or not a number
        raise NotOurs(f"an element this tool would not write ({exc})") from None


def _read(root) -> Drawing:
    title, texts, boxes = "", [], []
    for element in root:
        tag = element.tag[len(_SVG):] if element.tag.startswith(_SVG) else element.tag
        if tag == "title":
            title = element.text or ""
        elif tag == "rect" and element.get("x") == "0" and element.get("y") == "0":
            continue  # the white ground under everything
        elif tag == "text":
            texts.append(Text(float(element.get("x")), float(element.get("y")), element.text or "",
                              int(element.get("font-size", FONT_SIZE)), element.get("text-anchor", "start"),
                              element.get("fill", "black")))
        elif tag == "g":
            boxes.append(_box(element))
        else:
            raise NotOurs(f"it holds a <{tag}>, which this tool's flamegraphs never do (py-spy's own SVG?)")
    return Drawing(int(root.get("width")), int(root.get("height")), title, tuple(texts), tuple(boxes))


def _box(group) -> Box:
    rect, label = group.find(_SVG + "rect"), group.find(_SVG + "text")
    tip = group.find(_SVG + "title")
    if rect is None:
        raise NotOurs("a <g> without its <rect>")
    return Box(float(rect.get("x")), float(rect.get("y")), float(rect.get("width")), float(rect.get("height")),
               rect.get("fill"), rect.get("stroke"), float(rect.get("stroke-width")),
               label.text or "" if label is not None else "",
               label is not None and label.get("font-weight") == "bold",
               tip.text or "" if tip is not None else "")
