"""The verdict: every word a comparison may say of a case, and the one place each is decided.

The clock (the paired A/B, `overrides/ab/`, and the unpaired comparison, `overrides/case_comparison.py`)
and the instruction counts (`overrides/counts/judge.py`) judge by this one rule, so a verdict
means the same in both views; `clock_and_counts` makes one verdict of the two. Everyone else
reads verdicts (compares them with the names below) and never writes one:
`tests/test_owners.py` fails on a verdict word, or one of these names, returned, assigned or
passed anywhere but here. It sits at the bottom of the package (it imports nothing of it) so
that every wing can use it without climbing up.

Verdict rules, with threshold T = max(threshold_ns, threshold_pct% of base):
- `regression`: the 95% interval lies above 0 and the estimate is at least T;
- `improvement`: the 95% interval lies below 0 and the estimate is at most -T;
- `no change`: the whole 99% interval lies within [-T, +T] (see NO_CHANGE_CONFIDENCE; on
  instruction counts the 95% one, counts.judge.COUNTS_NO_CHANGE_CONFIDENCE);
- `clock only` (with instruction counts): the wall clock moved beyond T but the counts rule out
  a change (`no change` on the counts): the same instructions run slower or faster, which is
  where the code sits in memory, not what it does; not a regression. In the paired A/B the
  clock must be 99% sure to say so (`case_comparison.with_counts`), as sure as the counts' `no change`;
- `disagree` (with instruction counts): the clock and the counts each found a change, in
  opposite directions (as torch 2.14.1 against 2.12.1 did on plain Tensor here; figures:
  benchmarks/history.md, 'Docstring figures'): fewer instructions that cost more cycles
  (memory, atomics, branches), or the reverse; a reviewer must look, but neither view alone is
  the verdict;
- where the counts are `inconclusive` (their seeds' layouts spread too far, or the change sits
  near the threshold), the clock's verdict;
- a regression or improvement whose clock change is more than case_comparison.UNEXPLAINED_FACTOR times what the
  instruction change costs at the case's own nanoseconds per instruction keeps its verdict and is
  named (`clock_unexplained`): the same work got faster or slower (memory, caches, atomics or
  threads), not only the code. torch 2.12.1 -> 2.14.1 read SubTensor faster on the clock by far
  more than its fewer instructions cost at its ns per instruction (figures:
  benchmarks/history.md, 'Docstring figures'): the verdict "improvement" is right, and the
  instructions account for a small part of it;
- `inconclusive`: anything else (the data cannot carry a claim either way), and, unpaired,
  whenever one side's run was contended (`stats.contended`: busy for most of the run).
`clock_unexplained` is a property of `case_comparison.Comparison` (it needs the case's ns per
instruction), not a verdict; a contended run is `judge(..., undecidable=True)`.
"""

from __future__ import annotations

import math

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no change"
CLOCK_ONLY = "clock only"
DISAGREE = "disagree"
INCONCLUSIVE = "inconclusive"
VERDICTS = (REGRESSION, IMPROVEMENT, NO_CHANGE, CLOCK_ONLY, DISAGREE, INCONCLUSIVE)
DECIDED = (REGRESSION, IMPROVEMENT, NO_CHANGE)  # verdicts that end the A/B's sampling
MOVED = (REGRESSION, IMPROVEMENT)  # one view found a change, in a direction
# Verdicts that say the case changed, and so want explaining (a call tree, a bold step in the
# history picture): the counts and the clock moved, even if in opposite directions.
CHANGED = (REGRESSION, IMPROVEMENT, DISAGREE)
# Verdicts that say the time per call moved, whatever the counts say: what a flamegraph (a
# sampling of time) can show. `clock only` is here and `disagree` is not, unlike CHANGED.
CLOCK_MOVED = (REGRESSION, IMPROVEMENT, CLOCK_ONLY)
# "no change" is a claim a reviewer acts on as much as "regression", so it must be as sure. A
# regression needs the 95% interval above 0 *and* the estimate past T, about three standard
# errors with the A/B's usual noise: wrong ~1% of the time at a true change of 0. "no change"
# at a true change of T is wrong as rarely only with the 99% interval inside +-T. With the 95%
# one, the bare shim (+100 ns on SubTensor, T = 55 ns) was once read +13 [-11..+37]: "no change".
NO_CHANGE_CONFIDENCE = 0.99
DEFAULT_THRESHOLD_NS = 20.0  # below this a change is not worth a reviewer's attention here
# ... nor below 0.75% of the call's cost. Chosen on 30 A/A and 30 bare-shim pairs of the paired
# A/B (10-pair comparisons resampled from them): at 0.5%, 11% of A/A comparisons flagged some
# case; at 0.75%, 6%, while the bare shim (+1.3% on SubTensor) was still caught 99% of the time.
DEFAULT_THRESHOLD_PCT = 0.75


