"""`scripts/record.sh`: measure one build and record its flamegraphs under `runs/LABEL/`.

This is the workflow where one checkout of PyTorch is rebuilt between base and branch: record
`--label base`, rebuild, record `--label branch`, then `scripts/report.sh base branch`. A
recorded run is a folder:

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
A label already recorded is not recorded over without --force: forgetting to change the label
after a rebuild would otherwise lose the base.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from typing import Callable, Sequence

from overrides import ROOT
from overrides.errors import UsageError
from overrides.files import TEMP_PREFIX, write_json_atomic, write_text_atomic

DEFAULT_RUNS_DIR = os.path.join(ROOT, "runs")
RUNS_DIR_VARIABLE = "OVERRIDES_RUNS_DIR"  # where runs/ lives, when not in this checkout
MANIFEST = "record.json"
SCHEMA = "torch-function-overhead/record/1"
DEFAULT_PYTHON = "python3"  # the interpreter measured without --python: whatever PATH finds
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
    manifest: dict

    @property
    def python(self) -> str:
        return self.manifest["python"]

    @property
    def complete(self) -> bool:
        return bool(self.manifest.get("complete", True))

    def missing(self) -> list[str]:
        """What an incomplete recording lacks, in words ("bench results", "the kept copy", ...)."""
        if self.complete:
            return []
        steps = self.manifest.get("steps")  # None: written before record.json listed them

        def asked(step: str, otherwise: bool) -> bool:
            return step in steps if steps is not None else otherwise

        flamegraphs = self.manifest.get("flamegraphs") or {}
        lacking = []
        if not self.manifest.get("results"):
            lacking.append("bench results")
        if asked("instructions", False) and not self.manifest.get("instructions"):
            lacking.append("instruction counts")
        if asked("flamegraphs", bool(flamegraphs)):
            cases = [case for case in self.manifest.get("cases", []) if case not in flamegraphs]
            if cases:
                lacking.append(f"flamegraphs ({', '.join(cases)})")
        if asked("keep", True) and (self.manifest.get("kept") or {}).get("skipped") == STOPPED_BEFORE_KEEP:
            lacking.append("the kept copy")
        return lacking or ["its last step"]

    def still_recording(self) -> bool:
        """An incomplete recording whose record.sh still runs (on this host), not an interrupted one."""
        recorder = self.manifest.get("recorder") or {}
        if self.complete or recorder.get("host") != socket.gethostname() or not recorder.get("pid"):
            return False
        try:
            os.kill(int(recorder["pid"]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True  # another user's process
        return True

    def incomplete_line(self) -> str:
        """Why a label is not whole, and what to do, in one line."""
        if self.still_recording():
            return (f"label {self.label!r} is being recorded now (record.sh, pid "
                    f"{self.manifest['recorder']['pid']}); wait for it to finish")
        return (f"label {self.label!r} is an incomplete recording (interrupted; missing "
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
        entry = self.manifest.get("flamegraphs", {}).get(case)
        if not entry or entry.get("error"):
            return None
        paths = tuple(os.path.join(self.directory, entry[key]) for key in ("svg", "folded"))
        return paths if all(os.path.exists(p) for p in paths) else None

    @property
    def kept_root(self) -> str | None:
        """The kept copy's folder (import torch from there), if it is on disk."""
        from overrides.builds import keep

        return keep.kept_root(self.directory, self.manifest)

    def why_not_kept(self) -> str:
        from overrides.builds import keep

        return keep.why_not_kept(self.directory, self.manifest)

    def instructions_path(self) -> str | None:
        name = self.manifest.get("instructions")
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
        manifest = json.load(src)
    if manifest.get("schema") != SCHEMA:
        raise UsageError(f"{path} was not written by this tool's record.sh (schema "
                         f"{manifest.get('schema')!r}); record the run again")
    return RecordedRun(label, os.path.dirname(path), manifest)


