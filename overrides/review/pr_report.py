"""`scripts/report.sh BASE BRANCH`: compare two builds and pack what a PR reviewer needs into a ZIP.

BASE and BRANCH are each a label recorded earlier by `scripts/record.sh` (one checkout rebuilt
between the two) or an interpreter / virtualenv, measured on the spot. Both are measured live,
side by side (`overrides/ab/paired.py`, paired: the sharpest verdicts) whenever both can run: an
interpreter always can, a label through the copy of its build that record.sh kept
(`overrides/builds/keep.py`). A label without a usable copy is compared from the two separate runs
(`overrides/compare.py`, unpaired), and the report says why and what that costs. Then each
build's Python calls per call of every case, counted in its own interpreter
(`overrides/counts/pycalls.py`: which Python functions the branch runs that base does not, exactly),
and for every case that regressed (every case with --all), both builds' py-spy
flamegraphs, their screenshots, and a differential view of where the branch's extra time went.

The ZIP holds report.md (ready to paste into a PR), comparison.json, base/branch .txt and .json
(the bench outputs), base-NAME.svg / branch-NAME.svg with their PNGs, and diff-NAME.svg/.png.
It is written whole or not at all; the runs/ folders keep every file finished before an
interruption.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import os
import shutil
import sys
import tempfile
import time
import zipfile
from typing import Callable, Sequence

from overrides import children, compare, environment, report, results
from overrides.errors import UsageError
from overrides.files import atomic_path, write_json_atomic, write_text_atomic

DEFAULT_OUTPUT = "report.zip"
ROLES = ("base", "branch")
DIFF_ROWS = 12  # frames listed per direction (grew, shrank) in a case's differential table
DIFFERENTIAL_SCHEMA = "torch-function-overhead/differential/1"


@dataclasses.dataclass(frozen=True)
class Side:
    """One of BASE and BRANCH: a recorded label or an interpreter measured on the spot."""

    role: str
    spec: str
    label: str | None = None  # set when the spec is a recorded label
    python: str | None = None  # the interpreter: given, or the one the label was recorded with
    build: "object | None" = None  # interpreters.Build to run live; None: only the label's recorded run
    unpaired_reason: str = ""  # why a label cannot run live (no kept copy, ...)
    missing: tuple[str, ...] = ()  # what an incomplete label lacks (--allow-incomplete)

    def torch_root(self) -> str | None:
        return getattr(self.build, "torch_root", None)


@dataclasses.dataclass(frozen=True)
class Figure:
    """A file for the ZIP: its name in the ZIP and where it is now."""

    name: str
    path: str


def classify(spec: str, role: str, runs: str, allow_incomplete: bool = False) -> Side:
    """A recorded label if runs/SPEC exists, else an interpreter or virtualenv, else exit 2. An
    incomplete (interrupted) label is refused unless `allow_incomplete`; a results file is named
    as what it is, not "no interpreter"."""
    from overrides.builds import interpreters
    from overrides.review import record

    if os.sep not in spec and spec in record.recorded_labels(runs):
        recorded = record.load_label(runs, spec)
        if not recorded.complete and (not allow_incomplete or recorded.still_recording()):
            raise UsageError(f"{role.upper()}: {recorded.incomplete_line()}"
                             + ("" if recorded.still_recording() else
                                ", or pass --allow-incomplete to compare what it has"))
        if not recorded.manifest.get("results") or not os.path.isfile(recorded.results_path):
            raise UsageError(f"{role.upper()}: label {spec!r} has no bench results to compare "
                             f"(interrupted before bench.py finished); record it again with "
                             f"`scripts/record.sh --label {spec} --force`")
        root = recorded.kept_root
        missing = tuple(recorded.missing())
        if root is None:
            return Side(role, spec, label=spec, python=recorded.python, missing=missing,
                        unpaired_reason=f"label `{spec}`: {recorded.why_not_kept()}")
        build = interpreters.Build(recorded.python, root)
        try:
            interpreters.probe_interpreter(build)
        except UsageError as exc:
            return Side(role, spec, label=spec, python=recorded.python, missing=missing,
                        unpaired_reason=f"label `{spec}`'s kept copy does not run: {exc}")
        return Side(role, spec, label=spec, python=recorded.python, build=build, missing=missing)
    results_file = _results_file_label(spec, runs)
    if results_file is not None:
        raise UsageError(
            f"{role.upper()} {spec} is a results file, not a build: report.sh measures builds; "
            f"pass a label recorded with `scripts/record.sh --label NAME`{results_file}, an "
            "interpreter, or a virtualenv (`python bench.py --load FILE` prints a results file)")
    looks_like_interpreter = os.sep in spec or os.path.isdir(spec) or shutil.which(spec)
    if not looks_like_interpreter:
        known = record.recorded_labels(runs)
        raise UsageError(
            f"{role.upper()} {spec!r} is neither a label recorded in {runs} "
            f"({'recorded: ' + ', '.join(known) if known else 'none recorded yet'}) nor an "
            "interpreter or virtualenv; record it with `scripts/record.sh --label "
            f"{spec}` or pass a Python executable")
    python = interpreters.resolve_interpreter(spec)
    return Side(role, spec, python=python, build=interpreters.Build(python))


def title(sides: Sequence[Side]) -> str:
    """"base vs again": the labels, or the environments' names; the roles where those match."""
    names = [side.label or _environment_name(side.spec) for side in sides]
    if len(set(names)) < len(names):
        return " vs ".join(f"{side.role} ({name})" for side, name in zip(sides, names))
    return " vs ".join(names)


def _environment_name(spec: str) -> str:
    """What a user calls an interpreter spec: a virtualenv's folder name (`~/base-env`,
    `~/base-env/bin/python`), else the executable's name (`python3`, `/usr/bin/python3.11`)."""
    path = os.path.normpath(os.path.expanduser(spec))
    environment = os.path.dirname(os.path.dirname(path))
    if not os.path.isdir(path) and os.path.isfile(os.path.join(environment, "pyvenv.cfg")):
        return os.path.basename(environment)
    return os.path.basename(path) or spec


