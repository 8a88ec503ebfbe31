"""The history picture: each case's instructions per call across builds, one panel per case.

Drawn with matplotlib, which writes the PNG a PR or a release note carries and the SVG beside
it, so a machine without a browser gets its picture (the flamegraphs' PNGs are matplotlib's
too: overrides/flame/flamepng.py). Readable at a glance: builds left to right, oldest
first; each build's count with its range over seeds; each step coloured by its verdict (red:
regression, green: improvement, grey: no change, amber dashed: undecided) and labelled with its
change and share. The y axis of a panel spans that case's own counts (a 1% step must be visible),
and says so. Every mark carries a `gid` (the SVG's element id: what it is, its case, build or
step, figure and verdict), so a test reads the picture's content back.
"""

from __future__ import annotations

import os
from typing import Callable, Sequence

from overrides.files import atomic_path
from overrides.verdicts import CHANGED, CLOCK_ONLY, DISAGREE, IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION

TITLE = "__torch_function__ overhead across builds"
COLOURS = {REGRESSION: "#d62728", IMPROVEMENT: "#2ca02c", NO_CHANGE: "#8c8c8c",
           CLOCK_ONLY: "#8c8c8c", DISAGREE: "#9467bd", INCONCLUSIVE: "#e6a700"}
LEGEND = (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE)
POINT = "#1f4e79"
WIDTH_IN = 16.0  # at DPI, 1600 pixels: a PR page shows it without scaling the labels away
PANEL_IN = 2.6
HEADER_IN = 1.9  # title, subtitle, legend and how to read a step's label
FOOTER_IN = 0.7  # the last panel's build names, two lines each
DPI = 100
INSTALL = "pip install matplotlib"


def draw(out_dir: str, builds: Sequence, figures: dict, steps: Sequence, seed_count: int,
         say: Callable[[str], None]) -> tuple[str | None, str | None]:
    """history.svg and history.png written into `out_dir`: their paths, or (None, None) where
    this interpreter has no matplotlib, which `say` is told with how to install it."""
    try:
        import matplotlib
    except ImportError:
        say(f"no history.png: this interpreter has no matplotlib ({INSTALL})")
        return None, None
    matplotlib.use("Agg")  # files only: no display, on any machine
    versions = sorted({b.torch_version for b in builds})
    subtitle = (f"Callgrind instructions per call, hash seeds matched build to build ({seed_count} in "
                f"all; a step's undecided cases get more); torch {', '.join(versions)}; oldest first")
    figure = render(builds, figures, steps, TITLE, subtitle)
    paths = []
    for suffix in (".svg", ".png"):
        path = os.path.join(out_dir, "history" + suffix)
        with atomic_path(path, suffix=suffix) as tmp:
            figure.savefig(tmp, dpi=DPI, format=suffix[1:])
        paths.append(path)
    import matplotlib.pyplot as plt

    plt.close(figure)
    return paths[0], paths[1]


def render(builds: Sequence, figures: dict, steps: Sequence, title: str, subtitle: str):
    """A matplotlib Figure. `builds`: HistoryBuild-likes (name, torch_version); `figures`:
    (case, op) -> name -> (mean, ci or None, seeds); `steps`: Step-likes (case, op, before,
    after, counts.delta, counts.exact, delta_pct, verdict)."""
    import matplotlib.pyplot as plt

    targets = list(figures) or [("no case", "")]
    height = HEADER_IN + PANEL_IN * len(targets) + FOOTER_IN
    figure, axes = plt.subplots(len(targets), 1, figsize=(WIDTH_IN, height), squeeze=False)
    figure.subplots_adjust(left=0.08, right=0.97, top=1 - HEADER_IN / height, bottom=FOOTER_IN / height,
                           hspace=0.9)
    figure.text(0.08, 1 - 0.35 / height, title, ha="left", va="center", fontsize=18, fontweight="bold")
    figure.text(0.08, 1 - 0.7 / height, subtitle, va="center", fontsize=11, color="#444")
    figure.text(0.08, 1 - 1.35 / height, "a step's label is the verdict's figure: the mean of its per-seed "
                "deltas over the seeds both builds were counted under (layout matched), so it can differ "
                "from the rise\nbetween two points when one build has more seeds", va="center",
                fontsize=10, color="#555")
    handles = [plt.Line2D([], [], color=COLOURS[v], lw=3, ls="--" if v == INCONCLUSIVE else "-", label=v)
               for v in LEGEND]
    handles.append(plt.Line2D([], [], color=POINT, marker="o", ls="", label="a build's count (mean over "
                              "its seeds), bar: their range"))
    figure.legend(handles=handles, loc="center left", bbox_to_anchor=(0.075, 1 - 1.0 / height),
                  ncol=len(handles), frameon=False, fontsize=10)
    by_step = {(s.case, s.op, s.before, s.after): s for s in steps}
    for axis, target in zip(axes[:, 0], targets):
        _panel(axis, target, figures.get(target, {}), builds, by_step)
    return figure


