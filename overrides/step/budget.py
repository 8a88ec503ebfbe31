"""`bench.py --write-budget FILE --step SPEC` and `--check-budget FILE --step SPEC`: an
instruction budget of your training step, kept in git and checked in CI, as the op budget
(overrides/budget.py) is for cases.

Why a budget of its own kind. A step's budget holds one step and its plain twin, counted as
`--step --instructions` counts them (counting.py: one valgrind process a seed, exact between
runs under one seed), and your functions' calls and bytecodes a step: a file of its own schema
(STEP_SCHEMA), so an op budget checked with `--step`, or a step budget without it, is refused in
one line rather than read as rows missing.

Its rows are the op budget's rows (budget.Row, the case being the step's spec and the op its
side, `yours` or `plain`), sized and judged by the op budget's own rules: the mean of per-seed
changes under the budget's fixed seeds, a margin of half the spread over seeds and the largest
move a layout variant made (unused functions compiled onto your sources, one variant a seed, as
budget.LAYOUT_VARIANTS), within max(50, 0.75% of the count). `yours` is the figure your change
moves; `plain` moves only with torch, so a `plain` row off tells a torch upgrade from your change.

Your functions' calls and own bytecodes a step are counted exactly (counting.python_calls), so
a function of yours called more, or running more of its own bytecodes (a loop added to your
`__torch_function__`), puts its side's row off even within the instruction margin, and is named:
as a new Python call does a case's row (budget.with_calls), since a margin sized for memory layout
must never hide a change of your code. A harmless edit (a comment, an unused function) changes
neither.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Sequence

from overrides import budget, errors
from overrides.environment import Fingerprint
from overrides.errors import UsageError
from overrides.figures import signed, whole
from overrides.step.counting import PLAIN, YOURS, FunctionCalls, StepCounts

STEP_SCHEMA = "torch-function-overhead/step-budget/1"
STEP_CHECK_SCHEMA = "torch-function-overhead/step-budget-check/1"
SIDES = (YOURS, PLAIN)  # rows in this order: the figure your change moves first
# Your functions shown under a check: those whose calls or bytecodes a step changed, the largest change first,
# up to this many (a table a reviewer reads, not a dump).
SHOWN_FUNCTIONS = 8


@dataclasses.dataclass(frozen=True)
class StepBudget:
    environment: Fingerprint  # what its counts hold for
    seeds: tuple[int, ...]
    spec: str  # the step's factory, pkg.module:factory
    rows: tuple[budget.Row, ...]  # case: the spec, op: the side (yours, plain)
    functions: tuple[FunctionCalls, ...]  # your functions' calls and bytecodes a step, both sides
    steps_per_repeat: int
    warm_steps: int

    def get(self, case: str, op: str) -> budget.Row | None:
        return next((r for r in self.rows if (r.case, r.op) == (case, op)), None)

    def to_dict(self) -> dict:
        return {"schema": STEP_SCHEMA, "step": self.spec, "environment": self.environment.to_dict(),
                "seeds": list(self.seeds), "steps_per_repeat": self.steps_per_repeat,
                "warm_steps": self.warm_steps, "rows": [row.to_dict() for row in self.rows],
                "functions": [dataclasses.asdict(f) for f in self.functions]}

    @classmethod
    def from_dict(cls, data: dict) -> "StepBudget":
        """A step budget as `to_dict` writes it (its schema and step checked by the caller: `load`)."""
        functions = tuple(FunctionCalls(f["function"], f["plain"], f["yours"], f.get("plain_bytecodes", 0.0),
                                        f.get("yours_bytecodes", 0.0)) for f in data["functions"])
        return cls(Fingerprint.from_dict(data["environment"]), tuple(data["seeds"]), data["step"],
                   tuple(budget.Row.from_dict(r) for r in data["rows"]), functions, data["steps_per_repeat"],
                   data["warm_steps"])


def dumps(step_budget: StepBudget) -> str:
    """The file's text: its head as indented JSON, then one line a row and a function
    (budget.row_per_line), so a rewrite's diff in git shows one line for each thing that changed."""
    return budget.row_per_line(step_budget.to_dict(), ("rows", "functions"))


@dataclasses.dataclass(frozen=True)
class BudgetKind:
    """What a budget file says it is, read before it is read as one: its schema (files.schema_of),
    and the step whose budget it is (a step budget's `step`; None for anything else)."""

    schema: str | None
    step: str | None

    @classmethod
    def from_dict(cls, data) -> "BudgetKind":
        from overrides.files import schema_of

        return cls(schema_of(data), data.get("step") if isinstance(data, dict) else None)


