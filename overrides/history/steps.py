"""Every build of a history counted under matched seeds, in rounds like `--compare`'s, and each
neighbouring pair (a step) judged by the rule `--compare` judges its counts with; `--clock`
adds the paired clock per step."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Sequence

from overrides.case_comparison import Comparison, with_counts
from overrides.figures import json_figure
from overrides.counts import callgrind, judge, rounds
from overrides.history.lineup import HistoryBuild
from overrides.progress import counted
from overrides.verdicts import DECIDED

@dataclasses.dataclass(frozen=True)
class Step:
    """One neighbouring pair's change for one case: the counts' comparison, the clock's where
    timed, and the verdict."""

    case: str
    op: str
    before: str  # build names
    after: str
    counts: judge.CountComparison
    clock: Comparison | None = None  # judged with the counts, with --clock

    @property
    def verdict(self) -> str:
        """The step's verdict: the clock's judged with the counts where timed, else the counts'."""
        return self.clock.verdict if self.clock is not None else self.counts.verdict

    @property
    def delta_pct(self) -> float:
        return 100.0 * self.counts.delta / self.counts.base if self.counts.base else math.nan

    def to_dict(self) -> dict:
        c, r = self.counts, json_figure
        out = {"case": self.case, "op": self.op, "from": self.before, "to": self.after,
               "verdict": self.verdict, "counts_verdict": c.verdict,
               "base_instructions": r(c.base), "branch_instructions": r(c.branch),
               "delta_instructions": r(c.delta), "delta_pct": r(self.delta_pct),
               "instructions_ci95": [r(v) for v in c.ci95] if c.ci95 else None,
               "seeds": c.seeds, "limit": r(c.limit), "counts_exact": c.exact}
        if c.why:
            out["counts_why"] = c.why
        if self.clock is not None:
            k = self.clock
            out.update({"base_ns": r(k.base_ns), "branch_ns": r(k.branch_ns), "delta_ns": r(k.delta_ns),
                        "ci95_ns": [r(v) for v in k.ci95_ns] if k.ci95_ns else None,
                        "clock_verdict": k.clock_verdict})
        return out


def steps_of(builds: Sequence[HistoryBuild], runs: dict, threshold_pct: float) -> list[Step]:
    """Every neighbouring pair judged on its counts, for every case both counted."""
    steps = []
    for before, after in zip(builds, builds[1:]):
        for c in judge.compare_counts(runs[before.name], runs[after.name], threshold_pct=threshold_pct):
            steps.append(Step(c.case, c.op, before.name, after.name, c))
    return steps


def count_history(builds: Sequence[HistoryBuild], targets: list[tuple[str, str]],
                  seeds: Sequence[int] | None, threshold_pct: float, say: Callable[[str], None],
                  after_round: Callable[[dict, list[int]], None] = lambda runs, seeds: None,
                  ) -> tuple[dict, list[int]]:
    """Every build's CountRuns (by name) under matched seeds, and the seeds. The user's seeds
    are counted at once; drawn ones in rounds (see the module docstring). `after_round(runs,
    seeds)` is told what has been counted after every round."""
    runs: dict[str, list] = {build.name: [] for build in builds}
    pythons = [build.python for build in builds]
    import_paths = [build.torch_root for build in builds]
    pads = callgrind.pads_for(pythons, import_paths)

    def count(which: Sequence[int], targets_: list, seeds_: Sequence[int]) -> None:
        """The builds numbered `which` counted on `targets_` under `seeds_`, into `runs`."""
        jobs = len(which) * len(seeds_)
        say(f"counting {counted(len(targets_), 'target')} in {counted(len(which), 'build')} under "
            f"seed{'s' if len(seeds_) != 1 else ''} {', '.join(map(str, seeds_))}: "
            f"{counted(jobs, 'valgrind process', 'valgrind processes')}, "
            f"{min(jobs, callgrind.count_jobs())} at once")
        started = time.monotonic()
        per_build = callgrind.count_builds([pythons[i] for i in which], targets_, seeds_,
                                           pads=[pads[i] for i in which], say=say, tree=True,
                                           import_paths=[import_paths[i] for i in which])
        for i, build_runs in zip(which, per_build):
            runs[builds[i].name].extend(build_runs)
        say(f"round counted in {time.monotonic() - started:.0f} s")

    everyone = list(range(len(builds)))
    if seeds:
        count(everyone, targets, seeds)
        after_round(runs, list(seeds))
        return runs, list(seeds)
    seeds_counted = list(rounds.fresh_seeds(rounds.seeds_per_round(len(builds))))
    count(everyone, targets, seeds_counted)
    after_round(runs, seeds_counted)
    while len(seeds_counted) < rounds.MAX_COMPARE_SEEDS:
        open_steps = undecided_steps(builds, runs, threshold_pct)
        if not open_steps:
            break
        names = {s.before for s in open_steps} | {s.after for s in open_steps}
        which = [i for i, build in enumerate(builds) if build.name in names]
        wanted = [t for t in targets if any((s.case, s.op) == t for s in open_steps)]
        take = min(rounds.seeds_per_round(len(which)), rounds.MAX_COMPARE_SEEDS - len(seeds_counted))
        new = list(rounds.fresh_seeds(take, taken=seeds_counted))
        say(f"the counts leave {counted(len(open_steps), 'step')} undecided "
            f"({', '.join(sorted({f'{s.case} {s.before}->{s.after}' for s in open_steps}))}): "
            f"seed {len(seeds_counted) + 1} of at most {rounds.MAX_COMPARE_SEEDS}")
        count(which, wanted, new)
        seeds_counted += new
        after_round(runs, seeds_counted)
    return runs, seeds_counted


def undecided_steps(builds: Sequence[HistoryBuild], runs: dict, threshold_pct: float) -> list[Step]:
    """The steps the counts leave undecided and more seeds could decide: the next round counts
    their builds, on their cases only."""
    return [s for s in steps_of(builds, runs, threshold_pct)
            if s.verdict not in DECIDED and rounds.more_seeds_could_decide(s.counts)]


def with_clock(steps: list[Step], builds: Sequence[HistoryBuild], cases, ops, config, say) -> list[Step]:
    """Each step timed by the paired clock (`config` made without counts: the steps are counted
    already), and judged with both views as `--compare` judges."""
    from overrides.ab.paired import run_ab
    from overrides.builds.interpreters import Build

    by_step: dict[tuple[str, str], list] = {}
    for i, (before, after) in enumerate(zip(builds, builds[1:])):
        say(f"clock, step {i + 1} of {len(builds) - 1}: {before.name} -> {after.name}")
        outcome = run_ab(Build(before.python, before.torch_root), Build(after.python, after.torch_root),
                            cases, ops, config, say,
                            keep_interrupted=False)
        by_step[(before.name, after.name)] = outcome.comparisons
    out = []
    for step in steps:
        clock = next((c for c in by_step.get((step.before, step.after), ())
                      if (c.case, c.op) == (step.case, step.op)), None)
        if clock is None:
            out.append(step)
            continue
        judged, = with_counts([clock], [step.counts])
        out.append(dataclasses.replace(step, clock=judged))
    return out


