"""The history picture: each case's instructions per call across builds, one panel per case.

Drawn as a plain SVG (no script, no plotting library: the flamegraphs are made the same way, and
Chromium turns either into the PNG a PR or a release note carries; overrides/flame/screenshot.py).
Readable at a glance: builds left to right, oldest first; each build's count with its range
over seeds; each step coloured by its verdict (red: regression, green: improvement, grey: no
change, amber dashed: undecided) and labelled with its change and share. The y axis of a panel
spans that case's own counts (a 1% step must be visible), and says so. Every mark carries
`data-` attributes (case, build, figure, verdict), so a test reads the picture's content back.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from overrides.files import write_text_atomic
from overrides.flame import screenshot
from overrides.flame.flamesvg import escape
from overrides.verdicts import CHANGED

WIDTH = 1600  # the screenshot's window width (overrides/flame/screenshot.py)
PANEL_HEIGHT = 250
TOP = 118  # title, subtitle, legend and how to read a step's label
LEFT, RIGHT = 120, 60
PLOT_TOP, PLOT_BOTTOM = 34, 58  # inside a panel: the case's title above, build names below
FONT = "font-family='DejaVu Sans, Verdana, sans-serif'"
COLOURS = {"regression": "#d62728", "improvement": "#2ca02c", "no change": "#8c8c8c",
           "clock only": "#8c8c8c", "disagree": "#9467bd", "inconclusive": "#e6a700"}
POINT = "#1f4e79"


TITLE = "__torch_function__ overhead across builds"


def draw(out_dir: str, builds: Sequence, figures: dict, steps: Sequence, seed_count: int,
         say: Callable[[str], None]) -> tuple[str, str | None]:
    """history.svg written into `out_dir`, then Chromium's history.png of it: (the SVG's path,
    the PNG's or None when Chromium could not take it, which `say` is told)."""
    svg_path = os.path.join(out_dir, "history.svg")
    versions = sorted({b.torch_version for b in builds})
    write_text_atomic(svg_path, render(
        builds, figures, steps, TITLE,
        f"Callgrind instructions per call, hash seeds matched build to build ({seed_count} in all; a "
        f"step's undecided cases get more); torch {', '.join(versions)}; oldest first"))
    png_path = os.path.join(out_dir, "history.png")
    try:
        screenshot.screenshot(svg_path, png_path)
    except screenshot.ScreenshotError as exc:
        say(f"no history.png: {exc}")
        return svg_path, None
    return svg_path, png_path


