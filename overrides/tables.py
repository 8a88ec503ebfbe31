"""Markdown pipe tables: the one place a table of the report or the history is laid out.

A table is a header and rows of cells already worded; this module only joins them, so the
wording stays with the module that owns the figures and the layout stays here.
"""

from __future__ import annotations

from typing import Sequence


def pipe_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int) -> list[str]:
    """The table as markdown lines: the first `right_from` columns (names) left-aligned, the
    rest (figures) right-aligned."""
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"every row needs {len(header)} cells, one per column of the header")
    rule = "|" + "|".join("---:" if i >= right_from else "---" for i in range(len(header))) + "|"
    return [_row(header), rule] + [_row(row) for row in rows]


def _row(cells: Sequence[str]) -> str:
    """`| a | b |`; an empty cell as `| |`."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"