def file_stem(case_name: str, op_name: str | None) -> str:
    """NAME in LABEL-NAME.svg: the case's flamegraph name, with the op when it is not the default."""
    from overrides.cases.registry import get_case
    from overrides.cases.ops import DEFAULT_OP

    stem = get_case(case_name).stem
    if op_name and op_name != DEFAULT_OP.name:
        stem += "-" + re.sub(r"[^a-z0-9]+", "", op_name.lower())
    return stem


class Recorder:
    """Writes one run folder step by step, rewriting its manifest after each."""

    def __init__(self, directory: str, label: str, python: str, cases: Sequence[str],
                 op: str | None, say: Callable[[str], None], steps: Sequence[str] = ()):
        self.directory = os.path.join(directory, label)
        self.label = label
        self.say = say
        os.makedirs(self.directory, exist_ok=True)
        self.manifest = {
            "schema": SCHEMA, "label": label, "python": python,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cases": list(cases), "op": op, "results": None, "text": None, "flamegraphs": {},
            "instructions": None, "complete": False, "steps": list(steps),
            "recorder": {"pid": os.getpid(), "host": socket.gethostname()},
            "kept": {"skipped": STOPPED_BEFORE_KEEP},
        }
        self.save()

    def save(self) -> None:
        write_json_atomic(os.path.join(self.directory, MANIFEST), self.manifest)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def bench(self, python: str, extra: Sequence[str] = ()) -> None:
        """bench.py under the recorded interpreter: its JSON and its table, beside each other."""
        results, text = f"{self.label}.json", f"{self.label}.txt"
        command = [python, os.path.join(ROOT, "bench.py"), "--json", self.path(results),
                   "--cases", *self.manifest["cases"], *extra]
        if self.manifest["op"]:
            command += ["--op", self.manifest["op"]]
        self.say(f"record {self.label}: bench.py with {python}")
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env_with_root())
        if done.returncode == 2 or not os.path.exists(self.path(results)):
            lines = done.stderr.strip().splitlines()
            raise UsageError(f"bench.py under {python} failed: {lines[-1] if lines else 'no message'}")
        write_text_atomic(self.path(text), done.stdout)
        self.manifest.update(results=results, text=text)
        self.save()

    def flamegraphs(self, python: str, seconds: float) -> None:
        from overrides.flame import flamegraph
        from overrides.flame.pyspy import find_pyspy

        pyspy = find_pyspy(python)
        names = self.manifest["cases"]
        for index, case in enumerate(names, 1):
            stem = file_stem(case, self.manifest["op"])
            svg, folded = f"{self.label}-{stem}.svg", f"{self.label}-{stem}.folded"
            self.say(f"record {self.label}: py-spy on {case} ({index}/{len(names)}), {seconds:g} s")
            try:
                recording = flamegraph.record_case(
                    python, case, self.path(svg), self.path(folded), op=self.manifest["op"],
                    seconds=seconds, pyspy=pyspy,
                    title=flamegraph.title(case, self.manifest["op"], f"label {self.label}", python))
            except UsageError as exc:
                if index == 1:
                    raise  # py-spy cannot record here at all (ptrace, a bad case): say so now
                self.manifest["flamegraphs"][case] = {"error": str(exc)}
                self.say(f"record {self.label}: {case} failed: {exc}")
            else:
                self.manifest["flamegraphs"][case] = {"svg": svg, "folded": folded,
                                                      "samples": recording.samples,
                                                      "seconds": seconds}
            self.save()

    def instructions(self, python: str, seeds: Sequence[int] | None) -> None:
        """Callgrind's counts for every case, into LABEL-instructions.json."""
        from overrides.counts import callgrind, records
        from overrides.cases import ops as ops_mod, registry

        op = ops_mod.get_op(self.manifest["op"]) if self.manifest["op"] else ops_mod.DEFAULT_OP
        targets = [(name, op.name) for name in self.manifest["cases"]
                   if not ops_mod.not_applicable_reason(registry.get_case(name), op)]
        self.say(f"record {self.label}: counting instructions with Callgrind")
        runs = callgrind.count(python, targets, seeds or callgrind.DEFAULT_SEEDS, say=self.say)
        name = f"{self.label}-instructions.json"
        write_json_atomic(self.path(name), records.to_dict(runs))
        self.manifest["instructions"] = name
        self.save()

    def keep(self, torch_dir: str | None) -> None:
        """A copy of the build just measured, for report.sh's paired comparison; a disk too
        full for it costs a warning, not the recording."""
        from overrides.builds import keep

        if not torch_dir:
            self.manifest["kept"] = {"skipped": "torch's folder could not be found"}
            self.save()
            return
        self.say(f"record {self.label}: keeping a copy of the build ({torch_dir})")
        try:
            kept = keep.keep(torch_dir, self.directory)
        except keep.DiskShort as exc:
            self.manifest["kept"] = {"skipped": str(exc)}
            self.say(f"record {self.label}: warning: {exc}; no copy kept, so report.sh will compare "
                     "this label unpaired (free disk, or delete copies with `scripts/record.sh "
                     "--clean LABEL`)")
        else:
            self.manifest["kept"] = kept.to_dict(self.directory)
        self.save()

    def finish(self) -> RecordedRun:
        self.manifest["complete"] = True
        self.save()
        return RecordedRun(self.label, self.directory, self.manifest)


