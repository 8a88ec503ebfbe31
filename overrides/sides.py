"""Base and branch, paired: the one small generic record every comparison of two sides holds.

Everything this tool compares has two sides, and their figures, files, workers, interpreters
and torch folders went around as dicts keyed "base" and "branch", where a misspelt key is a
KeyError at run time and a third key goes unnoticed. `Sides[T]` holds the two by attribute
(`.base`, `.branch`); where a loop must name its side (a message, a file name) `roles()` gives
`(role, value)` in order. A JSON document keeps its keys: `to_dict` writes `{"base": ...,
"branch": ...}` and `from_dict` reads it, so files stay as they were.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Generic, Iterator, Mapping, Sequence, TypeVar

T = TypeVar("T")
U = TypeVar("U")

BASE = "base"
BRANCH = "branch"
ROLES = (BASE, BRANCH)  # in this order everywhere: base first


@dataclasses.dataclass(frozen=True)
class Sides(Generic[T]):
    """Two of a kind, base's and branch's. Iterating gives base, then branch."""

    base: T
    branch: T

    @classmethod
    def of(cls, pair: Sequence[T]) -> "Sides[T]":
        """From (base, branch)."""
        base, branch = pair
        return cls(base, branch)

    def __iter__(self) -> Iterator[T]:
        yield self.base
        yield self.branch

    def roles(self) -> tuple[tuple[str, T], tuple[str, T]]:
        """(("base", base), ("branch", branch)): for what says which side it is."""
        return (BASE, self.base), (BRANCH, self.branch)

    def side(self, role: str) -> T:
        """The side named `role` ("base" or "branch"), for code handed a role by name."""
        if role not in ROLES:
            raise ValueError(f"a side is {' or '.join(ROLES)}, not {role!r}")
        return self.base if role == BASE else self.branch

    def map(self, f: Callable[[T], U]) -> "Sides[U]":
        return Sides(f(self.base), f(self.branch))

    def with_side(self, role: str, value: T) -> "Sides[T]":
        """A copy with the side named `role` replaced."""
        self.side(role)  # a role that is neither says so
        return dataclasses.replace(self, **{role: value})

    def to_dict(self, value: Callable[[T], Any] = lambda v: v) -> dict:
        """The JSON form, keyed as files always were: {"base": ..., "branch": ...}."""
        return {BASE: value(self.base), BRANCH: value(self.branch)}

    @classmethod
    def from_dict(cls, data: Mapping, value: Callable[[Any], T] = lambda v: v) -> "Sides[T]":
        """Read back what `to_dict` wrote (a side missing reads as None)."""
        return cls(*(value(data[role]) if role in data else None for role in ROLES))
