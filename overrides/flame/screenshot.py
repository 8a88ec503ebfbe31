"""PNG screenshots of flamegraph SVGs, taken by headless Chromium, for a PR that cannot show SVG.

Chromium runs the flamegraph's own JavaScript, so the picture is the one a person sees in a
browser. It captures only its window, so the window is as tall as the SVG says it is
(1600 wide by the SVG root's height; a fixed 1000 cut a py-spy graph in half). Each shot gets
a fresh profile directory, removed after. Debian's wrapper script prints a warning that the
binary itself does not, so the binary is preferred when it is there.

A screenshot can fail without an error from Chromium (a blank page when the SVG did not load),
so every PNG is checked: the size asked for, and more than one colour.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import tempfile
import zlib

from overrides.files import atomic_path

WINDOW_WIDTH = 1600
MIN_HEIGHT, MAX_HEIGHT = 200, 16000  # a flamegraph is never shorter; Chromium's limit is near the top
SHOT_TIMEOUT_S = 60  # one shot takes 2-3 s here
BROWSERS = ("/usr/lib/chromium/chromium", "chromium", "chromium-browser", "google-chrome",
            "google-chrome-stable")
BROWSER_VARIABLE = "CHROMIUM"  # which browser to use, when not one of BROWSERS
INSTALL_HINT = ("install Chromium (Debian/Ubuntu: `apt-get install -y --no-install-recommends "
                "chromium`), then run the report again")
HEADLESS_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--log-level=3", "--disable-quic")


class ScreenshotError(Exception):
    """The browser could not make a usable PNG; the message says why."""


def find_browser() -> str | None:
    """$CHROMIUM if set (even if it is broken: then each shot fails and says why), else the
    first Chromium found."""
    given = os.environ.get(BROWSER_VARIABLE)
    if given:
        return given
    for candidate in BROWSERS:
        path = candidate if os.sep in candidate else shutil.which(candidate)
        if path and os.access(path, os.X_OK):
            return path
    return None


def svg_size(svg_path: str) -> tuple[int, int]:
    """(width, height) from the SVG root element, in pixels (the viewBox when they are absent)."""
    with open(svg_path, encoding="utf-8", errors="replace") as src:
        head = src.read(4096)
    root = re.search(r"<svg\b[^>]*>", head, re.S)
    if not root:
        raise ScreenshotError(f"{svg_path} is not an SVG file")
    tag = root.group(0)

    def attribute(name: str) -> float | None:
        match = re.search(rf'\b{name}="([\d.]+)(px)?"', tag)
        return float(match.group(1)) if match else None

    width, height = attribute("width"), attribute("height")
    view_box = re.search(r'viewBox="[\d.\s-]+?\s([\d.]+)\s+([\d.]+)"', tag)
    if (width is None or height is None) and view_box:
        width, height = float(view_box.group(1)), float(view_box.group(2))
    if width is None or height is None:
        raise ScreenshotError(f"{svg_path} does not say its size (no width/height or viewBox)")
    return int(round(width)), int(round(height))


def screenshot(svg_path: str, png_path: str, browser: str | None = None,
               width: int = WINDOW_WIDTH) -> tuple[int, int]:
    """Render `svg_path` to `png_path` (written whole or not at all); returns the PNG's size."""
    browser = browser or find_browser()
    if browser is None:
        raise ScreenshotError(f"no Chromium found; {INSTALL_HINT}")
    _, svg_height = svg_size(svg_path)
    height = max(MIN_HEIGHT, min(MAX_HEIGHT, svg_height))
    with tempfile.TemporaryDirectory(prefix="overrides-chromium-") as profile, \
            atomic_path(png_path, suffix=".png") as tmp_png:
        command = [browser, *HEADLESS_FLAGS, f"--user-data-dir={profile}",
                   f"--window-size={width},{height}", f"--screenshot={tmp_png}",
                   "file://" + os.path.abspath(svg_path)]
        os.unlink(tmp_png)  # so a PNG that exists afterwards is Chromium's
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=SHOT_TIMEOUT_S,
                                  cwd=profile)
        except subprocess.TimeoutExpired:
            raise ScreenshotError(f"Chromium did not finish within {SHOT_TIMEOUT_S} s") from None
        except OSError as exc:
            raise ScreenshotError(f"Chromium would not start ({exc}); {INSTALL_HINT}") from None
        if not os.path.exists(tmp_png):
            detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise ScreenshotError(f"Chromium wrote no PNG ({detail})")
        size = png_size(tmp_png)
        if size != (width, height):
            raise ScreenshotError(f"Chromium's PNG is {size[0]}x{size[1]}, not the {width}x{height} asked for")
        if png_is_flat(tmp_png):
            raise ScreenshotError("Chromium's PNG is one flat colour (the SVG did not render)")
    return size


# ---------------------------------------------------------------------------------------------
# Just enough PNG reading to check a screenshot (no imaging library needed).

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel


def _chunks(path: str):
    with open(path, "rb") as src:
        data = src.read()
    if not data.startswith(_PNG_SIGNATURE):
        raise ScreenshotError(f"{path} is not a PNG")
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
    raise ScreenshotError(f"{path} has no PNG header")


def png_rows(path: str):
    """Yield (bytes per pixel, row of raw pixel bytes) top to bottom, filters undone, lazily so a
    caller can stop early. 8-bit, non-interlaced PNGs only (what Chromium writes)."""
    header, idat = None, []
    for kind, body in _chunks(path):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    if header is None:
        raise ScreenshotError(f"{path} has no PNG header")
    width, height, depth, colour, _, _, interlace = header
    if depth != 8 or interlace or colour not in _CHANNELS:
        raise ScreenshotError(f"{path}: only 8-bit, non-interlaced PNGs are read here")
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
