"""The notes under one run's tables, and its warnings for stderr: what a reader must know to
read the figures above them.

`run_report.py` lays out the rows; the sentences beneath them are many and each has its own
reason (a run slowed as a whole, a case with no baseline in the run, an n/a reason too long for
its cell, a catalog case timing its own statement, a twin unlike its case, a meta op running
Python, counts that moved with memory layout), so they live here, apart from the layout. Like
the tables, everything here reads a `RunResult` and returns text.
"""

from __future__ import annotations

import math

from overrides.cases.casenames import BASELINE_CASE, split_shaped, twinned
from overrides.clock import stats
from overrides.clock.speed import SpeedCheck
from overrides.clock.timer import DRIFT_MAX_WIDTH
from overrides.counts import records
from overrides.progress import counted
from overrides.results import CaseResult, RunResult


# An n/a reason longer than this shows its first clause in the table and whole in the notes
# below it, so one long reason (a user class's construction hint) does not widen every row.
NA_CELL_CHARS = 60


def _shortened(reason: str) -> bool:
    return len(reason) > NA_CELL_CHARS


def na_cell(reason: str) -> str:
    """The table's cell for an n/a reason (see NA_CELL_CHARS)."""
    if not _shortened(reason):
        return f"n/a: {reason}"
    return f"n/a: {reason.split('; ', 1)[0]} (see below)"


def _op_note(run: RunResult) -> list[str]:
    """Which op a one-op table timed or counted, unless it is the default one (torch.add)."""
    from overrides.cases.ops import DEFAULT_OP

    names = {r.op for r in run.results}
    if len(names) != 1 or names == {DEFAULT_OP.name}:
        return []
    (name,) = names
    stmt = op_stmts().get(name, name)
    return [f"op: {name}" + (f" = {stmt}" if stmt != name else "") + ", on each case's operands"]


def table_notes(run: RunResult, matrix: bool = False) -> list[str]:
    """The notes under a run's timing table (with `matrix`, those the matrix's own notes do not
    already say)."""
    notes = [] if matrix else _op_note(run)
    notes += [
        f"per call = {stats.headline_label()} of per-call samples (each sample = calls shown after 'x');"
        f" the empty-loop cost ({loop_cost(run)} ns/call) is already removed.",
        speed_note(run),
    ]
    notes += _missing_baseline_notes(run, "no overhead or ratio" if matrix else "'-' in overhead ns and vs Tensor")
    notes += [] if matrix else _long_na_notes(run)  # the matrix says every reason in its footnotes
    for result in run.results:
        if result.error and not (matrix and not result.ok):  # a matrix keys a failed cell instead
            notes.append(f"{result.case} [{result.op}] failed: {result.error}")
        elif result.ok and result.too_spread:
            notes.append(f"! {result.case} [{result.op}]: {_spread_reason(result)}")
    notes += _catalog_notes(run) + _twin_notes(run) + _meta_notes(run)
    notes += [entry["note"] for entry in run.settings.not_applied]
    if run.interrupted:
        notes.append("interrupted: figures cover only the rounds finished before Ctrl-C")
    return notes


SLOW_MARK = "~"  # after each figure of a run the machine slowed as a whole (speed_note says by how much)
_BUILDS = "another build is another memory layout, so compare builds with --compare"


def slow_mark(run: RunResult) -> str:
    return f" {SLOW_MARK}" if run.slow else ""


def speed_note(run: RunResult) -> str:
    """What this run measured of its own speed against this machine's earlier runs, and
    nothing it did not (overrides/clock/speed.py); the slow run's line carries the mark."""
    check = run.speed
    within = "95% CI covers sampling noise within this run"
    if check is None:
        return f"{within}; this run's speed against other runs was not checked; {_BUILDS}."
    said = speed_said(check, "the cases", _CASES_READ_HIGH)
    return f"{SLOW_MARK} {said}; {_BUILDS}." if check.slow else f"{within}; {said}; {_BUILDS}."


_CASES_READ_HIGH = "every figure marked reads high (the ratios less so)"


