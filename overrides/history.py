"""History: what each case costs across an ordered list of builds, and which step changed it.

`--compare` answers "did my branch make it slower than its base". History answers the question
after it: how the overhead moved over releases, nightlies or a run of commits, and which step
moved it. Each build is an interpreter, a virtualenv, a label kept by `record.sh`, or a pip
requirement (`torch==2.14.1`) installed once into a cached virtualenv of its own (the user's
environments are never touched).

The method is the comparison's, applied to every neighbouring pair:
- Every build is counted with Callgrind under the same hash seeds, so layouts are matched
  build to build, each from the one fixed start-up path (overrides/samepath.py): two installs
  of one wheel count alike to the instruction, so a step's delta is the code's.
- Seeds are counted in rounds, like `--compare`'s (callgrind.count_until_decided): the first
  round counts every build; each later one only the builds of steps whose cases the counts
  leave undecided, and only those cases, up to callgrind.MAX_COMPARE_SEEDS.
- Each step is judged by callgrind.compare_counts, the rule `--compare` uses, so a step's
  verdict is the one `--compare` of that pair would give on its counts. `--clock` adds the
  paired clock per step (a whole comparison each, without counts) and the verdict is then the
  two views' together (compare.with_counts).
- The step that changed most (largest share of its case's count among the steps judged a
  change) gets the counts' call-tree diff: "which release" comes with "where".

What it writes (`--out`, default `history/`): `history.json` (schema HISTORY_SCHEMA, rewritten
after every round, `complete: false` until the end), `history.md`, `history.svg` and its
Chromium screenshot `history.png` (overrides/historyplot.py), and the changed step's
differential call tree as `where-CASE.svg`/`.png`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Callable, Sequence

from overrides.errors import UsageError
from overrides.files import write_json_atomic, write_text_atomic

HISTORY_SCHEMA = "torch-function-overhead/history/1"
DEFAULT_OUT = "history"
CACHE_VARIABLE = "OVERRIDES_BUILD_CACHE"  # where installed requirements live, if not the default
INSTALL_HEARTBEAT_S = 15.0  # a CUDA wheel takes ~40 s to install here: say it is still going
INSTALL_TIMEOUT_S = 1800
# A pip requirement, not a path: a distribution name followed by a version operator or a URL.
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*(===|==|~=|!=|>=|<=|<|>|@)\s*\S")
_COMPLETE_MARKER = ".overrides-installed"


@dataclasses.dataclass(frozen=True)
class HistoryBuild:
    """One build of the history, resolved: what it is, how it runs, its torch."""

    spec: str  # as the user gave it
    name: str  # short and unique: the column and axis label
    kind: str  # "interpreter", "label" or "requirement"
    python: str  # the interpreter's real path
    torch_root: str | None  # a kept copy's folder (record.sh label), imported first
    torch_dir: str | None
    torch_version: str

    def to_dict(self) -> dict:
        return {"spec": self.spec, "name": self.name, "kind": self.kind, "python": self.python,
                "torch_root": self.torch_root, "torch_dir": self.torch_dir,
                "torch_version": self.torch_version}


def is_requirement(spec: str) -> bool:
    return not os.path.exists(spec) and bool(_REQUIREMENT.match(spec))


def cache_root(given: str | None = None) -> str:
    """Where installed requirements are kept: --cache, $OVERRIDES_BUILD_CACHE, or the user's
    cache folder."""
    root = given or os.environ.get(CACHE_VARIABLE)
    if not root:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(home, "torch-function-overhead", "builds")
    return os.path.abspath(root)


def _cache_folder(requirement: str, index_url: str | None, root: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9.+-]+", "-", requirement).strip("-")[:60]
    key = hashlib.sha256(f"{requirement}\n{index_url or ''}\n{sys.version_info[:2]}".encode()).hexdigest()[:10]
    return os.path.join(root, f"{readable}-{key}")


def install_requirement(requirement: str, index_url: str | None, root: str,
                        say: Callable[[str], None]) -> str:
    """The interpreter of a virtualenv holding `requirement`, installed on first use and kept in
    `root` (a folder per requirement and index). A failed install leaves nothing behind and is
    one UsageError naming pip's last line."""
    folder = _cache_folder(requirement, index_url, root)
    python = os.path.join(folder, "bin", "python")
    if os.path.isfile(os.path.join(folder, _COMPLETE_MARKER)) and os.access(python, os.X_OK):
        say(f"{requirement}: from the cache ({folder})")
        return python
    os.makedirs(root, exist_ok=True)
    partial = folder + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    say(f"{requirement}: installing into {folder} (once; later runs take it from the cache)")
    started = time.monotonic()
    try:
        made = subprocess.run([sys.executable, "-m", "venv", partial], capture_output=True, text=True)
        if made.returncode:
            raise UsageError(f"could not make a virtualenv for {requirement} at {partial}: "
                             f"{_last_line(made.stderr)}")
        command = [os.path.join(partial, "bin", "python"), "-m", "pip", "install",
                   "--disable-pip-version-check", "--no-input", "-q", requirement]
        if index_url:
            command += ["--index-url", index_url]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while True:
                try:
                    _, err = process.communicate(timeout=INSTALL_HEARTBEAT_S)
                    break
                except subprocess.TimeoutExpired:
                    waited = time.monotonic() - started
                    if waited > INSTALL_TIMEOUT_S:
                        process.kill()
                        raise UsageError(f"{requirement} did not install within {INSTALL_TIMEOUT_S} s")
                    say(f"{requirement}: still installing ({waited:.0f} s)")
        except BaseException:
            process.kill()
            process.wait()
            raise
        if process.returncode:
            raise UsageError(f"{requirement} did not install ({_last_line(err)}); check the "
                             "requirement, or pass --index-url for a wheel that is elsewhere")
        with open(os.path.join(partial, _COMPLETE_MARKER), "w", encoding="utf-8") as marker:
            marker.write(f"{requirement}\n{index_url or ''}\n")
        os.rename(partial, folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    say(f"{requirement}: installed in {time.monotonic() - started:.0f} s")
    return python


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def version_key(version: str) -> tuple | None:
    """An ordering key for a torch version ("2.14.1+cu130", "2.15.0.dev20260101"), or None when
    it does not read as one."""
    found = re.match(r"^(\d+(?:\.\d+)*)(?:\.?(a|b|rc|dev)(\d+))?", version or "")
    if not found:
        return None
    release = tuple(int(part) for part in found.group(1).split("."))
    release += (0,) * (3 - len(release))
    stage = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4}[found.group(2)]
    return release + (stage, int(found.group(3) or 0))