def _env_with_root() -> dict:
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def record(label: str, python_spec: str, cases: Sequence[str] | None = None, *,
           op: str | None = None, seconds: float | None = None, directory: str | None = None,
           flamegraphs: bool = True, instructions: bool = False,
           seeds: Sequence[int] | None = None, min_time: float | None = None,
           keep_build: bool = True, force: bool = False,
           progress: Callable[[str], None] | None = None) -> RecordedRun:
    """Measure `python_spec`'s build and record its flamegraphs into `directory/label/`, and
    (with `keep_build`) keep a copy of that build for a paired report later. A label already
    recorded is refused before anything runs, unless `force`: then it is replaced whole."""
    from overrides.builds import interpreters
    from overrides.cases import registry
    from overrides.flame import hotloop
    from overrides.flame.pyspy import find_pyspy

    say = progress or (lambda message: None)
    check_label(label)
    check_new_label(runs_dir(directory), label, force)
    interpreter = interpreters.probe_interpreter(python_spec)
    python = interpreter.executable
    say(f"record {label}: measuring {interpreter_line(interpreter, python_spec)}")
    if flamegraphs:
        find_pyspy(python)  # before anything is measured: say now if it is missing
    if instructions:
        from overrides.counts import callgrind

        callgrind.find_valgrind()
    names = [case.name for case in registry.resolve_cases(list(cases) if cases else None)]
    earlier = os.path.join(runs_dir(directory), label)
    if force and os.path.isdir(earlier):  # none of the replaced recording's files may linger
        say(f"record {label}: replacing the earlier recording of {label!r} (--force)")
        shutil.rmtree(earlier)
    steps = ["bench"] + ["instructions"] * instructions + ["flamegraphs"] * flamegraphs + ["keep"] * keep_build
    recorder = Recorder(runs_dir(directory), label, python, names, op, say, steps)
    recorder.bench(python, ["--min-time", f"{min_time:g}"] if min_time else [])
    if instructions:
        recorder.instructions(python, seeds)
    if flamegraphs:
        recorder.flamegraphs(python, seconds or hotloop.DEFAULT_SECONDS)
    if keep_build:  # last: copying a build's files while it is timed would disturb the timing
        recorder.keep(interpreter.torch_dir)
    else:
        recorder.manifest["kept"] = {"skipped": "recorded with --no-keep"}
        recorder.save()
    return recorder.finish()


def interpreter_line(interpreter, python_spec: str) -> str:
    """Which interpreter, and which torch, a recording measures: record.sh's first line."""
    line = interpreter.executable
    if python_spec == DEFAULT_PYTHON:
        line += f" (`{DEFAULT_PYTHON}` on PATH, the default: pass --python for another build)"
    elif os.path.realpath(python_spec) != interpreter.executable:
        line += f" (from --python {python_spec})"
    return f"{line} with torch {interpreter.torch_version} from {interpreter.torch_dir}"


