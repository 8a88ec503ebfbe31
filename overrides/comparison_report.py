"""A comparison's output for people: the table of verdicts, in text or markdown, and the notes
under it that say how the two sides were measured and what each verdict rests on.

It reads `case_comparison.Comparison`s and the comparison's settings, and returns text; the table of
one run is `overrides/run_report.py`.
"""

from __future__ import annotations

import math

from overrides.case_comparison import UNPAIRED_PROCESS_CV
from overrides.comparison_settings import ComparisonSettings, CountSettings, LibraryPlacement
from overrides.counts.judge import DEFAULT_THRESHOLD_INSTRUCTIONS
from overrides.figures import count
from overrides.run_report import fmt_ns
from overrides.sides import Sides
from overrides.tables import ruled
from overrides.tables import pipe_table
from overrides.verdicts import CHANGED, CLOCK_ONLY, DISAGREE, INCONCLUSIVE

# Functions named in a moved case's note, the first (new ones, then the largest changes) of
# `pycalls.order`; --json lists them all.
NAMED_IN_NOTE = 6
COMPARISON_HEADER = ("case", "base ns", "branch ns", "delta ns", "95% CI ns", "delta %", "verdict")
# With instruction counts on both sides, the clock's verdict moves aside and the counts decide.
COUNTED_HEADER = ("case", "base ns", "branch ns", "delta ns", "95% CI ns", "delta %", "clock verdict",
                  "delta instr", "95% CI instr", "delta instr %", "verdict")


def _interval(ci, signed: bool = True) -> str:
    return "-" if ci is None else f"{fmt_ns(ci[0], signed)}..{fmt_ns(ci[1], signed)}"


def _one_seed(c) -> bool:
    """Counted under one seed only: no interval over seeds (and no verdict unless exact)."""
    return c.instructions_ci95 is None and c.delta_instructions is not None


def _counted(comparisons) -> bool:
    return any(c.delta_instructions is not None for c in comparisons)


def _comparison_rows(comparisons, multi_op: bool) -> list[list[str]]:
    counted = _counted(comparisons)
    rows = [list(COUNTED_HEADER if counted else COMPARISON_HEADER)]
    for c in comparisons:
        name = f"{c.case} [{c.op}]" if multi_op else c.case
        wall = [name, fmt_ns(c.base_ns), fmt_ns(c.branch_ns), fmt_ns(c.delta_ns, True),
                _interval(c.ci95_ns)]
        pct = "-" if not math.isfinite(c.delta_pct) else f"{c.delta_pct:+.2f}%"
        if counted:
            instr_pct = ("-" if c.delta_instructions is None or not c.base_instructions
                         else f"{100 * c.delta_instructions / c.base_instructions:+.2f}%")
            counts_ci = "1 seed" if _one_seed(c) else _interval(c.instructions_ci95)
            rows.append(wall + [pct, c.clock_verdict, fmt_ns(c.delta_instructions, True),
                                counts_ci, instr_pct, verdict_cell(c)])
        else:
            rows.append(wall + [pct, c.verdict])
    return rows


def verdict_cell(c) -> str:
    """The verdict, with what it rests on when that is not the counts alone: `clock 29x` when
    the clock moved far more than its instructions explain, `(clock)` when the counts could not
    decide and the clock's verdict stands."""
    if c.clock_unexplained:
        ratio = c.clock_to_instructions
        return f"{c.verdict}, clock {ratio:.0f}x" if math.isfinite(ratio) else f"{c.verdict}, clock only"
    if c.counts_verdict == INCONCLUSIVE:
        return f"{c.verdict} (clock)"
    return c.verdict


