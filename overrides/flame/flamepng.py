"""The PNG of a flamegraph SVG, for a PR page that shows no SVG: drawn by matplotlib, no browser.

The SVGs are static and this tool draws them all (overrides/flame/flamesvg.py), so their PNG
needs no browser: the SVG is read back into the drawing it was written from
(`flamesvg.read_svg`, exact), and matplotlib's Agg backend draws the same boxes, colours and
labels at the same pixels. matplotlib installs from pip alone (wheels with Agg and its own
font, DejaVu Sans: the one a browser here falls back to for the SVG's Verdana); headless
Chromium, which drew them before, was a system package a pip user cannot install, and slower
(benchmarks/history.md, "Pictures without a browser"); cairosvg, the other candidate, needs the
system's libcairo.

Every PNG is still checked before it counts (its size, more than one colour), and an SVG this
tool did not draw (py-spy's own, with its script) is an error that says so, not a blank PNG.
"""

from __future__ import annotations

import os
import re
import struct
import sys
import threading
import zlib

from overrides.files import atomic_path
from overrides.flame import flamesvg

# 72 dots an inch: a point is a pixel, so the SVG's font sizes and stroke widths carry over as
# they are written.
DPI = 72
MAX_HEIGHT = 16000  # taller is cut there (a 900-deep stack): a 1600-wide RGBA canvas of ~100 MB
FONT = "DejaVu Sans"  # ships inside matplotlib: the same letters on every machine
# Glyphs at their unhinted widths, as Chromium lays out the SVG's text: hinted (matplotlib's
# default) an 11 px label came out ~3% wider than the browser's, past the widths that
# flamesvg.CHAR_WIDTH fits labels to.
RC = {"text.hinting": "no_hinting"}
ANCHORS = {"start": "left", "middle": "center"}  # SVG's text-anchor in matplotlib's words
INSTALL_HINT = "install it (`{python} -m pip install matplotlib`; `make test` does), then run this again"
# matplotlib is not thread-safe and drawing holds the GIL: one picture at a time in a process.
_DRAWING = threading.Lock()
_RGB = re.compile(r"rgb\((\d+),(\d+),(\d+)\)")


class PngError(Exception):
    """No usable PNG could be drawn; the message says why."""


def missing() -> str | None:
    """Why no PNG can be drawn in this interpreter (no matplotlib), or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return f"{sys.executable} has no matplotlib; {INSTALL_HINT.format(python=sys.executable)}"
    return None


def write_png(svg_path: str, png_path: str) -> tuple[int, int]:
    """The PNG of the flamegraph `svg_path` at `png_path` (written whole or not at all), as wide
    and as tall as the SVG (cut at MAX_HEIGHT); returns its size."""
    reason = missing()
    if reason:
        raise PngError(reason)
    try:
        with open(svg_path, encoding="utf-8") as src:
            drawing = flamesvg.read_svg(src.read())
    except (OSError, UnicodeDecodeError) as exc:
        raise PngError(f"{svg_path} could not be read ({exc})") from None
    except flamesvg.NotOurs as exc:
        raise PngError(f"{os.path.basename(svg_path)} is not a flamegraph this tool drew: {exc}") from None
    size = (drawing.width, min(drawing.height, MAX_HEIGHT))
    with atomic_path(png_path, suffix=".png") as tmp_png:
        import matplotlib

        try:
            with _DRAWING, matplotlib.rc_context(RC):
                _figure(drawing, size[1]).savefig(tmp_png, format="png", dpi=DPI, facecolor="white")
        except Exception as exc:  # whatever matplotlib raises costs this picture, not the report
            raise PngError(f"matplotlib could not draw it ({type(exc).__name__}: {exc})") from None
        drawn = png_size(tmp_png)
        if drawn != size:
            raise PngError(f"matplotlib's PNG is {drawn[0]}x{drawn[1]}, not the {size[0]}x{size[1]} asked for")
        if png_is_flat(tmp_png):
            raise PngError("the PNG is one flat colour (nothing was drawn)")
    return size


def _figure(drawing: flamesvg.Drawing, height: int):
    """A matplotlib figure of `drawing`, one pixel a unit, y downwards as in the SVG: the frames
    and their labels, then the callouts over them, then the lines of text."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import PatchCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    figure = Figure(figsize=(drawing.width / DPI, height / DPI), dpi=DPI, facecolor="white")
    FigureCanvasAgg(figure)
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_axis_off()
    axes.set_xlim(0, drawing.width)
    axes.set_ylim(height, 0)
    # two layers, as the SVG's order has them: callouts (bold) after every frame
    for layer, callouts in enumerate((False, True)):
        boxes = [b for b in drawing.boxes if b.bold == callouts]
        if not boxes:
            continue
        axes.add_collection(PatchCollection(
            [Rectangle((b.x, b.y), b.width, b.height) for b in boxes],
            facecolors=[colour(b.fill) for b in boxes], edgecolors=[colour(b.stroke) for b in boxes],
            linewidths=[b.stroke_width for b in boxes], zorder=2 * layer + 1))
        for b in boxes:
            if b.label:
                axes.text(b.label_x, b.label_baseline, b.label, fontsize=flamesvg.FONT_SIZE, family=FONT,
                          fontweight="bold" if b.bold else "normal", ha="left", va="baseline",
                          color="black", zorder=2 * layer + 2, parse_math=False)
    for text in drawing.texts:
        axes.text(text.x, text.y, text.text, fontsize=text.size, family=FONT, ha=ANCHORS[text.anchor],
                  va="baseline", color=colour(text.colour), zorder=5, parse_math=False)
    return figure


