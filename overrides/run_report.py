"""One run's output for people: the aligned table, the seed's legacy sentences, and markdown.

Everything here reads a `RunResult` and returns text; nothing here measures or writes files.
The rows are laid out here; the notes under them and the warnings for stderr are
`overrides/run_notes.py`. The table of a comparison of two runs is `overrides/comparison_report.py`.
"""

from __future__ import annotations

from overrides import environment, run_notes
from overrides.clock import stats
from overrides.counts import records
from overrides.figures import whole
from overrides.tables import pipe_table, ruled
from overrides.results import CaseResult, RunResult

FORMATS = ("table", "legacy", "markdown")


fmt_ns = whole  # one run's tables write nanoseconds as every table does (overrides/figures.py)


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


HEADER = ("case", "per call ns", "95% CI", "median", "min", "IQR", "overhead ns",
          "vs Tensor", "samples")


def _row(run: RunResult, result: CaseResult, multi_op: bool) -> list[str]:
    name = f"{result.case} [{result.op}]" if multi_op else result.case
    if result.not_applicable:
        return [name, run_notes.na_cell(result.not_applicable)] + [""] * (len(HEADER) - 2)
    if not result.ok:
        return [name, "failed"] + [""] * (len(HEADER) - 2)
    low, high = result.ci95_ns
    flag = " !" if result.too_spread else ""
    return [
        name + flag,
        fmt_ns(result.per_call_ns) + run_notes.slow_mark(run),
        f"{fmt_ns(low)}-{fmt_ns(high)}",
        fmt_ns(result.median_ns),
        fmt_ns(result.min_ns),
        fmt_ns(result.iqr_ns),
        fmt_ns(run.overhead_ns(result), signed=True),
        fmt_ratio(run.overhead_ratio(result)),
        f"{len(result.samples_ns)}x{result.calls_per_sample}",
    ]


def _multi_op(run: RunResult) -> bool:
    return len({r.op for r in run.results}) > 1


# What a cell of the cases x ops matrix shows (`--cells`): `full`, the per-call figure, its
# overhead in ns and its ratio to its baseline; `overhead`, the overhead in ns alone (what the
# subclass adds to each op, the narrowest view); `ratio`, the figure and its ratio (the layout
# before the overhead was shown). An n/a or failed cell is a short key either way (`n/a [1]`),
# its reason in a note below, so no reason widens the matrix.
MATRIX_CELLS = ("full", "overhead", "ratio")
DEFAULT_CELLS = "full"
_CELLS_SAY = {"full": "per call ns, its overhead ns over its baseline and the ratio to it",
              "overhead": "overhead ns: the per-call figure less its baseline's",
              "ratio": "per call ns and its ratio to its baseline"}


def _footnote_keys(run: RunResult) -> dict[tuple[str, str], tuple[int, str]]:
    """(case, op) -> (key, text) for every n/a or failed cell: one key per distinct reason."""
    keys: dict[str, int] = {}
    out = {}
    for r in run.results:
        text = (f"n/a: {r.not_applicable}" if r.not_applicable
                else f"failed: {r.error or 'no figure'}" if not r.ok else None)
        if text is not None:
            out[(r.case, r.op)] = (keys.setdefault(text, len(keys) + 1), text)
    return out


def _footnotes(run: RunResult) -> list[str]:
    """`[1] n/a: reason (case [op, ...]; ...)`: what each short cell's key stands for, and where."""
    cells: dict[tuple[int, str], dict[str, list[str]]] = {}
    for (case, op), key in _footnote_keys(run).items():
        cells.setdefault(key, {}).setdefault(case, []).append(op)
    return [f"[{key}] {text} (" + "; ".join(f"{case} [{', '.join(ops)}]" for case, ops in where.items()) + ")"
            for (key, text), where in cells.items()]


def _matrix_cell(run: RunResult, result: CaseResult | None, cells: str, key: tuple[int, str] | None) -> str:
    if result is None:
        return ""
    if key is not None:
        return f"{key[1].split(':', 1)[0]} [{key[0]}]"
    ratio = run.overhead_ratio(result)
    overhead = run.overhead_ns(result)
    flag = " !" if result.too_spread else ""
    if cells == "overhead":
        return fmt_ns(overhead, signed=True) + run_notes.slow_mark(run) + flag
    figure = fmt_ns(result.per_call_ns) + run_notes.slow_mark(run)
    if cells == "full" and overhead is not None:
        figure += f" {fmt_ns(overhead, signed=True)}"
    return figure + ("" if ratio is None else f" ({fmt_ratio(ratio)})") + flag


def _matrix_rows(run: RunResult, cells: str = DEFAULT_CELLS) -> list[list[str]]:
    """Cases down, ops across; each cell as `cells` says (MATRIX_CELLS)."""
    ops = list(dict.fromkeys(r.op for r in run.results))
    cases = list(dict.fromkeys(r.case for r in run.results))
    by_key = {(r.case, r.op): r for r in run.results}
    keys = _footnote_keys(run)
    rows = [["case"] + ops]
    rows += [[case] + [_matrix_cell(run, by_key.get((case, op)), cells, keys.get((case, op))) for op in ops]
             for case in cases]
    return rows