def unexplained_note(c) -> str:
    """A sentence for a reviewer on a clock change the instructions cannot account for."""
    return (f"{c.case}: the clock moved {fmt_ns(c.delta_ns, True)} ns ({c.delta_pct:+.1f}%), "
            f"{c.clock_to_instructions:.0f}x what its {fmt_ns(c.delta_instructions, True)} "
            f"instructions cost at this case's {c.base_ns / c.base_instructions:.3f} ns an instruction "
            f"({fmt_ns(c.instructions_as_ns, True)} ns): the same work got "
            f"{'faster' if c.delta_ns < 0 else 'slower'}: memory, caches, atomics or threads, not "
            "only the code. The verdict stands; its size is the machine's as much as the code's.")


def user_module_notes(user_modules: Sides | None, comparisons=(), your_code: Sides | None = None) -> list[str]:
    """Which file of yours each side ran, per user case: one file on both sides says your code
    was the same there, two files that each side ran its own. What moved is said only where a
    verdict says something moved (CHANGED, CLOCK_ONLY): the build's doing with two interpreters,
    the method's false alarm with one (`your_code`: nothing differed between the sides, unless
    its two specs name two factories, which one file may hold)."""
    if not user_modules:
        return []
    base, branch = user_modules.base or {}, user_modules.branch or {}
    notes = []
    for spec in dict.fromkeys([*base, *branch]):
        a, b = base.get(spec), branch.get(spec)
        moved = sorted({c.verdict for c in comparisons if c.case == spec and c.verdict in CHANGED + (CLOCK_ONLY,)})
        one_interpreter = bool(your_code)
        if a and a == b and (not your_code or your_code.base == your_code.branch):
            said = f"{spec}: both sides ran one file of yours, {a}: your code is the same on both"
            if not moved:
                notes.append(said + ", and no verdict found a change.")
            elif one_interpreter:
                notes.append(f"{said}, in one interpreter: nothing differed between the sides, so its "
                             f"{' / '.join(moved)} is a false alarm of the method, not a change.")
            else:
                notes.append(f"{said}, so what moved ({' / '.join(moved)}) is the build, not your code.")
        else:
            notes.append(f"{spec}: base ran {a or 'no file (not resolved)'}, branch ran "
                         f"{b or 'no file (not resolved)'}: each side its own code.")
    return notes


def _named_row(d) -> str:
    where = d.function if d.line is None or d.is_c else f"{d.function[:-1]}:{d.line})"
    calls = f"{count(d.base_calls)} -> {count(d.branch_calls)} call{'' if d.branch_calls == 1 else 's'}"
    codes = (f", {count(d.base_bytecodes)} -> {count(d.branch_bytecodes)} bytecodes"
             if d.has_bytecodes else "")
    return f"{d.tag} `{where}` {calls}{codes}"


def changed_functions_notes(comparisons) -> list[str]:
    """What changed in each case that moved, by name (`Comparison.changed_functions`): the
    Python functions added, removed or called differently, new ones first, with calls and own
    bytecodes per call of the case on each side; or that the names were not looked for, and why."""
    multi_op = len({c.op for c in comparisons}) > 1
    notes, not_looked_for = [], {}
    for c in comparisons:
        named = c.changed_functions
        if named is None:
            continue
        name = f"{c.case} [{c.op}]" if multi_op else c.case
        if not named.looked_for:
            not_looked_for.setdefault(named.not_looked_for, []).append(name)
            continue
        if not named.functions:
            notes.append(f"{name}: what changed: no Python function was called more or less, or ran "
                         "other bytecodes (counted on both sides): what moved is not in the Python code.")
            continue
        listed = "; ".join(_named_row(d) for d in named.functions[:NAMED_IN_NOTE])
        more = len(named.functions) - NAMED_IN_NOTE
        notes.append(f"{name}: what changed, per call (Python calls counted on both sides, base -> branch): "
                     f"{listed}" + (f"; and {more} more (--json lists them all)" if more > 0 else "") + "."
                     + (f" {named.bytecodes_note}" if named.bytecodes_note else ""))
    for why, names in not_looked_for.items():
        notes.append(f"what changed, by name: not looked for ({', '.join(names)}): {why}.")
    return notes