def kind_refusal(path: str, kind: BudgetKind, step: str | None) -> str:
    """Why the budget file `path` (of `kind`) is not of the kind asked (`step`: the --step spec,
    None for an op budget), in one line with the fix; '' when it is."""
    found = kind.schema
    if step and found == budget.SCHEMA:
        return (f"{path} is an op budget ({budget.SCHEMA}), not a step's: check it without --step "
                f"(--check-budget {path}), or write your step's budget to a file of its own "
                f"(--write-budget STEP_FILE --step {step})")
    if not step and found == STEP_SCHEMA:
        return (f"{path} is the step budget of {kind.step} ({STEP_SCHEMA}): check it with "
                f"--check-budget {path} --step {kind.step}")
    if step and found == STEP_SCHEMA and kind.step != step:
        return (f"{path} is the step budget of {kind.step}, not of {step}: check it with --step "
                f"{kind.step}, or write {step}'s budget to a file of its own")
    return ""


def refuse_as_op_budget(path: str) -> None:
    """A step's budget given as an op budget (no --step): refused in one line, saying the --step
    to add; anything else is left to the op budget's own reader."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return
    why = kind_refusal(path, BudgetKind.from_dict(data), None)
    if why:
        raise UsageError(why)


def load(path: str, step: str) -> StepBudget:
    from overrides.files import read_json, versioned

    make = f"write one with `python bench.py --write-budget {path} --step {step}`"
    data = read_json(path, "step budget", make)
    why = kind_refusal(path, BudgetKind.from_dict(data), step)
    if why:
        raise UsageError(why)
    return StepBudget.from_dict(versioned(data, STEP_SCHEMA, path, "a step budget file", make))


def made(counts: StepCounts, seeds: Sequence[int], environment: Fingerprint, variant_runs=()) -> StepBudget:
    """A step budget from a count (`counts`, under `seeds`) and its layout variants' runs."""
    rows = budget.rows_from(counts.runs, seeds, variant_runs)
    ordered = tuple(sorted(rows, key=lambda r: SIDES.index(r.op)))
    return StepBudget(environment, tuple(seeds), counts.spec, ordered, counts.functions,
                      counts.steps_per_repeat, counts.warm_steps)


def rewritten(old: StepBudget | None, new: StepBudget) -> tuple[StepBudget, list[str]]:
    """`new`, keeping each of `old`'s rows that moved by less than budget.KEEP_SHARE of its
    margin (same environment, seeds and step); and the sides whose row changed."""
    as_op = budget.Budget(new.environment, new.seeds, new.rows)
    kept, changed = budget.rewritten(None if old is None or old.spec != new.spec else
                                     budget.Budget(old.environment, old.seeds, old.rows), as_op)
    return dataclasses.replace(new, rows=kept.rows), changed


@dataclasses.dataclass(frozen=True)
class FunctionChange:
    """One function of yours whose calls or own bytecodes a step on one side differ from its
    budget's."""

    function: str
    side: str
    budget: float  # calls a step
    now: float
    budget_bytecodes: float
    now_bytecodes: float

    @property
    def delta(self) -> float:
        return self.now - self.budget

    @property
    def delta_bytecodes(self) -> float:
        return self.now_bytecodes - self.budget_bytecodes


def function_changes(then: Sequence[FunctionCalls], now: Sequence[FunctionCalls]) -> list[FunctionChange]:
    """Your functions called a different number of times a step, or running another number of
    their own bytecodes, on either side; the largest change of bytecodes first."""
    before, after = {f.function: f for f in then}, {f.function: f for f in now}
    out = []
    for name in dict.fromkeys([*before, *after]):
        a, b = before.get(name), after.get(name)
        for side in SIDES:
            was = (getattr(a, side), getattr(a, f"{side}_bytecodes")) if a else (0.0, 0.0)
            is_ = (getattr(b, side), getattr(b, f"{side}_bytecodes")) if b else (0.0, 0.0)
            if was != is_:
                out.append(FunctionChange(name, side, was[0], is_[0], was[1], is_[1]))
    return sorted(out, key=lambda c: (-abs(c.delta_bytecodes), -abs(c.delta), c.function, c.side))