def _nice_ticks(low: float, high: float, count: int = 4) -> list[float]:
    span = max(high - low, 1e-9)
    raw = span / count
    magnitude = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1
    step = min((m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw), default=raw)
    first = (low // step + 1) * step
    ticks = []
    value = first
    while value < high:
        ticks.append(value)
        value += step
    return ticks


def render(builds: Sequence, figures: dict, steps: Sequence, title: str, subtitle: str) -> str:
    """`builds`: HistoryBuild-likes (name, torch_version); `figures`: (case, op) -> name ->
    (mean, ci or None, seeds); `steps`: Step-likes (case, op, before, after, counts.delta,
    delta_pct, verdict)."""
    targets = list(figures)
    height = TOP + PANEL_HEIGHT * max(1, len(targets)) + 30
    names = [b.name for b in builds]
    usable = WIDTH - LEFT - RIGHT
    x_of = {name: LEFT + (usable * (i + 0.5) / len(names)) for i, name in enumerate(names)}
    out = _heading(title, subtitle, height)
    by_step = {(s.case, s.op, s.before, s.after): s for s in steps}
    for p, target in enumerate(targets):
        out += _panel(target, figures[target], builds, by_step, x_of, TOP + p * PANEL_HEIGHT)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _heading(title: str, subtitle: str, height: int) -> list[str]:
    """The SVG's opening, the title and subtitle, the legend and how to read a step's label."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" data-kind="history">',
           f"<rect x='0' y='0' width='{WIDTH}' height='{height}' fill='#ffffff'/>",
           f"<text x='{LEFT}' y='34' font-size='24' font-weight='bold' {FONT}>{escape(title)}</text>",
           f"<text x='{LEFT}' y='60' font-size='15' fill='#444' {FONT}>{escape(subtitle)}</text>"]
    legend_x = LEFT
    for verdict in ("regression", "improvement", "no change", "inconclusive"):
        colour = COLOURS[verdict]
        dash = " stroke-dasharray='8 5'" if verdict == "inconclusive" else ""
        out.append(f"<line x1='{legend_x}' y1='82' x2='{legend_x + 34}' y2='82' stroke='{colour}' "
                   f"stroke-width='4'{dash}/>")
        out.append(f"<text x='{legend_x + 42}' y='87' font-size='14' {FONT}>{verdict}</text>")
        legend_x += 170
    out.append(f"<circle cx='{legend_x + 8}' cy='82' r='6' fill='{POINT}'/>"
               f"<text x='{legend_x + 22}' y='87' font-size='14' {FONT}>a build's count (mean over its "
               "seeds), bar: their range</text>")
    out.append(f"<text x='{LEFT}' y='108' font-size='13' fill='#555' {FONT}>a step's label is the "
               "verdict's figure: the mean of its per-seed deltas over the seeds both builds were "
               "counted under (layout matched), so it can differ from the rise between two points "
               "when one build has more seeds</text>")
    return out


def _panel(target: tuple[str, str], per_name: dict, builds: Sequence, by_step: dict,
           x_of: dict, top: float) -> list[str]:
    """One case's panel, `top` down the picture: its axis spanning its own counts, each step's
    line and label, each build's point, range and name."""
    case, op = target
    names = [b.name for b in builds]
    usable = WIDTH - LEFT - RIGHT
    plot_top, plot_bottom = top + PLOT_TOP, top + PANEL_HEIGHT - PLOT_BOTTOM
    values = []
    for mean, ci, _ in per_name.values():
        values += [mean] + (list(ci) if ci else [])
    low, high = min(values), max(values)
    pad = max((high - low) * 0.15, abs(high) * 0.002, 1.0)
    low, high = low - pad, high + pad

    def y_of(value: float) -> float:
        return plot_bottom - (value - low) / (high - low) * (plot_bottom - plot_top)

    out = [f"<g data-case='{escape(case)}' data-op='{escape(op)}'>"]
    out.append(f"<text x='{LEFT}' y='{top + 22}' font-size='18' font-weight='bold' {FONT}>"
               f"{escape(case)} <tspan font-weight='normal' fill='#555'>({escape(op)}; instructions "
               f"per call, axis from {low:,.0f}, not 0)</tspan></text>")
    out.append(f"<rect x='{LEFT}' y='{plot_top}' width='{usable}' height='{plot_bottom - plot_top}' "
               "fill='#fafafa' stroke='#ccc'/>")
    for tick in _nice_ticks(low, high):
        y = y_of(tick)
        out.append(f"<line x1='{LEFT}' y1='{y:.1f}' x2='{LEFT + usable}' y2='{y:.1f}' stroke='#e4e4e4'/>")
        out.append(f"<text x='{LEFT - 8}' y='{y + 5:.1f}' font-size='13' text-anchor='end' "
                   f"fill='#555' {FONT}>{tick:,.0f}</text>")
    for before, after in zip(names, names[1:]):
        step = by_step.get((case, op, before, after))
        if step is None or before not in per_name or after not in per_name:
            continue
        out += _step_marks(step, x_of[before], x_of[after], y_of(per_name[before][0]),
                           y_of(per_name[after][0]), plot_top)
    for name in names:
        x = x_of[name]
        if name not in per_name:
            out.append(f"<text x='{x:.1f}' y='{(plot_top + plot_bottom) / 2:.1f}' font-size='14' "
                       f"text-anchor='middle' fill='#d62728' {FONT}>not counted</text>")
            continue
        mean, ci, seeds = per_name[name]
        if ci:
            out.append(f"<line x1='{x:.1f}' y1='{y_of(ci[0]):.1f}' x2='{x:.1f}' y2='{y_of(ci[1]):.1f}' "
                       f"stroke='{POINT}' stroke-width='2'/>")
        out.append(f"<circle cx='{x:.1f}' cy='{y_of(mean):.1f}' r='6' fill='{POINT}' "
                   f"data-build='{escape(name)}' data-instructions='{mean:.2f}' data-seeds='{seeds}'/>")
        out.append(f"<text x='{x + 10:.1f}' y='{y_of(mean) + 20:.1f}' font-size='13' fill='#333' "
                   f"{FONT}>{mean:,.0f}</text>")
    for build in builds:
        x = x_of[build.name]
        out.append(f"<text x='{x:.1f}' y='{plot_bottom + 22}' font-size='15' text-anchor='middle' "
                   f"{FONT}>{escape(build.name)}</text>")
        if build.torch_version and build.torch_version not in build.name:
            out.append(f"<text x='{x:.1f}' y='{plot_bottom + 40}' font-size='12' text-anchor='middle' "
                       f"fill='#666' {FONT}>torch {escape(build.torch_version)}</text>")
    out.append("</g>")
    return out


def _step_marks(step, x1: float, x2: float, y1: float, y2: float, plot_top: float) -> list[str]:
    """A step's line between its two builds' points, coloured by its verdict, and its label:
    the change and its share (bold, with the verdict, when the case changed)."""
    before, after, verdict = step.before, step.after, step.verdict
    colour = COLOURS.get(verdict, COLOURS["inconclusive"])
    changed = verdict in CHANGED
    dash = " stroke-dasharray='8 5'" if verdict == "inconclusive" else ""
    exact = getattr(step.counts, "exact", False)
    label = (f"{step.counts.delta:+,.0f} (exact)" if exact else
             f"{step.counts.delta:+,.0f} ({step.delta_pct:+.{2 if abs(step.delta_pct) < 0.1 else 1}f}%)")
    mid_x, mid_y = (x1 + x2) / 2, min(y1, y2) - 10
    weight = "bold" if changed else "normal"
    return [f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='{colour}' "
            f"stroke-width='{5 if changed else 3}'{dash} data-step='{escape(before)}->{escape(after)}' "
            f"data-verdict='{verdict}' data-delta='{step.counts.delta:.2f}'/>",
            f"<text x='{mid_x:.1f}' y='{max(mid_y, plot_top + 16):.1f}' font-size='15' "
            f"font-weight='{weight}' text-anchor='middle' fill='{colour}' {FONT}>"
            f"{escape(label)}{' ' + verdict if changed else ''}</text>"]
