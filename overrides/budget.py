"""An overhead budget for CI: instructions per call of each case and op, written once into a
small file kept in git, then checked on every pull request (`bench.py --write-budget FILE`,
`bench.py --check-budget FILE`).

Why counts, and why these seeds. Instruction counts see no machine noise: under one hash seed
(one memory layout) the same build counts the same to the instruction, so a budget is checked
under the very seeds it was written with, seed by seed, and a row's change is the mean of its
per-seed changes. Layout still moves a case's count from one seed to the next (figures:
benchmarks/history.md, 'Docstring figures'); a row's margin is that spread over its seeds
(MARGIN_SPREAD_SHARE of their range): tight where the counts are exact, wider where layout
moves them; never below `--compare`'s own threshold on counts for a small change (50
instructions) nor above it for a large case (0.75% of the count), so a budget misses nothing a
comparison would call.

What a budget holds for. Counts move with the torch build, the Python, the machine's
architecture and valgrind itself; a budget records them (`environment`) and a check under
another refuses in one line (exit 2) rather than reading a new build's counts as a regression
(what "another" means is the environment's fingerprint: overrides/environment.py).

Layout beyond the seeds. A row of your own code also moves when its module's objects lie
elsewhere: an unused function added to the module moves every address the import makes after
it. Each module's cases are counted in processes of their own (counts/isolated.py), so a
sibling's edit moves nothing; for its own module's, a budget is also counted under
LAYOUT_VARIANTS (unused functions compiled onto each of your sources, one variant a seed), and a row's margin covers
the largest move a variant made on any seed (LAYOUT_SHARE of it), within the same floor and
ceiling. A check counts no variant: it is as fast as `--instructions` of the same cases.

A rewrite over an existing budget keeps the rows that moved by less than a third of their
margin (KEEP_SHARE), so a budget's diff in a pull request shows only what changed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Sequence

from overrides.counts import judge
from overrides.environment import Fingerprint
from overrides.figures import json_figure, signed, whole
from overrides.verdicts import BUDGET_JUDGED, MISSING, OVER, UNDER, WITHIN, budget_row  # noqa: F401 (read as budget.X)

SCHEMA = "torch-function-overhead/budget/1"
CHECK_SCHEMA = "torch-function-overhead/budget-check/1"
BUDGET_SEEDS = (1, 2, 3)  # fixed, so a check counts under the layouts the budget was written with
# Instructions a call: --compare's threshold on counts (max(50, 0.75% of the count)) bounds a
# margin on both sides.
MARGIN_FLOOR = judge.DEFAULT_THRESHOLD_INSTRUCTIONS
MARGIN_CEILING_PCT = judge.DEFAULT_THRESHOLD_INSTRUCTIONS_PCT
# Of a row's range over its seeds. A check is seed by seed, so one build counts +0; the range
# says how far layout can move this case, which another install's start-up may still do. Half of
# it kept the bare shim's +453 on SubTensor (range 427 over seeds 1-3) two margins out.
MARGIN_SPREAD_SHARE = 0.5
# Unused functions compiled onto your sources while a budget is written, one entry a seed in seed
# order (one more count of every seed, of your cases only: a write takes about twice a check): the
# harmless edit a budget must read as no change, in three sizes.
LAYOUT_VARIANTS = (1, 2, 3)
# Of the largest per-seed move a layout variant made: a check's delta is the mean over seeds of
# one new layout each, which stayed within the largest single-seed move measured (figures:
# benchmarks/README.md, 'A budget row moves only when its case's code moves').
LAYOUT_SHARE = 1.0
KEEP_SHARE = 1 / 3  # a rewrite keeps a row that moved by less than this share of its margin
# A row keeps every function of at least this many own instructions a call: where a change went,
# read against what runs now (a shorter list made functions below its cut look new or gone).
FUNCTION_FLOOR = 1.0


@dataclasses.dataclass(frozen=True)
class Row:
    case: str
    op: str
    per_seed: dict  # seed -> instructions per call
    margin: float
    functions: dict  # function -> own instructions per call (mean over seeds), largest first
    # Python function -> [calls, own bytecodes] per call (counts/pycalls.py): which Python code
    # a failing row runs more of, by name, where Callgrind sees only the interpreter
    python_calls: dict = dataclasses.field(default_factory=dict)
    # the largest move a layout variant made on one seed (instructions a call); None: not counted
    layout_moved: float | None = None

    @property
    def instructions(self) -> float:
        return sum(self.per_seed.values()) / len(self.per_seed)

    def to_dict(self) -> dict:
        return {"case": self.case, "op": self.op, "instructions": json_figure(self.instructions),
                "margin": json_figure(self.margin),
                **({} if self.layout_moved is None else {"layout_moved": json_figure(self.layout_moved)}),
                "seeds": {str(seed): json_figure(v) for seed, v in self.per_seed.items()},
                "functions": {name: round(v, 1) for name, v in self.functions.items()},
                "python_calls": self.python_calls}

    @classmethod
    def from_dict(cls, data: dict) -> "Row":
        """A row as `to_dict` writes it: the one reader of a budget's rows, op and step budgets alike."""
        return cls(data["case"], data["op"], {int(s): v for s, v in data["seeds"].items()}, data["margin"],
                   dict(data.get("functions", {})), dict(data.get("python_calls", {})), data.get("layout_moved"))