def _results_file_label(spec: str, runs: str) -> str | None:
    """None unless `spec` names a results file (bench.py --json, or a label's LABEL.json): then
    a hint naming the label it belongs to ("" when it belongs to none)."""
    from overrides.review import record

    if not (spec.endswith(".json") or _starts_like_json(spec)):
        return None
    folder = os.path.dirname(os.path.abspath(spec))
    label = os.path.basename(folder)
    if (os.path.dirname(folder) == runs and label in record.recorded_labels(runs)
            and os.path.basename(spec) == f"{label}.json"):
        return f" (this file is label `{label}`'s results: pass `{label}`)"
    return ""


def _starts_like_json(path: str) -> bool:
    """A file that is not executable and opens with "{" (a results file named otherwise)."""
    if not os.path.isfile(path) or os.access(path, os.X_OK):
        return False
    try:
        with open(path, "rb") as src:
            return src.read(64).lstrip().startswith(b"{")
    except OSError:
        return False


class Report:
    """Gathers the numbers, figures and notes of one report, then writes the ZIP."""

    def __init__(self, runs: str, workdir: str, say: Callable[[str], None]):
        self.runs = runs
        self.workdir = workdir  # figures made here (PNGs, differential SVGs) until zipped
        self.say = say
        self.notes: list[str] = []
        self.files: list[Figure] = []
        self.sections: list[str] = []
        self.recorded: dict = {}
        self.counts: list | None = None  # [base runs, branch runs] of Callgrind, when both counted
        # differential.json: per case, what each view (counts, py-spy) names, machine-readable
        self.differentials: dict[str, dict] = {}
        self.count_parts: list[str] = []  # the "where the instructions went" section
        self.python_calls: list | None = None  # [base, branch] pycalls.CaseCalls lists
        self.python_call_parts: list[str] = []  # the "where the Python calls went" section
        # Screenshots are taken on a thread of their own while the report goes on (py-spy
        # records the next case meanwhile); finish_screenshots() waits for them.
        self._shooter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="screenshot")
        self._shots: list[tuple[concurrent.futures.Future, str]] = []

    # -- numbers ---------------------------------------------------------------------------

    def measure(self, sides: Sequence[Side], case_names: Sequence[str] | None, op: str | None,
                ab_config) -> tuple[list, dict, dict]:
        """(comparisons, RunResult per role, settings)."""
        from overrides.ab.paired import run_ab
        from overrides.cases import ops as ops_mod, registry
        from overrides.review import record

        selected = registry.resolve_cases(list(case_names) if case_names else None)
        names = [case.name for case in selected]
        if all(side.build is not None for side in sides):
            outcome = run_ab(sides[0].build, sides[1].build, selected,
                                ops_mod.resolve_ops([op] if op else None), ab_config, self.say,
                                keep_interrupted=False)  # Ctrl-C: no ZIP, so nothing to keep
            runs = {"base": outcome.base_run, "branch": outcome.branch_run}
            if all(run.instructions for run in runs.values()):
                from overrides.counts import records

                self.counts = [records.from_dict(runs[role].instructions) for role in ROLES]
            kept = [side for side in sides if side.label]
            if kept:
                self.notes.append(
                    "Paired from kept builds: " + "; ".join(
                        f"{side.role} ran label `{side.label}`'s copy of its build "
                        f"(`{side.torch_root()}`)" for side in kept)
                    + ", side by side with the other side, exactly as two environments are.")
            for side in sides:
                if side.label:  # its flamegraphs were recorded with it: use them, write nothing
                    self.recorded[side.role] = record.load_label(self.runs, side.label)
                    continue
                # An interpreter: kept as record.sh would, so flamegraphs land beside it.
                folder = _live_folder(self.runs, side.role, [s.label for s in sides])
                recorder = record.Recorder(self.runs, folder, side.python, names, op, self.say)
                recorder.manifest.update(results=f"{folder}.json", text=f"{folder}.txt",
                                         measured_by="paired A/B in report.sh",
                                         kept={"skipped": "measured by report.sh from an interpreter"})
                results.save(runs[side.role], recorder.path(f"{folder}.json"))
                write_text_atomic(recorder.path(f"{folder}.txt"), report.table(runs[side.role]) + "\n")
                recorder.save()
                self.recorded[side.role] = recorder.finish()
            return list(outcome.comparisons), runs, outcome.settings
        for side in sides:
            if side.unpaired_reason:
                self.notes.append(f"Not paired: {side.unpaired_reason}. Record it again (record.sh "
                                  "keeps a copy of the build by default) for a paired comparison.")
        recorded = {}
        for side in sides:
            if side.label is not None:
                recorded[side.role] = record.load_label(self.runs, side.label)
            else:
                recorded[side.role] = record.record(
                    _live_folder(self.runs, side.role, [s.label for s in sides]), side.python,
                    names, op=op, directory=self.runs, flamegraphs=False,
                    instructions=bool(ab_config.instruction_seeds),
                    seeds=ab_config.instruction_seeds, keep_build=False, force=True,
                    progress=self.say)  # _live_folder: a report.sh run's folder, never a label
                recorded[side.role].manifest["measured_by"] = "report.sh, unpaired"
                write_json_atomic(os.path.join(recorded[side.role].directory, record.MANIFEST),
                                  recorded[side.role].manifest)
        self.recorded = recorded
        runs = {role: results.load(recorded[role].results_path) for role in ROLES}
        comparisons = compare.compare_runs(runs["base"], runs["branch"], ab_config.threshold_ns,
                                           ab_config.threshold_pct)
        settings = {"mode": "unpaired", "threshold_ns": ab_config.threshold_ns,
                    "threshold_pct": ab_config.threshold_pct}
        count_files = [recorded[role].instructions_path() for role in ROLES]
        if all(count_files):
            comparisons, runs = self._judge_on_counts(comparisons, runs, count_files, settings,
                                                      ab_config.threshold_pct)
        elif any(count_files):
            self.notes.append("Only one side has instruction counts (record both with "
                              "`record.sh --instructions`), so the verdicts rest on wall time.")
        return comparisons, runs, settings

    def _judge_on_counts(self, comparisons, runs: dict, count_files, settings: dict,
                         threshold_pct: float):
        from overrides.counts import judge, records

        counts = []
        for path in count_files:
            with open(path, encoding="utf-8") as src:
                counts.append(records.from_dict(json.load(src), source=path))
        self.counts = counts
        seeds = sorted({run.seed for run in counts[0]} & {run.seed for run in counts[1]})
        if not seeds:
            self.notes.append("The two sides' instruction counts share no hash seed (record both "
                              "with the same --seeds), so the verdicts rest on wall time.")
            return comparisons, runs
        settings["instructions"] = {"seeds": seeds,
                                    "threshold": judge.DEFAULT_THRESHOLD_INSTRUCTIONS,
                                    "threshold_pct": threshold_pct}
        runs = {role: dataclasses.replace(runs[role], instructions=records.to_dict(c))
                for role, c in zip(ROLES, counts)}
        return compare.with_counts(comparisons, judge.compare_counts(*counts, threshold_pct=threshold_pct)), runs

    # -- flamegraphs -----------------------------------------------------------------------

    def flamegraphs(self, sides: Sequence[Side], comparisons, seconds: float | None,
                    op: str | None) -> None:
        from overrides.flame import hotloop, screenshot
        from overrides.review import record

        browser = screenshot.find_browser()
        if browser is None:
            self.notes.append(f"Screenshots were skipped: no Chromium on this machine; {screenshot.INSTALL_HINT}.")
        for comparison in comparisons:
            stem = record.file_stem(comparison.case, op)
            folded: dict[str, list[str]] = {}  # role -> its recordings' collapsed stacks
            # Both sides at once, one core each: a profile is shares of samples, which the other
            # core's work does not skew, and the report gets 8 s a case back. Ctrl-C kills both
            # py-spy processes at once (overrides/children.py).
            recorded = children.parallel(lambda side: self._flamegraph_for(
                side, comparison.case, op, seconds or hotloop.DEFAULT_SECONDS), sides, len(sides))
            for side, paths in zip(sides, recorded):
                if paths is None:
                    continue
                svg, folded[side.role] = paths
                name = f"{side.role}-{stem}"
                self.files.append(Figure(f"{name}.svg", svg))
                if browser:
                    self._shoot(svg, f"{name}.png", browser)
            section = [f"### {comparison.case}: {_signed(comparison.delta_ns)} ns per call "
                       f"({comparison.verdict})", ""]
            for role in ROLES:
                if any(f.name == f"{role}-{stem}.png" for f in self.files):
                    section.append(f"{role}: ![{role}-{stem}]({role}-{stem}.png)")
            section.append("")
            if len(folded) == 2:
                section += self._differential(comparison, folded, stem, browser)
            else:
                section.append("No differential view: a flamegraph is missing on one side (see notes).")
            self.sections.append("\n".join(section))

    def _flamegraph_for(self, side: Side, case: str, op: str | None,
                        seconds: float) -> tuple[str, list[str]] | None:
        """(svg, the recordings' collapsed stacks) of one side: recorded now, RECORDINGS
        processes of seconds / RECORDINGS each, wherever the side's build can run; a label's
        own single recording only when it cannot (its spread between processes then unknown)."""
        from overrides.flame import flamegraph
        from overrides.flame.differential import RECORDINGS
        from overrides.review import record

        recorded = self.recorded.get(side.role) or record.load_label(self.runs, side.label or side.role)
        label = recorded.label
        existing = _recordings_of(recorded, case)
        if existing and (len(existing[1]) >= RECORDINGS or side.build is None):
            return existing
        if side.label and side.build is None:  # its interpreter may import another build by now
            self.notes.append(f"No {side.role} flamegraph for {case}: label {label!r} was recorded "
                              f"without it, and no copy of its build was kept to record it from.")
            return None
        if not (side.python and os.access(side.python, os.X_OK)):
            self.notes.append(f"No {side.role} flamegraph for {case}: its interpreter "
                              f"({side.python}) is gone.")
            return None
        stem = record.file_stem(case, op)
        # A label's folder keeps what record.sh recorded; its kept copy's recordings for this
        # report go into the report's own folder.
        folder, name = ((self.workdir, f"{side.role}-{stem}") if side.label
                        else (recorded.directory, f"{label}-{stem}"))
        svg, folded = os.path.join(folder, f"{name}.svg"), os.path.join(folder, f"{name}.folded")
        self.say(f"report: py-spy on {case} for {side.role} ({RECORDINGS} x "
                 f"{seconds / RECORDINGS:g} s)")
        try:
            rec = flamegraph.record_case(side.python, case, svg, folded, op=op, seconds=seconds,
                                         import_path=side.torch_root(),
                                         recordings=RECORDINGS,
                                         title=flamegraph.title(case, op, f"{side.role}: {side.spec}",
                                                                side.python, side.torch_root()))
        except UsageError as exc:
            self.notes.append(f"No {side.role} flamegraph for {case}: {exc}")
            return None
        if not side.label:
            recorded.manifest.setdefault("flamegraphs", {})[case] = {
                "svg": os.path.basename(svg), "folded": os.path.basename(folded),
                "recordings": [os.path.basename(path) for path in rec.folded_paths],
                "samples": rec.samples, "seconds": seconds}
            write_json_atomic(os.path.join(recorded.directory, record.MANIFEST), recorded.manifest)
        return svg, list(rec.folded_paths)

    def _shoot(self, svg: str, png_name: str, browser: str) -> bool:
        """Start a screenshot of `svg` as `png_name`; the PNG is counted on (its Figure listed,
        the markdown pointing at it) until finish_screenshots() finds it failed."""
        from overrides.flame import screenshot

        png = os.path.join(self.workdir, png_name)

        def shoot() -> None:
            self.say(f"report: screenshot {png_name}")
            screenshot.screenshot(svg, png, browser)

        self._shots.append((self._shooter.submit(shoot), png_name))
        self.files.append(Figure(png_name, png))
        return True

    def stop_screenshots(self) -> None:
        """Cancel the screenshots not begun and wait for the one running (on the way out)."""
        self._shooter.shutdown(wait=True, cancel_futures=True)

    def finish_screenshots(self) -> None:
        """Wait for every screenshot; a failed one leaves its figure out, its SVG named instead
        in the markdown, and a note saying why."""
        from overrides.flame import screenshot

        try:
            for future, png_name in self._shots:
                try:
                    future.result()
                except screenshot.ScreenshotError as exc:
                    self.notes.append(f"No {png_name}: {exc}.")
                    self.files = [f for f in self.files if f.name != png_name]
                    stem = png_name[:-len(".png")]
                    image, instead = f"![{stem}]({png_name})", f"`{stem}.svg` (no screenshot, see the notes)"
                    self.sections = [text.replace(image, instead) for text in self.sections]
                    self.count_parts = [text.replace(image, instead) for text in self.count_parts]
        finally:
            self._shots = []
            self.stop_screenshots()

    def _differential(self, comparison, folded: dict, stem: str, browser: str | None) -> list[str]:
        from overrides.counts import calltree, pycalls
        from overrides.flame import differential, stacks

        base_runs = [stacks.read_folded(path) for path in folded["base"]]
        branch_runs = [stacks.read_folded(path) for path in folded["branch"]]
        deltas = differential.differential(base_runs, branch_runs, comparison.base_ns,
                                         comparison.branch_ns)
        lines = []
        if not deltas:
            return ["No differential view: no samples inside the hot loop on one side."]
        by_frame = {d.frame: d for d in deltas}
        counted = {frame: row for frame, row in self._counted_frames(comparison).items()
                   if frame in by_frame}
        instructions = self._instructions_by_frame(comparison, [d.frame for d in deltas])
        # Significant changes of time where the counts found the same work (the same
        # instructions, or the same Python calls and bytecodes): drawn amber, never listed.
        same_python = self._same_python_work(comparison)
        same_work = {d.frame for d in deltas if d.significant and d.frame not in counted and (
            _same_instructions(instructions.get(d.frame)) or d.frame in same_python)}
        diff_svg = os.path.join(self.workdir, f"diff-{stem}.svg")
        write_text_atomic(diff_svg, differential.differential_svg(
            base_runs, branch_runs, comparison.base_ns, comparison.branch_ns,
            f"{comparison.case}: branch against base, ns per call by call path", same_work,
            {frame: 1 if row.delta_calls > 0 else -1 for frame, row in counted.items()}))
        self.files.append(Figure(f"diff-{stem}.svg", diff_svg))
        legend = "red: more time than base, blue: less" + (
            ", amber: time moved where the counts found the same work" if same_work else "") + (
            ", labelled whatever their width: the functions the Python-call counts found new or "
            "changed" if counted else "")
        if browser and self._shoot(diff_svg, f"diff-{stem}.png", browser):
            lines.append(f"Differential flamegraph ({legend}): ![diff-{stem}](diff-{stem}.png)")
        else:
            lines.append(f"Differential flamegraph: `diff-{stem}.svg` ({legend}).")
        verdicts = {comparison.verdict, comparison.wall_verdict or comparison.verdict}
        changed = bool(verdicts & {"regression", "improvement", "clock only"})
        # The functions the Python-call counts name come first, whatever their sampled time:
        # the counts are exact, the samples are not. Then what moved beyond its spread.
        first = [by_frame[frame] for frame in counted] if changed else []
        grew, shrank = (differential.top_changes(
            [d for d in deltas if d.frame not in counted and d.frame not in same_work], DIFF_ROWS)
            if changed else ([], []))
        listed = first + grew + shrank
        spread_measured = deltas[0].spread_ns is not None
        self._differential_entry(comparison)["wall_clock"] = {
            "source": "py-spy", "unit": "ns per call", "listed": changed,
            "recordings": {"base": len(base_runs), "branch": len(branch_runs)},
            "error": "spread between recordings" if spread_measured else
                     f"sampling error x {differential.PROCESS_DISPERSION:g}",
            "functions": [dict(d.to_dict(), instructions=_rounded(instructions.get(d.frame)),
                               python_calls=counted[d.frame].tag if d.frame in counted else None)
                          for d in listed],
            "everything_else": round(comparison.delta_ns - sum(d.delta_ns for d in listed), 1)
            if changed else None,
            "total_delta": round(comparison.delta_ns, 1)}
        if not changed:
            return lines + ["", f"No function is named: the case itself did not change beyond noise "
                            f"({' / '.join(sorted(verdicts))}), and a function's share of ~1000 "
                            "samples moves by chance (two installs of one build moved single "
                            "functions by hundreds of ns).", ""]
        explained = sum(d.delta_ns for d in listed)
        if spread_measured:
            error = (f"one error is the function's own spread between the recordings of each side "
                     f"({len(base_runs)} and {len(branch_runs)} processes), or py-spy's sampling "
                     f"error widened {differential.PROCESS_DISPERSION:g}x (the spread of one build's "
                     "processes on average) where that is larger: a function that moved in one "
                     "process only stays within it and goes to \"everything else\", however far "
                     "it moved")
        else:
            error = (f"one error is py-spy's sampling error widened {differential.PROCESS_DISPERSION:g}x "
                     "for the process-to-process spread of one build's profile (a side recorded "
                     "once: the spread of each function was not measured)")
        lines += ["", (f"Functions the Python-call counts found new or called more or less often "
                       "first (\"Python calls\"), whatever their sampled time; then functions "
                       f"whose own time per call changed by more than {differential.SIGNIFICANT_Z:g} "
                       f"errors, where {error}; and functions new in the call path (\"new\": never "
                       "sampled in base, significant with callees). Own time does not count what a "
                       "function calls, so the rows and \"everything else\" add up to the case's "
                       f"change (listed: {_signed(explained)} of {_signed(comparison.delta_ns)} ns). "
                       "With callees: the function's time including what it calls."), ""]
        counted_instructions = bool(instructions)
        if counted_instructions:
            lines += ["Instructions: the same function's own change in the Callgrind counts "
                      "(\"-\": not in them; Python code shows there as the interpreter's)."]
        if same_work:
            lines += [f"Not listed, whatever their time: {len(same_work)} function(s) whose own "
                      "work the counts found unchanged (instructions moved by less than "
                      f"{calltree.FUNCTION_FLOOR:g} a call, \"same instructions\", or the same "
                      "Python calls and bytecodes). Their time moved, their work did not: one "
                      "process's layout luck, caches, or py-spy placing samples in the "
                      "neighbouring Python frame. They are in \"everything else\" and amber in the "
                      "picture."]
        if counted_instructions or same_work:
            lines.append("")
        rows = [["", "function", "own ns: base", "branch", "delta", "±", "with callees: base", "branch"]
                + (["instructions"] if counted_instructions else [])]
        for d in listed:
            change = instructions.get(d.frame)
            tags = ["more" if d.delta_ns > 0 else "less"] if d.significant else ["within ±"]
            tags += ["new"] if d.new and d.significant and not (
                d.frame in counted and counted[d.frame].new) else []  # said once
            if d.frame in counted:
                row = counted[d.frame]
                tags.insert(0, "Python calls: " + ("new" if row.new else
                                                   f"{pycalls.signed(row.delta_calls)} a call"))
            rows.append([", ".join(tags), f"`{d.frame}`", f"{d.base_self_ns:,.0f}",
                         f"{d.branch_self_ns:,.0f}", _signed(d.delta_ns), f"{d.error_ns:,.0f}",
                         f"{d.base_ns:,.0f}", f"{d.branch_ns:,.0f}"]
                        + ([_signed(change)] if counted_instructions else []))
        if len(rows) == 1:
            return lines + ["No function's own time changed by more than its error allows: the "
                            f"case's change ({_signed(comparison.delta_ns)} ns) is spread too thin "
                            "over its functions for py-spy's samples to place it.", ""]
        rest = len(deltas) - len(listed) - len(same_work)
        rows.append(["", f"everything else ({rest} functions within their error"
                     + (f", {len(same_work)} with the same work" if same_work else "") + ")", "", "",
                     _signed(comparison.delta_ns - explained), "", "", ""]
                    + ([""] if counted_instructions else []))
        rows.append(["", "**total: the case's change**", "", "", f"**{_signed(comparison.delta_ns)}**",
                     "", "", ""] + ([""] if counted_instructions else []))
        lines += _markdown_table(rows, right_from=2)
        return lines + [""]

    def _same_python_work(self, comparison) -> set[str]:
        """py-spy frame names of the Python functions that ran as often, with as many
        bytecodes, on both sides of this case (by the Python-call counts)."""
        from overrides.counts import pycalls

        if not self.python_calls:
            return set()
        base, branch = (pycalls.find(runs, comparison.case, comparison.op) for runs in self.python_calls)
        if base is None or branch is None:
            return set()
        changed = {pycalls.pyspy_frame(row.function) for row in pycalls.compare(base, branch)}
        return {pycalls.pyspy_frame(key) for key in set(base.functions) & set(branch.functions)
                if pycalls.pyspy_frame(key)} - changed  # two files can share py-spy's short name

    def _counted_frames(self, comparison) -> dict:
        """py-spy frame name -> the Python-call counts' row, for the Python functions the counts
        found new or called a different number of times in this case (in the counts' order)."""
        from overrides.counts import pycalls

        if not self.python_calls:
            return {}
        base, branch = (pycalls.find(runs, comparison.case, comparison.op) for runs in self.python_calls)
        if base is None or branch is None:
            return {}
        return {pycalls.pyspy_frame(row.function): row for row in pycalls.compare(base, branch)
                if row.delta_calls and pycalls.pyspy_frame(row.function)}

    def _instructions_by_frame(self, comparison, frames: Sequence[str]) -> dict[str, float | None]:
        """Each py-spy frame -> its function's own instruction change per call in this case's
        counted call paths (None where they do not name it: Python code, an unresolved `?`, a
        function only one tool saw); empty where there are no call paths to set py-spy against."""
        from overrides.counts import calltree

        deltas = (calltree.own_deltas(self.counts[0], self.counts[1], comparison.case, comparison.op)
                  if self.counts else None)
        if deltas is None:
            return {}
        by_key = {calltree.function_key(name): delta for name, delta in deltas.items()}
        keys = {frame: calltree.function_key(frame) for frame in frames}
        return {frame: None if key[0] == "?" else by_key.get(key) for frame, key in keys.items()}

    # -- output ----------------------------------------------------------------------------

    def markdown(self, comparisons, settings: dict, runs: dict, sides: Sequence[Side],
                 flamegraphs: bool, all_cases: bool, wall_s: float) -> str:
        regressed = [c for c in comparisons if c.verdict == "regression"]
        headline = (f"**{len(regressed)} regression{'s' if len(regressed) != 1 else ''}**: "
                    + ", ".join(f"{c.case} {_signed(c.delta_ns)} ns"
                                + (f" / {_signed(c.delta_instructions)} instructions"
                                   if c.delta_instructions is not None else "") for c in regressed)
                    if regressed else "**No regression.**")
        split = [c for c in comparisons if c.verdict in ("disagree", "clock only") or c.clock_unexplained]
        if split:
            headline += ("\n\n**Clock and counts tell different stories** (see the notes under the "
                         "table): " + ", ".join(f"{c.case} {_signed(c.delta_ns)} ns / "
                                                f"{_signed(c.delta_instructions)} instructions "
                                                f"({report.verdict_cell(c)})" for c in split))
            if any(c.clock_unexplained for c in split):
                headline += (". Where the clock moved far more than the instructions cost, the same "
                             "work got faster or slower (memory, caches, atomics or threads), not "
                             "only the code.")
        parts = [f"# `__torch_function__` overhead: {title(sides)}", "", headline, "",
                 "## Comparison", "", report.comparison_markdown(comparisons, settings), ""]
        parts += self.python_call_parts
        parts += self.count_parts
        if flamegraphs:
            which = "every case (--all)" if all_cases else "each regressed case"
            parts += [f"## Where the time went: {which}", ""]
            parts += self.sections or ["Nothing regressed, so no flamegraphs were needed "
                                       "(--all records them for every case)."]
            parts.append("")
        if self.notes:
            parts += ["## Notes", ""] + [f"- {note}" for note in self.notes] + [""]
        parts += ["## Environments", ""]
        paired = settings.get("mode", "").startswith("paired")
        for side in sides:
            env = runs[side.role].environment
            # A label with a copy is still compared from its recorded run when the other side
            # cannot run live (unpaired): say what was measured, not what could have been.
            source = (f"label `{side.label}`, " + ("run from its kept copy" if side.build and paired
                                                  else "its recorded run")
                      + (", an incomplete recording" if side.missing else "")) if side.label else f"`{side.spec}`"
            parts.append(f"- **{side.role}** ({source}): {environment.one_line(env)}; "
                         f"`{env.get('python_executable', side.python)}`")
        parts += ["", "## Bench output", ""]
        for side in sides:
            parts += [f"<details><summary>{side.role}</summary>", "", "```text",
                      report.table(runs[side.role]), "```", "</details>", ""]
        parts.append(f"_Made by `scripts/report.sh` in {wall_s:.0f} s._")
        return "\n".join(parts) + "\n"

    def _differential_entry(self, comparison) -> dict:
        return self.differentials.setdefault(
            f"{comparison.case} [{comparison.op}]",
            {"case": comparison.case, "op": comparison.op, "verdict": comparison.verdict,
             "python_calls": None, "instructions": None, "wall_clock": None})

    # -- Python calls ----------------------------------------------------------------------

    def count_python_calls(self, sides: Sequence[Side], comparisons) -> None:
        """Both sides' Python calls per call of every compared case (overrides/counts/pycalls.py), one
        process per side, both at once: counts do not care what else runs."""
        from overrides.counts import pycalls

        cannot = [side for side in sides if side.build is None]
        if cannot:
            self.notes.append("Python calls were not counted: " + "; ".join(
                f"{side.role} ({side.unpaired_reason or 'no build to run'})" for side in cannot)
                + ". They need both builds runnable, as for a paired comparison.")
            return
        targets = list(dict.fromkeys((c.case, c.op) for c in comparisons))
        self.say(f"report: counting Python calls per call ({len(targets)} case(s), both sides)")
        try:
            self.python_calls = children.parallel(
                lambda side: pycalls.count_build(side.python, targets, import_path=side.torch_root()),
                sides, len(sides))
        except UsageError as exc:
            self.notes.append(f"Python calls were not counted: {exc}.")

    def python_call_sections(self, comparisons, all_cases: bool) -> list[str]:
        """Per case whose Python calls changed (and every changed or --all case, in a line when
        they did not): which Python functions run more, less, or for the first time."""
        from overrides.counts import pycalls

        if not self.python_calls:
            return []
        parts: list[str] = []
        same: list[str] = []
        for c in comparisons:
            base, branch = (pycalls.find(runs, c.case, c.op) for runs in self.python_calls)
            if base is None or branch is None:
                continue
            rows = pycalls.compare(base, branch)
            (base_calls, base_codes), (branch_calls, branch_codes) = base.totals(), branch.totals()
            self._differential_entry(c)["python_calls"] = {
                "source": "sys.setprofile + sys.settrace (opcodes)", "calls_counted": base.calls,
                "unit": "calls and own bytecodes per call of the case",
                "base": {"calls": round(base_calls, 3), "bytecodes": round(base_codes, 3)},
                "branch": {"calls": round(branch_calls, 3), "bytecodes": round(branch_codes, 3)},
                "functions": [row.to_dict() for row in rows]}
            if not rows:
                if all_cases or c.verdict in ("regression", "improvement", "disagree", "clock only"):
                    same.append(f"{c.case} ({c.verdict})")
                continue
            calls = pycalls.signed(branch_calls - base_calls)
            parts += [f"### {c.case}: {calls} Python call{'' if calls in ('+1', '-1') else 's'}, "
                      f"{pycalls.signed(branch_codes - base_codes)} bytecodes per call ({c.verdict})", ""]
            parts += pycalls.markdown_table(rows, base, branch) + [""]
        if same:
            parts += ["The same Python functions ran, as often and with the same bytecodes, in: "
                      f"{', '.join(same)}: what changed there is below Python (C++, the interpreter, "
                      "or where code sits in memory).", ""]
        if not parts:
            return []
        intro = ["## Where the Python calls went", "",
                 f"Counted, not sampled: each case's call run {pycalls.CALLS:,} times under the "
                 "interpreter's profiler and opcode hooks, in a process of its own per side (never "
                 "the timed one). The same build gives the same counts, so each row is a real "
                 "difference in the Python code that runs, however little time it takes: read "
                 "these first, `new` rows (functions the base never calls) before the rest. "
                 "Calls: calls per call of the case; bytecodes: the function's own bytecodes "
                 "executed per call of the case, not counting what it calls (`[C]`: a C function "
                 "called from Python, counted by its calls). Order: new first, then by the change "
                 "of calls times the function's bytecodes per call. Line numbers are the "
                 "branch's.", ""]
        return intro + parts

    def count_sections(self, comparisons, all_cases: bool, browser: str | None) -> list[str]:
        """Per regressed case (every case with --all; every case whose counts changed): where
        the instructions went, by function and as a differential flamegraph of the call tree
        (overrides/counts/calltree.py). Counts recorded without call paths get the older per-function
        table of one seed."""
        from overrides.counts import calltree
        from overrides.review import record

        chosen = [c for c in comparisons
                  if all_cases or c.verdict in ("regression", "improvement", "disagree")]
        if not chosen:
            return []
        intro = ["## Where the instructions went", "",
                 "Instructions per call by function (Callgrind: deterministic, so this is the view "
                 "to read first). Own: the function's own instructions; with callees: including "
                 "what it calls. Listed: a change of at least "
                 f"{calltree.FUNCTION_FLOOR:g} a call, consistent over the hash seeds; the rows and "
                 "\"everything else\" add up to the case's change. Callgrind sees C functions: "
                 "Python code shows as the interpreter's (`_PyEval_EvalFrameDefault`, calls, "
                 "attribute look-ups)" + ("; the Python functions themselves are named under "
                                          "\"Where the Python calls went\" above."
                                          if self.python_call_parts else "."), ""]
        parts: list[str] = []
        unchanged = []  # "case delta (verdict)": one line for all of them, not a table each
        for c in chosen:
            went = calltree.where_it_went(self.counts[0], self.counts[1], c.case, c.op)
            if went is None:
                parts += self._count_section_without_paths(c)
                continue
            counted_change = c.verdict in ("regression", "improvement", "disagree")
            if not counted_change:  # nothing to explain: every function's move is layout noise
                went = dataclasses.replace(went, rows=(), unlisted_functions=went.unlisted_functions + len(went.rows))
            self._differential_entry(c)["instructions"] = dict(went.to_dict(), listed=counted_change)
            if not counted_change:
                unchanged.append(f"{c.case} {_signed(went.total_delta)} ({c.verdict})")
                continue
            parts += [f"### {c.case}: {_signed(went.total_delta)} instructions per call ({c.verdict})", ""]
            parts += calltree.markdown_table(went) + [""]
            stem = f"counts-diff-{record.file_stem(c.case, c.op)}"
            svg = os.path.join(self.workdir, f"{stem}.svg")
            write_text_atomic(svg, calltree.differential_svg(
                self.counts[0], self.counts[1], c.case, c.op,
                f"{c.case} · {c.op}: branch against base, instructions per call by call path"))
            self.files.append(Figure(f"{stem}.svg", svg))
            if browser and self._shoot(svg, f"{stem}.png", browser):
                parts += [f"Call tree of the branch, coloured by change (red: more, blue: less): "
                          f"![{stem}]({stem}.png)", ""]
            else:
                parts += [f"Call tree of the branch, coloured by change: `{stem}.svg`.", ""]
        if unchanged:
            parts += [f"No function is named where the verdict is not a change (what moved is "
                      f"within the hash seeds' layout noise); instructions per call: {'; '.join(unchanged)}.", ""]
        explained = len(unchanged) < len(chosen)
        return (intro if explained else intro[:2]) + parts  # nothing listed: the line alone

    def _count_section_without_paths(self, c) -> list[str]:
        from overrides.counts import judge

        rows = judge.function_deltas(self.counts[0], self.counts[1], c.case, c.op)
        parts = [f"### {c.case}: {_signed(c.delta_instructions)} instructions per call", "",
                 "Counted without call paths (`record.sh --instructions` of an older version): self "
                 "instructions per call by function, first shared hash seed.", ""]
        if not rows:
            return parts + ["No function changed by half an instruction per call or more.", ""]
        table = [["function", "base", "branch", "delta"]]
        table += [[f"`{name}`", f"{a:,.1f}", f"{b:,.1f}", f"{b - a:+,.1f}"] for name, a, b in rows]
        return parts + _markdown_table(table, right_from=1) + [""]

    def write_zip(self, output: str, members: dict[str, str]) -> None:
        """Every member (name -> path) into `output`, whole or not at all."""
        with atomic_path(output, suffix=".zip") as tmp:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as bundle:
                for name, path in members.items():
                    bundle.write(path, name)