def _panel(axis, target: tuple[str, str], per_name: dict, builds: Sequence, by_step: dict) -> None:
    """One case's panel: its axis spanning its own counts, each step's line and label, each
    build's point, range and name."""
    case, op = target
    names = [b.name for b in builds]
    values = [v for mean, ci, _ in per_name.values() for v in (mean, *(ci or ()))] or [0.0]
    low, high = min(values), max(values)
    pad = max((high - low) * 0.2, abs(high) * 0.002, 1.0)
    axis.set_ylim(low - pad, high + pad * 1.6)  # room above for the steps' labels
    axis.set_xlim(-0.5, len(names) - 0.5)
    axis.set_title(f"{case}  ({op}; instructions per call, axis from {low - pad:,.0f}, not 0)",
                   loc="left", fontsize=13, fontweight="bold")
    axis.set_xticks(range(len(names)))
    axis.set_xticklabels([b.name if not b.torch_version or b.torch_version in b.name
                          else f"{b.name}\ntorch {b.torch_version}" for b in builds], fontsize=11)
    axis.yaxis.set_major_formatter(lambda value, _: f"{value:,.0f}")
    axis.grid(axis="y", color="#e4e4e4")
    axis.set_facecolor("#fafafa")
    x_of = {name: i for i, name in enumerate(names)}
    for before, after in zip(names, names[1:]):
        step = by_step.get((case, op, before, after))
        if step is not None and before in per_name and after in per_name:
            _step_marks(axis, step, x_of[before], x_of[after], per_name[before][0], per_name[after][0])
    for name in names:
        if name not in per_name:
            axis.text(x_of[name], (low + high) / 2, "not counted", ha="center", va="center",
                      color=COLOURS[REGRESSION], fontsize=12, gid=f"missing|{case}|{name}")
            continue
        mean, ci, seeds = per_name[name]
        if ci:
            axis.plot([x_of[name]] * 2, list(ci), color=POINT, lw=2)
        axis.plot([x_of[name]], [mean], "o", color=POINT, ms=9, gid=f"point|{case}|{name}|{mean:.2f}|{seeds}")
        axis.annotate(f"{mean:,.0f}", (x_of[name], mean), xytext=(8, -14), textcoords="offset points",
                      fontsize=10, color="#333")


def _step_marks(axis, step, x1: float, x2: float, y1: float, y2: float) -> None:
    """A step's line between its two builds' points, coloured by its verdict, and its label:
    the change and its share (bold, with the verdict, when the case changed)."""
    verdict = step.verdict
    colour = COLOURS.get(verdict, COLOURS[INCONCLUSIVE])
    changed = verdict in CHANGED
    pct = step.delta_pct
    label = (f"{step.counts.delta:+,.0f} (exact)" if getattr(step.counts, "exact", False)
             else f"{step.counts.delta:+,.0f} ({pct:+.{2 if abs(pct) < 0.1 else 1}f}%)")
    axis.plot([x1, x2], [y1, y2], color=colour, lw=4 if changed else 2.5,
              ls="--" if verdict == INCONCLUSIVE else "-",
              gid=f"step|{step.case}|{step.before}->{step.after}|{verdict}|{step.counts.delta:.2f}")
    axis.annotate(label + (f" {verdict}" if changed else ""), ((x1 + x2) / 2, max(y1, y2)),
                  xytext=(0, 10), textcoords="offset points", ha="center", color=colour, fontsize=12,
                  fontweight="bold" if changed else "normal")