@dataclasses.dataclass(frozen=True)
class Budget:
    environment: Fingerprint  # what its counts hold for
    seeds: tuple[int, ...]
    rows: tuple[Row, ...]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "environment": self.environment.to_dict(), "seeds": list(self.seeds),
                "rows": [row.to_dict() for row in self.rows]}

    def get(self, case: str, op: str) -> Row | None:
        return next((r for r in self.rows if (r.case, r.op) == (case, op)), None)

    @classmethod
    def from_dict(cls, data: dict) -> "Budget":
        """A budget as `to_dict` writes it (its schema checked by the caller: `load`)."""
        return cls(Fingerprint.from_dict(data["environment"]), tuple(data["seeds"]),
                   tuple(Row.from_dict(r) for r in data["rows"]))


def dumps(budget: Budget) -> str:
    """The budget file's text: the environment and seeds as indented JSON, then one line per
    row, so that a rewrite's diff in git shows one line per changed row."""
    return row_per_line(budget.to_dict(), ("rows",))


def row_per_line(data: dict, listed: Sequence[str]) -> str:
    """A budget document's text (op or step budget): its head as indented JSON, then each list
    named in `listed` one item a line, so that a rewrite's diff in git shows one line for each
    thing that changed. The one writer of budget files."""
    head = json.dumps({k: v for k, v in data.items() if k not in listed}, indent=1)[:-2]
    lists = ",\n ".join(f'"{name}": [\n  ' + ",\n  ".join(json.dumps(item) for item in data[name]) + "\n ]"
                        for name in listed)
    return head + ",\n " + lists + "\n}\n"


def load(path: str) -> Budget:
    from overrides.files import read_json, versioned

    data = read_json(path, "budget", f"write one with `python bench.py --write-budget {path}`")
    return Budget.from_dict(versioned(data, SCHEMA, path, "a budget file",
                                      f"write one with `python bench.py --write-budget {path}`"))


def rows_from(runs, seeds: Sequence[int], variant_runs=()) -> list[Row]:
    """A budget row per (case, op) counted on every seed: its counts, margin and functions.
    `variant_runs`: the same cases counted under layout variants (LAYOUT_VARIANTS), whose
    largest per-seed move widens the row's margin up to the ceiling."""
    by_key: dict[tuple[str, str], dict] = {}
    functions: dict[tuple[str, str], dict] = {}
    for run in runs:
        for counted in run.cases:
            if counted.error is None:
                key = (counted.case, counted.op)
                by_key.setdefault(key, {})[run.seed] = counted.per_call
                for name, value in counted.functions.items():
                    functions.setdefault(key, {}).setdefault(name, []).append(value)
    moved: dict[tuple[str, str], float] = {}
    for run in variant_runs:
        for counted in run.cases:
            base = by_key.get((counted.case, counted.op), {}).get(run.seed)
            if counted.error is None and base is not None:
                key = (counted.case, counted.op)
                moved[key] = max(moved.get(key, 0.0), abs(counted.per_call - base))
    rows = []
    for key, per_seed in by_key.items():
        if len(per_seed) != len(seeds):
            continue  # a seed failed: no row rather than one without its layouts
        spread = max(per_seed.values()) - min(per_seed.values())
        mean_functions = {name: sum(v) / len(seeds) for name, v in functions.get(key, {}).items()}
        kept = dict(sorted(((n, v) for n, v in mean_functions.items() if v >= FUNCTION_FLOOR),
                           key=lambda kv: -kv[1]))
        mean = sum(per_seed.values()) / len(per_seed)
        ceiling = max(MARGIN_FLOOR, MARGIN_CEILING_PCT / 100 * mean)
        wanted = max(MARGIN_FLOOR, MARGIN_SPREAD_SHARE * spread, LAYOUT_SHARE * moved.get(key, 0.0))
        rows.append(Row(key[0], key[1], dict(sorted(per_seed.items())), min(wanted, ceiling), kept,
                        layout_moved=moved.get(key)))
    return rows