def _short_name(spec: str, kind: str, version: str) -> str:
    if kind == "requirement":
        return re.sub(r"^torch\s*==\s*", "", spec)
    if kind == "label":
        return spec
    path = spec.rstrip(os.sep)
    if os.path.basename(path) in ("python", "python3") or re.match(r"python3(\.\d+)?$", os.path.basename(path)):
        parent = os.path.dirname(os.path.dirname(path))  # ENV/bin/python -> ENV
        path = parent or path
    return os.path.basename(path) or version


def resolve_builds(specs: Sequence[str], *, index_url: str | None = None, cache: str | None = None,
                   runs: str | None = None, any_order: bool = False,
                   say: Callable[[str], None] = lambda message: None) -> list[HistoryBuild]:
    """Each spec made a build that runs, in the order given: installs first (cached), then each
    interpreter probed for torch. Duplicates, and torch versions that go backwards (unless
    `any_order`), are refused before anything is counted."""
    from overrides import ab, record

    if len(specs) < 2:
        raise UsageError("--history needs at least two builds, oldest first")
    runs_folder = record.runs_dir(runs)
    labels = set(record.recorded_labels(runs_folder)) if os.path.isdir(runs_folder) else set()
    builds: list[HistoryBuild] = []
    for spec in specs:
        if is_requirement(spec):
            python = install_requirement(spec, index_url, cache_root(cache), say)
            kind, target = "requirement", ab.Build(python)
        elif os.sep not in spec and spec in labels:
            recorded = record.load_label(runs_folder, spec)
            if not recorded.complete:
                raise UsageError(recorded.incomplete_line())
            if recorded.kept_root is None:
                raise UsageError(f"label {spec!r} cannot be run again: {recorded.why_not_kept()}; "
                                 f"record it with `scripts/record.sh --label {spec} --force`")
            kind, target = "label", ab.Build(recorded.python, recorded.kept_root)
        else:
            looks = os.sep in spec or os.path.isdir(spec) or shutil.which(spec)
            if not looks:
                raise UsageError(f"{spec!r} is neither an interpreter, a virtualenv, a label recorded in "
                                 f"{runs_folder}, nor a pip requirement such as torch==2.14.1")
            kind, target = "interpreter", ab.Build(spec)
        probed = ab.probe_interpreter(target)
        builds.append(HistoryBuild(spec, _short_name(spec, kind, probed.torch_version), kind,
                                   probed.executable, target.torch_root, probed.torch_dir,
                                   probed.torch_version))
    return _checked(builds, any_order)


