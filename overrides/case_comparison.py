"""A case compared, base against branch: the `Comparison` record (delta, interval, verdicts),
judged with the counts (`with_counts`); and the unpaired comparison of two results files.

A verdict is only as good as its interval, and the interval must include every source of
variation that differs between the two sides. Two kinds of comparison exist:

- Unpaired (`compare_runs`): two results files measured at different times, in different
  processes. Within-run sampling noise is small, but each process has its own memory layout
  and the machine drifts between runs; the interval therefore adds a process-to-process term,
  `UNPAIRED_PROCESS_CV` of the figure per side, measured here as the spread of the headline
  across separate invocations of the same build (benchmarks/headline_stats.py). That term is
  what makes unpaired verdicts cautious: it cannot be measured from one run per side.
- Paired (`overrides/ab/paired.py`): both builds measured alternately in one run, the interval taken
  from the spread between independent worker pairs. It resolves far smaller changes.

The verdicts themselves, and why each is what it says, are `overrides/verdicts.py`'s rule: the
same one for the clock and for the instruction counts.
"""

from __future__ import annotations

import dataclasses
import math

from overrides.clock import stats
from overrides.comparison_settings import ComparisonSettings
from overrides.counts.pycalls import NamedChanges
from overrides.figures import json_figure
from overrides.results import CaseResult, RunResult
from overrides.sides import Sides
from overrides.verdicts import (DEFAULT_THRESHOLD_NS, DEFAULT_THRESHOLD_PCT, INCONCLUSIVE, MOVED, REGRESSION,
                                clock_and_counts, judge, threshold_for, unmeasured)

# 2: "wall_verdict" became "clock_verdict"; 3: "changed_functions" (what changed in a case that
# moved, by name). Each case's own object (a report's comparison.json) says
# CASE_COMPARISON_SCHEMA, the whole payload COMPARISON_SCHEMA.
COMPARISON_SCHEMA = "torch-function-overhead/comparison/3"
CASE_COMPARISON_SCHEMA = "torch-function-overhead/case-comparison/3"
# Process-to-process spread of the headline (then p10; p2 spreads less) for one build, runs minutes apart: CV 0.9-3.7%
# across invocations on this machine (seed_vs_bench, headline_stats), and an A/A pair of runs
# with other work on the machine differed by 5.8%. 3% per side keeps unpaired verdicts honest.
UNPAIRED_PROCESS_CV = 0.03
_BOOTSTRAP_RESAMPLES = 400  # enough for a 95% interval of a quantile difference
# A clock change beyond this many times what its instruction change costs (at the case's own ns
# per instruction) is more than the code: a cycle per instruction that moved by a third would
# already be a different machine. Only a change whose whole 95% interval lies beyond it is named.
UNEXPLAINED_FACTOR = 3.0