def check_new_label(directory: str, label: str, force: bool) -> None:
    """Refuse to record over a recorded label (unless `force`), saying what would be lost;
    one still being recorded is refused even then."""
    if label not in recorded_labels(directory):
        return
    try:
        run = load_label(directory, label)
    except UsageError:
        run = None  # a record.json of another tool or version: --force replaces it
    if run is not None and run.still_recording():
        raise UsageError(run.incomplete_line())
    if force:
        return
    if run is None:
        what = "its folder"
        recorded = "its record.json is not this record.sh's"
    else:
        what = words(_recorded_parts(run) or ["its folder"])
        recorded = (f"recorded {run.manifest.get('created', '?')[:16].replace('T', ' ')} with torch "
                    f"{_torch_version_of(run)}{'' if run.complete else ', incomplete'}")
    raise UsageError(f"label {label!r} is already recorded in {directory} ({recorded}); recording "
                     f"it again would replace {what}: pass --force to replace it, or pick another "
                     "--label")


def _recorded_parts(run: RecordedRun) -> list[str]:
    """What a recorded label holds, in words, for the message that refuses to replace it."""
    from overrides.builds import keep

    parts = []
    if run.manifest.get("results"):
        parts.append("its bench results")
    if run.manifest.get("instructions"):
        parts.append("its instruction counts")
    drawn = [case for case, entry in (run.manifest.get("flamegraphs") or {}).items() if not entry.get("error")]
    if drawn:
        parts.append(f"{len(drawn)} flamegraph{'s' if len(drawn) != 1 else ''}")
    if run.kept_root:
        parts.append(f"its kept copy of the build ({keep.human(int(run.manifest['kept'].get('bytes', 0)))})")
    return parts


def kept_line(run: RecordedRun, directory: str) -> str:
    """What record.sh says about the copy it kept (or did not)."""
    from overrides.builds import keep

    entry = run.manifest.get("kept") or {}
    if not run.kept_root:
        return f"no copy of the build kept: {run.why_not_kept()}"
    line = (f"kept a copy of the build ({', '.join(entry['packages'])}: {keep.human(entry['bytes'])}, "
            f"copied in {entry['seconds']:.1f} s) in {run.kept_root}, for a paired report.sh; "
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
            sizes[label] = int(run.manifest["kept"].get("bytes", 0))
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
        kept = keep.status_word(run.directory, run.manifest)
        if run.still_recording():
            kept = "recording now"
        elif not run.complete:
            kept = f"incomplete, {kept}" if run.kept_root else "incomplete"
            removed = remove_leftovers(run.directory)
            notes.append(f"{label}: incomplete (interrupted): missing {words(run.missing())}"
                         + (f"; removed its half-written {words(removed)}" if removed else "")
                         + f"; record it again with `scripts/record.sh --label {label} --force`")
        rows.append((label, run.manifest.get("created", "?")[:16].replace("T", " "),
                     _torch_version_of(run), kept, run.python))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines += notes
    sizes = kept_bytes(directory)
    largest = max(sizes, key=sizes.get) if sizes else None
    freeing = (f"; `scripts/record.sh --clean {largest}` frees most, {keep.human(sizes[largest])}"
               if largest else " (delete one with `scripts/record.sh --clean LABEL`)")
    lines.append(f"{len(labels)} label(s) in {directory}; kept copies: "
                 f"{keep.human(sum(sizes.values()))}{freeing}")
    return "\n".join(lines)


def _torch_version_of(run: RecordedRun) -> str:
    try:
        with open(run.results_path, encoding="utf-8") as src:
            return str(json.load(src).get("environment", {}).get("torch_version", "?"))
    except (OSError, ValueError):
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
        if (run.manifest.get("kept") or {}).get("root"):
            run.manifest["kept"] = {"deleted": datetime.datetime.now(datetime.timezone.utc)
                                    .isoformat(timespec="seconds")}
            write_json_atomic(os.path.join(run.directory, MANIFEST), run.manifest)
        lines.append(f"{label}: deleted its kept copy, {keep.human(freed)} (its results stay; "
                     "report.sh compares it unpaired now)" if had_copy else f"{label}: no kept copy to delete")
    return lines


def build_parser():
    from overrides.argtypes import OneLineParser, positive_float, positive_int
    from overrides.flame.hotloop import DEFAULT_SECONDS

    parser = OneLineParser(
        prog="scripts/record.sh",
        description="Measure one build with bench.py and record a py-spy flamegraph of each case "
                    "into runs/LABEL/ (then compare two labels with scripts/report.sh).")
    parser.add_argument("--label", help="names the folder runs/LABEL and its files (required to record)")
    parser.add_argument("--python", default=DEFAULT_PYTHON,
                        help=f"interpreter or virtualenv of the build to record (default: {DEFAULT_PYTHON} "
                             "on PATH; the first line says which it is and its torch)")
    parser.add_argument("--seconds", type=positive_float, default=None, metavar="S",
                        help=f"py-spy recording time per case (default {DEFAULT_SECONDS:g})")
    parser.add_argument("--op", default=None, help="the op to record (default torch.add)")
    parser.add_argument("--min-time", type=positive_float, default=None, metavar="SECONDS",
                        help="bench.py's time budget per case (default: bench.py's)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per call with Callgrind (valgrind)")
    parser.add_argument("--seeds", nargs="+", type=positive_int, metavar="SEED",
                        help="with --instructions: hash seeds, one valgrind process each (default 1)")
    parser.add_argument("--no-flamegraphs", action="store_true", help="bench.py only, no py-spy")
    parser.add_argument("--no-keep", action="store_true",
                        help="keep no copy of the build (report.sh then compares this label unpaired)")
    parser.add_argument("--force", action="store_true",
                        help="record over a label already recorded, replacing its results, "
                             "flamegraphs and kept copy (without it, that is refused)")
    parser.add_argument("--list", action="store_true",
                        help="list recorded labels with their kept copies and sizes, then exit")
    parser.add_argument("--clean", nargs="+", metavar="LABEL",
                        help="delete these labels' kept copies ('all': every one), keeping their "
                             "results, then exit (--list shows each copy's size and which label "
                             "frees most)")
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help=f"where runs are kept (default: ${RUNS_DIR_VARIABLE}, else runs/ in this checkout)")
    parser.add_argument("cases", nargs="*", metavar="CASE",
                        help="cases to record (default: the four seed cases; 'all'; pkg.module:factory)")
    return parser