def verdict_rule(threshold_ns: float, threshold_pct: float) -> str:
    """The threshold and what each verdict rests on, in one sentence (also under `--compare
    BASE BRANCH --step`'s change: one rule, one wording)."""
    return (f"threshold: max({threshold_ns} ns, {threshold_pct}% of base); regression/improvement only when the "
            "95% CI excludes 0 and the delta passes the threshold; no change only when the 99% CI lies within the "
            "threshold (as sure as a regression); otherwise inconclusive.")


def comparison_notes(comparisons, settings: ComparisonSettings) -> list[str]:
    paired = bool(comparisons) and all(c.paired for c in comparisons)
    if paired:
        each = f" of {settings.seconds_per_pair:g} s" if settings.seconds_per_pair else ""
        how = (f"paired A/B: base and branch sampled alternately in {settings.pairs} fresh "
               f"worker pairs{each}{_stopped(settings)}; delta and 95% CI from the pair-to-pair spread "
               f"(t-interval), so memory-layout luck is inside the interval.")
    else:
        how = ("UNPAIRED: the two sides were measured in separate runs. The interval adds a "
               f"process-to-process term (machine drift and memory layout, ~{UNPAIRED_PROCESS_CV:.0%} per side), so only "
               "changes of a few percent can be called; for small changes measure both builds "
               "together with `bench.py --compare BASE_PY BRANCH_PY`.")
    if paired:
        how += (" base ns and branch ns are each side's own figure over all its samples; delta ns "
                "(and delta %) is the paired estimate, so it need not equal their difference.")
    notes = changed_functions_notes(comparisons) + [how, verdict_rule(settings.threshold_ns, settings.threshold_pct)]
    if paired and settings.placement:
        notes.append(_placement_note(settings.placement))
    if any(c.verdict == DISAGREE for c in comparisons):
        notes.append("disagree: the clock and the instruction counts found changes in opposite "
                     "directions: fewer instructions that cost more cycles (memory, atomics, "
                     "branches) or the reverse; look at both views before calling it either way.")
    if any(c.verdict == CLOCK_ONLY for c in comparisons):
        notes.append("clock only: the wall clock moved past the threshold but the instruction counts "
                     "rule out a change: the same instructions ran slower or faster, which is where "
                     "the code sits in memory (layout, cache placement), not what it does.")
    for c in comparisons:
        if c.clock_unexplained:
            notes.append(unexplained_note(c))
    if settings.same_path:
        notes.append(f"start-up paths: {settings.same_path.summary}.")
    for entry in settings.not_timed:
        notes.append(f"{entry.target}: not timed: {entry.why}")
    if settings.your_code:
        base, branch = settings.your_code
        notes.append(f"your code: one interpreter on both sides; base built {base}, branch {branch}, "
                     f"timed and counted alike under the name {base}"
                     + (": the same code on both sides (an A/A), so any change found is the method's noise."
                        if base == branch else "."))
    notes += user_module_notes(settings.user_modules, comparisons, settings.your_code)
    notes += [entry["note"] for entry in settings.not_applied]
    if settings.incomplete:
        notes.append(f"incomplete: {settings.incomplete}; the verdicts rest on the {settings.pairs or 0} "
                     "pairs finished before it, and gate nothing.")
    elif settings.workers_died:
        died = settings.workers_died
        notes.append(f"retried: {len(died)} worker{'s' if len(died) > 1 else ''} died and "
                     f"{'their pairs were' if len(died) > 1 else 'its pair was'} run again with fresh workers "
                     f"({'; '.join(died)}).")
    if settings.instructions_skipped:
        notes.append(f"instruction counts skipped: {settings.instructions_skipped}; the verdicts "
                     "are the wall clock's alone.")
    if _counted(comparisons):
        counts = settings.instructions or CountSettings((), DEFAULT_THRESHOLD_INSTRUCTIONS, settings.threshold_pct or 0.0)
        seeds_added = counts.seeds_added
        added = (f" (the last {len(seeds_added)} only for the cases the first ones left undecided)"
                 if seeds_added else "")
        exact = [c.case for c in comparisons if c.counts_exact]
        if exact:
            notes.append(f"exact: {', '.join(exact)} counted alike on both sides under every seed "
                         "(within 2 instructions a call, both started from one path): the same "
                         "instructions ran, so \"no change\" needs no more seeds.")
        by_clock = [c.case for c in comparisons if c.counts_verdict == INCONCLUSIVE and not c.counts_why]
        for c in comparisons:
            if c.counts_verdict == INCONCLUSIVE and c.counts_why:
                notes.append(f"(clock): the counts do not judge {c.case}: {c.counts_why}, so the "
                             "clock's verdict stands there.")
        if by_clock:
            notes.append(f"(clock): the counts could not decide {', '.join(by_clock)} (their seeds "
                         "spread too far, or the change sits near the threshold), so the clock's "
                         "verdict stands there.")
        notes.append(
            f"verdict: judged on instruction counts per call (Callgrind, hash seeds "
            f"{', '.join(map(str, counts.seeds))}{added}, base and branch matched per "
            f"seed; CI over the seeds), threshold max({counts.threshold} instructions, "
            f"{counts.threshold_pct}% of base): counts do not see machine noise, so a "
            "change beyond it is a regression whatever the wall clock says.")
    return notes


