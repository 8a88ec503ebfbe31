"""BASE and BRANCH of a report: each a label recorded by record.sh or an interpreter measured on
the spot, told apart here (and refused in one line when it is neither)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Sequence

from overrides.cases import casenames
from overrides.errors import UsageError
from overrides.sides import ROLES


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
    ended: str = ""  # how an incomplete label's recording ended: "interrupted", "stopped: ..."

    def torch_root(self) -> str | None:
        return getattr(self.build, "torch_root", None)


def classify(spec: str, role: str, runs: str, allow_incomplete: bool = False) -> Side:
    """A recorded label if runs/SPEC exists, else an interpreter or virtualenv, else exit 2. An
    incomplete (interrupted) label is refused unless `allow_incomplete`; a results file is named
    as what it is, not "no interpreter"."""
    from overrides.builds import interpreters
    from overrides.review import runs as recorded

    if os.sep not in spec and spec in recorded.recorded_labels(runs):
        recorded = recorded.load_label(runs, spec)
        if not recorded.complete and (not allow_incomplete or recorded.still_recording()):
            raise UsageError(f"{role.upper()}: {recorded.incomplete_line()}"
                             + ("" if recorded.still_recording() else
                                ", or pass --allow-incomplete to compare what it has"))
        if not recorded.manifest.results or not os.path.isfile(recorded.results_path):
            raise UsageError(f"{role.upper()}: label {spec!r} has no bench results to compare "
                             f"(interrupted before bench.py finished); record it again with "
                             f"`scripts/record.sh --label {spec} --force`")
        root = recorded.kept_root
        missing = tuple(recorded.missing())
        ended = "" if recorded.complete else recorded.stopped()
        if root is None:
            return Side(role, spec, label=spec, python=recorded.python, missing=missing, ended=ended,
                        unpaired_reason=f"label `{spec}`: {recorded.why_not_kept()}")
        build = interpreters.Build(recorded.python, root)
        try:
            interpreters.probe_interpreter(build)
        except UsageError as exc:
            return Side(role, spec, label=spec, python=recorded.python, missing=missing, ended=ended,
                        unpaired_reason=f"label `{spec}`'s kept copy does not run: {exc}")
        return Side(role, spec, label=spec, python=recorded.python, build=build, missing=missing,
                    ended=ended)
    results_file = _results_file_label(spec, runs)
    if results_file is not None:
        raise UsageError(
            f"{role.upper()} {spec} is a results file, not a build: report.sh measures builds; "
            f"pass a label recorded with `scripts/record.sh --label NAME`{results_file}, an "
            "interpreter, or a virtualenv (`python bench.py --load FILE` prints a results file)")
    looks_like_interpreter = os.sep in spec or os.path.isdir(spec) or shutil.which(spec)
    if not looks_like_interpreter and casenames.is_user_spec(spec):
        raise UsageError(
            f"{role.upper()} {spec!r} is a case of yours (module:factory), not a build: report.sh "
            "compares two environments; two versions of your code in one environment are "
            "`python bench.py --compare BASE_SPEC BRANCH_SPEC`, or give each version an "
            "environment of its own and pass their interpreters (docs/cases.md, 'Two versions "
            "of your code')")
    if not looks_like_interpreter:
        known = recorded.recorded_labels(runs)
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
    from overrides.review import runs as recorded

    if not (spec.endswith(".json") or _starts_like_json(spec)):
        return None
    folder = os.path.dirname(os.path.abspath(spec))
    label = os.path.basename(folder)
    if (os.path.dirname(folder) == runs and label in recorded.recorded_labels(runs)
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


def live_folder(runs: str, role: str, labels: Sequence[str | None]) -> str:
    """Where an interpreter side's run is written: runs/ROLE, unless that folder is one of the
    labels compared or a record.sh recording of its own (never overwrite those)."""
    from overrides.review import runs as recorded

    name = role
    while name in labels or (name in recorded.recorded_labels(runs) and
                             recorded.load_label(runs, name).manifest.measured_by is None):
        name += "-live"
    return name