def _checked(builds: list[HistoryBuild], any_order: bool) -> list[HistoryBuild]:
    """`builds` refused if one is listed twice or (unless `any_order`) their torch versions go
    backwards; names made unique (`main#1`, `main#2`) where two folders share one."""
    seen: dict[tuple, HistoryBuild] = {}
    for build in builds:
        # the environment the interpreter runs in (its folder: a virtualenv named by its folder,
        # bin/python or bin/python3 is one; two virtualenvs sharing one torch are two builds)
        identity = (os.path.dirname(os.path.dirname(os.path.abspath(build.python))), build.torch_root,
                    build.torch_dir)
        if identity in seen:
            raise UsageError(f"{build.spec} and {seen[identity].spec} are one build (torch at "
                             f"{build.torch_dir}); list each build once")
        seen[identity] = build
    if not any_order:
        for earlier, later in zip(builds, builds[1:]):
            a, b = version_key(earlier.torch_version), version_key(later.torch_version)
            if a is not None and b is not None and b < a:
                raise UsageError(f"builds out of order: {earlier.spec} (torch {earlier.torch_version}) "
                                 f"comes before {later.spec} (torch {later.torch_version}); list them "
                                 "oldest first, or pass --any-order")
    names = [build.name for build in builds]
    unique = []
    for i, build in enumerate(builds):
        if names.count(build.name) > 1:
            build = dataclasses.replace(build, name=f"{build.name}#{names[:i + 1].count(build.name)}")
        unique.append(build)
    return unique


# ---------------------------------------------------------------------------------------------
# Counting every build under matched seeds, in rounds

@dataclasses.dataclass(frozen=True)
class Step:
    """One neighbouring pair's change for one case: the counts' comparison, the clock's where
    timed, and the verdict."""

    case: str
    op: str
    before: str  # build names
    after: str
    counts: object  # callgrind.CountComparison
    clock: object | None = None  # compare.Comparison (judged with the counts), with --clock
    verdict: str = "inconclusive"

    @property
    def delta_pct(self) -> float:
        return 100.0 * self.counts.delta / self.counts.base if self.counts.base else math.nan

    def to_dict(self) -> dict:
        c = self.counts

        def r(v):
            return None if v is None or not math.isfinite(v) else round(v, 2)

        out = {"case": self.case, "op": self.op, "from": self.before, "to": self.after,
               "verdict": self.verdict, "counts_verdict": c.verdict,
               "base_instructions": r(c.base), "branch_instructions": r(c.branch),
               "delta_instructions": r(c.delta), "delta_pct": r(self.delta_pct),
               "instructions_ci95": [r(v) for v in c.ci95] if c.ci95 else None,
               "seeds": c.seeds, "limit": r(c.limit), "counts_exact": c.exact}
        if self.clock is not None:
            k = self.clock
            out.update({"base_ns": r(k.base_ns), "branch_ns": r(k.branch_ns), "delta_ns": r(k.delta_ns),
                        "ci95_ns": [r(v) for v in k.ci95_ns] if k.ci95_ns else None,
                        "wall_verdict": k.wall_verdict or k.verdict})
        return out


