"""`scripts/report.sh BASE BRANCH`: compare two builds and pack what a PR reviewer needs into a ZIP.

BASE and BRANCH are each a label recorded earlier by `scripts/record.sh` (one checkout rebuilt
between the two) or an interpreter / virtualenv, measured on the spot. Both are measured live,
side by side (`overrides/ab/paired.py`, paired: the sharpest verdicts) whenever both can run: an
interpreter always can, a label through the copy of its build that record.sh kept
(`overrides/builds/keep.py`). A label without a usable copy is compared from the two separate runs
(`overrides/case_comparison.py`, unpaired), and the report says why and what that costs. Then each
build's Python calls per call of every case, counted in its own interpreter
(`overrides/counts/pycalls.py`: which Python functions the branch runs that base does not, exactly),
and for every case that regressed (every case with --all), both builds' py-spy
flamegraphs, their PNGs, and a differential view of where the branch's extra time went.

The ZIP holds report.md (ready to paste into a PR), comparison.json, base/branch .txt and .json
(the bench outputs), base-NAME.svg / branch-NAME.svg with their PNGs, and diff-NAME.svg/.png.
It is written whole or not at all; the runs/ folders keep every file finished before an
interruption. A place that cannot take it is said before anything is measured; a disk that
fills meanwhile is said in one line naming the path and the fix (exit 2). py-spy killed (the
out-of-memory killer) costs the flamegraphs it was recording: the ZIP is written without
them, its notes say which and why, and report.sh ends with exit 3 saying so in one line.

`build` runs the pieces in order, each a module of its own that can be read and tested alone:
what BASE and BRANCH are (`sides.py`); measuring and judging, into one `Evidence`
(`measuring.py`); presenting it (`sections.py`, `flamegraphs.py`, `markdown.py`); and packing the
files into the ZIP (`pack.py`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Callable, Sequence

from overrides import children, case_comparison, comparison_report
from overrides.case_comparison import UNPAIRED_PROCESS_CV
from overrides.comparison_settings import ComparisonSettings
from overrides.counts.kept import FRESH_HELP, count_anew
from overrides.errors import INCOMPLETE_EXIT_STATUS, UsageError, place_error
from overrides.review import measuring, runs as recorded_runs, sections
from overrides.review.time_sections import flamegraph_sections, record_sections
from overrides.review.markdown import report_markdown
from overrides.review.pack import Pack, without_picture
from overrides.review.sides import classify
from overrides.verdicts import DISAGREE, REGRESSION

if TYPE_CHECKING:
    from overrides.ab.config import ABConfig

DEFAULT_OUTPUT = "report.zip"


@dataclasses.dataclass(frozen=True)
class Request:
    """What report.sh was asked: the two builds, and how to compare and present them."""

    base_spec: str
    branch_spec: str
    output: str = DEFAULT_OUTPUT
    all_cases: bool = False  # flamegraphs for every case, not only those that regressed
    flamegraphs: bool = True
    cases: Sequence[str] | None = None
    op: str | None = None
    seconds: float | None = None  # py-spy's recording time per case and side
    ab_config: "ABConfig | None" = None
    runs_dir: str | None = None
    skipped_counts: str | None = None  # why the counts were skipped, for the notes
    force: bool = False  # overwrite an existing ZIP
    allow_incomplete: bool = False  # compare a label whose recording was interrupted


@dataclasses.dataclass(frozen=True)
class Report:
    """What a written report says: its path, the comparisons and their settings, and what died
    on the way, in words (`Evidence.incomplete`)."""

    path: str
    comparisons: tuple
    settings: ComparisonSettings
    incomplete: tuple[str, ...]


# Said where a label without a usable copy of its build could only be compared unpaired.
UNPAIRED_NOTE = ("This comparison is UNPAIRED: base and branch were measured in separate runs, so machine "
                 "drift and memory layout between the runs are in the interval ({cv:.0%} per side); only "
                 "changes of a few percent can get a verdict. For small changes, compare labels that kept a "
                 "copy of their build (record.sh does by default), or two interpreters or virtualenvs: "
                 "those are measured side by side.")


def build(request: Request, progress: Callable[[str], None] | None = None) -> Report:
    """Write the report ZIP. An existing ZIP is refused before anything is measured unless
    `force`, an incomplete label unless `allow_incomplete`, and a place that cannot take the ZIP
    (read-only, not yours)."""
    from overrides.ab.config import ABConfig

    say = progress or (lambda message: None)
    started = time.monotonic()
    sides, runs = _refused_before_measuring(request)
    ab_config = request.ab_config or ABConfig()
    with tempfile.TemporaryDirectory(prefix="overrides-report-") as workdir:
        notes = [f"Label `{side.label}` is an incomplete recording ({side.ended}; missing "
                 f"{recorded_runs.words(side.missing)}), compared as it is (--allow-incomplete)."
                 for side in sides if side.missing]
        pack = Pack(workdir, say, notes)
        try:
            evidence = measuring.measure(sides, request.cases, request.op, ab_config, runs, say, notes)
            if not evidence.settings.paired:
                notes.append(UNPAIRED_NOTE.format(cv=UNPAIRED_PROCESS_CV))
            text = _presented(request, evidence, sides, pack, runs, say, started)
            pack.write_zip(request.output, text, evidence)
        finally:
            pack.stop_pictures()
    return Report(request.output, tuple(evidence.comparisons), evidence.settings, tuple(evidence.incomplete))


def _refused_before_measuring(request: Request) -> tuple[list, str]:
    """The two sides (`sides.classify`) and the runs folder, once everything that would fail
    after minutes of measuring has been checked: the ZIP's name and place, the runs folder,
    py-spy."""
    from overrides.flame.pyspy import find_pyspy

    output = request.output
    if not output.endswith(".zip"):
        raise UsageError(f"-o {output}: the report is a ZIP; name it FILE.zip")
    if os.path.exists(output) and not request.force:
        raise UsageError(f"{output} exists; pass --force to overwrite it, or -o another FILE.zip")
    check_writable(output, "the report")
    runs = recorded_runs.runs_dir(request.runs_dir)
    sides = [classify(spec, role, runs, request.allow_incomplete)
             for spec, role in ((request.base_spec, "base"), (request.branch_spec, "branch"))]
    live = [side for side in sides if not side.label]  # an interpreter's run is kept in runs/
    if live:
        check_writable(os.path.join(runs, live[0].role), f"{live[0].role}'s measured run",
                       f" (pass --runs-dir, or set ${recorded_runs.RUNS_DIR_VARIABLE}, for another place)")
    if request.flamegraphs:
        find_pyspy(sides[0].python)  # say now, before minutes of measuring
    return sides, runs


def _presented(request: Request, evidence, sides, pack: Pack, runs: str, say, started: float) -> str:
    """report.md: the Python calls counted, the flamegraphs of the cases chosen recorded, the
    sections and the pictures they draw; the pictures are drawn into `pack` as it goes."""
    comparisons, all_cases, op, seconds = evidence.comparisons, request.all_cases, request.op, request.seconds
    chosen = ([c for c in comparisons if all_cases or c.verdict in (REGRESSION, DISAGREE)]
              if request.flamegraphs else [])
    # The Python calls are counted while py-spy records (~1.5 s saved): counts do not
    # care what else runs, and a profile is shares of samples, which they do not skew.
    recorded = None
    count_parts_after = None
    if evidence.counts:  # the call trees drawn and their PNGs begun first
        count_parts_after = sections.count_sections_later(evidence, comparisons, all_cases, pack)
    if chosen:
        recorded, _ = children.parallel(lambda job: job(), [
            lambda: record_sections(evidence, sides, chosen, seconds, op, pack, runs),
            lambda: measuring.count_python_calls(evidence, sides, say)], 2)
    else:
        measuring.count_python_calls(evidence, sides, say)
    python_call_parts = sections.python_call_sections(evidence, comparisons, all_cases, pack)
    count_parts: list[str] = []
    if count_parts_after is not None:
        count_parts = count_parts_after(bool(python_call_parts))
    elif request.skipped_counts:
        evidence.notes.append(request.skipped_counts)
    time_parts = None
    if request.flamegraphs:
        time_parts = flamegraph_sections(evidence, sides, chosen, seconds, op, pack, runs, recorded)
    for png_name in pack.finish_pictures():  # a failed one: its SVG named instead
        count_parts = without_picture(count_parts, png_name)
        if time_parts is not None:
            time_parts = without_picture(time_parts, png_name)
    return report_markdown(evidence, sides, python_call_parts, count_parts, time_parts,
                           all_cases, time.monotonic() - started)


def check_writable(path: str, what: str, hint: str = "") -> None:
    """A UsageError now, before minutes of measuring, where `path`'s folder cannot take a file
    (`errors.place_error`: read-only, not yours, not even an empty file's room), `hint` after
    it; an empty file is made there and removed. A disk that fills later is said then."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tmp-"):
            pass
    except OSError as exc:
        said = place_error(path, exc, what)
        if said is None:
            raise
        raise UsageError(f"{said}{hint}") from None