def _live_folder(runs: str, role: str, labels: Sequence[str | None]) -> str:
    """Where an interpreter side's run is written: runs/ROLE, unless that folder is one of the
    labels compared or a record.sh recording of its own (never overwrite those)."""
    from overrides.review import record

    name = role
    while name in labels or (name in record.recorded_labels(runs) and
                             record.load_label(runs, name).manifest.get("measured_by") is None):
        name += "-live"
    return name


def _recordings_of(recorded, case: str) -> tuple[str, list[str]] | None:
    """(svg, collapsed stacks of each recording) a recorded folder holds for `case`: the
    recordings listed in its manifest when all are there, else its one recording."""
    found = recorded.flamegraph(case)
    if found is None:
        return None
    listed = recorded.manifest.get("flamegraphs", {}).get(case, {}).get("recordings") or []
    paths = [os.path.join(recorded.directory, name) for name in listed]
    if len(paths) > 1 and all(os.path.exists(path) for path in paths):
        return found[0], paths
    return found[0], [found[1]]


def _same_instructions(instructions: float | None) -> bool:
    """The counts name the function and its own instructions moved by less than a listed row's
    floor: whatever its time did, its work did not change."""
    from overrides.counts import calltree

    return instructions is not None and abs(instructions) < calltree.FUNCTION_FLOOR


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _signed(value: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:+,.0f}"


