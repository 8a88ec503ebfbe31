"""Markdown pipe tables: the one place a table of the report or the history is laid out.

A table is a header and rows of cells already worded; this module only joins them, so the
wording stays with the module that owns the figures and the layout stays here.
"""

from __future__ import annotations

from typing import Sequence


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
