"""report.md as a whole: the headline, the comparison table, the sections other modules write,
the notes, the environments and each side's bench output; and the little markdown helpers they
share.

It reads an `Evidence` (`measuring.py`) and the sections' lines, and measures nothing.
"""

from __future__ import annotations

from typing import Sequence

from overrides import environment, run_report, comparison_report
from overrides.figures import signed
from overrides.progress import counted
from overrides.review.sides import Side, title
from overrides.verdicts import CLOCK_ONLY, DISAGREE, IMPROVEMENT, REGRESSION


def _changes(comparisons) -> str:
    """`SubTensor +51 ns (+0.92%) / +434 instructions, ...` for `comparisons`."""
    return ", ".join(f"{c.case} {signed(c.delta_ns)} ns ({c.delta_pct:+.2f}%)"
                     + (f" / {signed(c.delta_instructions)} instructions"
                        if c.delta_instructions is not None else "")
                     for c in comparisons)


def _headline(comparisons) -> str:
    """What changed, first: the regressions, else the improvements (a large improvement under
    "No regression." read as nothing happened; figures: benchmarks/history.md, 'Docstring
    figures'), else that nothing moved."""
    regressed = [c for c in comparisons if c.verdict == REGRESSION]
    improved = [c for c in comparisons if c.verdict == IMPROVEMENT]
    if regressed:
        line = f"**{counted(len(regressed), 'case')} regressed**: {_changes(regressed)}"
        if improved:
            line += f"; **{len(improved)} improved**: {_changes(improved)}"
        return line
    if improved:
        return (f"**No case regressed; {len(improved)} improved**: "
                f"{_changes(improved)}")
    return "**No case regressed or improved.**"


def report_markdown(evidence, sides: Sequence[Side], python_calls: Sequence[str] = (),
                    instructions: Sequence[str] = (), time: Sequence[str] | None = None,
                    all_cases: bool = False, wall_s: float = 0.0) -> str:
    """report.md: the headline, the comparison table, then the sections (`python_calls`,
    `instructions`; `time`, the flamegraphs' section, None when they were not asked for), the
    notes, the environments and each side's bench output."""
    comparisons, settings, runs = evidence.comparisons, evidence.settings, evidence.runs
    headline = _headline(comparisons)
    split = [c for c in comparisons if c.verdict in (DISAGREE, CLOCK_ONLY) or c.clock_unexplained]
    if split:
        headline += ("\n\n**Clock and counts tell different stories** (see the notes under the "
                     "table): " + ", ".join(f"{c.case} {signed(c.delta_ns)} ns / "
                                            f"{signed(c.delta_instructions)} instructions "
                                            f"({comparison_report.verdict_cell(c)})" for c in split))
        if any(c.clock_unexplained for c in split):
            headline += (". Where the clock moved far more than the instructions cost, the same "
                         "work got faster or slower (memory, caches, atomics or threads), not "
                         "only the code.")
    parts = [f"# `__torch_function__` overhead: {title(sides)}", "", headline, "",
             "## Comparison", "", comparison_report.comparison_markdown(comparisons, settings, notes=False), ""]
    parts += in_details("How these verdicts were reached",
                    [f"- {note}" for note in comparison_report.comparison_notes(comparisons, settings)])
    parts += python_calls
    parts += instructions
    if time is not None:
        which = "every case (--all)" if all_cases else "each regressed case"
        parts += [f"## Where the time went: {which}", ""]
        parts += list(time) or ["Nothing regressed, so no flamegraphs were needed "
                                   "(--all records them for every case)."]
        parts.append("")
    if evidence.notes:
        parts += ["## Notes", ""] + [f"- {note}" for note in evidence.notes] + [""]
    environments: list[str] = []
    paired = settings.paired
    for side in sides:
        env = runs.side(side.role).environment
        # A label with a copy is still compared from its recorded run when the other side
        # cannot run live (unpaired): say what was measured, not what could have been.
        source = (f"label `{side.label}`, " + ("run from its kept copy" if side.build and paired
                                              else "its recorded run")
                  + (", an incomplete recording" if side.missing else "")) if side.label else f"`{side.spec}`"
        environments.append(f"- **{side.role}** ({source}): {environment.one_line(env)}; "
                            f"`{env.python_executable or side.python}`")
    parts += ["## Environments and each side's bench output", ""]
    parts += in_details("The environments", environments)
    for side in sides:
        parts += in_details(f"{side.role}'s bench output", ["```text", run_report.table(runs.side(side.role)), "```"])
    parts.append(f"_Made by `scripts/report.sh` in {wall_s:.0f} s._")
    return "\n".join(parts) + "\n"


def in_details(summary: str, lines: list[str]) -> list[str]:
    """`lines` under a `<details>` a reader opens for the method: the verdicts, the tables and
    the cause stay in the first screenful."""
    if not lines:
        return []
    return [f"<details><summary>{summary}</summary>", "", *lines, "", "</details>", ""]