def _markdown_table(rows: list[list[str]], right_from: int) -> list[str]:
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("---:" if i >= right_from else "---" for i in range(len(rows[0]))) + "|")
    return lines


def comparison_list(comparisons) -> list[dict]:
    """comparison.json: one object per case, each saying which schema it follows."""
    return [dict(schema=compare.COMPARISON_SCHEMA, **c.to_dict()) for c in comparisons]


def build(base_spec: str, branch_spec: str, *, output: str = DEFAULT_OUTPUT,
          all_cases: bool = False, flamegraphs: bool = True, cases: Sequence[str] | None = None,
          op: str | None = None, seconds: float | None = None, ab_config=None,
          runs_dir: str | None = None, skipped_counts: str | None = None, force: bool = False,
          allow_incomplete: bool = False,
          progress: Callable[[str], None] | None = None) -> tuple[str, list, dict]:
    """Write the report ZIP; returns (its path, the comparisons, the comparison's settings).
    An existing ZIP is refused before anything is measured unless `force`, an incomplete
    label unless `allow_incomplete`."""
    from overrides.ab.config import ABConfig
    from overrides.flame.pyspy import find_pyspy
    from overrides.review import record

    say = progress or (lambda message: None)
    started = time.monotonic()
    if not output.endswith(".zip"):
        raise UsageError(f"-o {output}: the report is a ZIP; name it FILE.zip")
    if os.path.exists(output) and not force:
        raise UsageError(f"{output} exists; pass --force to overwrite it, or -o another FILE.zip")
    runs = record.runs_dir(runs_dir)
    sides = [classify(spec, role, runs, allow_incomplete)
             for spec, role in ((base_spec, "base"), (branch_spec, "branch"))]
    if flamegraphs:
        find_pyspy(sides[0].python)  # say now, before minutes of measuring
    ab_config = ab_config or ABConfig()
    with tempfile.TemporaryDirectory(prefix="overrides-report-") as workdir:
        the_report = Report(runs, workdir, say)
        try:
            the_report.notes += [f"Label `{side.label}` is an incomplete recording (interrupted; missing "
                                 f"{record.words(side.missing)}), compared as it is (--allow-incomplete)."
                                 for side in sides if side.missing]
            comparisons, run_results, settings = the_report.measure(sides, cases, op, ab_config)
            if not settings.get("mode", "").startswith("paired"):
                the_report.notes.append(
                    "This comparison is UNPAIRED: base and branch were measured in separate runs, so "
                    "machine drift and memory layout between the runs are in the interval (3% per "
                    "side); only changes of a few percent can get a verdict. For small changes, "
                    "compare labels that kept a copy of their build (record.sh does by default), or "
                    "two interpreters or virtualenvs: those are measured side by side.")
            the_report.count_python_calls(sides, comparisons)
            the_report.python_call_parts = the_report.python_call_sections(comparisons, all_cases)
            if the_report.counts:
                from overrides.flame import screenshot

                the_report.count_parts = the_report.count_sections(comparisons, all_cases,
                                                                   screenshot.find_browser())
            elif skipped_counts:
                the_report.notes.append(skipped_counts)
            if flamegraphs:
                chosen = [c for c in comparisons if all_cases or c.verdict in ("regression", "disagree")]
                the_report.flamegraphs(sides, chosen, seconds, op)
            the_report.finish_screenshots()
            members = {}
            for role in ROLES:
                for suffix, payload in (("json", results.to_dict(run_results[role])),
                                        ("txt", report.table(run_results[role]) + "\n")):
                    path = os.path.join(workdir, f"{role}.{suffix}")
                    if suffix == "json":
                        write_json_atomic(path, payload)
                    else:
                        write_text_atomic(path, payload)
                    members[f"{role}.{suffix}"] = path
            comparison_path = os.path.join(workdir, "comparison.json")
            write_json_atomic(comparison_path, comparison_list(comparisons))
            members["comparison.json"] = comparison_path
            differential_path = os.path.join(workdir, "differential.json")
            write_json_atomic(differential_path, {"schema": DIFFERENTIAL_SCHEMA,
                                                  "cases": list(the_report.differentials.values())})
            members["differential.json"] = differential_path
            for figure in the_report.files:
                members[figure.name] = figure.path
            markdown = the_report.markdown(comparisons, settings, run_results, sides, flamegraphs,
                                           all_cases, time.monotonic() - started)
            report_path = os.path.join(workdir, "report.md")
            write_text_atomic(report_path, markdown)
            members = {"report.md": report_path, **members}
            the_report.write_zip(output, members)
        finally:
            the_report.stop_screenshots()
    return output, comparisons, settings