def check(step_budget: StepBudget, counts: StepCounts) -> tuple[list[budget.Checked], list[FunctionChange]]:
    """Each side's row against its count now, seed by seed (budget.check), a side whose
    functions' calls changed off all the same; and those changes."""
    measured = budget.rows_from(counts.runs, step_budget.seeds)
    checked = budget.check(budget.Budget(step_budget.environment, step_budget.seeds, step_budget.rows), measured)
    changes = function_changes(step_budget.functions, counts.functions)
    out = []
    for c in checked:
        moved = any(change.side == c.op for change in changes)
        verdict = budget.budget_row(c.delta, c.margin, moved) if c.verdict == budget.WITHIN else c.verdict
        out.append(dataclasses.replace(c, verdict=verdict, by_calls=verdict != c.verdict))
    return out, changes


def _table(checked: Sequence[budget.Checked]) -> list[list[str]]:
    return [["step", "side", "budget instr/step", "measured", "delta", "margin", "verdict"]] + [
        [c.case, c.op, whole(c.budget), whole(c.measured), signed(c.delta),
         "-" if c.margin is None else f"±{c.margin:,.0f}", c.verdict] for c in checked]


def _function_table(changes: Sequence[FunctionChange]) -> list[list[str]]:
    return [["your function", "side", "calls/step: budget", "now", "delta", "own bytecodes/step: budget", "now",
             "delta"]] + [
        [f"`{c.function}`", c.side, f"{c.budget:g}", f"{c.now:g}", f"{c.delta:+g}", f"{c.budget_bytecodes:,.0f}",
         f"{c.now_bytecodes:,.0f}", f"{c.delta_bytecodes:+,.0f}"] for c in changes[:SHOWN_FUNCTIONS]]


def _notes(checked, changes, path: str, step_budget: StepBudget) -> list[str]:
    seeds = ", ".join(map(str, step_budget.seeds))
    rewrite = f"python bench.py --write-budget {path} --step {step_budget.spec}"
    notes = [f"instructions a step (Callgrind, {step_budget.steps_per_repeat} steps a repeat after "
             f"{step_budget.warm_steps} warm steps), the mean of per-seed changes under the budget's seeds "
             f"({seeds}); margin: half the row's range over those seeds or the largest move of a layout variant, "
             f"within max({budget.MARGIN_FLOOR:g}, {budget.MARGIN_CEILING_PCT:g}% of the count)"]
    off = {c.op for c in checked if c.verdict != budget.WITHIN}
    if PLAIN in off:
        notes.append("the plain twin moved: it runs none of your code, so torch (or what the step runs of it) "
                     "changed; rewrite the budget where that change is intended")
    if YOURS in off and PLAIN not in off:
        notes.append("yours moved and the plain twin did not: the change is in your code" +
                     (" (your functions whose calls or bytecodes a step changed are named above)" if changes else ""))
    if any(c.by_calls for c in checked):
        notes.append("within the instruction margin, but off all the same: your functions' calls or bytecodes a step "
                     "changed (counted exactly), so your code moved; a margin is sized for memory layout, never for "
                     "a new call")
    if off:
        notes.append(f"if that is intended, rewrite the budget in this change (`{rewrite}`)")
    return notes


def text(checked, changes, path: str, step_budget: StepBudget) -> str:
    from overrides.tables import ruled

    lines = ruled(_table(checked), left_columns=2)
    if changes:
        lines += ["", f"your functions whose calls or own bytecodes a step changed ({len(changes)})",
                  *ruled(_function_table(changes), left_columns=2)]
    for heading, rows in budget.where_lines([c for c in checked if c.functions]):
        lines += ["", heading.replace("instructions a call", "instructions a step"), *ruled(rows, left_columns=1)]
    return "\n".join(lines + [""] + _notes(checked, changes, path, step_budget))


def markdown(checked, changes, path: str, step_budget: StepBudget) -> str:
    from overrides.tables import pipe_table

    bad = [c for c in checked if c.verdict != budget.WITHIN]
    head = (f"**Step budget of `{step_budget.spec}`: {len(bad)} of {len(checked)} rows off** (`{path}`)" if bad
            else f"**Step budget of `{step_budget.spec}`: all {len(checked)} rows within** (`{path}`)")
    table = _table(checked)
    lines = [head, ""] + pipe_table(table[0], table[1:], right_from=2, right_to=6)
    if changes:
        rows = _function_table(changes)
        lines += ["", "**Your functions whose calls or own bytecodes a step changed**", ""] + pipe_table(rows[0], rows[1:], right_from=2)
    return "\n".join(lines + [""] + [f"- {n}" for n in _notes(checked, changes, path, step_budget)]) + "\n"


def payload(checked, changes, path: str, step_budget: StepBudget) -> dict:
    return {"schema": STEP_CHECK_SCHEMA, "budget": path, "step": step_budget.spec, "seeds": list(step_budget.seeds),
            "environment": step_budget.environment.to_dict(), "passed": not budget.failed(checked),
            "rows": [c.to_dict() for c in checked],
            "functions": [dataclasses.asdict(c) for c in changes]}


