"""`scripts/record.sh`: measure one build and record its flamegraphs under `runs/LABEL/`.

This is the workflow where one checkout of PyTorch is rebuilt between base and branch: record
`--label base`, rebuild, record `--label branch`, then `scripts/report.sh base branch`. What a
recorded run's folder holds, and how it is read back, listed and cleaned, is `runs.py`'s.
`record.json` is rewritten (whole) after every step, so an interrupted recording keeps, and
lists, what it finished. A label already recorded is not recorded over without --force:
forgetting to change the label after a rebuild would otherwise lose the base.

Faults end a recording with what finished kept, said in one line: py-spy killed or crashed
(the out-of-memory killer) stops it at that step, exit 3 (`errors.INCOMPLETE_EXIT_STATUS`); a
full or unwritable place, the copy of the build included, is a usage error naming the path,
what was being written and the fix, exit 2. Either way record.json says why it stopped
("stopped"), and the label stays incomplete: `--list` says so, report.sh refuses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import socket
import subprocess
import sys
import time
from typing import Callable, Sequence

from overrides import ROOT
from overrides.counts.kept import FRESH_HELP, count_anew
from overrides.errors import INCOMPLETE_EXIT_STATUS, UsageError, place_error
from overrides.files import write_json_atomic, write_text_atomic
from overrides.builds.keep import Kept
from overrides.progress import counted
from overrides.review.manifest import Flamegraph, Manifest, Recorder as RecorderProcess
from overrides.review.runs import (MANIFEST, RUNS_DIR_VARIABLE, STOPPED_BEFORE_KEEP, RecordedRun,
                                   check_label, clean, file_stem, kept_line, listing, load_label,
                                   recorded_labels, recorded_parts, runs_dir, torch_version_of, words)

DEFAULT_PYTHON = "python3"  # the interpreter measured without --python: whatever PATH finds


class Recorder:
    """Writes one run folder step by step, rewriting its manifest after each: each step makes a
    new Manifest (`update`), none is changed."""

    def __init__(self, directory: str, label: str, python: str, cases: Sequence[str],
                 op: str | None, say: Callable[[str], None], steps: Sequence[str] = ()):
        self.directory = os.path.join(directory, label)
        self.label = label
        self.say = say
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise place_said(self.directory, exc, f"the folder of label {label!r}") from None
        self.manifest = Manifest(
            label, python, created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            cases=tuple(cases), op=op, complete=False, steps=tuple(steps),
            recorder=RecorderProcess(os.getpid(), socket.gethostname()), kept=Kept(skipped=STOPPED_BEFORE_KEEP))
        self.save()

    def update(self, **changes) -> None:
        """The manifest with `changes` (Manifest's fields), not yet saved."""
        self.manifest = dataclasses.replace(self.manifest, **changes)

    def save(self) -> None:
        write_json_atomic(os.path.join(self.directory, MANIFEST), self.manifest.to_dict(), "the recording's manifest")

    def stop(self, why: str) -> RecordedRun:
        """End the recording here, incomplete, with record.json saying why (where it still
        can be written: on a full disk it may not, and it says incomplete already)."""
        self.update(stopped=why)
        with contextlib.suppress(UsageError):
            self.save()
        return RecordedRun(self.label, self.directory, self.manifest)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def bench(self, python: str, extra: Sequence[str] = ()) -> None:
        """bench.py under the recorded interpreter: its JSON and its table, beside each other."""
        results, text = f"{self.label}.json", f"{self.label}.txt"
        command = [python, os.path.join(ROOT, "bench.py"), "--json", self.path(results),
                   "--cases", *self.manifest.cases, *extra]
        if self.manifest.op:
            command += ["--op", self.manifest.op]
        self.say(f"record {self.label}: bench.py with {python}")
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env_with_root())
        if done.returncode == 2 or not os.path.exists(self.path(results)):
            lines = done.stderr.strip().splitlines()
            raise UsageError(f"bench.py under {python} failed: {lines[-1] if lines else 'no message'}")
        write_text_atomic(self.path(text), done.stdout, "bench.py's table")
        self.update(results=results, text=text)
        self.save()

    def flamegraphs(self, python: str, seconds: float) -> None:
        """py-spy on every case, all in one process (one torch import), each for `seconds`; if
        that fails, one by one, so a failing case costs only itself (the first failing alone
        stops the recording: py-spy cannot record here at all, or the case is bad)."""
        from overrides.flame import flamegraph
        from overrides.flame.pyspy import find_pyspy

        pyspy = find_pyspy(python)
        names = list(self.manifest.cases)
        op = self.manifest.op
        targets = []
        for case in names:
            stem = file_stem(case, op)
            targets.append(flamegraph.Target(
                case, self.path(f"{self.label}-{stem}.svg"), self.path(f"{self.label}-{stem}.folded"),
                flamegraph.title(case, op, f"label {self.label}", python)))

        def recorded(made: list) -> None:
            for rec in made:
                self.manifest = self.manifest.with_flamegraph(Flamegraph(
                    rec.case, os.path.basename(rec.svg_path), os.path.basename(rec.folded_path), rec.samples,
                    seconds))
            self.save()

        def failed(target, why: str) -> None:
            self.manifest = self.manifest.with_flamegraph(Flamegraph(target.case, error=why))
            self.say(f"record {self.label}: {target.case} failed: {why}")
            self.save()

        self.say(f"record {self.label}: py-spy on {', '.join(names)} "
                 f"({counted(len(names), 'case')} in one process, {seconds:g} s each)")
        flamegraph.record_together_or_alone(
            python, targets, op=op, seconds=seconds, pyspy=pyspy, on_recorded=recorded, on_failed=failed,
            on_alone=lambda index, target: self.say(
                f"record {self.label}: py-spy on {target.case} alone ({index + 1}/{len(names)})"),
            on_together_failed=lambda why: self.say(
                f"record {self.label}: recording {', '.join(names)} in one process failed ({why}); each case alone"),
            stop_at_first=True)  # py-spy cannot record here at all (ptrace, a bad case): say so now

    def instructions(self, python: str, seeds: Sequence[int] | None) -> None:
        """Callgrind's counts for every case, into LABEL-instructions.json."""
        from overrides.counts import callgrind, records
        from overrides.cases import ops as ops_mod, registry

        op = ops_mod.get_op(self.manifest.op) if self.manifest.op else ops_mod.DEFAULT_OP
        targets = [(name, op.name) for name in self.manifest.cases
                   if not ops_mod.not_applicable_reason(registry.get_case(name), op)]
        self.say(f"record {self.label}: counting instructions with Callgrind")
        runs = callgrind.count(python, targets, seeds or callgrind.DEFAULT_SEEDS, say=self.say)
        name = f"{self.label}-instructions.json"
        write_json_atomic(self.path(name), records.to_dict(runs), "the instruction counts")
        self.update(instructions=name)
        self.save()
        died = records.deaths(runs)
        if died:  # the other seeds are written; the label is not complete without this one
            from overrides.flame.flamegraph import RecorderDied

            raise RecorderDied(f"callgrind {'; '.join(died)}")

    def keep(self, torch_dir: str | None) -> None:
        """A copy of the build just measured, for report.sh's paired comparison; a disk too
        full for it, seen before it starts, costs a warning, not the recording. A copy that
        fails midway (the disk filled meanwhile, a file gone) is removed and stops the
        recording, incomplete, with a UsageError naming the path, why and the fix: a label
        is never left looking as if it had a copy."""
        from overrides.builds import keep

        if not torch_dir:
            self.update(kept=Kept(skipped="torch's folder could not be found"))
            self.save()
            return
        self.say(f"record {self.label}: keeping a copy of the build ({torch_dir})")
        target = os.path.join(self.directory, keep.KEPT_DIR)
        try:
            kept = keep.keep(torch_dir, self.directory)
        except keep.DiskShort as exc:
            self.update(kept=Kept(skipped=str(exc)))
            self.say(f"record {self.label}: warning: {exc}; no copy kept, so report.sh will compare "
                     "this label unpaired (free disk, or delete copies with `scripts/record.sh "
                     "--clean LABEL`)")
        except OSError as exc:
            self.update(kept=Kept(failed=exc.strerror or str(exc)))
            self.stop(f"the copy of the build failed ({exc.strerror or exc})")
            said = place_error(target, exc, "the copy of the build")
            raise UsageError(
                f"{said or f'cannot copy the build into {target}: {exc}'}; the label {self.label!r} "
                f"is incomplete: record it again with `scripts/record.sh --label {self.label} "
                "--force` (`--no-keep` keeps no copy; `scripts/record.sh --list` shows the copies "
                "`--clean LABEL` deletes)") from None
        else:
            self.update(kept=kept.entry(self.directory))
        try:
            self.save()
        except UsageError:  # record.json cannot say the copy is there: none must be
            keep.remove(self.directory)
            raise

    def finish(self) -> RecordedRun:
        self.update(complete=True)
        self.save()
        return RecordedRun(self.label, self.directory, self.manifest)