def steps_of(builds: Sequence[HistoryBuild], runs: dict, threshold_pct: float) -> list[Step]:
    """Every neighbouring pair judged on its counts, for every case both counted."""
    from overrides import callgrind

    steps = []
    for before, after in zip(builds, builds[1:]):
        for c in callgrind.compare_counts(runs[before.name], runs[after.name], threshold_pct=threshold_pct):
            steps.append(Step(c.case, c.op, before.name, after.name, c, verdict=c.verdict))
    return steps


def count_history(builds: Sequence[HistoryBuild], targets: list[tuple[str, str]],
                  seeds: Sequence[int] | None, threshold_pct: float, say: Callable[[str], None],
                  after_round: Callable[[dict, list[int]], None] = lambda runs, seeds: None,
                  ) -> tuple[dict, list[int]]:
    """Every build's CountRuns (by name) under matched seeds, and the seeds. The user's seeds
    are counted at once; drawn ones in rounds (see the module docstring)."""
    from overrides import callgrind
    from overrides.compare import DECIDED

    runs: dict[str, list] = {build.name: [] for build in builds}
    pythons = [build.python for build in builds]
    import_paths = [build.torch_root for build in builds]
    pads = callgrind.pads_for(pythons, import_paths)

    def count(which: Sequence[int], targets_: list, seeds_: Sequence[int]) -> None:
        jobs = len(which) * len(seeds_)
        say(f"counting {len(targets_)} target{'s' if len(targets_) != 1 else ''} in "
            f"{len(which)} build{'s' if len(which) != 1 else ''} under seed"
            f"{'s' if len(seeds_) != 1 else ''} {', '.join(map(str, seeds_))}: {jobs} valgrind "
            f"process{'es' if jobs != 1 else ''}, {min(jobs, callgrind.count_jobs())} at once")
        started = time.monotonic()
        counted = callgrind.count_builds([pythons[i] for i in which], targets_, seeds_,
                                         pads=[pads[i] for i in which], say=say, tree=True,
                                         import_paths=[import_paths[i] for i in which])
        for i, build_runs in zip(which, counted):
            runs[builds[i].name].extend(build_runs)
        say(f"round counted in {time.monotonic() - started:.0f} s")

    everyone = list(range(len(builds)))
    if seeds:
        count(everyone, targets, seeds)
        after_round(runs, list(seeds))
        return runs, list(seeds)
    per_round = max(1, callgrind.count_jobs() // len(builds))
    counted = list(callgrind.fresh_seeds(per_round))
    count(everyone, targets, counted)
    after_round(runs, counted)
    while len(counted) < callgrind.MAX_COMPARE_SEEDS:
        open_steps = [s for s in steps_of(builds, runs, threshold_pct)
                      if s.verdict not in DECIDED and callgrind.more_seeds_could_decide(s.counts)]
        if not open_steps:
            break
        names = {s.before for s in open_steps} | {s.after for s in open_steps}
        which = [i for i, build in enumerate(builds) if build.name in names]
        wanted = [t for t in targets if any((s.case, s.op) == t for s in open_steps)]
        take = min(max(1, callgrind.count_jobs() // len(which)), callgrind.MAX_COMPARE_SEEDS - len(counted))
        new = list(callgrind.fresh_seeds(take, taken=counted))
        say(f"the counts leave {len(open_steps)} step{'s' if len(open_steps) != 1 else ''} undecided "
            f"({', '.join(sorted({f'{s.case} {s.before}->{s.after}' for s in open_steps}))}): "
            f"seed {len(counted) + 1} of at most {callgrind.MAX_COMPARE_SEEDS}")
        count(which, wanted, new)
        counted += new
        after_round(runs, counted)
    return runs, counted


def with_clock(steps: list[Step], builds: Sequence[HistoryBuild], cases, ops, config, say) -> list[Step]:
    """Each step timed by the paired clock (a comparison without counts), and judged with both
    views as `--compare` judges."""
    from overrides import ab, compare

    by_step: dict[tuple[str, str], list] = {}
    for i, (before, after) in enumerate(zip(builds, builds[1:])):
        say(f"clock, step {i + 1} of {len(builds) - 1}: {before.name} -> {after.name}")
        outcome = ab.run_ab(ab.Build(before.python, before.torch_root), ab.Build(after.python, after.torch_root),
                            cases, ops, dataclasses.replace(config, instruction_seeds=()), say,
                            keep_interrupted=False)
        by_step[(before.name, after.name)] = outcome.comparisons
    out = []
    for step in steps:
        clock = next((c for c in by_step.get((step.before, step.after), ())
                      if (c.case, c.op) == (step.case, step.op)), None)
        if clock is None:
            out.append(step)
            continue
        judged, = compare.with_counts([clock], [step.counts])
        out.append(dataclasses.replace(step, clock=judged, verdict=judged.verdict))
    return out


# ---------------------------------------------------------------------------------------------
# Figures per build, the step that changed most, and the files

def per_build(builds: Sequence[HistoryBuild], runs: dict, targets: Sequence[tuple[str, str]]) -> dict:
    """(case, op) -> build name -> (mean count a call over its seeds, (lowest, highest) over them
    or None with one seed, seeds). The range, not an interval: a build's own count moves by
    layout from seed to seed (~0.8%), while a step is judged on the per-seed deltas, matched
    seed by seed and far tighter; a t-interval over two seeds would draw a bar twelve spreads
    long beside a step known to a few instructions."""
    out: dict = {}
    for target in targets:
        for build in builds:
            values = [c.per_call for run in runs[build.name] for c in run.cases
                      if (c.case, c.op) == target and c.error is None]
            if values:
                spread = (min(values), max(values)) if len(values) >= 2 else None
                out.setdefault(target, {})[build.name] = (sum(values) / len(values), spread, len(values))
    return out


def largest_step(steps: Sequence[Step]) -> Step | None:
    """The step judged a change that moved its case's count most, as a share of it."""
    changed = [s for s in steps if s.verdict in ("regression", "improvement", "disagree")
               or (s.counts.verdict in ("regression", "improvement"))]
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
    return {"regression": "regression", "improvement": "improvement", "no change": "no change",
            "clock only": "clock only", "disagree": "DISAGREE"}.get(verdict, "inconclusive")


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
        widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(head))]
        right = {2, 3, 4, 6}
        for r in rows:
            lines.append("  " + "  ".join((cell.rjust(w) if i in right else cell.ljust(w))
                                          for i, (cell, w) in enumerate(zip(r, widths))).rstrip())
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def markdown(builds, steps, figures, seeds, where_lines: list[str], picture: str | None,
             wall_s: float, notes: Sequence[str]) -> str:
    out = ["# `__torch_function__` overhead across builds", ""]
    out.append(f"{len(builds)} builds, oldest first; Callgrind instruction counts per call under hash seeds "
               f"{', '.join(map(str, seeds))} (matched build to build); each step judged as "
               f"`bench.py --compare` judges its counts. Wall time {wall_s:.0f} s.")
    out.append("")
    if picture:
        out += [f"![instructions per call across builds]({picture})", ""]
    out += ["| build | torch | kind | interpreter |", "|---|---|---|---|"]
    out += [f"| {b.name} | {b.torch_version} | {b.kind} | `{b.python}` |" for b in builds]
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


def where_section(step: Step | None, runs: dict, out_dir: str, say) -> tuple[list[str], dict | None, list[str]]:
    """The counts' call-tree diff of the step that changed most: markdown, JSON, pictures."""
    from overrides import calltree, screenshot

    if step is None:
        return ["No step was judged a change, so no call tree is shown."], None, []
    went = calltree.where_it_went(runs[step.before], runs[step.after], step.case, step.op)
    if went is None:
        return [], None, []
    stem = f"where-{re.sub(r'[^A-Za-z0-9]+', '-', step.case).strip('-').lower()}"
    svg = os.path.join(out_dir, stem + ".svg")
    title = f"{step.case}: {step.before} -> {step.after}, {step.counts.delta:+,.0f} instructions a call"
    write_text_atomic(svg, calltree.differential_svg(runs[step.before], runs[step.after], step.case, step.op, title))
    pictures = [os.path.basename(svg)]
    lines = [f"## Where the largest step went: {step.case}, {step.before} -> {step.after}", "",
             f"{step.counts.delta:+,.1f} instructions a call ({step.delta_pct:+.2f}%), {step.verdict}. "
             "Functions by the change of their own count (Callgrind call tree, mean over the seeds):", ""]
    lines += calltree.markdown_table(went)
    lines.append("")
    try:
        screenshot.screenshot(svg, svg[:-4] + ".png")
        pictures.append(stem + ".png")
        lines += [f"![call-tree diff]({stem}.png)", ""]
    except screenshot.ScreenshotError as exc:
        say(f"no PNG of {os.path.basename(svg)}: {exc}")
        lines += [f"The call tree is in `{os.path.basename(svg)}` (no PNG: {exc}).", ""]
    return lines, {"case": step.case, "op": step.op, "from": step.before, "to": step.after,
                   "where": went.to_dict(), "pictures": pictures}, pictures


# ---------------------------------------------------------------------------------------------
# The command: `bench.py --history B1 B2 ...`

def add_arguments(parser) -> None:
    group = parser.add_argument_group("history across builds")
    group.add_argument("--history", nargs="+", metavar="BUILD",
                       help="count every case in each build, oldest first, and judge each step: a "
                            "BUILD is an interpreter, a virtualenv, a record.sh label, or a pip "
                            "requirement such as torch==2.14.1 (installed once into a cached virtualenv)")
    group.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                       help=f"--history: where history.json/.md/.svg/.png go (default {DEFAULT_OUT}/)")
    group.add_argument("--clock", action="store_true",
                       help="--history: also time each step with the paired clock (a comparison per step)")
    group.add_argument("--index-url", metavar="URL",
                       help="--history: pip's --index-url for requirements (nightlies, CPU wheels)")
    group.add_argument("--cache", metavar="DIR",
                       help=f"--history: where installed requirements are kept (default: ${CACHE_VARIABLE} "
                            "or ~/.cache/torch-function-overhead/builds)")
    group.add_argument("--any-order", action="store_true",
                       help="--history: do not refuse torch versions that go backwards")


