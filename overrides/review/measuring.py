"""Measuring and judging for a report: both sides compared (paired where both can run), their
Python calls counted, their flamegraphs recorded; all of it gathered in one `Evidence`.

Nothing here writes markdown: `sections.py`, `time_sections.py` and `markdown.py` present an
Evidence, so each side of the report can be read and tested without the other.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable, Sequence

from overrides import children, case_comparison, run_report, results
from overrides.builds.keep import Kept
from overrides.comparison_settings import UNPAIRED, ComparisonSettings, CountSettings
from overrides.errors import UsageError
from overrides.files import write_text_atomic
from overrides.review.manifest import Flamegraph
from overrides.review.sides import ROLES, Side, live_folder
from overrides.sides import Sides


@dataclasses.dataclass
class Evidence:
    """What a report says, measured and judged: the comparisons (with their settings), each
    side's RunResult and recorded folder, both sides' counts where they were made, and the
    notes a reader must see."""

    comparisons: list
    runs: Sides | None  # each side's RunResult
    settings: ComparisonSettings = ComparisonSettings()
    recorded: dict = dataclasses.field(default_factory=dict)  # role -> runs.RecordedRun
    counts: list | None = None  # [base runs, branch runs] of Callgrind, when both counted
    python_calls: list | None = None  # [base, branch] pycalls.CaseCalls lists
    notes: list[str] = dataclasses.field(default_factory=list)
    # What died on the way (py-spy killed), in words: the report is written without what it
    # would have made, and report.sh ends with exit 3 (errors.INCOMPLETE_EXIT_STATUS) saying so.
    incomplete: list[str] = dataclasses.field(default_factory=list)

    def calls_of(self, case: str, op: str) -> tuple | None:
        """(base, branch) Python-call counts (`pycalls.CaseCalls`) of one case, or None where
        either side has none."""
        from overrides.counts import pycalls

        if not self.python_calls:
            return None
        base, branch = (pycalls.find(runs, case, op) for runs in self.python_calls)
        return None if base is None or branch is None else (base, branch)

    def own_instruction_deltas(self, case: str, op: str) -> dict[str, float] | None:
        """Every counted function's own instruction change per call of one case
        (`calltree.own_deltas`), or None without both sides' call paths."""
        from overrides.counts import calltree

        return calltree.own_deltas(self.counts[0], self.counts[1], case, op) if self.counts else None


