"""What a history writes: each build's figure per case, the table, the markdown, the
`history/2` JSON, and the call-tree diff of the step that changed most."""

from __future__ import annotations

import os
import re
from typing import Sequence

from overrides.counts.records import per_call_by_case
from overrides.files import write_text_atomic
from overrides.history import HISTORY_SCHEMA
from overrides.history.lineup import HistoryBuild
from overrides.history.steps import Step
from overrides.tables import align, pipe_table
from overrides.verdicts import CHANGED, DISAGREE, MOVED, known

def per_build(builds: Sequence[HistoryBuild], runs: dict, targets: Sequence[tuple[str, str]]) -> dict:
    """(case, op) -> build name -> (mean count a call over its seeds, (lowest, highest) over them
    or None with one seed, seeds). The range, not an interval: a build's own count moves by
    layout from seed to seed (figures: benchmarks/history.md, 'Docstring figures'), while a step
    is judged on the per-seed deltas, matched seed by seed and far tighter; a t-interval over
    two seeds would draw a bar twelve spreads long beside a step known to a few instructions."""
    out: dict = {}
    counts = {build.name: per_call_by_case(runs[build.name]) for build in builds}
    for target in targets:
        for build in builds:
            values = counts[build.name].get(target)
            if values:
                spread = (min(values), max(values)) if len(values) >= 2 else None
                out.setdefault(target, {})[build.name] = (sum(values) / len(values), spread, len(values))
    return out


def largest_step(steps: Sequence[Step]) -> Step | None:
    """The step judged a change that moved its case's count most, as a share of it."""
    changed = [s for s in steps if s.verdict in CHANGED
               or s.counts.verdict in MOVED]
    return max(changed, key=lambda s: abs(s.delta_pct), default=None)


def payload(builds, steps, figures, seeds, settings, complete: bool, wall_s: float,
            where: dict | None = None) -> dict:
    return {
        "schema": HISTORY_SCHEMA,
        "complete": complete,
        "wall_s": round(wall_s, 1),
        "settings": settings,
        "seeds": list(seeds),
        "builds": [b.to_dict() for b in builds],
        "cases": [{"case": case, "op": op,
                   "builds": [{"build": name, "instructions": round(mean, 2),
                               "range": [round(v, 2) for v in ci] if ci else None, "seeds": n}
                              for name, (mean, ci, n) in per_name.items()]}
                  for (case, op), per_name in figures.items()],
        "steps": [s.to_dict() for s in steps],
        "largest_step": where,
    }


def _mark(verdict: str) -> str:
    """The verdict as the history table shows it: a disagreement of the two views in capitals,
    anything that is not a verdict as inconclusive."""
    return "DISAGREE" if verdict == DISAGREE else known(verdict)