def speed_said(check: SpeedCheck, beside: str, reads_high: str) -> str:
    """A run's speed check in words: its reference loop, timed beside `beside`, against this
    machine's earlier runs; a slow one says so, and which figures read high (`reads_high`)."""
    reference = f"a reference loop ({check.stmt}) timed beside {beside}"
    if check.reference_ns is None:
        return f"{reference} took {len(check.samples_ns)} samples, too few to judge the run's speed"
    if check.ratio is None:
        return (f"{reference} ran {check.reference_ns:,.1f} ns a call, the first run kept for this machine and "
                "Python, so its speed has nothing to be compared with yet")
    against = (f"{check.ratio:.2f}x the fastest of this machine's {counted(check.earlier_runs, 'earlier run')} "
               f"({check.reference_ns:,.1f} ns a call against {check.best_ns:,.1f})")
    if check.slow:
        return (f"slow run: {reference} ran {against}, past {check.limit:.2f}x: the machine was slower for the "
                f"whole run, so {reads_high}; re-run when it is quieter")
    return f"{reference} ran {against}: not slowed past {check.limit:.2f}x"


def speed_warnings(run: RunResult) -> list[str]:
    """The slow run's line, for stderr."""
    return [f"warning: {speed_said(run.speed, 'the cases', _CASES_READ_HIGH)}"] if run.slow else []


def _missing_baseline_notes(run: RunResult, shown: str) -> list[str]:
    """Why a case shows no overhead, and how to get one: `bench.py --cases SubTensor` alone
    has nothing to measure SubTensor's overhead against."""
    missing: dict[str, list[str]] = {}
    for result in run.results:
        if result.ok and result.case != result.baseline and run.overhead_ns(result) is None:
            cases = missing.setdefault(result.baseline, [])
            if result.case not in cases:
                cases.append(result.case)
    in_run = {r.case for r in run.results}
    notes = []
    for baseline, cases in missing.items():
        because = f"{', '.join(cases)}: {shown}, because overheads need the {baseline} case in the same run"
        if baseline in in_run:  # it ran, but has no figure for that op: its own line says why
            notes.append(f"{because}, and it has no figure for the same op")
        else:
            notes.append(f"{because}; add it: --cases {baseline} {' '.join(cases)}")
    return notes


def loop_cost(run: RunResult) -> str:
    costs = [r.loop_overhead_ns for r in run.results if r.ok]
    if not costs:
        return "-"
    return f"{min(costs):.1f}" if max(costs) - min(costs) < 0.05 else f"{min(costs):.1f}-{max(costs):.1f}"


# A plain meta tensor's op that takes longer than this runs more than dispatch: its meta function
# is Python (torch._refs: torch 2.13's torch.add on meta runs ~360 Python calls, ~50 us a call),
# where a C++ one (x.view(-1), x.t(), x.detach()) takes ~1 us.
META_PYTHON_NS = 10_000.0


def _meta_notes(run: RunResult) -> list[str]:
    """Where a plain meta case's op is far from dispatch alone: say so, and what to time instead."""
    slow = [r for r in run.results if r.ok and r.case == r.baseline and not twinned(r.case)
            and split_shaped(r.case)[1].device == "meta" and r.per_call_ns > META_PYTHON_NS]
    return [f"{r.case} [{r.op}] takes {r.per_call_ns / 1000:,.0f} us a call: on meta this op runs its meta "
            "function in Python (torch._refs), not dispatch alone, and a subclass's overhead is measured on top "
            "of that; for dispatch alone time an op whose meta function is C++, such as x.view(-1), x.t() "
            "or x.detach()" for r in slow]