def measure(sides: Sequence[Side], case_names: Sequence[str] | None, op: str | None, ab_config,
            runs_dir: str, say: Callable[[str], None], notes: list[str] | None = None) -> Evidence:
    """Both sides measured and judged: paired (run_ab) when both can run, else from their
    recorded runs, unpaired (judged on counts where both have them). `notes` (the report's own
    list, kept in the Evidence) gets what a reader must know about how."""
    from overrides.ab.paired import run_ab
    from overrides.cases import ops as ops_mod, registry
    from overrides.review import record, runs as recorded_runs

    evidence = Evidence([], None, ComparisonSettings(), notes=notes if notes is not None else [])
    selected = registry.resolve_cases(list(case_names) if case_names else None)
    names = [case.name for case in selected]
    if all(side.build is not None for side in sides):
        outcome = run_ab(sides[0].build, sides[1].build, selected,
                         ops_mod.resolve_ops([op] if op else None), ab_config, say,
                         keep_interrupted=False)  # Ctrl-C: no ZIP, so nothing to keep
        runs = Sides(outcome.base_run, outcome.branch_run)
        if outcome.failure:  # a process died past its retries: the report says so, exit 3
            evidence.incomplete.append(outcome.failure)
        if all(run.instructions for run in runs):
            evidence.counts = [list(run.instructions) for run in runs]
        kept = [side for side in sides if side.label]
        if kept:
            evidence.notes.append(
                "Paired from kept builds: " + "; ".join(
                    f"{side.role} ran label `{side.label}`'s copy of its build "
                    f"(`{side.torch_root()}`)" for side in kept)
                + ", side by side with the other side, exactly as two environments are.")
        for side in sides:
            if side.label:  # its flamegraphs were recorded with it: use them, write nothing
                evidence.recorded[side.role] = recorded_runs.load_label(runs_dir, side.label)
                continue
            # An interpreter: kept as record.sh would, so flamegraphs land beside it.
            folder = live_folder(runs_dir, side.role, [s.label for s in sides])
            recorder = record.Recorder(runs_dir, folder, side.python, names, op, say)
            recorder.update(results=f"{folder}.json", text=f"{folder}.txt", measured_by="paired A/B in report.sh",
                            kept=Kept(skipped="measured by report.sh from an interpreter"))
            results.save(runs.side(side.role), recorder.path(f"{folder}.json"))
            write_text_atomic(recorder.path(f"{folder}.txt"), run_report.table(runs.side(side.role)) + "\n")
            recorder.save()
            evidence.recorded[side.role] = recorder.finish()
        evidence.comparisons, evidence.runs = list(outcome.comparisons), runs
        evidence.settings = outcome.settings
        return evidence
    for side in sides:
        if side.unpaired_reason:
            evidence.notes.append(f"Not paired: {side.unpaired_reason}. Record it again (record.sh "
                                  "keeps a copy of the build by default) for a paired comparison.")
    recorded = {}
    for side in sides:
        if side.label is not None:
            recorded[side.role] = recorded_runs.load_label(runs_dir, side.label)
        else:
            recorded[side.role] = record.record(
                live_folder(runs_dir, side.role, [s.label for s in sides]), side.python,
                names, op=op, directory=runs_dir, flamegraphs=False,
                instructions=bool(ab_config.instruction_seeds),
                seeds=ab_config.instruction_seeds, keep_build=False, force=True,
                progress=say)  # live_folder: a report.sh run's folder, never a label
            recorded[side.role] = recorded_runs.saved(recorded[side.role], measured_by="report.sh, unpaired")
    evidence.recorded = recorded
    runs = Sides.of([results.load(recorded[role].results_path) for role in ROLES])
    comparisons = case_comparison.compare_runs(runs.base, runs.branch, ab_config.threshold_ns,
                                       ab_config.threshold_pct)
    settings = ComparisonSettings(mode=UNPAIRED, threshold_ns=ab_config.threshold_ns,
                                  threshold_pct=ab_config.threshold_pct)
    count_files = [recorded[role].instructions_path() for role in ROLES]
    if all(count_files):
        comparisons, runs, settings = _judge_on_counts(evidence, comparisons, runs, count_files, settings)
    elif any(count_files):
        evidence.notes.append("Only one side has instruction counts (record both with "
                              "`record.sh --instructions`), so the verdicts rest on wall time.")
    evidence.comparisons, evidence.runs, evidence.settings = comparisons, runs, settings
    return evidence


def _judge_on_counts(evidence: Evidence, comparisons, runs: Sides, count_files, settings: ComparisonSettings):
    """The comparisons, runs and settings, judged on both sides' recorded counts where they share
    hash seeds."""
    from overrides.counts import judge, records

    counts = []
    for path in count_files:
        with open(path, encoding="utf-8") as src:
            counts.append(records.from_dict(json.load(src), source=path))
    evidence.counts = counts
    seeds = sorted({run.seed for run in counts[0]} & {run.seed for run in counts[1]})
    if not seeds:
        evidence.notes.append("The two sides' instruction counts share no hash seed (record both "
                              "with the same --seeds), so the verdicts rest on wall time.")
        return comparisons, runs, settings
    threshold_pct = settings.threshold_pct
    settings = dataclasses.replace(settings, instructions=CountSettings(
        tuple(seeds), judge.DEFAULT_THRESHOLD_INSTRUCTIONS, threshold_pct))
    runs = Sides.of([dataclasses.replace(run, instructions=tuple(c)) for run, c in zip(runs, counts)])
    return case_comparison.with_counts(comparisons, judge.compare_counts(*counts, threshold_pct=threshold_pct)), runs, settings


def count_python_calls(evidence: Evidence, sides: Sequence[Side], say: Callable[[str], None]) -> None:
    """Both sides' Python calls per call of every compared case (overrides/counts/pycalls.py), one
    process per side, both at once: counts do not care what else runs. Into
    `evidence.python_calls`, or a note saying why not."""
    from overrides.counts import pycalls

    cannot = [side for side in sides if side.build is None]
    if cannot:
        evidence.notes.append("Python calls were not counted: " + "; ".join(
            f"{side.role} ({side.unpaired_reason or 'no build to run'})" for side in cannot)
            + ". They need both builds runnable, as for a paired comparison.")
        return
    targets = list(dict.fromkeys((c.case, c.op) for c in evidence.comparisons))
    say(f"report: counting Python calls per call ({len(targets)} case(s), both sides)")
    try:
        evidence.python_calls = children.parallel(
            lambda side: pycalls.count_build(side.python, targets, import_path=side.torch_root()),
            sides, len(sides))
    except UsageError as exc:
        evidence.notes.append(f"Python calls were not counted: {exc}.")