def threshold_for(base_ns: float, threshold_ns: float, threshold_pct: float) -> float:
    return max(threshold_ns, threshold_pct / 100.0 * base_ns)


def judge(delta: float, ci: tuple[float, float] | None, threshold: float,
          no_change_ci: tuple[float, float] | None = None, *, exact: bool = False,
          undecidable: bool = False) -> str:
    """The verdict for an estimate, its 95% interval and its NO_CHANGE_CONFIDENCE interval
    (the 95% one when not given); see the module docstring. `exact`: the two sides counted
    alike to the instruction, so no change whatever the interval; `undecidable`: the data
    cannot carry a claim whatever they read (one side's run contended, one seed's layout,
    seeds that spread as no layout moves them)."""
    if exact:
        return NO_CHANGE
    if undecidable or ci is None or not all(math.isfinite(v) for v in ci) or not math.isfinite(delta):
        return INCONCLUSIVE
    low, high = ci
    if low > 0 and delta >= threshold:
        return REGRESSION
    if high < 0 and delta <= -threshold:
        return IMPROVEMENT
    wide_low, wide_high = no_change_ci or ci
    if -threshold <= wide_low and wide_high <= threshold:
        return NO_CHANGE
    return INCONCLUSIVE


def unmeasured() -> str:
    """The verdict of a case one side could not measure (an error, no samples, too few pairs)."""
    return INCONCLUSIVE


def known(verdict: str | None) -> str:
    """`verdict` if it is one of VERDICTS, else INCONCLUSIVE (a file from another version)."""
    return verdict if verdict in VERDICTS else INCONCLUSIVE


def clock_and_counts(clock_verdict: str, counts_verdict: str | None, sure_clock: str | None = None) -> str:
    """One verdict from both views. The counts see no machine noise, so they judge; but a clock
    that moved where the counts rule out a change is said so, not called a regression. Counts
    that cannot decide (their seeds' layouts spread too far) leave the verdict to the clock:
    the bare shim's three seeds once read an interval of instructions reaching below zero while
    the clock read a regression, 99% sure (figures: benchmarks/history.md, 'Docstring figures').
    `sure_clock`, the clock's verdict at NO_CHANGE_CONFIDENCE where known, is what may go
    against the counts (see case_comparison.with_counts). Without counts (`counts_verdict`
    None), the clock's verdict."""
    against = sure_clock or clock_verdict
    if counts_verdict is None or counts_verdict == INCONCLUSIVE:
        return clock_verdict
    if counts_verdict == NO_CHANGE and against in MOVED:
        return CLOCK_ONLY
    if {counts_verdict, against} == set(MOVED):
        return DISAGREE
    return counts_verdict


# A budget row's words (`--check-budget`, overrides/budget.py): a row is judged against its
# margin, seed by seed, not by an interval, so it has words of its own; decided here all the same.
WITHIN = "within"
OVER = "over budget"
UNDER = "under budget: tighten"
MISSING = "not measured"
NO_ROW = "no row in the budget"
BUDGET_VERDICTS = (WITHIN, OVER, UNDER, MISSING, NO_ROW)
BUDGET_JUDGED = (WITHIN, OVER, UNDER)  # a row measured against its margin


def budget_row(delta: float | None, margin: float | None, calls_changed: bool = False) -> str:
    """A budget row's verdict: its mean per-seed change against its margin (None: not measured,
    or, with no margin, no row in the budget). A row within its margin whose Python calls
    changed (`calls_changed`) is off all the same, on the side its count moved: its code moved,
    and a margin sized for memory layout must not hide a new call."""
    if margin is None:
        return NO_ROW
    if delta is None:
        return MISSING
    if delta > margin or (calls_changed and delta >= 0):
        return OVER
    if delta < -margin or calls_changed:
        return UNDER
    return WITHIN