def refuse_stray_flags(args) -> None:
    """--history's own flags without --history: one line, not silence."""
    stray = [flag for flag, given in (("--clock", args.clock), ("--index-url", args.index_url),
                                      ("--cache", args.cache), ("--any-order", args.any_order),
                                      ("--out", args.out != DEFAULT_OUT)) if given]
    if stray:
        raise UsageError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} for --history; "
                         "add --history BUILD BUILD ... or drop it")


def check_arguments(args) -> None:
    """Flags that do not go with --history, refused before anything runs."""
    clash = [flag for flag, given in (("--compare", args.compare), ("--load", args.load),
                                      ("-n", args.nreps), ("-m", args.nrepreps),
                                      ("--no-instructions", args.no_instructions),
                                      ("--min-time", args.min_time)) if given]
    if clash:
        raise UsageError(f"--history counts instructions in each build; drop {', '.join(clash)}")
    if not args.history or len(args.history) < 2:
        raise UsageError("--history needs at least two builds, oldest first")


def run_history(args, say: Callable[[str], None] | None) -> int:
    from overrides import ab, callgrind, casenames, historyplot, screenshot
    from overrides import ops as ops_mod
    from overrides.errors import INTERRUPTED_EXIT_STATUS

    say = say or (lambda message: None)
    check_arguments(args)
    cases = casenames.resolve(args.cases)
    ops = ops_mod.resolve_ops(args.op)
    callgrind.find_valgrind()  # a missing valgrind says how to install it, before any install
    started = time.monotonic()
    builds = resolve_builds(args.history, index_url=args.index_url, cache=args.cache,
                            any_order=args.any_order, say=say)
    targets = ab._countable([(case, op) for op in ops for case in cases], builds[0].python,
                            builds[0].torch_root)
    if not targets:
        raise UsageError("none of the cases applies to the ops asked for; see bench.py --list-ops")
    out_dir = os.path.abspath(args.out)
    os.makedirs(out_dir, exist_ok=True)
    json_path = args.json or os.path.join(out_dir, "history.json")
    settings = {"cases": [c.name for c in cases], "ops": [o.name for o in ops],
                "threshold_instructions": callgrind.DEFAULT_THRESHOLD_INSTRUCTIONS,
                "threshold_pct": args.threshold_pct, "clock": bool(args.clock),
                "seeds_given": bool(args.seeds)}

    def save(runs: dict, seeds: Sequence[int], steps=None, complete: bool = False, where=None) -> None:
        steps = steps if steps is not None else steps_of(builds, runs, args.threshold_pct)
        write_json_atomic(json_path, payload(builds, steps, per_build(builds, runs, targets), seeds,
                                             settings, complete, time.monotonic() - started, where))

    say(f"history of {len(builds)} builds: {', '.join(b.name for b in builds)}; "
        f"{len(targets)} target{'s' if len(targets) != 1 else ''}; writing to {out_dir}")
    runs: dict = {}
    seeds: list[int] = []

    def keep(runs_: dict, seeds_: list[int]) -> None:
        runs.update(runs_)
        seeds[:] = seeds_
        save(runs_, seeds_)

    try:
        runs, seeds = count_history(builds, targets, args.seeds, args.threshold_pct, say, keep)
        steps = steps_of(builds, runs, args.threshold_pct)
        if args.clock:
            config = ab.config_from_arguments(args, (), threads=args.threads)
            steps = with_clock(steps, builds, cases, ops, config, say)
    except KeyboardInterrupt:
        if runs:
            save(runs, seeds)
            print(f"interrupted; what was counted is in {json_path} (complete: false)", file=sys.stderr)
        return INTERRUPTED_EXIT_STATUS
    figures = per_build(builds, runs, targets)
    svg_path = os.path.join(out_dir, "history.svg")
    versions = sorted({b.torch_version for b in builds})
    write_text_atomic(svg_path, historyplot.render(
        builds, figures, steps, "__torch_function__ overhead across builds",
        f"Callgrind instructions per call, hash seeds matched build to build ({len(seeds)} in all; a "
        f"step's undecided cases get more); torch {', '.join(versions)}; oldest first"))
    picture = None
    try:
        screenshot.screenshot(svg_path, os.path.join(out_dir, "history.png"))
        picture = "history.png"
    except screenshot.ScreenshotError as exc:
        say(f"no history.png: {exc}")
    notes = [f"- Counted from one start-up path for every build (`overrides/samepath.py`); "
             f"a step whose counts are within {callgrind.EXACT_INSTRUCTIONS:g} instructions on every "
             "seed is `no change (exact)`.",
             "- Each step's verdict is what `bench.py --compare BEFORE AFTER` gives on its counts"
             + (" together with the paired clock (`--clock`)." if args.clock else
                "; the clock was not run (`--clock` times every step).")]
    where_lines, where, _ = where_section(largest_step(steps), runs, out_dir, say)
    wall = time.monotonic() - started
    write_text_atomic(os.path.join(out_dir, "history.md"),
                      markdown(builds, steps, figures, seeds, where_lines, picture, wall, notes))
    write_json_atomic(json_path, payload(builds, steps, figures, seeds, settings, True, wall, where))
    print(table(builds, steps, figures), end="")
    print(f"written: {json_path}, {os.path.join(out_dir, 'history.md')}, {svg_path}"
          + (f", {os.path.join(out_dir, picture)}" if picture else ""))
    print(f"wall time {wall:.0f} s")
    return 0