def record_flamegraphs(evidence: Evidence, side: Side, cases: Sequence[str], op: str | None,
                       seconds: float, runs_dir: str, workdir: str,
                       say: Callable[[str], None]) -> dict[str, tuple[str, list[str]] | None]:
    """case -> (svg, the recordings' collapsed stacks) of one side, or None with a note saying
    why not. Recorded now wherever the side's build can run: every case in one process per
    recording (one torch import for all), RECORDINGS processes at once, `seconds` a case; a
    case that fails that way is tried alone, so it costs only itself; py-spy killed is not
    tried again: the cases it lost get a note, and `evidence.incomplete` the death. A label's
    own single recording is used only when its build cannot run (its spread between processes
    then unknown)."""
    from overrides.flame import flamegraph
    from overrides.flame.differential import RECORDINGS
    from overrides.review import runs as recorded_runs

    recorded = evidence.recorded.get(side.role) or recorded_runs.load_label(runs_dir, side.label or side.role)
    found: dict[str, tuple[str, list[str]] | None] = {}
    targets = []
    for case in cases:
        existing = _recordings_of(recorded, case)
        if existing and (len(existing[1]) >= RECORDINGS or side.build is None):
            found[case] = existing
        elif side.label and side.build is None:  # its interpreter may import another build by now
            evidence.notes.append(f"No {side.role} flamegraph for {case}: label {recorded.label!r} "
                                  "was recorded without it, and no copy of its build was kept to "
                                  "record it from.")
            found[case] = None
        elif not (side.python and os.access(side.python, os.X_OK)):
            evidence.notes.append(f"No {side.role} flamegraph for {case}: its interpreter "
                                  f"({side.python}) is gone.")
            found[case] = None
        else:
            stem = recorded_runs.file_stem(case, op)
            # A label's folder keeps what record.sh recorded; its kept copy's recordings for
            # this report go into the report's own folder.
            folder, name = ((workdir, f"{side.role}-{stem}") if side.label
                            else (recorded.directory, f"{recorded.label}-{stem}"))
            targets.append(flamegraph.Target(
                case, os.path.join(folder, f"{name}.svg"), os.path.join(folder, f"{name}.folded"),
                flamegraph.title(case, op, f"{side.role}: {side.spec}", side.python, side.torch_root())))
    if not targets:
        return found
    say(f"report: py-spy on {', '.join(t.case for t in targets)} for {side.role} "
        f"({RECORDINGS} processes at once, {seconds:g} s a case)")

    made: list = []
    try:
        flamegraph.record_together_or_alone(
            side.python, targets, op=op, seconds=seconds, import_path=side.torch_root(),
            recordings=RECORDINGS, on_recorded=made.extend,
            on_failed=lambda target, why: evidence.notes.append(
                f"No {side.role} flamegraph for {target.case}: {why}"))
    except flamegraph.RecorderDied as exc:  # no retry: what finished stays, the rest is said
        done = {rec.case for rec in made}
        lost = [target.case for target in targets if target.case not in done]
        evidence.notes.append(f"No {side.role} flamegraph for {', '.join(lost)}: {exc}.")
        evidence.incomplete.append(f"{side.role}: {exc}")
    manifest = recorded.manifest
    for rec in made:
        found[rec.case] = rec.svg_path, list(rec.folded_paths)
        manifest = manifest.with_flamegraph(Flamegraph(
            rec.case, os.path.basename(rec.svg_path), os.path.basename(rec.folded_path), rec.samples, seconds,
            tuple(os.path.basename(path) for path in rec.folded_paths)))
    if made and not side.label:  # a label's folder keeps what record.sh recorded
        recorded = recorded_runs.saved(recorded, flamegraphs=manifest.flamegraphs)
        if side.role in evidence.recorded:
            evidence.recorded[side.role] = recorded
    return {case: found.get(case) for case in cases}


def _recordings_of(recorded, case: str) -> tuple[str, list[str]] | None:
    """(svg, collapsed stacks of each recording) a recorded folder holds for `case`: the
    recordings listed in its manifest when all are there, else its one recording."""
    found = recorded.flamegraph(case)
    if found is None:
        return None
    entry = recorded.manifest.flamegraph(case)
    listed = entry.recordings if entry is not None else ()
    paths = [os.path.join(recorded.directory, name) for name in listed]
    if len(paths) > 1 and all(os.path.exists(path) for path in paths):
        return found[0], paths
    return found[0], [found[1]]
