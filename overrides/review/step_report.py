"""`scripts/report.sh BASE BRANCH --step pkg.module:factory`: a PR report for your training step.

A case's report pairs the two builds sample by sample in one A/B; a step is timed by
`bench.py --step` in one process, against its own plain twin (overrides/step/timing.py). So
each build runs `bench.py --step SPEC` of its own, one after the other, from your folder, and
its overhead is timed in alternation with its plain twin there: machine drift between the two runs cancels inside each
overhead. The two overheads are then compared as two independent measurements: their difference
has an interval wider than either's, and no pairing narrows it (said in report.md). Both
builds' steps are recorded with py-spy (`pyspybench.py --step`, your subclass's hooks labelled),
with the branch's plain twin, for two differential pictures: the branch against base, and your
subclass against its plain twin (what it adds). Everything goes into the ZIP with report.md.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import tempfile
import zipfile
from typing import Callable, Sequence

from overrides import ROOT, children
from overrides.case_comparison import UNPAIRED_PROCESS_CV
from overrides.clock import stats
from overrides.errors import UsageError
from overrides.figures import signed
from overrides.files import atomic_path, write_json_atomic, write_text_atomic
from overrides.review.markdown import in_details
from overrides.review.pack import Pack, without_picture
from overrides.sides import ROLES, Sides
from overrides.step import stepfile
from overrides.step.stepfile import StepFile, TimingFigures
from overrides.tables import pipe_table
from overrides.verdicts import (DEFAULT_THRESHOLD_NS, DEFAULT_THRESHOLD_PCT, IMPROVEMENT, INCONCLUSIVE,
                                NO_CHANGE, REGRESSION, judge, threshold_for)

BENCH = os.path.join(ROOT, "bench.py")
STEP_TIMEOUT_S = 900  # one build's bench.py --step: ~1-2 min here, the op table included
Z95 = 1.96  # each run's 95% interval is read as +-1.96 standard errors to combine two of them
# Functions listed under a differential picture: the largest moves beyond their error.
TOP_FUNCTIONS = 8


@dataclasses.dataclass(frozen=True)
class StepRun:
    """One build's `bench.py --step SPEC`: its printed output and its step/1 JSON, read back."""

    role: str
    text: str
    file: StepFile
    warnings: tuple[str, ...] = ()  # what bench.py --step warned of (drift, samples too spread)

    @property
    def timing(self) -> TimingFigures:
        """The figures at the batch the op table was made at (the first)."""
        return self.file.first

    @property
    def plain_ns(self) -> float:
        return self.timing.plain_step_ns

    @property
    def subclass_ns(self) -> float:
        return self.timing.subclass_step_ns

    @property
    def overhead_ns(self) -> float:
        return self.timing.overhead_ns

    @property
    def overhead_ci_ns(self) -> tuple[float, float]:
        low, high = self.timing.overhead_ci_ns
        return low, high

    @property
    def share(self) -> float:
        return self.timing.share


def difference_ci(base: tuple[float, float, float], branch: tuple[float, float, float],
                  process_cv: float = UNPAIRED_PROCESS_CV) -> tuple[float, float]:
    """The 95% interval of branch - base, each given as (figure, low, high) from a run of its
    own. A run's interval holds its own samples' spread, not how far a whole process of the same
    build lands from the next (its layout, the machine's load then): each half-width is widened
    in quadrature by `process_cv` of its figure at 95%, and the two runs, independent, add in
    quadrature too (the low side of the difference takes branch's low and base's high side)."""
    (a, a_low, a_high), (b, b_low, b_high) = base, branch

    def widened(half: float, figure: float) -> float:
        return math.hypot(half, Z95 * process_cv * abs(figure))

    delta = b - a
    return (delta - math.hypot(widened(b - b_low, b), widened(a_high - a, a)),
            delta + math.hypot(widened(b_high - b, b), widened(a - a_low, a)))