_STOPPED = {"decided": "until every case was decided", "time cap": "until the time cap",
            "pair limit": "until the pair limit", "interrupted": "until interrupted"}


def _stopped(settings: ComparisonSettings) -> str:
    why = _STOPPED.get(settings.stopped)
    if not why:
        return ""
    cap = settings.max_seconds
    return f" ({why}{f', cap {cap:g} s' if cap and why != _STOPPED['time cap'] else ''})"


def _placement_note(record: LibraryPlacement) -> str:
    """What was done about where the libraries sit in memory (overrides/builds/placement.py)."""
    if not record.views:
        return (f"library placement: not matched ({record.reason}); two installs of one "
                "build can then differ by up to ~2% for no reason in the code.")
    if not record.matched:
        return (f"library placement: NOT matched ({record.failure}); two installs of one "
                "build can then differ by up to ~2% for no reason in the code.")
    text = (f"library placement: {record.shared_libraries} shared libraries identical on "
            f"both sides ({record.shared_mb:,.0f} MB) were loaded by both from one file")
    replaced = record.replaced_per_pair or ()
    if replaced:
        names = ", ".join(name.rsplit("/", 1)[-1] for name in replaced[:3])
        more = f" and {len(replaced) - 3} more" if len(replaced) > 3 else ""
        text += (f"; {len(replaced)} that differ ({names}{more}) were copied anew for every pair"
                 f"{' on ' + record.copies_on if record.copies_on else ''}, so where they "
                 "sit in memory is a random effect inside the interval")
        if record.copies_on in ("tmpfs", "ramfs"):
            text += (" (WARNING: on a memory file system, whose 4 KB pages can move the clock by "
                     "~10% against an install on disk; set XDG_CACHE_HOME to a disk folder)")
    if record.fixed:
        text += f"; {len(record.fixed)} GPU-only libraries that differ were left in place"
    return text + "."


def comparison_table(comparisons, settings: ComparisonSettings) -> str:
    multi = len({c.op for c in comparisons}) > 1
    lines = ruled(_comparison_rows(comparisons, multi))
    return "\n".join(lines + [""] + comparison_notes(comparisons, settings))


def comparison_markdown(comparisons, settings: ComparisonSettings, notes: bool = True) -> str:
    """The comparison as a markdown table, and (`notes`) its notes as a list under it."""
    multi = len({c.op for c in comparisons}) > 1
    rows = _comparison_rows(comparisons, multi)
    lines = pipe_table(rows[0], rows[1:], right_from=1, right_to=len(rows[0]) - 1)
    if not notes:
        return "\n".join(lines)
    return "\n".join(lines + [""] + [f"- {note}" for note in comparison_notes(comparisons, settings)])
