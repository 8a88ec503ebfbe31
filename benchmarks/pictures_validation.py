"""Flamegraph PNGs without a browser: matplotlib (overrides/flame/flamepng.py) against headless
Chromium (what drew them before) and cairosvg (the other candidate), on the SVGs of a report.

    python benchmarks/pictures_validation.py report.zip [--rounds 5] [--out DIR] [--cairosvg-python PY]

For every SVG in the ZIP (or SVG files given instead), ROUNDS rounds, the renderers interleaved
within each round so the machine's load falls on all of them alike: seconds a picture (Chromium
and cairosvg each in a process of their own per picture, as Chromium ran in the report;
matplotlib in this process, as the report draws, its first picture's import reported apart).
Likeness against Chromium's PNG: the share of pixels that differ by more than 32 levels in a
channel, and per labelled frame how far its label's first and last dark column lie from
Chromium's (median and worst, in pixels). The PNGs are left in --out to look at side by side.
A renderer that cannot run here (no Chromium, no cairosvg or no libcairo) is said and skipped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from overrides.flame import flamepng, flamesvg  # noqa: E402

# The command screenshot.py ran before this change (its flags, window as tall as the SVG, at
# least CHROMIUM_MIN_HEIGHT: a shorter headless window showed the top of the page only).
CHROMIUM_MIN_HEIGHT = 200
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--log-level=3", "--disable-quic")
CHROMIUM = next((p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "") if p and os.access(p, os.X_OK)), None)
DIFFERENT_LEVELS = 32  # a pixel differs when a channel is off by more than this (not anti-aliasing)
DARK = 160  # a label's pixel: every channel below this (every fill's largest channel is >= 215)


def chromium(svg: str, png: str) -> None:
    drawing = flamesvg.read_svg(open(svg, encoding="utf-8").read())
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                        f"--window-size={drawing.width},{max(CHROMIUM_MIN_HEIGHT, drawing.height)}", f"--screenshot={os.path.abspath(png)}",
                        "file://" + os.path.abspath(svg)], capture_output=True, timeout=60, cwd=profile, check=True)


CAIRO_PYTHON = [sys.executable]  # --cairosvg-python: an interpreter with cairosvg (not a test dependency)


def cairosvg(svg: str, png: str) -> None:
    subprocess.run([CAIRO_PYTHON[0], "-c", "import sys, cairosvg; cairosvg.svg2png(url=sys.argv[1], write_to=sys.argv[2])",
                    svg, png], capture_output=True, timeout=60, check=True)


def cairosvg_missing() -> str | None:
    done = subprocess.run([CAIRO_PYTHON[0], "-c", "import cairosvg"], capture_output=True, text=True)
    return (done.stderr.strip().splitlines() or ["?"])[-1][:160] if done.returncode else None


def pixels(png: str):
    import matplotlib.image

    return (matplotlib.image.imread(png)[..., :3] * 255).round().astype(int)


def label_columns(image, box) -> tuple[int, int] | None:
    region = image[int(box.y) + 1:int(box.y + box.height), int(box.x) + 2:int(box.x + box.width) - 1]
    dark = [i for i, d in enumerate((region.max(axis=2) < DARK).any(axis=0)) if d]
    return (dark[0] + int(box.x) + 2, dark[-1] + int(box.x) + 2) if dark else None


def likeness(svg: str, png: str, reference: str) -> str:
    a, b = pixels(png), pixels(reference)
    b = b[:a.shape[0]]  # Chromium's window is at least CHROMIUM_MIN_HEIGHT tall: white below the SVG
    if a.shape != b.shape:
        return f"size {a.shape[1]}x{a.shape[0]} against {b.shape[1]}x{b.shape[0]}"
    differ = float((abs(a - b).max(axis=2) > DIFFERENT_LEVELS).mean())
    shifts = []
    for box in flamesvg.read_svg(open(svg, encoding="utf-8").read()).boxes:
        if box.label:
            mine, theirs = label_columns(a, box), label_columns(b, box)
            if mine and theirs:
                shifts += [abs(mine[0] - theirs[0]), abs(mine[1] - theirs[1])]
    return (f"{100 * differ:.1f}% of pixels differ; label ends off by median "
            f"{statistics.median(shifts):.0f} px, worst {max(shifts)} px over {len(shifts) // 2} labels"
            if shifts else f"{100 * differ:.1f}% of pixels differ; no labels")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("inputs", nargs="+", help="a report ZIP, or SVG files this tool drew")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="pictures-out")
    parser.add_argument("--cairosvg-python", default=sys.executable)
    args = parser.parse_args()
    CAIRO_PYTHON[0] = args.cairosvg_python
    os.makedirs(args.out, exist_ok=True)
    svgs = []
    for given in args.inputs:
        if given.endswith(".zip"):
            with zipfile.ZipFile(given) as bundle:
                for name in sorted(n for n in bundle.namelist() if n.endswith(".svg")):
                    bundle.extract(name, args.out)
                    svgs.append(os.path.join(args.out, name))
        else:
            svgs.append(given)
    renderers = {"matplotlib": lambda svg, png: flamepng.write_png(svg, png)}
    if CHROMIUM:
        renderers["chromium"] = chromium
    else:
        print("chromium: not found here, skipped")
    missing = cairosvg_missing()
    if missing:
        print(f"cairosvg: cannot import here ({missing}), skipped")
    else:
        renderers["cairosvg"] = cairosvg
    started = time.perf_counter()
    flamepng.write_png(svgs[0], os.path.join(args.out, "first.png"))
    print(f"matplotlib's first picture in this process (import, font cache): {time.perf_counter() - started:.2f} s")
    seconds = {name: [] for name in renderers}
    for _ in range(args.rounds):
        for svg in svgs:
            for name, draw in renderers.items():
                png = os.path.join(args.out, os.path.basename(svg)[:-4] + f".{name}.png")
                started = time.perf_counter()
                draw(svg, png)
                seconds[name].append(time.perf_counter() - started)
    print(f"{len(svgs)} SVGs x {args.rounds} rounds, seconds a picture: " + "; ".join(
        f"{name} median {statistics.median(s):.2f} (min {min(s):.2f}, max {max(s):.2f})" for name, s in seconds.items()))
    if CHROMIUM:
        for svg in svgs:
            stem = os.path.join(args.out, os.path.basename(svg)[:-4])
            for name in renderers:
                if name != "chromium":
                    print(f"{os.path.basename(svg)} {name} against chromium: "
                          f"{likeness(svg, f'{stem}.{name}.png', f'{stem}.chromium.png')}")
    print(f"load average: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