@dataclasses.dataclass(frozen=True)
class StepComparison:
    """Base's and branch's step, and what moved between them."""

    spec: str
    base: StepRun
    branch: StepRun

    @property
    def delta_ns(self) -> float:
        return self.branch.overhead_ns - self.base.overhead_ns

    @property
    def ci95_ns(self) -> tuple[float, float]:
        return difference_ci((self.base.overhead_ns, *self.base.overhead_ci_ns),
                             (self.branch.overhead_ns, *self.branch.overhead_ci_ns))

    @property
    def ci99_ns(self) -> tuple[float, float]:
        """The 99% interval "no change" is judged by (verdicts.NO_CHANGE_CONFIDENCE, as every
        verdict of the project): the 95% one's sides widened by Z99/Z95, both being normal."""
        low, high = self.ci95_ns
        scale = stats.Z99 / stats.Z95
        return self.delta_ns - scale * (self.delta_ns - low), self.delta_ns + scale * (high - self.delta_ns)

    @property
    def plain_ratio(self) -> float:
        """The plain twin's cost, branch over base: the same code in both runs unless torch
        changed, so how far the machine moved between the runs where it did not."""
        return self.branch.plain_ns / self.base.plain_ns

    @property
    def verdict(self) -> str:
        """verdicts.judge's, the threshold taken against base's step as a case's is against its
        call (DEFAULT_THRESHOLD_PCT of it, at least DEFAULT_THRESHOLD_NS)."""
        threshold = threshold_for(self.base.subclass_ns, DEFAULT_THRESHOLD_NS, DEFAULT_THRESHOLD_PCT)
        return judge(self.delta_ns, self.ci95_ns, threshold, self.ci99_ns)

    def to_dict(self) -> dict:
        low, high = self.ci95_ns
        return {"schema": "torch-function-overhead/step-comparison/1", "spec": self.spec,
                "base_overhead_ns": self.base.overhead_ns, "branch_overhead_ns": self.branch.overhead_ns,
                "delta_overhead_ns": self.delta_ns, "delta_ci95_ns": [low, high], "verdict": self.verdict,
                "interval": "two independent runs, each timed in alternation with its plain twin; each 95% interval "
                            f"widened by {UNPAIRED_PROCESS_CV:.0%} of its figure, then combined in quadrature", "plain_ratio": self.plain_ratio}