def _matrix_notes(run: RunResult, cells: str = DEFAULT_CELLS) -> list[str]:
    known = run_notes.op_stmts()
    stmts = {r.op: known.get(r.op, r.stmt) for r in run.results}
    named = {op: stmt for op, stmt in stmts.items() if op != stmt}  # a statement of yours is its own name
    return [f"cells: {_CELLS_SAY[cells]} for the same op (plain Tensor unless a note says otherwise; "
            f"--cells {' / '.join(MATRIX_CELLS)}); per call = {stats.headline_label()} of per-call samples, the "
            f"empty-loop cost ({run_notes.loop_cost(run)} ns/call) removed; n/a [k] and failed [k]: see [k] below "
            "(n/a: the op makes no sense for that case and was not timed); intervals and every sample are in --json.",
            *(["ops: " + "; ".join(f"{op} = {stmt}" for op, stmt in named.items())] if named else [])] \
        + _footnotes(run) + run_notes.table_notes(run, matrix=True)[1:]  # [0]: the one-op table's per-call line, said above


def matrix(run: RunResult, cells: str = DEFAULT_CELLS) -> str:
    """Several ops: cases by ops, one aligned cell per case and op."""
    lines = ruled(_matrix_rows(run, cells))
    lines += [""] + _matrix_notes(run, cells) + [environment.one_line(run.environment)]
    return "\n".join(lines)


def matrix_markdown(run: RunResult, cells: str = DEFAULT_CELLS) -> str:
    rows = _matrix_rows(run, cells)
    lines = pipe_table(rows[0], rows[1:], right_from=1)
    lines += [""] + [f"- {note}" for note in _matrix_notes(run, cells)]
    lines.append(f"- {environment.one_line(run.environment)}")
    return "\n".join(lines)


def table(run: RunResult, cells: str = DEFAULT_CELLS) -> str:
    multi = _multi_op(run)
    if multi:
        return matrix(run, cells)
    rows = [list(HEADER)] + [_row(run, r, multi) for r in run.results]
    lines = ruled(rows)
    lines += [""] + run_notes.table_notes(run) + [environment.one_line(run.environment)]
    return "\n".join(lines)


def legacy(run: RunResult) -> str:
    """The seed benchmark's sentence per case, so new numbers sit beside historic ones."""
    lines = []
    for result in run.results:
        if result.not_applicable:
            lines.append(f"Type {result.case} is not applicable to {result.op}: {result.not_applicable}")
            continue
        if not result.ok:
            lines.append(f"Type {result.case} failed: {result.error}")
            continue
        lines.append(
            f"Type {result.case} had a minimum time of {result.min_ns / 1000} us"
            f" and a standard deviation of {result.stdev_ns / 1000} us.")
    return "\n".join(lines)


def markdown(run: RunResult, cells: str = DEFAULT_CELLS) -> str:
    multi = _multi_op(run)
    if multi:
        return matrix_markdown(run, cells)
    lines = pipe_table(HEADER, [_row(run, r, multi) for r in run.results], right_from=1)
    lines += [""] + [f"- {note}" for note in run_notes.table_notes(run)]
    lines.append(f"- {environment.one_line(run.environment)}")
    return "\n".join(lines)


INSTRUCTION_HEADER = ("case", "instructions/call", "range over seeds", "repeat spread",
                      "overhead", "vs Tensor", "seeds")


def _instruction_rows(run: RunResult) -> list[list[str]]:
    count_runs = run.instructions
    per_case = records.per_call_by_case(count_runs)
    spreads: dict[tuple[str, str], float] = {}
    for count_run in count_runs:
        for c in count_run.cases:
            spreads[(c.case, c.op)] = max(spreads.get((c.case, c.op), 0.0), c.spread_pct)
    multi = _multi_op(run)
    rows = [list(INSTRUCTION_HEADER)]
    for result in run.results:
        name = f"{result.case} [{result.op}]" if multi else result.case
        values = per_case.get((result.case, result.op))
        if result.not_applicable:
            rows.append([name, run_notes.na_cell(result.not_applicable)] + [""] * 5)
            continue
        if not values:
            rows.append([name, "failed"] + [""] * 5)
            continue
        mean = sum(values) / len(values)
        base_values = per_case.get((result.baseline, result.op))
        base = sum(base_values) / len(base_values) if base_values else None
        rows.append([name, fmt_ns(mean), f"{fmt_ns(min(values))}-{fmt_ns(max(values))}",
                     f"{spreads[(result.case, result.op)]:.3f}%",
                     fmt_ns(None if base is None else mean - base, signed=True),
                     fmt_ratio(None if not base else mean / base), str(len(values))])
    return rows


def instruction_table(run: RunResult) -> str:
    lines = ruled(_instruction_rows(run))
    return "\n".join(lines + [""] + run_notes.instruction_notes(run) + [environment.one_line(run.environment)])


def instruction_markdown(run: RunResult) -> str:
    rows = _instruction_rows(run)
    lines = pipe_table(rows[0], rows[1:], right_from=1)
    return "\n".join(lines + [""] + [f"- {note}" for note in run_notes.instruction_notes(run)])


def render(run: RunResult, fmt: str, cells: str | None = None) -> str:
    """The run in format `fmt` (a matrix's cells as `cells` says: MATRIX_CELLS); counted
    instructions get their own table (after the timings, when the run has both)."""
    timed = any(r.ok for r in run.results)
    shown = legacy(run) if fmt == "legacy" else {"table": table, "markdown": markdown}[fmt](run, cells or DEFAULT_CELLS)
    parts = [shown] if timed or not run.instructions else []
    if run.instructions:
        parts.append(instruction_markdown(run) if fmt == "markdown" else instruction_table(run))
    return "\n\n".join(parts)