def build_parser():
    from overrides.ab.config import add_arguments
    from overrides.argtypes import OneLineParser, positive_float, positive_int
    from overrides.flame.hotloop import DEFAULT_SECONDS
    from overrides.review.runs import RUNS_DIR_VARIABLE

    parser = OneLineParser(
        prog="scripts/report.sh",
        description="Compare two builds and write a ZIP for the PR: report.md, comparison.json, "
                    "bench outputs, and base-/branch- flamegraphs (SVG and PNG) of what regressed.")
    parser.add_argument("base", metavar="BASE", help="a label recorded by record.sh, or an interpreter / virtualenv")
    parser.add_argument("branch", metavar="BRANCH", help="the same, for the branch")
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT, metavar="FILE.zip",
                        help=f"where to write the ZIP (default {DEFAULT_OUTPUT})")
    parser.add_argument("--force", action="store_true", help="overwrite the ZIP if it exists")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="compare a label whose recording was interrupted (refused without it)")
    parser.add_argument("--all", action="store_true", help="flamegraphs for every case, not only regressed ones")
    parser.add_argument("--no-flamegraphs", action="store_true", help="numbers only: no py-spy, no flamegraphs or their PNGs")
    parser.add_argument("--cases", nargs="+", metavar="NAME", help="cases (default: the four seed cases)")
    parser.add_argument("--op", default=None, help="the op (default torch.add), or your own statement such as "
                        "\"x.sum()\"")
    parser.add_argument("--step", metavar="PKG.MODULE:FACTORY", default=None,
                        help="your training step instead of cases: each build runs bench.py --step, and both "
                             "steps are recorded with py-spy (docs/pr-report.md#a-report-for-your-step)")
    parser.add_argument("--seconds", type=positive_float, default=None, metavar="S",
                        help=f"py-spy recording time per case and side (default {DEFAULT_SECONDS:g}); "
                             "the side's two recordings run at once, each for S")
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
    parser.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    add_arguments(parser.add_argument_group("paired A/B, for two interpreters"))
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help=f"where recorded runs live (default: ${RUNS_DIR_VARIABLE}, else runs/ in this checkout)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    return parser