def _catalog_notes(run: RunResult) -> list[str]:
    """What a reader of a catalog run must know: a case timing its own statement, a case
    measured against another baseline, a time budget scaled down to fit many targets."""
    notes = []
    own: dict[str, list[str]] = {}
    for result in run.results:
        if result.stmt and result.op in op_stmts() and result.stmt != op_stmts()[result.op]:
            own.setdefault(result.case, []).append(f"{result.stmt} for {result.op}")
    grouped: dict[tuple[str, ...], list[str]] = {}
    for case, stmts in own.items():
        grouped.setdefault(tuple(stmts), []).append(case)
    for stmts, cases in grouped.items():
        verb = "times its" if len(cases) == 1 else "time their"
        notes.append(f"{', '.join(cases)} {verb} own statements: {'; '.join(stmts)}")
    baselines: dict[str, list[str]] = {}
    for result in run.results:
        if (result.ok and result.baseline != BASELINE_CASE and result.case != result.baseline
                and result.case not in baselines.get(result.baseline, [])):
            baselines.setdefault(result.baseline, []).append(result.case)
    for baseline, cases in baselines.items():
        like = (_twin_like(run, baseline) if twinned(baseline) else "plain tensors of the same shape, dtype and device" if baseline != split_shaped(baseline)[0]
                else "the same statements")
        notes.append(f"{', '.join(cases)}: overhead and ratio against {baseline} ({like}), not {BASELINE_CASE}")
    scaled_from = run.settings.min_time_scaled_from_s
    if scaled_from:
        longest = run.settings.max_time_s or run.settings.min_time_s
        took = f"; the run took {run.wall_s:.0f} s" if math.isfinite(run.wall_s) and run.wall_s > 0 else ""  # aim, and outcome
        notes.append(f"at most {longest:.2g} s per case and op, scaled down from {scaled_from:g} s "
                     f"to aim the sampling at ~{_run_budget_s():g} s{took}; --min-time SECONDS sets it")
    if run.settings.recalibrated:
        notes.append(f"calibrated during a slow spell: {', '.join(run.settings.recalibrated)} ran well faster "
                     "than calibration measured, so were resized from their samples and the rounds started over")
    if run.settings.stopped == "time cap" and run.settings.precision:
        busy = [r for r in run.results if r.ok and (stats.contended(r.samples_ns) or stats.busy(r.samples_ns))]
        why = (f"the machine was busy ({len(busy)} of {sum(r.ok for r in run.results)} figures show it: "
               "see ! above)" if busy else "the samples stayed spread wider than that")
        notes.append(f"sampling stopped at the time cap ({run.settings.max_time_s:.3g} s per case) "
                     f"before every figure was known to +-{run.settings.precision:.1%}: {why}; "
                     "the intervals say how sure each figure is")
    if run.settings.stopped == "drift" and run.settings.precision:
        moved = stats.drift([r.samples_ns for r in run.results if r.ok])
        by = f" by {moved.shift:+.1%}" if moved is not None else ""
        notes.append(f"sampling stopped before every figure was known to +-{run.settings.precision:.1%}: "
                     f"the figures moved together{by} between the first and second half of the run, more "
                     "than sampling explains (the machine's speed moved them), and every 95% interval was "
                     f"already within that move and within +-{DRIFT_MAX_WIDTH:.0%}; more samples narrow "
                     "the intervals, not the machine's move (docs/timing.md)")
    return notes


def _twin_like(run: RunResult, twin: str) -> str:
    """What the plain twin `twin` is, from its description ("units:pair's own operands as plain
    tensors: how", overrides/cases/twins.py), as the baseline note says it."""
    said = next((r.description for r in run.results if r.case == twin), "")
    return "its " + said.split("'s ", 1)[1] if "'s " in said else "its own operands as plain tensors"


def _counted_twin_notes(run: RunResult) -> list[str]:
    """A counting run's _catalog_notes for twins (it has no timed figures for that to key on)."""
    cases: dict[str, list[str]] = {}
    for r in run.results:
        if twinned(r.baseline) and r.case != r.baseline and r.case not in cases.get(r.baseline, []):
            cases.setdefault(r.baseline, []).append(r.case)
    return [f"{', '.join(mine)}: overhead and ratio against {twin} ({_twin_like(run, twin)}), not {BASELINE_CASE}"
            for twin, mine in cases.items()] + _twin_notes(run)


def _twin_notes(run: RunResult) -> list[str]:
    """Where a plain twin of yours is unlike your case's operands (overrides/cases/twins.py);
    which twin each case was quoted against is said with its baseline (_catalog_notes)."""
    twins = {r.case: r.warning for r in run.results if twinned(r.case) and r.warning}
    return [f"warning: {name}: {warning}" for name, warning in twins.items()]


def op_stmts() -> dict[str, str]:
    from overrides.cases.ops import all_ops

    return {op.name: op.stmt for op in all_ops()}