def with_python_calls(rows: Sequence[Row], counted) -> list[Row]:
    """`rows` with each one's Python calls per call (`counted`: pycalls.CaseCalls of this
    interpreter), where they were counted."""
    out = []
    for row in rows:
        calls = next((c for c in counted if (c.case, c.op) == (row.case, row.op) and not c.error), None)
        named = {} if calls is None else {
            key: [round(calls.per_call(key)[0], 3), round(calls.per_call(key)[1], 3)] for key in calls.functions}
        out.append(dataclasses.replace(row, python_calls=named))
    return out


def python_call_rows(row: Row, now) -> list[list[str]]:
    """A failing row's Python calls against its budget's (`now`: pycalls.CaseCalls of the
    check), as table rows: the functions called more, less or for the first time."""
    from overrides.counts import pycalls
    from overrides.figures import count, signed_count

    if not row.python_calls or now is None:
        return []
    then = pycalls.CaseCalls(row.case, row.op, 1000, {key: (round(c * 1000), round(b * 1000), None)
                                                      for key, (c, b) in row.python_calls.items()})
    changed = [d for d in pycalls.compare(then, now) if d.delta_calls or d.delta_bytecodes]
    return [["new" if d.new else "", f"`{d.function}`", count(d.base_calls), count(d.branch_calls),
             signed_count(d.delta_calls), signed_count(d.delta_bytecodes) if d.has_bytecodes else "-"]
            for d in changed[:8]]


def calls_unchanged(row: Row, now) -> bool:
    """Whether a row off its budget runs the very Python calls its budget recorded (`now`:
    pycalls.CaseCalls of the check): the same functions, as often, with as many bytecodes. Then
    the interpreter did the same work, and the instructions moved with memory layout."""
    return bool(row.python_calls) and now is not None and not now.error and not python_call_rows(row, now)


def with_calls(checked: Sequence[Checked], budget: Budget, find) -> list[Checked]:
    """Each checked row with the Python calls that changed against its budget (`find(c)`: its
    pycalls.CaseCalls now). A row within its instruction margin whose Python calls changed is off
    all the same: its code moved, and a margin sized for memory layout must not hide a new call."""
    out = []
    for c in checked:
        row = budget.get(c.case, c.op)
        if row is None or c.verdict not in BUDGET_JUDGED:
            out.append(c)
            continue
        now = find(c)
        changed = python_call_rows(row, now)
        verdict = budget_row((c.delta or 0.0), c.margin, bool(changed) and not now.error) \
            if c.verdict == WITHIN else c.verdict
        out.append(dataclasses.replace(c, verdict=verdict, python_calls=tuple(map(tuple, changed)),
                                       by_calls=verdict != c.verdict,
                                       layout_only=verdict != WITHIN and calls_unchanged(row, now)))
    return out


def rewritten(old: Budget | None, new: Budget) -> tuple[Budget, list[str]]:
    """`new`, keeping each of `old`'s rows (same environment) that moved by less than
    KEEP_SHARE of its margin; and the (case, op)s whose row changed."""
    if old is None or refusal(old, new.environment) or tuple(old.seeds) != tuple(new.seeds):
        return new, [f"{r.case} [{r.op}]" for r in new.rows]
    rows, changed = [], []
    for row in new.rows:
        kept = old.get(row.case, row.op)
        if kept is not None and abs(row.instructions - kept.instructions) < KEEP_SHARE * kept.margin:
            rows.append(kept)
        else:
            rows.append(row)
            changed.append(f"{row.case} [{row.op}]")
    return dataclasses.replace(new, rows=tuple(rows)), changed


def refusal(budget: Budget, environment: Fingerprint) -> str:
    """Why counts from `environment` cannot be checked against `budget` (one line), or ''."""
    differs = budget.environment.differences(environment)
    if not differs:
        return ""
    how = ("; its counts were made a process a job, before one import of torch a seed and a forked child a job "
           "(counts/forkserver.py), which lays every case out otherwise"
           if budget.environment.counted_by is None and environment.counted_by else "")
    return ("the budget holds for another environment (" + "; ".join(differs) + f"){how}: its counts would "
            "read the difference as a change. Check where it was written, or rewrite it here with "
            "--write-budget (a new baseline, reviewed as such)")