def run_step(side, spec: str, workdir: str, say: Callable[[str], None]) -> StepRun:
    """`bench.py --step SPEC` under the side's interpreter (and kept torch), from this folder,
    where the factory is found; a UsageError in one line where it fails."""
    from overrides.builds.interpreters import with_import_path

    json_path = os.path.join(workdir, f"{side.role}-step.json")
    say(f"report: {side.role}: bench.py --step {spec} ({side.python})")
    env = with_import_path(dict(os.environ), ROOT, side.torch_root())
    try:
        done = subprocess.run([side.python, BENCH, "--step", spec, "--json", json_path, "-q"], env=env,
                              capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UsageError(f"{side.role}: bench.py --step {spec} did not finish within {STEP_TIMEOUT_S} s") from None
    if done.returncode != 0 or not os.path.exists(json_path):
        said = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise UsageError(f"{side.role} ({side.spec}): bench.py --step {spec} failed: "
                         f"{said[-1] if said else f'exit {done.returncode}'}")
    from overrides.files import read_json

    read = StepFile.from_dict(read_json(json_path, "step result", stepfile.MAKE), json_path)
    warned = tuple(line.strip() for line in done.stderr.splitlines() if line.strip().startswith("warning:"))
    return StepRun(side.role, done.stdout, read, warned)


def record(sides, spec: str, seconds: float, pack: Pack) -> tuple[Sides, object]:
    """Base's and branch's step and the branch's plain twin, recorded at once (py-spy's shares do
    not care what else runs): each a flamegraph.Recording, both steps' as a Sides."""
    from overrides.flame import differential, flamegraph

    jobs = [(side, side.role, False) for side in sides] + [(sides[-1], "plain", True)]

    def one(job):
        side, name, plain = job
        who = f"{side.role}, its plain twin" if plain else side.role
        return flamegraph.record_step(
            side.python, spec, os.path.join(pack.workdir, f"{name}.svg"),
            os.path.join(pack.workdir, f"{name}.folded"), plain=plain, seconds=seconds,
            title=flamegraph.title(spec, "a training step", who, side.python, side.torch_root()),
            import_path=side.torch_root(), recordings=differential.RECORDINGS)

    pack.say(f"report: recording {spec} with py-spy: base, branch and the branch's plain twin, "
             f"{differential.RECORDINGS} processes each ({seconds:g} s)")
    base, branch, plain = children.parallel(one, jobs, len(jobs))
    return Sides(base, branch), plain


def _stacks(recording, spec: str, plain: bool = False) -> list[dict]:
    """A recording's stacks, one dict a process; the plain twin's with its loop frame named as
    yours, so that a differential against yours compares what runs under the loop, not its name."""
    from overrides.flame.hotloop import frame_name, step_name
    from overrides.flame.stacks import read_folded

    twin, yours = frame_name(step_name(spec, True)) + " (", frame_name(spec) + " ("
    found = []
    for path in recording.folded_paths:
        out: dict = {}
        for stack, count in read_folded(path).items():
            key = tuple(yours + frame[len(twin):] if plain and frame.startswith(twin) else frame for frame in stack)
            out[key] = out.get(key, 0) + count
        found.append(out)
    return found


def differential_part(name: str, title: str, before, after, before_ns: float, after_ns: float,
                      pack: Pack, what: str, sides: tuple[str, str]) -> list[str]:
    """A differential picture of `after` against `before` (ns per step) into the pack, and the
    functions whose own time moved beyond their error, as a table."""
    from overrides.flame import differential
    from overrides.flame.stacks import is_subclass_hook

    hooks = {frame for stacks in after for stack in stacks for frame in stack if is_subclass_hook(frame)}
    svg = os.path.join(pack.workdir, f"{name}.svg")
    write_text_atomic(svg, differential.differential_svg(
        before, after, before_ns, after_ns, title, sides=sides, per="step", labelled=hooks,
        labelled_as="your subclass's hooks"))
    pack.add(f"{name}.svg", svg)
    shown = f"![{name}]({name}.png)" if pack.picture(svg, f"{name}.png") else f"`{name}.svg`"
    grew, shrank = differential.top_changes(differential.differential(before, after, before_ns, after_ns),
                                            TOP_FUNCTIONS)
    lines = [f"{what} (red: more time, blue: less, grey: within {differential.SIGNIFICANT_Z:g} errors): {shown}", ""]
    if not grew and not shrank:
        return lines + ["No function's own time moved beyond its error (the spread between each side's "
                        f"{differential.RECORDINGS} recordings, or py-spy's sampling error where larger).", ""]
    rows = [["new" if d.new else "more" if d.delta_ns > 0 else "less", f"`{d.frame}`", f"{d.base_self_ns:,.0f}",
             f"{d.branch_self_ns:,.0f}", signed(d.delta_ns), f"{d.error_ns:,.0f}", f"{d.base_ns:,.0f}",
             f"{d.branch_ns:,.0f}"] for d in grew + shrank]
    return lines + pipe_table(["", "function", f"own ns a step: {sides[0]}", sides[1], "delta", "±",
                               f"with callees: {sides[0]}", sides[1]], rows, right_from=2) + [""]


def step_markdown(comparison: StepComparison, sides, recorded: tuple[Sides, object] | None, pack: Pack,
                  notes: Sequence[str]) -> str:
    base, branch = comparison.base, comparison.branch
    low, high = comparison.ci95_ns
    rows = [[f"{run.role} (`{side.spec}`)", f"{run.plain_ns:,.0f}", f"{run.subclass_ns:,.0f}",
             signed(run.overhead_ns), f"{signed(run.overhead_ci_ns[0])}..{signed(run.overhead_ci_ns[1])}",
             f"{run.share:+.1%}"] for run, side in zip((base, branch), sides)]
    rows.append(["**branch - base**", "", "", f"**{signed(comparison.delta_ns)}**", f"{signed(low)}..{signed(high)}",
                 f"{100 * (branch.share - base.share):+.1f} points"])
    said = {REGRESSION: "your subclass costs this step MORE on the branch",
            IMPROVEMENT: "your subclass costs this step LESS on the branch",
            NO_CHANGE: "no change beyond the threshold",
            INCONCLUSIVE: "no change this report can tell from noise"}[comparison.verdict]
    lines = [f"# Your step, base against branch: `{comparison.spec}`", "",
             f"**{comparison.verdict}**: {said}: {signed(comparison.delta_ns)} ns of overhead a step "
             f"({signed(low)}..{signed(high)} at 95%).", "",
             *pipe_table(["build", "plain twin ns/step", "yours ns/step", "overhead ns", "95% CI ns", "share"],
                         rows, right_from=1), "",
             f"How sure: each build ran `bench.py --step {comparison.spec}` in its own process, one after the "
             "other, and its overhead is timed in alternation with its own plain twin, so the machine's "
             "drift between the two runs cancels inside each overhead. The two overheads are NOT paired with "
             "each other: the interval of their difference joins the two runs' 95% intervals in quadrature, "
             f"each first widened by the {UNPAIRED_PROCESS_CV:.0%} a whole process of one build moves from the "
             "next (its layout, the machine's load then), which its own samples cannot show. So it is wider "
             "than either run's, and only a change of a few percent of the overhead gets a verdict. The "
             f"plain twin's step read {comparison.plain_ratio:.3f}x base's on the branch "
             "(the same code unless torch itself changed: how far the machine moved between the runs).", ""]
    if recorded is not None:
        lines += ["## Where the time went", "", "Your subclass's `__torch_function__` / `__torch_dispatch__` "
                  "frames are labelled in every picture, whatever their width.", ""]
        steps, plain = recorded
        for name, recording in (*steps.roles(), ("plain", plain)):
            shown = (f"![{name}-step]({name}-step.png)" if pack.picture(recording.svg_path, f"{name}-step.png")
                     else f"`{name}-step.svg`")
            pack.add(f"{name}-step.svg", recording.svg_path)
            lines += [f"{'the branch' + chr(39) + 's plain twin' if recording is plain else name}: {shown}", ""]
        yours = steps.map(lambda recording: _stacks(recording, comparison.spec))
        lines += differential_part("diff-step", f"{comparison.spec}: branch against base, ns a step",
                                   yours.base, yours.branch, base.subclass_ns, branch.subclass_ns, pack,
                                   "Branch against base, your step", ROLES)
        lines += differential_part("diff-plain", f"{comparison.spec} on the branch: yours against its plain twin, "
                                   "ns a step", _stacks(plain, comparison.spec, True), yours.branch,
                                   branch.plain_ns, branch.subclass_ns, pack,
                                   "What your subclass adds: the branch's step against its plain twin",
                                   ("plain twin", "subclass step"))
    for run in (base, branch):
        lines += in_details(f"{run.role}: bench.py --step output (the op table, the closure)",
                            ["```", run.text.rstrip(), "```"])
    if notes:
        lines += ["## Notes", ""] + [f"- {note}" for note in notes] + [""]
    return "\n".join(lines)


def build(spec: str, sides, output: str, seconds: float | None, flamegraphs: bool,
          say: Callable[[str], None] | None) -> StepComparison:
    """Measure both builds' step, record and draw them, and write the ZIP whole or not at all."""
    from overrides.flame.hotloop import DEFAULT_SECONDS

    say = say or (lambda message: None)  # -q: stderr_progress gives none
    for side in sides:
        if side.label and side.build is None:
            raise UsageError(f"--step measures both builds live, and label {side.label} kept no copy of its build "
                             f"({side.unpaired_reason or 'none kept'}); name an interpreter or virtualenv instead")
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="overrides-step-report-") as workdir:
        pack = Pack(workdir, say, notes)
        try:
            base, branch = (run_step(side, spec, workdir, say) for side in sides)
            comparison = StepComparison(spec, base, branch)
            notes += [f"{run.role}'s bench.py --step: {line}" for run in (base, branch) for line in run.warnings]
            recorded = record(sides, spec, seconds or DEFAULT_SECONDS, pack) if flamegraphs else None
            text = step_markdown(comparison, sides, recorded, pack, notes)
            for png in pack.finish_pictures():
                text = without_picture([text], png)[0]
            if notes and "## Notes" not in text:
                text += "\n## Notes\n\n" + "\n".join(f"- {note}" for note in notes) + "\n"
            members = {"report.md": _written(workdir, "report.md", text)}
            for run in (base, branch):
                members[f"{run.role}.txt"] = _written(workdir, f"{run.role}.txt", run.text)
                members[f"{run.role}-step.json"] = os.path.join(workdir, f"{run.role}-step.json")
            members["comparison.json"] = _written(workdir, "comparison.json", comparison.to_dict())
            for figure in pack.files:
                members[figure.name] = figure.path
            with atomic_path(output, suffix=".zip", what="the report") as tmp:
                with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as bundle:
                    for name, path in members.items():
                        bundle.write(path, name)
        finally:
            pack.stop_pictures()
    return comparison


def _written(workdir: str, name: str, payload) -> str:
    path = os.path.join(workdir, name)
    if isinstance(payload, str):
        write_text_atomic(path, payload)
    else:
        write_json_atomic(path, payload)
    return path


def summary(comparison: StepComparison) -> str:
    """What report.sh prints: one line a build and the difference."""
    low, high = comparison.ci95_ns
    return "\n".join([f"{run.role}: {comparison.spec} overhead {signed(run.overhead_ns)} ns a step "
                      f"({run.share:+.1%} of its plain twin's {run.plain_ns:,.0f} ns)"
                      for run in (comparison.base, comparison.branch)]
                     + [f"branch - base: {signed(comparison.delta_ns)} ns a step ({signed(low)}..{signed(high)} "
                        f"at 95%, two independent runs): {comparison.verdict}"])