def written(step_budget: StepBudget) -> str:
    from overrides.tables import ruled

    rows = [["step", "side", "instructions/step", "margin", "per seed"]] + [
        [r.case, r.op, whole(r.instructions), f"±{r.margin:,.0f}", " ".join(whole(v) for v in r.per_seed.values())]
        for r in step_budget.rows]
    calls = [["your function", "plain calls/step", "yours calls/step", "yours own bytecodes/step"]] + [
        [f.function, f"{f.plain:g}", f"{f.yours:g}", f"{f.yours_bytecodes:,.0f}"] for f in step_budget.functions]
    env = step_budget.environment
    return "\n".join(ruled(rows, left_columns=2) + [""] + ruled(calls) + [
        "", f"seeds {', '.join(map(str, step_budget.seeds))}; holds for torch {env.torch_version} "
        f"({str(env.torch_git_hash)[:10]}), Python {env.python}, {env.machine}, {env.valgrind}"])


@dataclasses.dataclass(frozen=True)
class BudgetRequest:
    """What `--write-budget FILE --step SPEC` or `--check-budget FILE --step SPEC` asks, made from
    the flags by the command (cli.run_budget): nothing below it reads the command line."""

    spec: str
    path: str
    write: bool  # --write-budget; else --check-budget
    seeds: tuple[int, ...] = ()  # --seeds; empty: the budget's own, or BUDGET_SEEDS for a new one
    threads: int = 1
    markdown: bool = False  # --format markdown
    json_path: str | None = None  # --json


def run(request: BudgetRequest, say) -> int:
    """The whole of `--write-budget FILE --step SPEC` / `--check-budget FILE --step SPEC`:
    exit 0 (written, or every row within), 1 (a row off), 2 (bad input, another environment,
    raised as UsageError), 3 where a seed's count died (nothing written or judged)."""
    import os

    from overrides import environment as env_mod
    from overrides.counts import callgrind
    from overrides.files import write_json_atomic, write_text_atomic
    from overrides.step.counting import count_step
    from overrides.step.factory import find_factory

    path, spec = request.path, request.spec
    find_factory(spec)  # refused before valgrind starts
    old = load(path, spec) if not request.write or os.path.exists(path) else None
    seeds = tuple(request.seeds or (old.seeds if old else budget.BUDGET_SEEDS))
    if request.write and len(seeds) < 2:
        raise UsageError("a budget's margins come from its spread over seeds: give --seeds two or more")
    valgrind, _ = callgrind.find_valgrind()
    environment = env_mod.collect(request.threads).fingerprint(callgrind.valgrind_version(valgrind))
    if not request.write:
        why = budget.refusal(old, environment)
        if why:
            raise UsageError(f"{path}: {why}")
        if tuple(seeds) != tuple(old.seeds):
            raise UsageError(f"{path} was written under seeds {', '.join(map(str, old.seeds))}: a check counts "
                             "under the budget's own seeds; drop --seeds")
    variants = [budget.LAYOUT_VARIANTS[i % len(budget.LAYOUT_VARIANTS)] for i in range(len(seeds))] \
        if request.write else []
    say and say(f"{spec}: counting both steps under Callgrind, seeds {', '.join(map(str, seeds))}"
                + (f", and again under layout variants {variants} (unused functions on your sources)" if variants else ""))
    counts = count_step(spec, seeds, say, variants)
    if counts.died:
        print(f"bench.py: incomplete: {'; '.join(counts.died)}; "
              + (f"{path} was not written" if request.write else "nothing was checked"), file=sys.stderr)
        return errors.INCOMPLETE_EXIT_STATUS
    if request.write:
        final, changed = rewritten(old, made(counts, seeds, environment,
                                             [r for r in counts.variant_runs if not r.died]))
        write_text_atomic(path, dumps(final))
        print(written(final))
        print(f"step budget written to {path}: " + (f"changed: {', '.join(changed)}" if changed else
              "no row changed (each moved by less than a third of its margin)"), file=sys.stderr)
        return 0
    checked, changes = check(old, counts)
    shown = markdown(checked, changes, path, old)
    print(shown if request.markdown else text(checked, changes, path, old))
    summary = budget.github_summary_path()
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write(shown)
    if request.json_path:
        write_json_atomic(request.json_path, payload(checked, changes, path, old), what="--json")
    return 1 if budget.failed(checked) else 0