def _run_budget_s() -> float:
    from overrides.single_run import DEFAULT_RUN_BUDGET_S

    return DEFAULT_RUN_BUDGET_S


def instruction_notes(run: RunResult) -> list[str]:
    runs = run.instructions or ()
    seeds = [count_run.seed for count_run in runs]
    # how every seed counted (one setting for all), as its first process that did not die says
    how = next((r for r in runs if not r.died), runs[0] if runs else records.CountRun(0, (), {}, 0.0))
    calls = how.calls_each
    sizes = "/".join(map(str, calls)) + (" (fewer for an expensive op)" if len(calls) > 1 else "")
    return [f"instructions/call: Callgrind, one import of torch per hash seed ({', '.join(map(str, seeds))}) "
            "and a forked child per module of yours; "
            f"minimum of repeats 2-{how.repeats} of {sizes} calls "
            "(extra work only ever adds instructions), the loop and the toggles removed; "
            "repeat spread = (max - min) / that minimum.",
            layout_note(run)] + _op_note(run) + _long_na_notes(run) \
        + _counted_twin_notes(run) \
        + [f"incomplete: {died}; the figures rest on the other seeds" for died in records.deaths(run.instructions)]


def layout_note(run: RunResult) -> str:
    """How far this run's counts moved between its hash seeds (memory layouts), where it counted
    under two or more; with one, that it could not see it."""
    spreads = [(max(values) - min(values)) / min(values) for values in
               records.per_call_by_case(run.instructions).values() if len(values) > 1 and min(values) > 0]
    if not spreads:
        return ("Counts move with memory layout, which one hash seed cannot show: compare builds over "
                "several seeds (--seeds 1 2 3), never across one layout each.")
    return (f"Counts move with memory layout: here by up to {max(spreads):.2%} between hash seeds; compare "
            "builds over several seeds (--seeds 1 2 3), never across one layout each.")


def _long_na_notes(run: RunResult) -> list[str]:
    """The n/a reasons the table shortened (na_cell), whole: once per case and reason."""
    ops: dict[tuple[str, str], list[str]] = {}
    for r in run.results:
        if r.not_applicable and _shortened(r.not_applicable):
            ops.setdefault((r.case, r.not_applicable), []).append(r.op)
    return [f"{case} [{', '.join(names)}] n/a: {reason}" for (case, reason), names in ops.items()]


def _spread_reason(result: CaseResult) -> str:
    return spread_reason(result.samples_ns)


def spread_reason(samples_ns) -> str:
    """Why samples are too spread to trust, with what to do, in one clause (a case's, a step's)."""
    n = len(samples_ns)
    if n < stats.MIN_TRUSTED_SAMPLES:
        return (f"only {n} samples, too few to trust; take at least "
                f"{stats.MIN_TRUSTED_SAMPLES} (-m) or a longer --min-time")
    if stats.contended(samples_ns):
        return (f"the figure lies {stats.contention(samples_ns):.0%} above the fastest sample "
                f"(limit {stats.CONTENDED_FRACTION:.0%}): the machine was busy for most of the run, so "
                "this is its busy speed; re-run on a quieter machine")
    if stats.busy(samples_ns):
        return (f"half the samples took over {stats.BUSY_MEDIAN_RATIO:g}x the figure (median "
                f"{stats.median(samples_ns):,.0f} ns against {stats.headline(samples_ns):,.0f} ns): "
                "the machine was busy for most of the run and the figure rests on its fastest few "
                "samples; re-run on a quieter machine, or compare builds with --compare")
    return (f"samples too spread to trust (p1-p5 spans {stats.core_width(samples_ns):.1%} "
            f"of the figure, limit {stats.CORE_WIDTH_WARN_FRACTION:.0%}); re-run on a quieter machine")


def spread_warnings(run: RunResult) -> list[str]:
    """One line per case too spread to trust, per twin unlike its case's operands, and for a slow
    run, for stderr."""
    return [f"warning: {r.case} [{r.op}]: {_spread_reason(r)}"
            for r in run.results if r.ok and r.too_spread] + _twin_notes(run) + speed_warnings(run)