# What --step does not go with: a step is timed by bench.py --step in each build, not by the A/B
# of cases, and counted by nothing yet.
STEP_REFUSES = (("cases", "--cases"), ("op", "--op"), ("all", "--all"), ("instructions", "--instructions"),
                ("seeds", "--seeds"), ("allow_incomplete", "--allow-incomplete"))


def _step_report(args) -> int:
    """report.sh --step: refused flags said first, then `step_report.build`; exit 1 where the
    branch's overhead is larger beyond the interval."""
    from overrides.progress import stderr_progress
    from overrides.review import step_report

    said = [flag for name, flag in STEP_REFUSES if getattr(args, name, None)]
    if said:
        raise UsageError(f"--step {args.step} compares your step, timed by bench.py --step in each build; "
                         f"drop {', '.join(said)}")
    from overrides.step.factory import find_factory

    find_factory(args.step)  # here, before minutes of measuring: a missing factory in one line
    sides, _ = _refused_before_measuring(Request(args.base, args.branch, output=args.output,
                                                 flamegraphs=not args.no_flamegraphs, force=args.force,
                                                 runs_dir=args.runs_dir))
    comparison = step_report.build(args.step, sides, args.output, args.seconds, not args.no_flamegraphs,
                                   stderr_progress(args.quiet))
    print(step_report.summary(comparison))
    print(f"report written to {args.output}")
    return 1 if comparison.verdict == REGRESSION else 0


def main(argv: list[str] | None = None) -> int:
    from overrides.ab.config import config_from_arguments
    from overrides.errors import run_command
    from overrides.progress import stderr_progress

    def body() -> int:
        args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
        if args.fresh:
            count_anew()
        if args.step:
            return _step_report(args)
        config, skipped = config_from_arguments(args, call_paths=True)
        if skipped:
            skipped = f"Instruction counts were skipped: {skipped}, then run the report again."
        report = build(Request(
            args.base, args.branch, output=args.output, all_cases=args.all,
            flamegraphs=not args.no_flamegraphs, cases=args.cases, op=args.op, seconds=args.seconds,
            ab_config=config, runs_dir=args.runs_dir, skipped_counts=skipped, force=args.force,
            allow_incomplete=args.allow_incomplete), progress=stderr_progress(args.quiet))
        print(comparison_report.comparison_table(report.comparisons, report.settings))
        print(f"report written to {report.path}")
        if report.incomplete:
            print(f"report.sh: incomplete: {'; '.join(report.incomplete)}; {report.path} was written without "
                  "what that cost (its notes say which); run the report again for it", file=sys.stderr)
            return INCOMPLETE_EXIT_STATUS
        return 1 if case_comparison.any_regression(report.comparisons) else 0

    return run_command("report.sh", body, "no ZIP written (runs/ keeps what was recorded)")


if __name__ == "__main__":
    sys.exit(main())