@dataclasses.dataclass(frozen=True)
class Checked:
    case: str
    op: str
    budget: float | None
    measured: float | None
    margin: float | None
    verdict: str
    functions: tuple = ()  # (function, budget, measured) own instructions, largest change first
    python_calls: tuple = ()  # table rows (python_call_rows) of the Python calls that changed
    # off, and its Python calls counted and none changed: most likely layout, not its code
    layout_only: bool = False
    # within its instruction margin, but its Python calls changed: off by its calls (with_calls)
    by_calls: bool = False

    @property
    def delta(self) -> float | None:
        return None if self.budget is None or self.measured is None else self.measured - self.budget

    def to_dict(self) -> dict:
        return {"case": self.case, "op": self.op, "budget": json_figure(self.budget),
                "measured": json_figure(self.measured), "delta": json_figure(self.delta),
                "margin": json_figure(self.margin), "verdict": self.verdict, "layout_only": self.layout_only,
                "by_calls": self.by_calls,
                "functions": [{"function": f, "budget": json_figure(a), "measured": json_figure(b)}
                              for f, a, b in self.functions]}


def check(budget: Budget, measured: Sequence[Row], asked: Sequence[tuple[str, str]] = ()) -> list[Checked]:
    """Each budget row against its measured counts, seed by seed; then what was measured (or
    asked for) with no row."""
    out = []
    by_key = {(r.case, r.op): r for r in measured}
    for row in budget.rows:
        now = by_key.get((row.case, row.op))
        if now is None:
            out.append(Checked(row.case, row.op, row.instructions, None, row.margin, budget_row(None, row.margin)))
            continue
        seeds = [s for s in row.per_seed if s in now.per_seed]
        delta = sum(now.per_seed[s] - row.per_seed[s] for s in seeds) / len(seeds)
        verdict = budget_row(delta, row.margin)
        functions = () if verdict == WITHIN else tuple(
            judge.largest_changes(row.functions, now.functions, 8, FUNCTION_FLOOR))
        out.append(Checked(row.case, row.op, row.instructions, row.instructions + delta, row.margin,
                           verdict, functions))
    budgeted = {(r.case, r.op) for r in budget.rows}
    for case, op in dict.fromkeys([*asked, *by_key]):
        if (case, op) not in budgeted:
            now = by_key.get((case, op))
            out.append(Checked(case, op, None, now.instructions if now else None, None, budget_row(None, None)))
    return out


def asked(results) -> list[tuple[str, str]]:
    """The (case, op)s a check asks for, from its results (results.CaseResult): each one the op
    applies to. One it does not (WithTorchFunction has no `x.add`) has no row, as when the budget
    was written, and is no reason to fail: a budget of the seed cases over three ops, checked
    unchanged right after it was written, exited 1 on two such rows."""
    return [(r.case, r.op) for r in results if not r.not_applicable]


def failed(checked: Sequence[Checked]) -> bool:
    return any(c.verdict != WITHIN for c in checked)


def rewrite_command(path: str) -> str:
    return f"python bench.py --write-budget {path}"


def rows_table(checked: Sequence[Checked]) -> list[list[str]]:
    header = ["case", "op", "budget", "measured", "delta", "margin", "verdict"]
    rows = [[c.case, c.op, whole(c.budget), whole(c.measured), signed(c.delta),
             "-" if c.margin is None else f"±{c.margin:,.0f}", c.verdict] for c in checked]
    return [header] + rows


def where_lines(checked: Sequence[Checked]) -> list[tuple[str, list[list[str]]]]:
    """Per row over or under budget: (a heading, a table): the Python functions it calls more,
    less or anew, then the functions whose own instructions moved most."""
    out = []
    for c in checked:
        head = f"{c.case} [{c.op}]: {signed(c.delta)} instructions a call ({c.verdict})"
        if c.layout_only:
            head += ": no Python call changed (likely memory layout)"
        if c.python_calls:
            out.append((f"{head}: Python calls", [["", "function", "calls: budget", "now", "delta",
                                                   "bytecodes delta"]] + [list(r) for r in c.python_calls]))
        if c.functions:
            rows = [[f"`{name}`", whole(a), whole(b), signed(b - a)] for name, a, b in c.functions]
            out.append((f"{head}: own instructions by function",
                        [["function", "own: budget", "now", "delta"]] + rows))
    return out