def main(argv: list[str] | None = None) -> int:
    from overrides.errors import run_command
    from overrides.progress import stderr_progress

    def body() -> int:
        parser = build_parser()
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
        if args.list or args.clean:
            extra = [name for name, value in vars(args).items()
                     if name not in ("list", "clean", "runs_dir") and value and value != parser.get_default(name)]
            if extra:
                given = ", ".join("cases" if n == "cases" else "--" + n.replace("_", "-") for n in extra)
                raise UsageError(f"--list and --clean take no --label or cases or other recording "
                                 f"options (got {given}); run them on their own")
            if args.list:
                print(listing(runs_dir(args.runs_dir)))
            else:
                for line in clean(runs_dir(args.runs_dir), args.clean):
                    print(line)
            return 0
        if not args.label:
            raise UsageError("--label is required to record, e.g. `scripts/record.sh --label base`")
        started = time.monotonic()
        run = record(args.label, args.python, args.cases, op=args.op, seconds=args.seconds,
                     directory=args.runs_dir, flamegraphs=not args.no_flamegraphs,
                     instructions=args.instructions, seeds=args.seeds, min_time=args.min_time,
                     keep_build=not args.no_keep, force=args.force, progress=stderr_progress())
        failed = {case: e["error"] for case, e in run.manifest["flamegraphs"].items() if e.get("error")}
        print(f"recorded {run.label} in {run.directory} ({time.monotonic() - started:.0f} s)")
        print("  " + kept_line(run, runs_dir(args.runs_dir)))
        for case, error in failed.items():
            print(f"  {case}: no flamegraph: {error}")
        return 1 if failed else 0

    return run_command("record.sh", body, "what finished is kept and listed in record.json")


if __name__ == "__main__":
    sys.exit(main())