def colour(svg_colour: str):
    """An SVG colour as matplotlib takes it: `rgb(r,g,b)` as a tuple of fractions, a name or
    `#rgb` as it is."""
    match = _RGB.fullmatch(svg_colour.replace(" ", ""))
    return tuple(int(part) / 255 for part in match.groups()) if match else svg_colour


# ---------------------------------------------------------------------------------------------
# Just enough PNG reading to check a picture (no imaging library needed).

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel


def _chunks(path: str):
    with open(path, "rb") as src:
        data = src.read()
    if not data.startswith(_PNG_SIGNATURE):
        raise PngError(f"{path} is not a PNG")
    position = len(_PNG_SIGNATURE)
    while position + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        yield kind, data[position + 8:position + 8 + length]
        position += 12 + length


def png_size(path: str) -> tuple[int, int]:
    for kind, body in _chunks(path):
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
            return width, height
    raise PngError(f"{path} has no PNG header")


def png_rows(path: str):
    """Yield (bytes per pixel, row of raw pixel bytes) top to bottom, filters undone, lazily so a
    caller can stop early. 8-bit, non-interlaced PNGs only (what matplotlib writes)."""
    header, idat = None, []
    for kind, body in _chunks(path):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    if header is None:
        raise PngError(f"{path} has no PNG header")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or interlace or colour not in _CHANNELS:
        raise PngError(f"{path}: only 8-bit, non-interlaced PNGs are read here")
    bpp = _CHANNELS[colour]
    raw = zlib.decompress(b"".join(idat))
    stride = width * bpp
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                up = previous[i]
                if kind == 1:
                    line[i] = (line[i] + left) & 0xFF
                elif kind == 2:
                    line[i] = (line[i] + up) & 0xFF
                elif kind == 3:
                    line[i] = (line[i] + (left + up) // 2) & 0xFF
                else:  # 4, Paeth
                    corner = previous[i - bpp] if i >= bpp else 0
                    estimate = left + up - corner
                    pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
                    line[i] = (line[i] + (left if pa <= pb and pa <= pc else (up if pb <= pc else corner))) & 0xFF
        yield bpp, bytes(line)
        previous = line


def png_colours(path: str, limit: int = 64) -> int:
    """How many distinct pixel colours the PNG has (reading stops once `limit` are seen)."""
    seen: set[bytes] = set()
    for bpp, row in png_rows(path):
        for i in range(0, len(row), bpp):
            seen.add(row[i:i + bpp])
        if len(seen) >= limit:
            return len(seen)
    return len(seen)


def png_is_flat(path: str) -> bool:
    return png_colours(path, limit=2) < 2