def github_summary_path() -> str | None:
    """Where a GitHub Actions job summary goes ($GITHUB_STEP_SUMMARY), when it is set."""
    return os.environ.get("GITHUB_STEP_SUMMARY") or None


def text(checked: Sequence[Checked], path: str, budget: Budget) -> str:
    """The check for people: the aligned table, where each failing row's instructions went,
    and the command that rewrites the budget."""
    from overrides.tables import ruled

    lines = ruled(rows_table(checked), left_columns=2)
    for heading, rows in where_lines(checked):
        lines += ["", heading, *ruled(rows, left_columns=2 if rows[0][0] == "" else 1)]
    lines += [""] + _notes(checked, path, budget)
    return "\n".join(lines)


def markdown(checked: Sequence[Checked], path: str, budget: Budget) -> str:
    """The check for a pull request's comment or a GitHub job summary."""
    from overrides.tables import pipe_table

    bad = [c for c in checked if c.verdict != WITHIN]
    head = (f"**Overhead budget: {len(bad)} of {len(checked)} rows off** (`{path}`)" if bad
            else f"**Overhead budget: all {len(checked)} rows within** (`{path}`)")
    table = rows_table(checked)
    lines = [head, ""] + pipe_table(table[0], table[1:], right_from=2, right_to=6)
    for heading, rows in where_lines(checked):
        lines += ["", f"**{heading}**", ""] + pipe_table(rows[0], rows[1:], right_from=1)
    return "\n".join(lines + [""] + [f"- {note}" for note in _notes(checked, path, budget)]) + "\n"


def _notes(checked: Sequence[Checked], path: str, budget: Budget) -> list[str]:
    seeds = ", ".join(map(str, budget.seeds))
    notes = [f"instructions per call (Callgrind), the mean of per-seed changes under the budget's "
             f"seeds ({seeds}); margin: half the row's range over those seeds, within max({MARGIN_FLOOR:g}, "
             f"{MARGIN_CEILING_PCT:g}% of the count)"]
    if any(c.verdict == OVER for c in checked):
        notes.append("over budget: the code does more per call than the budget allows; if that is "
                      f"intended, rewrite the budget (`{rewrite_command(path)}`) in this change")
    if any(c.verdict == UNDER for c in checked):
        notes.append(f"under budget: cheaper than the budget says; tighten it (`{rewrite_command(path)}`) "
                     "so the gain is kept")
    by_calls = [f"{c.case} [{c.op}]" for c in checked if c.by_calls]
    if by_calls:
        notes.append(f"{', '.join(by_calls)}: within the instruction margin, but off all the same: its Python "
                     "calls changed (named below), so its code moved; a margin is sized for memory layout, "
                     "never for a new call")
    moved = [f"{c.case} [{c.op}]" for c in checked if c.layout_only]
    if moved:
        notes.append(f"{', '.join(moved)}: the same Python calls and bytecodes as the budget's, so the code "
                     "does the same work a call; the instructions most likely moved with memory layout "
                     "(code added elsewhere in the case's module or in what it imports). If nothing in that "
                     f"code path changed, rewrite the budget (`{rewrite_command(path)}`): its margins are "
                     "then measured on this layout too")
    if any(c.verdict not in (WITHIN, OVER, UNDER) for c in checked):
        notes.append(f"rows not measured, or measured with no row: rewrite the budget "
                     f"(`{rewrite_command(path)}`) to match the cases checked")
    return notes


def payload(checked: Sequence[Checked], path: str, budget: Budget) -> dict:
    return {"schema": CHECK_SCHEMA, "budget": path, "seeds": list(budget.seeds),
            "environment": budget.environment.to_dict(), "passed": not failed(checked),
            "rows": [c.to_dict() for c in checked]}


def written(budget: Budget) -> str:
    """A budget as written, for people: each row's instructions, margin and per-seed counts."""
    from overrides.tables import ruled

    rows = [["case", "op", "instructions", "margin", "per seed"]] + [
        [r.case, r.op, whole(r.instructions), f"±{r.margin:,.0f}",
         " ".join(whole(v) for v in r.per_seed.values())] for r in budget.rows]
    lines = ruled(rows, left_columns=2)
    env = budget.environment
    return "\n".join(lines + ["", f"seeds {', '.join(map(str, budget.seeds))}; holds for torch "
                              f"{env.torch_version} ({str(env.torch_git_hash)[:10]}), Python "
                              f"{env.python}, {env.machine}, {env.valgrind}"])
