"""Recorded runs read back: the folder `scripts/record.sh` writes for a label, listed and cleaned.

A recorded run is a folder:

    runs/LABEL/record.json          what was recorded, with which interpreter (versioned)
    runs/LABEL/LABEL.json, .txt     bench.py's results file and table
    runs/LABEL/LABEL-NAME.svg       py-spy's flamegraph of the case's hot loop
    runs/LABEL/LABEL-NAME.folded    py-spy's raw collapsed stacks of the same loop
    runs/LABEL/kept/torch/          a copy of the build measured (`overrides/builds/keep.py`), so that
                                    report.sh can run it beside the branch, paired

NAME is the original README's: tensor, subtensor, overridden, suboverridden for the seed
cases, the case name in lower case for others. `record.json` is rewritten (whole) after every
step, so an interrupted recording keeps, and lists, what it finished; it says which steps were
asked for and which process records, so `--list` can tell an interrupted recording (marked
incomplete, with what it misses, and its half-written files removed) from one still running.
`record.sh --list` and `--clean` (here too) show and delete what the folders hold; `report.sh`
reads a label through `load_label`. Writing a recording is `record.py`'s.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import socket
from typing import Sequence

from overrides import ROOT
from overrides.errors import UsageError
from overrides.files import TEMP_PREFIX, versioned, write_json_atomic
from overrides.progress import counted
from overrides.review.manifest import SCHEMA, Flamegraph, Manifest
from overrides.tables import align
from overrides import variables

DEFAULT_RUNS_DIR = os.path.join(ROOT, "runs")
RUNS_DIR_VARIABLE = variables.RUNS_DIR  # where runs/ lives, when not in this checkout
MANIFEST = "record.json"
# What "kept" says until the copy is made: a recording without it stopped before that step.
STOPPED_BEFORE_KEEP = "the recording stopped before a copy was kept"
# What a step writes before renaming it into place (flamegraph.record_case, keep.keep; and
# files.TEMP_PREFIX): an interrupted recording can leave them, never a finished one.
PARTIAL_SUFFIX = ".partial"
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def runs_dir(given: str | None = None) -> str:
    return os.path.abspath(given or os.environ.get(RUNS_DIR_VARIABLE) or DEFAULT_RUNS_DIR)


def check_label(label: str) -> str:
    if not _LABEL.match(label):
        raise UsageError(f"label {label!r} must be letters, digits, '.', '_' or '-' (it names a folder "
                         "and its files), e.g. --label base")
    return label


def recorded_labels(directory: str) -> list[str]:
    if not os.path.isdir(directory):
        return []
    return sorted(name for name in os.listdir(directory)
                  if os.path.isfile(os.path.join(directory, name, MANIFEST)))


@dataclasses.dataclass(frozen=True)
class RecordedRun:
    """A folder written by `record`, read back."""

    label: str
    directory: str
    manifest: Manifest

    @property
    def python(self) -> str:
        return self.manifest.python

    @property
    def complete(self) -> bool:
        return self.manifest.complete

    def missing(self) -> list[str]:
        """What an incomplete recording lacks, in words ("bench results", "the kept copy", ...)."""
        if self.complete:
            return []
        steps = self.manifest.steps  # None: written before record.json listed them

        def asked(step: str, otherwise: bool) -> bool:
            return step in steps if steps is not None else otherwise

        flamegraphs = [entry.case for entry in self.manifest.flamegraphs]
        lacking = []
        if not self.manifest.results:
            lacking.append("bench results")
        if asked("instructions", False) and not self.manifest.instructions:
            lacking.append("instruction counts")
        if asked("flamegraphs", bool(flamegraphs)):
            cases = [case for case in self.manifest.cases if case not in flamegraphs]
            if cases:
                lacking.append(f"flamegraphs ({', '.join(cases)})")
        kept = self.manifest.kept
        if kept is not None and ((asked("keep", True) and kept.skipped == STOPPED_BEFORE_KEEP) or kept.failed):
            lacking.append("the kept copy")  # a failed copy: "stopped" says how
        return lacking or ["its last step"]

    def stopped(self) -> str:
        """How an incomplete recording ended, in words: what stopped it (record.json's "stopped":
        py-spy killed, a full disk), or "interrupted" (Ctrl-C, the recorder killed)."""
        why = self.manifest.stopped
        return f"stopped: {why}" if why else "interrupted"

    def still_recording(self) -> bool:
        """An incomplete recording whose record.sh still runs (on this host), not an interrupted one."""
        recorder = self.manifest.recorder
        if self.complete or recorder is None or recorder.host != socket.gethostname() or not recorder.pid:
            return False
        try:
            os.kill(int(recorder.pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's process
        return True

    def incomplete_line(self) -> str:
        """Why a label is not whole, and what to do, in one line."""
        if self.still_recording():
            return (f"label {self.label!r} is being recorded now (record.sh, pid "
                    f"{self.manifest.recorder.pid}); wait for it to finish")
        return (f"label {self.label!r} is an incomplete recording ({self.stopped()}; missing "
                f"{words(self.missing())}); record it again with "
                f"`scripts/record.sh --label {self.label} --force`")

    @property
    def results_path(self) -> str:
        return os.path.join(self.directory, f"{self.label}.json")

    @property
    def text_path(self) -> str:
        return os.path.join(self.directory, f"{self.label}.txt")

    def flamegraph(self, case: str) -> tuple[str, str] | None:
        """(svg, folded) paths recorded for `case`, if both are there."""
        entry = self.manifest.flamegraph(case)
        if entry is None or entry.error:
            return None
        paths = tuple(os.path.join(self.directory, name) for name in (entry.svg, entry.folded))
        return paths if all(os.path.exists(p) for p in paths) else None

    @property
    def kept_root(self) -> str | None:
        """The kept copy's folder (import torch from there), if it is on disk."""
        from overrides.builds import keep

        return keep.kept_root(self.directory, self.manifest.kept)

    def why_not_kept(self) -> str:
        from overrides.builds import keep

        return keep.why_not_kept(self.directory, self.manifest.kept)

    def instructions_path(self) -> str | None:
        name = self.manifest.instructions
        path = os.path.join(self.directory, name) if name else None
        return path if path and os.path.exists(path) else None


