"""A run on CUDA for people: each case's host, synchronized and GPU time per call, and, over a
sweep of sizes, from which size the GPU's own work hides a case's overhead.

On CUDA the main table's figure is the host's cost per call (`overrides/clock/cuda.py`): what
a subclass adds to every op of a training step's Python thread. Whether a step pays it depends
on the GPU: while the GPU's work per call is shorter than the host's, the GPU waits for the
host and the overhead is paid in full; once it is longer, the host runs ahead and the overhead
hides behind the kernels. The synchronized cost shows which: its overhead against plain
tensors of the same size shrinks to nothing where the GPU hides it.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Sequence

from overrides.cases.casenames import SHAPE_MARK, elements_of
from overrides.figures import micros
from overrides.results import RunResult
from overrides.tables import pipe_table

# The GPU hides a case's overhead at a size where what the synchronized cost still adds over
# plain tensors is at most this share of what the host adds: 90% of it is behind the kernels.
HIDDEN_SHARE = 0.1


@dataclasses.dataclass(frozen=True)
class DeviceRow:
    """One case and op on CUDA: its three figures per call, and its baseline's, in ns."""

    case: str
    op: str
    elements: int
    host: float
    synced: float | None
    gpu: float | None
    base_host: float | None
    base_synced: float | None

    @property
    def host_overhead(self) -> float | None:
        return None if self.base_host is None else self.host - self.base_host

    @property
    def synced_overhead(self) -> float | None:
        return None if self.base_synced is None or self.synced is None else self.synced - self.base_synced

    @property
    def hidden(self) -> bool | None:
        """Whether the GPU's work hides this case's overhead (HIDDEN_SHARE), if both are known."""
        host, synced = self.host_overhead, self.synced_overhead
        if host is None or synced is None or host <= 0:
            return None
        return synced <= HIDDEN_SHARE * host


def rows(run: RunResult) -> list[DeviceRow]:
    """Every result timed on CUDA, with its baseline's figures where the baseline ran."""
    out = []
    for result in run.results:
        if result.device != "cuda" or not result.ok:
            continue
        base = run.baseline(result.op, result.baseline)
        out.append(DeviceRow(result.case, result.op, elements_of(result.case), result.per_call_ns,
                             result.device_figure("synced"), result.device_figure("gpu"),
                             base.per_call_ns if base else None,
                             base.device_figure("synced") if base else None))
    return out


HEADER = ("case", "op", "host us", "synced us", "GPU us", "overhead: host", "synced")


def _cells(row: DeviceRow) -> list[str]:
    return [row.case, row.op, micros(row.host), micros(row.synced), micros(row.gpu),
            micros(row.host_overhead, True), micros(row.synced_overhead, True)]


def sweeps(found: Sequence[DeviceRow]) -> dict[tuple[str, str], list[DeviceRow]]:
    """(case without its shape, op) -> its rows by size, for the cases timed at two sizes or more."""
    by_case: dict[tuple[str, str], list[DeviceRow]] = {}
    for row in found:
        by_case.setdefault((row.case.partition(SHAPE_MARK)[0], row.op), []).append(row)
    return {key: sorted(group, key=lambda r: r.elements) for key, group in by_case.items()
            if len({r.elements for r in group}) > 1}


def hides_from(group: Sequence[DeviceRow]) -> int | None:
    """The smallest size from which every larger size hides the case's overhead, else None."""
    found = None
    for row in reversed(group):
        if row.hidden:
            found = row.elements
        else:
            break
    return found


def sentence(name: str, op: str, group: Sequence[DeviceRow]) -> str | None:
    """From which size this GPU's work hides the case's overhead, in words; None for a baseline."""
    paid = [row.host_overhead for row in group if row.host_overhead is not None]
    if not paid or max(paid) <= 0:  # a baseline is its own: it pays nothing over itself
        return None
    paid_us = (f"{micros(min(paid), True)}..{micros(max(paid), True)} us" if len(paid) > 1
               else f"{micros(paid[0], True)} us")
    start = hides_from(group)
    sizes = [f"{row.elements:,}" for row in group]
    if start is None:
        last = group[-1]
        return (f"{name} [{op}]: the host pays {paid_us} a call over plain tensors; this GPU's work does not "
                f"hide it up to {last.elements:,} elements (synced {micros(last.synced_overhead, True)} us there).")
    below = [row for row in group if row.elements < start]
    shown = next(row for row in group if row.elements == start)
    return (f"{name} [{op}]: the host pays {paid_us} a call over plain tensors; this GPU's work hides it from "
            f"{start:,} elements (synced {micros(shown.synced_overhead, True)} us)"
            + (f", not at {below[-1].elements:,} ({micros(below[-1].synced_overhead, True)} us)" if below else "")
            + f"; sizes timed: {', '.join(sizes)}.")