def table(builds, steps, figures) -> str:
    """One block per case: each build's count, each step's change and verdict, aligned."""
    lines = []
    by_key = {(s.case, s.op, s.after): s for s in steps}
    timed = any(s.clock is not None for s in steps)
    for (case, op), per_name in figures.items():
        lines.append(f"{case} ({op})")
        head = ["build", "torch", "instructions/call", "step", "step %", "verdict"] + (["clock step"] if timed else [])
        rows = [head]
        for build in builds:
            if build.name not in per_name:
                rows.append([build.name, build.torch_version, "-", "", "", "failed"])
                continue
            mean, _, _ = per_name[build.name]
            step = by_key.get((case, op, build.name))
            row = [build.name, build.torch_version, f"{mean:,.1f}"]
            if step is None:
                row += ["", "", ""]
            else:
                exact = " (exact)" if step.counts.exact else ""
                row += [f"{step.counts.delta:+,.1f}", f"{step.delta_pct:+.2f}%", _mark(step.verdict) + exact]
            if timed:
                k = step.clock if step else None
                ci = f" [{k.ci95_ns[0]:+,.0f}..{k.ci95_ns[1]:+,.0f}]" if k is not None and k.ci95_ns else ""
                row.append("" if k is None else f"{k.delta_ns:+,.0f} ns{ci}")
            rows.append(row)
        lines += align(rows, right={2, 3, 4, 6}, indent="  ")  # the figures' columns right-aligned
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def markdown(builds, steps, figures, seeds, where_lines: list[str], picture: str | None,
             wall_s: float, notes: Sequence[str]) -> str:
    out = ["# `__torch_function__` overhead across builds", ""]
    out.append(f"{len(builds)} builds, oldest first; Callgrind instruction counts per call under hash seeds "
               f"{', '.join(map(str, seeds))} (matched build to build; seeds after the first round "
               "only for the steps it left undecided); each step judged as "
               f"`bench.py --compare` judges its counts. Wall time {wall_s:.0f} s.")
    out.append("")
    if picture:
        out += [f"![instructions per call across builds]({picture})", ""]
    out += pipe_table(("build", "torch", "kind", "interpreter"),
                      [(b.name, b.torch_version, b.kind, f"`{b.python}`") for b in builds], right_from=4)
    out.append("")
    for block in table(builds, steps, figures).split("\n\n"):
        block_lines = [line for line in block.splitlines() if line.strip()]
        if block_lines:
            out += [f"**{block_lines[0]}**", "", "```", *block_lines[1:], "```", ""]
    out += list(notes)
    if notes:
        out.append("")
    out += where_lines
    return "\n".join(out).rstrip() + "\n"


def notes(clock: bool) -> list[str]:
    """What history.md says under its tables about how each step was judged."""
    from overrides.counts.judge import EXACT_INSTRUCTIONS

    return [f"- Counted from one start-up path for every build (`overrides/builds/samepath.py`); "
            f"a step whose counts are within {EXACT_INSTRUCTIONS:g} instructions on every "
            "seed is `no change (exact)`.",
            "- Each step's verdict is what `bench.py --compare BEFORE AFTER` gives on its counts"
            + (" together with the paired clock (`--clock`)." if clock else
               "; the clock was not run (`--clock` times every step).")]


def where_section(step: Step | None, runs: dict, out_dir: str, say) -> tuple[list[str], dict | None]:
    """The counts' call-tree diff of the step that changed most, drawn into `out_dir`: its
    markdown, and its entry in the JSON (`largest_step`, naming the pictures) or None."""
    from overrides.counts import calltree
    from overrides.review import count_tables
    from overrides.flame import flamepng

    if step is None:
        return ["No step was judged a change, so no call tree is shown."], None
    went = calltree.where_it_went(runs[step.before], runs[step.after], step.case, step.op)
    if went is None:
        return [], None
    stem = f"where-{re.sub(r'[^A-Za-z0-9]+', '-', step.case).strip('-').lower()}"
    svg = os.path.join(out_dir, stem + ".svg")
    title = f"{step.case}: {step.before} -> {step.after}, {step.counts.delta:+,.0f} instructions a call"
    write_text_atomic(svg, calltree.differential_svg(runs[step.before], runs[step.after], step.case, step.op, title))
    pictures = [os.path.basename(svg)]
    lines = [f"## Where the largest step went: {step.case}, {step.before} -> {step.after}", "",
             f"{step.counts.delta:+,.1f} instructions a call ({step.delta_pct:+.2f}%), {step.verdict}. "
             "Functions by the change of their own count (Callgrind call tree, mean over the seeds):", ""]
    lines += count_tables.instructions_table(went)
    lines.append("")
    try:
        flamepng.write_png(svg, svg[:-4] + ".png")
        pictures.append(stem + ".png")
        lines += [f"![call-tree diff]({stem}.png)", ""]
    except flamepng.PngError as exc:
        say(f"no PNG of {os.path.basename(svg)}: {exc}")
        lines += [f"The call tree is in `{os.path.basename(svg)}` (no PNG: {exc}).", ""]
    return lines, {"case": step.case, "op": step.op, "from": step.before, "to": step.after,
                   "where": went.to_dict(), "pictures": pictures}