def build_parser():
    from overrides.ab.config import add_arguments
    from overrides.argtypes import OneLineParser, positive_float, positive_int
    from overrides.flame.hotloop import DEFAULT_SECONDS
    from overrides.review.record import RUNS_DIR_VARIABLE

    parser = OneLineParser(
        prog="scripts/report.sh",
        description="Compare two builds and write a ZIP for the PR: report.md, comparison.json, "
                    "bench outputs, and base-/branch- flamegraphs with screenshots of what regressed.")
    parser.add_argument("base", metavar="BASE", help="a label recorded by record.sh, or an interpreter / virtualenv")
    parser.add_argument("branch", metavar="BRANCH", help="the same, for the branch")
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE.zip",
                        help=f"where to write the ZIP (default {DEFAULT_OUTPUT})")
    parser.add_argument("--force", action="store_true", help="overwrite the ZIP if it exists")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="compare a label whose recording was interrupted (refused without it)")
    parser.add_argument("--all", action="store_true", help="flamegraphs for every case, not only regressed ones")
    parser.add_argument("--no-flamegraphs", action="store_true", help="numbers only: no py-spy, no screenshots")
    parser.add_argument("--cases", nargs="+", metavar="NAME", help="cases (default: the four seed cases)")
    parser.add_argument("--op", default=None, help="the op (default torch.add)")
    parser.add_argument("--seconds", type=positive_float, default=None, metavar="S",
                        help=f"py-spy recording time per case and side (default {DEFAULT_SECONDS:g})")
    counts = parser.add_mutually_exclusive_group()
    counts.add_argument("--instructions", action="store_true",
                        help="count instructions per call with Callgrind and judge on them: the "
                             "default when valgrind is installed (with this flag, a missing "
                             "valgrind is an error); recorded labels are judged on counts "
                             "whenever both have them")
    counts.add_argument("--no-instructions", action="store_true",
                        help="no instruction counts: wall clock and py-spy only (faster)")
    parser.add_argument("--seeds", nargs="+", type=positive_int, metavar="SEED",
                        help="hash seeds for --instructions, matched between the builds (default: drawn afresh, counted in rounds that fill the CPUs, up to six for cases they leave undecided)")
    add_arguments(parser.add_argument_group("paired A/B, for two interpreters"))
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help=f"where recorded runs live (default: ${RUNS_DIR_VARIABLE}, else runs/ in this checkout)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    from overrides.ab.config import config_from_arguments
    from overrides.errors import run_command
    from overrides.progress import stderr_progress

    def body() -> int:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        from overrides.counts import rounds

        seeds, skipped = rounds.counting_plan(args.instructions, args.no_instructions, args.seeds)
        if skipped:
            skipped = f"Instruction counts were skipped: {skipped}, then run the report again."
        config = dataclasses.replace(config_from_arguments(args, seeds), call_paths=bool(seeds),
                                     instructions_optional=not args.instructions)
        path, comparisons, settings = build(
            args.base, args.branch, output=args.output, all_cases=args.all,
            flamegraphs=not args.no_flamegraphs, cases=args.cases, op=args.op, seconds=args.seconds,
            ab_config=config, runs_dir=args.runs_dir, skipped_counts=skipped, force=args.force,
            allow_incomplete=args.allow_incomplete, progress=stderr_progress(args.quiet))
        print(report.comparison_table(comparisons, settings))
        print(f"report written to {path}")
        return 1 if compare.any_regression(comparisons) else 0

    return run_command("report.sh", body, "no ZIP written (runs/ keeps what was recorded)")


if __name__ == "__main__":
    sys.exit(main())
