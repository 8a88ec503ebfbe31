"""Where a counted call is made: the caller's lines, base against branch, for py-spy's time.

The Python-call counts (`pycalls.py`) say exactly which function the branch calls more or less
often, but py-spy's own time of that function leaves out the call itself: the frame is made and
torn down on the caller's line, and for a small helper that is much of its cost (figures:
benchmarks/history.md, 'Docstring figures'). The caller's line that makes the call,
with everything that runs under it, holds all of it. This module finds those lines: in the
branch, the lines of each caller that call the function and name it (a call through C code, from
a line that does not name the function, is no call site: its line holds the whole C call); in
base, the same lines found by aligning the caller's source of both sides (`difflib`), where a
line the branch inserted has no counterpart (its base time is 0) and a line it rewrote stands
against the line it replaced. `flame/stacks.at_call_sites` then gives each such line's time,
with what it calls, to the function.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Sequence

from overrides.counts.pycalls import CaseCalls, CallDelta, pyspy_frame

# Where the branch replaced k base lines by a different number of lines, each base line stands
# against the branch line it resembles most (pairs taken most alike first), if they share at
# least this much (difflib's ratio): a rewritten line keeps about half its text or more
# (`n = len(x)` -> `n = _check_twice(x)`: 0.55), an inserted call shares less with its
# neighbour (`_check_types_extra(x)`: 0.26 against it) and is left as inserted.
REWRITE_SIMILARITY = 0.5


@dataclasses.dataclass(frozen=True)
class CallSite:
    """The lines of one caller that call `function`, on both sides (line numbers of each side's
    own file), and the branch's source line (base's where the branch has none)."""

    function: str  # the callee, as pycalls names it
    caller: str
    base_lines: tuple[int, ...]
    branch_lines: tuple[int, ...]
    text: str

    @property
    def inserted(self) -> bool:
        """The branch's line has no counterpart in base: the whole line is new."""
        return not self.base_lines

    def to_dict(self) -> dict:
        return {"function": self.function, "caller": self.caller, "base_lines": list(self.base_lines),
                "branch_lines": list(self.branch_lines), "text": self.text}


def short_name(function: str) -> str:
    """`Tensor.__torch_function__ (torch/_tensor.py)` -> `__torch_function__`: the name a call
    of it writes."""
    return function.rpartition(" (")[0].rpartition(".")[2]


def _naming_lines(calls: CaseCalls, function: str, caller: str) -> set[int]:
    """The caller's lines that call `function` and whose source names it."""
    source = calls.sources.get(caller)
    name = short_name(function)
    found = set()
    for callee, site_caller, line, _ in calls.sites:
        if callee != function or site_caller != caller or source is None:
            continue
        first, lines = source
        if 0 <= line - first < len(lines) and name in lines[line - first]:
            found.add(line)
    return found


def matching_lines(base_source: tuple[int, Sequence[str]] | None,
                   branch_source: tuple[int, Sequence[str]] | None, branch_lines: set[int]) -> set[int]:
    """The base lines that stand where `branch_lines` stand in the caller's source: the same
    line where unchanged, the line it rewrote where rewritten, none where inserted."""
    if not base_source or not branch_source or not branch_lines:
        return set()
    (base_first, base_text), (branch_first, branch_text) = base_source, branch_source
    wanted = {line - branch_first for line in branch_lines}
    found = set()
    matcher = difflib.SequenceMatcher(None, list(base_text), list(branch_text), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        hit = [j for j in wanted if j1 <= j < j2]
        if not hit or tag == "insert":
            continue
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):  # line for line
            found.update(base_first + i1 + (j - j1) for j in hit)
            continue
        pairs = sorted(((difflib.SequenceMatcher(None, base_text[i], branch_text[j]).ratio(), i, j)
                        for i in range(i1, i2) for j in range(j1, j2)), reverse=True)
        taken_base, taken_branch = set(), set()
        for score, i, j in pairs:  # "replace" by more or fewer lines: most alike first
            if score >= REWRITE_SIMILARITY and i not in taken_base and j not in taken_branch:
                taken_base.add(i)
                taken_branch.add(j)
                if j in hit:
                    found.add(base_first + i)
    return found


def call_sites(base: CaseCalls, branch: CaseCalls, rows: Sequence[CallDelta]) -> list[CallSite]:
    """The call sites of each Python function in `rows` called a different number of times, one
    per caller whose lines name it, on either side; in the order of `rows`."""
    found = []
    for row in rows:
        if not row.delta_calls or pyspy_frame(row.function) is None:
            continue
        callers = sorted({caller for callee, caller, _, _ in base.sites + branch.sites
                          if callee == row.function})
        for caller in callers:
            branch_lines = _naming_lines(branch, row.function, caller)
            base_lines = _naming_lines(base, row.function, caller) | matching_lines(
                base.sources.get(caller), branch.sources.get(caller), branch_lines)
            if not branch_lines and not base_lines:
                continue
            side, lines = (branch, branch_lines) if branch_lines else (base, base_lines)
            first, text = side.sources[caller]
            found.append(CallSite(row.function, caller, tuple(sorted(base_lines)),
                                  tuple(sorted(branch_lines)), text[min(lines) - first]))
    return found