@dataclasses.dataclass(frozen=True)
class Comparison:
    case: str
    op: str
    base_ns: float
    branch_ns: float
    delta_ns: float
    ci95_ns: tuple[float, float] | None
    clock_verdict: str  # the clock's own verdict, at 95% for a change
    paired: bool
    # Instruction counts per call, when both sides have them (Callgrind); None otherwise.
    base_instructions: float | None = None
    branch_instructions: float | None = None
    instructions_ci95: tuple[float, float] | None = None
    counts_verdict: str | None = None  # the counts' own verdict; inconclusive: the clock judged
    counts_exact: bool = False  # counted alike on every seed from one path (counts.judge.EXACT_INSTRUCTIONS)
    counts_why: str = ""  # why the counts left it to the clock, beyond a want of seeds
    clock_verdict_sure: str | None = None  # the clock's at NO_CHANGE_CONFIDENCE, where known
    # What changed in the case's Python code, by name (ab/named.py): a case that moved, or every
    # case where the names were not looked for; None: a case that did not move, or not asked
    changed_functions: NamedChanges | None = None

    @property
    def verdict(self) -> str:
        """The case's verdict: the clock's, judged with the counts where both sides have them
        (verdicts.clock_and_counts)."""
        return clock_and_counts(self.clock_verdict, self.counts_verdict, self.clock_verdict_sure)

    @property
    def delta_pct(self) -> float:
        return 100.0 * self.delta_ns / self.base_ns if self.base_ns else math.nan

    def to_dict(self) -> dict:
        r = json_figure
        out = {
            "case": self.case,
            "op": self.op,
            "base_ns": r(self.base_ns),
            "branch_ns": r(self.branch_ns),
            "delta_ns": r(self.delta_ns),
            "delta_pct": r(self.delta_pct),
            "ci95_ns": None if self.ci95_ns is None else [r(self.ci95_ns[0]), r(self.ci95_ns[1])],
            "verdict": self.verdict,
            "paired": self.paired,
        }
        if self.base_instructions is not None and self.branch_instructions is not None:
            out["base_instructions"] = r(self.base_instructions)
            out["branch_instructions"] = r(self.branch_instructions)
            out["delta_instructions"] = r(self.delta_instructions)
            out["instructions_ci95"] = (None if self.instructions_ci95 is None
                                        else [r(v) for v in self.instructions_ci95])
            out["clock_verdict"] = self.clock_verdict
            out["counts_verdict"] = self.counts_verdict
            out["counts_exact"] = self.counts_exact
            if self.counts_why:
                out["counts_why"] = self.counts_why
            out["judged_on"] = self.judged_on
            out["instructions_as_ns"] = r(self.instructions_as_ns)
            out["clock_unexplained"] = self.clock_unexplained
        if self.changed_functions is not None:
            out["changed_functions"] = self.changed_functions.to_dict()
        return out

    @property
    def judged_on(self) -> str:
        """"instructions" when the counts decided the verdict, "clock" when they could not."""
        return "clock" if self.counts_verdict == INCONCLUSIVE else "instructions"

    @property
    def ns_per_instruction(self) -> float | None:
        """Base's ns per call over its instructions per call: what an instruction of this case
        costs on average (None without counts)."""
        if not self.base_instructions or not math.isfinite(self.base_ns):
            return None
        return self.base_ns / self.base_instructions

    @property
    def instructions_as_ns(self) -> float | None:
        """What the instruction change would cost at this case's own ns per instruction."""
        delta, per = self.delta_instructions, self.ns_per_instruction
        return None if delta is None or per is None else delta * per

    @property
    def clock_sized(self) -> bool:
        """Whether the clock's delta is the change's size. Not when the counts found a change
        the clock's own verdict did not: its interval was then too wide to size it (the bare
        shim's interval over five pairs reached from below zero to about its whole size), and
        the counts' exact instructions at the case's ns per instruction (`instructions_as_ns`,
        within a few ns of the shim's size there) are the better figure (figures:
        benchmarks/history.md, 'Docstring figures')."""
        return not (self.verdict in MOVED and self.counts_verdict == self.verdict
                    and self.clock_verdict != self.verdict and self.instructions_as_ns is not None)

    @property
    def change_ns(self) -> float:
        """The change's size per call: the clock's delta, or where the clock could not size it
        (`clock_sized`), what the instruction change costs at this case's ns per instruction."""
        return self.delta_ns if self.clock_sized else self.instructions_as_ns

    @property
    def clock_unexplained(self) -> bool:
        """A regression or improvement on the clock and the counts alike whose clock 95%
        interval lies wholly beyond UNEXPLAINED_FACTOR times what the instruction change costs
        (counts that could not decide give no size to set it against)."""
        expected = self.instructions_as_ns
        if (expected is None or self.ci95_ns is None or self.verdict not in MOVED
                or self.clock_verdict != self.verdict or self.counts_verdict != self.verdict):
            return False
        sign = 1.0 if self.delta_ns > 0 else -1.0
        nearest = min(sign * self.ci95_ns[0], sign * self.ci95_ns[1])
        return nearest > max(UNEXPLAINED_FACTOR * sign * expected, 0.0)

    @property
    def clock_to_instructions(self) -> float | None:
        """The clock's change over what the instructions account for (inf when they are 0)."""
        expected = self.instructions_as_ns
        if expected is None or not math.isfinite(self.delta_ns):
            return None
        return abs(self.delta_ns) / abs(expected) if expected else math.inf

    @property
    def delta_instructions(self) -> float | None:
        if self.base_instructions is None or self.branch_instructions is None:
            return None
        return self.branch_instructions - self.base_instructions