def place_said(path: str, exc: OSError, what: str) -> Exception:
    """`errors.place_error` for a place under the runs folder, which the user chooses; any
    other OSError as it is."""
    said = place_error(path, exc, what)
    if said is None:
        return exc
    return UsageError(f"{said} (pass --runs-dir, or set ${RUNS_DIR_VARIABLE}, for another place)")


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
    from overrides.flame.flamegraph import RecorderDied

    try:
        recorder.bench(python, ["--min-time", f"{min_time:g}"] if min_time else [])
        if instructions:
            recorder.instructions(python, seeds)
        if flamegraphs:
            recorder.flamegraphs(python, seconds or hotloop.DEFAULT_SECONDS)
        if keep_build:  # last: copying a build's files while it is timed would disturb the timing
            recorder.keep(interpreter.torch_dir)
        else:
            recorder.update(kept=Kept(skipped="recorded with --no-keep"))
            recorder.save()
    except RecorderDied as exc:  # not the case's fault: no retry, and what finished stays
        return recorder.stop(str(exc))
    except UsageError as exc:  # said at the edge in one line; record.json and --list say it too
        if recorder.manifest.stopped is None:
            recorder.stop(str(exc))
        raise
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
        what = words(recorded_parts(run) or ["its folder"])
        recorded = (f"recorded {(run.manifest.created or '?')[:16].replace('T', ' ')} with torch "
                    f"{torch_version_of(run)}{'' if run.complete else ', incomplete'}")
    raise UsageError(f"label {label!r} is already recorded in {directory} ({recorded}); recording "
                     f"it again would replace {what}: pass --force to replace it, or pick another "
                     "--label")


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
    parser.add_argument("--op", default=None, help="the op to record (default torch.add), or your own statement "
                        "such as \"x.sum()\"")
    parser.add_argument("--min-time", type=positive_float, default=None, metavar="SECONDS",
                        help="bench.py's time budget per case (default: bench.py's)")
    parser.add_argument("--instructions", action="store_true",
                        help="also count instructions per call with Callgrind (valgrind)")
    parser.add_argument("--seeds", nargs="+", type=positive_int, metavar="SEED",
                        help="with --instructions: hash seeds, one valgrind process each (default 1)")
    parser.add_argument("--fresh", action="store_true", help=FRESH_HELP)
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
        if args.fresh:
            count_anew()
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
        if not run.complete:
            print(f"record.sh: incomplete: {run.manifest.stopped}; what finished is kept in "
                  f"{run.directory} (`scripts/record.sh --list` says what it misses); record it "
                  f"again with `scripts/record.sh --label {run.label} --force`", file=sys.stderr)
            return INCOMPLETE_EXIT_STATUS
        failed = {e.case: e.error for e in run.manifest.flamegraphs if e.error}
        print(f"recorded {run.label} in {run.directory} ({time.monotonic() - started:.0f} s)")
        print("  " + kept_line(run, runs_dir(args.runs_dir)))
        for case, error in failed.items():
            print(f"  {case}: no flamegraph: {error}")
        return 1 if failed else 0

    return run_command("record.sh", body, "what finished is kept and listed in record.json")


if __name__ == "__main__":
    sys.exit(main())
