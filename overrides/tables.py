"""Tables, as text for a terminal and as Markdown pipe tables: the one place any table of this
tool is laid out.

A table is a header and rows of cells already worded; this module only joins them, so the
wording stays with the module that owns the figures and the layout stays here.
"""

from __future__ import annotations

from typing import Collection, Sequence

GAP = "  "  # between the columns of a text table


def align(rows: Sequence[Sequence[str]], left_columns: int = 1, right: Collection[int] | None = None,
          indent: str = "") -> list[str]:
    """Rows of cells as aligned text lines: the first `left_columns` left-aligned (names,
    verdicts), the rest right-aligned (figures); or, with `right`, those columns right-aligned
    and the others left. A row shorter than the widest leaves its last columns out."""
    width = max(len(row) for row in rows)
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(width)]
    is_right = (lambda i: i in right) if right is not None else (lambda i: i >= left_columns)
    return [(indent + GAP.join(cell.rjust(widths[i]) if is_right(i) else cell.ljust(widths[i])
                               for i, cell in enumerate(row))).rstrip() for row in rows]


def ruled(rows: Sequence[Sequence[str]], left_columns: int = 1) -> list[str]:
    """`align`ed rows with a rule under the header row: the text tables of runs, comparisons,
    budgets and devices."""
    lines = align(rows, left_columns)
    return [lines[0], "-" * len(lines[0]), *lines[1:]]


def pipe_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int,
               right_to: int | None = None) -> list[str]:
    """The table as markdown lines: the columns from `right_from` up to `right_to` (figures;
    to the end when None) right-aligned, the others (names, verdicts) left-aligned."""
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row needs {len(header)} cells, one per column of the header")
    right = range(right_from, len(header) if right_to is None else right_to)
    rule = "|" + "|".join("---:" if i in right else "---" for i in range(len(header))) + "|"
    return [_row(header), rule] + [_row(row) for row in rows]


def _row(cells: Sequence[str]) -> str:
    """`| a | b |`; an empty cell as `| |`; a `|` inside a cell (an op such as `x | y`) escaped."""
    return "|" + "|".join(f" {cell.replace('|', chr(92) + '|')} " if cell else " " for cell in cells) + "|"