def words(parts: Sequence[str]) -> str:
    """The parts as prose: "a, b and c"."""
    return " and ".join([", ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else "".join(parts)


def remove_leftovers(label_dir: str) -> list[str]:
    """Delete what an interrupted recording half-wrote in its folder (`*.partial` files, a
    half-made `kept.partial` copy, temporary files); returns their names. Only for a recording
    that no longer runs: these are a running one's files in progress."""
    removed = []
    for name in sorted(os.listdir(label_dir)):
        if not (name.endswith(PARTIAL_SUFFIX) or name.startswith(TEMP_PREFIX)):
            continue
        path = os.path.join(label_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
        removed.append(name)
    return removed


def load_label(directory: str, label: str) -> RecordedRun:
    path = os.path.join(directory, label, MANIFEST)
    if not os.path.isfile(path):
        known = recorded_labels(directory)
        listing = f"recorded labels in {directory}: {', '.join(known)}" if known else \
            f"nothing is recorded in {directory} yet"
        raise UsageError(f"no recorded run {label!r} ({listing}); record one with "
                         f"`scripts/record.sh --label {label}`")
    with open(path, encoding="utf-8") as src:
        data = versioned(json.load(src), SCHEMA, path, "a recording's manifest",
                         "record the run again with `scripts/record.sh`")
    return RecordedRun(label, os.path.dirname(path), Manifest.from_dict(data))


def saved(run: RecordedRun, **changes) -> RecordedRun:
    """`run` with its manifest's `changes` (Manifest's fields), record.json rewritten whole."""
    manifest = dataclasses.replace(run.manifest, **changes)
    write_json_atomic(os.path.join(run.directory, MANIFEST), manifest.to_dict(), "the recording's manifest")
    return dataclasses.replace(run, manifest=manifest)


def file_stem(case_name: str, op_name: str | None) -> str:
    """NAME in LABEL-NAME.svg: the case's flamegraph name, with the op when it is not the default."""
    from overrides.cases.registry import get_case
    from overrides.cases.ops import DEFAULT_OP

    stem = get_case(case_name).stem
    if op_name and op_name != DEFAULT_OP.name:
        stem += "-" + re.sub(r"[^a-z0-9]+", "", op_name.lower())
    return stem


def recorded_parts(run: RecordedRun) -> list[str]:
    """What a recorded label holds, in words, for the message that refuses to replace it."""
    from overrides.builds import keep

    parts = []
    if run.manifest.results:
        parts.append("its bench results")
    if run.manifest.instructions:
        parts.append("its instruction counts")
    drawn = [entry.case for entry in run.manifest.flamegraphs if not entry.error]
    if drawn:
        parts.append(counted(len(drawn), "flamegraph"))
    if run.kept_root:
        parts.append(f"its kept copy of the build ({keep.human(int(run.manifest.kept.bytes))})")
    return parts


def kept_line(run: RecordedRun, directory: str) -> str:
    """What record.sh says about the copy it kept (or did not)."""
    from overrides.builds import keep

    entry = run.manifest.kept
    if not run.kept_root:
        return f"no copy of the build kept: {run.why_not_kept()}"
    line = (f"kept a copy of the build ({', '.join(entry.packages)}: {keep.human(entry.bytes)}, "
            f"copied in {entry.seconds:.1f} s) in {run.kept_root}, for a paired report.sh; "
            f"delete it with `scripts/record.sh --clean {run.label}`")
    total = sum(kept_bytes(directory).values())
    if total > keep.KEPT_WARNING_BYTES:
        line += (f"\n  warning: kept copies in {directory} take {keep.human(total)}; "
                 "`scripts/record.sh --list` shows them, `--clean LABEL` deletes one")
    return line


def kept_bytes(directory: str) -> dict[str, int]:
    """Bytes of each label's kept copy, as recorded, for the labels that still have one."""
    sizes = {}
    for label in recorded_labels(directory):
        try:
            run = load_label(directory, label)
        except UsageError:
            continue  # not this tool's recording: --list says so in its row
        if run.kept_root:
            sizes[label] = int(run.manifest.kept.bytes)
    return sizes


def listing(directory: str) -> str:
    """`record.sh --list`: every recorded label, aligned, with its kept copy's size; an
    interrupted recording is marked incomplete (what it misses said below the table) and its
    half-written files are removed; the last line names the copy whose deletion frees most."""
    from overrides.builds import keep

    labels = recorded_labels(directory)
    if not labels:
        return f"nothing is recorded in {directory} yet; record with `scripts/record.sh --label NAME`"
    rows = [("label", "recorded", "torch", "kept copy", "interpreter")]
    notes = []
    for label in labels:
        try:
            run = load_label(directory, label)
        except UsageError as exc:
            rows.append((label, "?", "?", "-", str(exc)))
            continue
        kept = keep.status_word(run.directory, run.manifest.kept)
        if run.still_recording():
            kept = "recording now"
        elif not run.complete:
            kept = f"incomplete, {kept}" if run.kept_root else "incomplete"
            removed = remove_leftovers(run.directory)
            notes.append(f"{label}: incomplete ({run.stopped()}): missing {words(run.missing())}"
                         + (f"; removed its half-written {words(removed)}" if removed else "")
                         + f"; record it again with `scripts/record.sh --label {label} --force`")
        rows.append((label, (run.manifest.created or "?")[:16].replace("T", " "),
                     torch_version_of(run), kept, run.python))
    lines = align(rows, right=())
    lines += notes
    sizes = kept_bytes(directory)
    largest = max(sizes, key=sizes.get) if sizes else None
    freeing = (f"; `scripts/record.sh --clean {largest}` frees most, {keep.human(sizes[largest])}"
               if largest else " (delete one with `scripts/record.sh --clean LABEL`)")
    lines.append(f"{len(labels)} label(s) in {directory}; kept copies: "
                 f"{keep.human(sum(sizes.values()))}{freeing}")
    return "\n".join(lines)


def torch_version_of(run: RecordedRun) -> str:
    """The torch its results file says it measured; "?" where it has none, or none this tool reads."""
    from overrides import results

    try:
        return str(results.load(run.results_path).environment.torch_version or "?")
    except UsageError:  # missing, not JSON, not a results file, damaged (an environment not an object)
        return "?"


def clean(directory: str, labels: Sequence[str]) -> list[str]:
    """`record.sh --clean`: delete kept copies (results stay); one line per label."""
    from overrides.builds import keep

    known = recorded_labels(directory)
    chosen = known if list(labels) == ["all"] else list(labels)
    for label in chosen:
        if label not in known:
            raise UsageError(f"no recorded label {label!r} in {directory} (recorded: "
                             f"{', '.join(known) or 'none'}); see `scripts/record.sh --list`")
    lines = []
    for label in chosen:
        run = load_label(directory, label)
        had_copy = run.kept_root is not None
        freed = keep.remove(run.directory)
        if run.manifest.kept is not None and run.manifest.kept.root:
            saved(run, kept=keep.Kept(deleted=datetime.datetime.now(datetime.timezone.utc)
                                      .isoformat(timespec="seconds")))
        lines.append(f"{label}: deleted its kept copy, {keep.human(freed)} (its results stay; "
                     "report.sh compares it unpaired now)" if had_copy else f"{label}: no kept copy to delete")
    return lines