def with_counts(comparisons, count_comparisons, sure_clock: dict | None = None) -> list[Comparison]:
    """The comparisons, judged on instruction counts wherever both sides have them: a change in
    counts beyond the threshold is a regression whatever the wall-clock noise said.
    `sure_clock` maps (case, op) to the clock's verdict at NO_CHANGE_CONFIDENCE, where the
    caller has it: a clock that goes against the counts' "no change" must be as sure as that
    claim (a 95% "regression" after five pairs flagged an untouched case as "clock only" in
    comparisons of kept copies; figures: benchmarks/history.md, 'Docstring figures'). Without
    it, the clock's own verdict is used. Where the counts cannot decide, the clock's own verdict
    is the verdict."""
    by_key = {(c.case, c.op): c for c in count_comparisons}
    out = []
    for c in comparisons:
        counted = by_key.get((c.case, c.op))
        if counted is None:
            out.append(c)
            continue
        out.append(dataclasses.replace(
            c, base_instructions=counted.base, branch_instructions=counted.branch,
            instructions_ci95=counted.ci95, counts_verdict=counted.verdict,
            counts_exact=counted.exact, counts_why=counted.why,
            clock_verdict_sure=(sure_clock or {}).get((c.case, c.op))))
    return out


def _bootstrap_headline_sd(samples: tuple[float, ...], seed: int) -> float:
    """Standard error of the headline quantile within one run, by bootstrap."""
    import random

    rng = random.Random(seed)
    n = len(samples)
    values = [stats.headline(rng.choices(samples, k=n)) for _ in range(_BOOTSTRAP_RESAMPLES)]
    return stats.stdev(values)


def compare_results(base: CaseResult, branch: CaseResult, threshold_ns: float,
                    threshold_pct: float) -> Comparison:
    """Unpaired comparison of one case measured in two separate runs."""
    if not (base.ok and branch.ok):
        return Comparison(base.case, base.op, base.per_call_ns if base.ok else math.nan,
                          branch.per_call_ns if branch.ok else math.nan, math.nan, None,
                          unmeasured(), paired=False)
    delta = branch.per_call_ns - base.per_call_ns
    variance = sum(
        _bootstrap_headline_sd(r.samples_ns, seed) ** 2 + (UNPAIRED_PROCESS_CV * r.per_call_ns) ** 2
        for seed, r in enumerate((base, branch))
    )
    half = stats.Z95 * math.sqrt(variance)
    wide = stats.Z99 * math.sqrt(variance)
    ci = (delta - half, delta + half)
    # One side that ran at the busy machine's speed shifts it as no interval from its samples covers.
    verdict = judge(delta, ci, threshold_for(base.per_call_ns, threshold_ns, threshold_pct),
                    (delta - wide, delta + wide), undecidable=base.contended or branch.contended)
    return Comparison(base.case, base.op, base.per_call_ns, branch.per_call_ns, delta, ci,
                      verdict, paired=False)


def compare_runs(base: RunResult, branch: RunResult,
                 threshold_ns: float = DEFAULT_THRESHOLD_NS,
                 threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> list[Comparison]:
    """Compare every (case, op) present in both runs, in the base run's order."""
    branch_by_key = {(r.case, r.op): r for r in branch.results}
    return [
        compare_results(r, branch_by_key[(r.case, r.op)], threshold_ns, threshold_pct)
        for r in base.results if (r.case, r.op) in branch_by_key
    ]


def comparison_payload(comparisons, settings: ComparisonSettings, environments: Sides) -> dict:
    """The versioned JSON of a comparison (`comparison.json`, `bench.py --compare --json`);
    `environments`: each side's environment.Environment."""
    return {
        "schema": COMPARISON_SCHEMA,
        "paired": all(c.paired for c in comparisons) if comparisons else None,
        "settings": settings.to_dict(),
        "environments": environments.to_dict(lambda env: env.to_dict()),
        "comparisons": [c.to_dict() for c in comparisons],
    }


def any_regression(comparisons) -> bool:
    return any(c.verdict == REGRESSION for c in comparisons)