def notes(found: Sequence[DeviceRow]) -> list[str]:
    out = ["on CUDA: host = the Python thread's cost a call, the queue emptied before and after each "
           "sample outside the clock (the figure above and its overhead); synced = the same calls with "
           "the synchronize inside the clock; GPU = the GPU's own time a call (CUDA events around the "
           "calls, queued behind a spin kernel so they run back to back). Overheads are against plain "
           "tensors of the same shape on the same device."]
    for (name, op), group in sweeps(found).items():
        said = sentence(name, op, group)
        if said:
            out.append(said)
    return out


def text(run: RunResult) -> str:
    """The CUDA table and its notes, or "" where nothing ran on CUDA."""
    from overrides.tables import ruled

    found = rows(run)
    if not found:
        return ""
    return "\n".join(ruled([list(HEADER)] + [_cells(row) for row in found], left_columns=2)
                     + [""] + notes(found))


def markdown(run: RunResult) -> str:
    found = rows(run)
    if not found:
        return ""
    return "\n".join(pipe_table(HEADER, [_cells(row) for row in found], right_from=2)
                     + [""] + [f"- {note}" for note in notes(found)])


PLOT_SUFFIXES = (".png", ".svg")


def check_plot(path: str | None, device: str | None) -> None:
    """--plot's refusals, before anything is timed: a format matplotlib is not asked to write,
    or a run that is not on CUDA."""
    from overrides.errors import UsageError

    if path is None:
        return
    if os.path.splitext(path)[1].lower() not in PLOT_SUFFIXES:
        raise UsageError(f"--plot {path}: name a .png or .svg file")
    if not (device or "").startswith("cuda"):
        raise UsageError(f"--plot {path} draws a size sweep on CUDA; add --device cuda and --shape with two "
                         "sizes or more")


def render(run: RunResult, fmt: str) -> str:
    """The CUDA section in `fmt` ("table", "markdown"; the seed's legacy sentences have none)."""
    return {"table": text, "markdown": markdown}.get(fmt, lambda run_: "")(run)


def plot(run: RunResult, path: str) -> str:
    """The sweep's picture at `path` (PNG or SVG): per case, host, synced and GPU time a call
    against size, its plain baseline's synced time beside; returns what was drawn, in words."""
    from overrides.errors import UsageError

    groups = sweeps(rows(run))
    drawn = {key: group for key, group in groups.items() if sentence(*key, group)}
    if not drawn:
        raise UsageError("--plot draws a size sweep on CUDA: give --device cuda and two sizes or more "
                         "(--shape 1 65536 4194304), with Tensor among the cases")
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from overrides.files import atomic_path

    from matplotlib import ticker

    fig, axes = plt.subplots(1, len(drawn), figsize=(max(7.0, 5.2 * len(drawn)), 4.6), squeeze=False)
    for ax, ((name, op), group) in zip(axes[0], drawn.items()):
        sizes = [row.elements for row in group]
        for label, values, style in (("host", [row.host for row in group], "o-"),
                                     ("synced", [row.synced for row in group], "s-"),
                                     ("GPU", [row.gpu for row in group], "^-"),
                                     ("plain tensors, synced", [row.base_synced for row in group], "k--")):
            points = [(s, v / 1000) for s, v in zip(sizes, values) if v is not None and v > 0]
            if points:
                ax.plot(*zip(*points), style, label=label, gid=f"{name}-{label}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.yaxis,):
            axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            axis.set_minor_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}" if str(v)[0] in "25" else ""))
        start = hides_from(group)
        if start is not None:
            ax.axvline(start, color="grey", linestyle=":", linewidth=1, gid=f"{name}-hidden-from-{start}")
            ax.text(start, 0.04, f"hidden from {start:,} ", transform=ax.get_xaxis_transform(), rotation=90,
                    fontsize=8, color="grey", ha="right", va="bottom")
        ax.set_title(f"{name} [{op}]", fontsize=10)
        ax.set_xlabel("elements per operand")
        ax.set_ylabel("us per call")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    device = run.environment.cuda_device or "CUDA"
    fig.suptitle(f"When the GPU hides the overhead\n{device}, torch {run.environment.torch_version or '?'}",
                 fontsize=11)
    fig.tight_layout()
    suffix = os.path.splitext(path)[1].lower()
    with atomic_path(path, suffix=suffix, what="--plot") as temporary:
        fig.savefig(temporary, format=suffix[1:], dpi=110)
    plt.close(fig)
    return f"{len(drawn)} case{'s' if len(drawn) > 1 else ''} over {len(sizes)} sizes"
