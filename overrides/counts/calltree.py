"""Where the instructions went: base's and branch's Callgrind call paths of one case, compared.

Why it exists. The wall-clock differential (py-spy) prices functions by their share of ~1000
samples, so on a real pair of builds it named nothing, or one function at several times the
whole call's change (figures: benchmarks/history.md, 'Docstring figures'). Instruction counts
are deterministic: under a given hash seed the same build counts the same to the instruction.
With `--separate-callers` (overrides/counts/callgrind.py, `tree=True`) Callgrind names every
function by its chain of callers, so the last repeat of a case's loop is a call tree with exact
self counts per path. From base's and branch's trees,
over the matched hash seeds:

- per function, self and inclusive instructions per call (a function counts once per path
  even when it recurses), base and branch, averaged over the seeds;
- a function is listed when its self change is at least FUNCTION_FLOOR a call and consistent
  over the seeds (the mean beyond the t-interval's half width; one seed: the floor alone);
- the listed rows plus an "everything else" row add up to the case's instruction delta (the
  figure the verdict judged: per-call counts, loop removed, minimum of repeats), so the table
  accounts for the whole change and says how much of it no single function carries;
- a differential flamegraph of the branch's tree: width = instructions, colour = change of the
  function's self count against base (red more, blue less, grey not listed).

Callgrind sees C functions: Python code shows as the interpreter's own functions
(`_PyEval_EvalFrameDefault`, calls, attribute look-ups), not by Python name; py-spy's view
names the Python frames.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Sequence

from overrides.clock import stats
from overrides.counts.records import same_seeds
from overrides.flame import flamesvg

FUNCTION_FLOOR = 5.0  # instructions a call: below this no function's change is worth a row
ROWS = 15  # listed functions per case, largest change first
# Every path starts where Callgrind began to see the call stack: inside the interpreter running
# the counted loop (instrumentation is switched on from a Python call). That root is the loop.
LOOP_ROOT = "counted loop (the interpreter running it)"


@dataclasses.dataclass(frozen=True)
class FunctionChange:
    function: str
    base_self: float  # instructions per call, mean over the matched seeds
    branch_self: float
    base_inclusive: float
    branch_inclusive: float
    seed_deltas: tuple[float, ...]  # self change under each seed

    @property
    def delta_self(self) -> float:
        return self.branch_self - self.base_self

    @property
    def delta_inclusive(self) -> float:
        return self.branch_inclusive - self.base_inclusive

    @property
    def half_width(self) -> float | None:
        """Half the 95% t-interval of the self change over the seeds; None with one seed."""
        n = len(self.seed_deltas)
        if n < 2:
            return None
        return stats.t95(n - 1) * stats.stdev(self.seed_deltas) / math.sqrt(n)

    @property
    def listed(self) -> bool:
        half = self.half_width
        return abs(self.delta_self) >= FUNCTION_FLOOR and (half is None or abs(self.delta_self) > half)

    def to_dict(self) -> dict:
        half = self.half_width
        return {"function": self.function, "base_self": round(self.base_self, 2),
                "branch_self": round(self.branch_self, 2), "delta_self": round(self.delta_self, 2),
                "error_self": None if half is None else round(half, 2),
                "base_inclusive": round(self.base_inclusive, 2),
                "branch_inclusive": round(self.branch_inclusive, 2),
                "delta_inclusive": round(self.delta_inclusive, 2)}


@dataclasses.dataclass(frozen=True)
class WhereItWent:
    """One case's instruction delta, split into functions and the rest."""

    case: str
    op: str
    seeds: tuple[int, ...]
    total_delta: float  # the case's delta per call: what the verdict judged
    rows: tuple[FunctionChange, ...]  # listed functions, largest self change first
    unlisted_functions: int  # functions that changed, but not by enough to list

    @property
    def everything_else(self) -> float:
        """What the listed rows do not carry: small changes spread over many functions, and the
        difference between the last repeat (the tree) and the figure (minimum of repeats)."""
        return self.total_delta - sum(r.delta_self for r in self.rows)

    def to_dict(self) -> dict:
        return {"case": self.case, "op": self.op, "source": "callgrind", "unit": "instructions per call",
                "seeds": list(self.seeds), "total_delta": round(self.total_delta, 2),
                "functions": [r.to_dict() for r in self.rows],
                "everything_else": round(self.everything_else, 2)}


def _rooted(stacks: dict) -> dict[tuple[str, ...], float]:
    """Stacks with their root (where Callgrind began to see the stack) named as the loop."""
    out: dict[tuple[str, ...], float] = {}
    for path, value in stacks.items():
        key = (LOOP_ROOT,) + tuple(path[1:])
        out[key] = out.get(key, 0.0) + value
    return out


def _per_function(stacks: dict[tuple[str, ...], float]) -> tuple[dict[str, float], dict[str, float]]:
    """(self, inclusive) instructions per call by function."""
    own: dict[str, float] = {}
    inclusive: dict[str, float] = {}
    for path, value in stacks.items():
        own[path[-1]] = own.get(path[-1], 0.0) + value
        for name in set(path):
            inclusive[name] = inclusive.get(name, 0.0) + value
    return own, inclusive


def matched(base_runs, branch_runs, case: str, op: str) -> list[tuple[int, object, object]]:
    """(seed, base CaseCounts, branch CaseCounts) for every seed both sides counted the case
    under, with call paths."""
    out = []
    for run, other in same_seeds(base_runs, branch_runs):
        a, b = run.get(case, op), other.get(case, op)
        if a and b and a.error is None and b.error is None and a.stacks and b.stacks:
            out.append((run.seed, a, b))
    return out


def where_it_went(base_runs, branch_runs, case: str, op: str, rows: int = ROWS) -> WhereItWent | None:
    """The case's change by function, or None when the counts carry no call paths."""
    pairs = matched(base_runs, branch_runs, case, op)
    if not pairs:
        return None
    per_seed = []
    for _, a, b in pairs:
        per_seed.append((_per_function(_rooted(a.stacks)), _per_function(_rooted(b.stacks))))
    names = set()
    for (a_own, _), (b_own, _) in per_seed:
        names |= set(a_own) | set(b_own)
    n = len(pairs)

    def mean(values) -> float:
        return sum(values) / n

    changes = []
    for name in names:
        deltas = tuple(b_own.get(name, 0.0) - a_own.get(name, 0.0) for (a_own, _), (b_own, _) in per_seed)
        if not any(deltas):
            continue
        changes.append(FunctionChange(
            name, mean(a_own.get(name, 0.0) for (a_own, _), _ in per_seed),
            mean(b_own.get(name, 0.0) for _, (b_own, _) in per_seed),
            mean(a_inc.get(name, 0.0) for (_, a_inc), _ in per_seed),
            mean(b_inc.get(name, 0.0) for _, (_, b_inc) in per_seed), deltas))
    listed = sorted((c for c in changes if c.listed), key=lambda c: (-abs(c.delta_self), c.function))
    total = mean(b.per_call - a.per_call for _, a, b in pairs)
    return WhereItWent(case, op, tuple(seed for seed, _, _ in pairs), total, tuple(listed[:rows]),
                       len(changes) - min(len(listed), rows))


def own_deltas(base_runs, branch_runs, case: str, op: str) -> dict[str, float] | None:
    """Every function in either side's call paths -> the change of its own instructions per
    call, mean over the matched seeds (0.0: counted on both sides and unchanged); None without
    call paths. What another view (the report's py-spy table) is set against."""
    pairs = matched(base_runs, branch_runs, case, op)
    if not pairs:
        return None
    per_seed = [(_per_function(_rooted(a.stacks))[0], _per_function(_rooted(b.stacks))[0])
                for _, a, b in pairs]
    names = set().union(*(set(a_own) | set(b_own) for a_own, b_own in per_seed))
    return {name: sum(b_own.get(name, 0.0) - a_own.get(name, 0.0) for a_own, b_own in per_seed)
            / len(per_seed) for name in names}


# The interpreter's object file as Callgrind names it: a shared libpython (`libpython3.11.so.1.0`)
# or a statically linked executable (`python3.11`). Its functions run whatever Python code runs.
_INTERPRETER_OBJECT = re.compile(r"(lib)?python\d*(\.\d+)*(\.so(\.\d+)*)?")


def is_interpreter(name: str) -> bool:
    """Whether a counted function is the interpreter's own (it runs Python code: a Python
    function's work shows in the counts as these)."""
    return bool(_INTERPRETER_OBJECT.fullmatch(function_key(name)[1]))


def interpreter_delta(deltas: dict[str, float]) -> float:
    """The change of the interpreter's own instructions per call of a case: the sum of
    `own_deltas` over every `is_interpreter` function. Where one Python function's work is all
    that changed (by the Python-call counts), this is that function's work, exactly: the report
    prices it with this where py-spy's samples cannot (the bare shim's `_shim`, whose samples put it
    anywhere in a range several times its true cost; figures: benchmarks/history.md, 'Docstring
    figures')."""
    return sum(delta for name, delta in deltas.items() if is_interpreter(name))


def function_key(name: str) -> tuple[str, str]:
    """(function, object file) as both tools name it: py-spy writes `f (lib.so)`, Callgrind's
    names here `f [lib.so]` (and `{anonymous}` for C++'s `(anonymous namespace)`). A name with
    neither is its own key, object file empty."""
    name = name.replace("(anonymous namespace)", "{anonymous}")
    for opening, closing in ((" (", ")"), (" [", "]")):
        if name.endswith(closing) and opening in name:
            function, _, obj = name[:-1].rpartition(opening)
            return function, obj
    return name, ""


def mean_stacks(counts: Sequence) -> dict[tuple[str, ...], float]:
    """Call paths averaged over several seeds' counts of one case (a path missing counts 0)."""
    out: dict[tuple[str, ...], float] = {}
    for c in counts:
        for path, value in _rooted(c.stacks).items():
            out[path] = out.get(path, 0.0) + value / len(counts)
    return out


def differential_svg(base_runs, branch_runs, case: str, op: str, title: str) -> str:
    """The branch's call tree, coloured by each function's self change against base."""
    went = where_it_went(base_runs, branch_runs, case, op, rows=10**6)
    if went is None:
        raise ValueError(f"no call paths for {case} on both sides")
    pairs = matched(base_runs, branch_runs, case, op)
    weights = flamesvg.tree_from_stacks(mean_stacks([b for _, _, b in pairs]))
    base_weights = flamesvg.tree_from_stacks(mean_stacks([a for _, a, _ in pairs]))
    by_function = {r.function: r for r in went.rows}
    scale = max((abs(r.delta_self) for r in went.rows), default=0.0)
    total = sum(w for path, w in weights.items() if len(path) == 1)

    def colour(path):
        row = by_function.get(path[-1])
        return flamesvg.change_colour(row.delta_self if row else 0.0, scale, row is not None)

    def tooltip(path, weight):
        tip = f"{path[-1]}: {weight:,.1f} instructions a call on this path (base {base_weights.get(path, 0):,.1f})"
        row = by_function.get(path[-1])
        if row:
            tip += (f"; function's own count {row.base_self:,.1f} -> {row.branch_self:,.1f} "
                    f"({row.delta_self:+,.1f})")
        return tip

    return flamesvg.render(
        weights, title,
        f"Callgrind, hash seeds {', '.join(map(str, went.seeds))}; width: the branch's instructions "
        f"per call; colour: change of the function's own count against base (red: more, blue: "
        f"less, grey: under {FUNCTION_FLOOR:g} a call or not consistent across seeds)",
        f"branch {total:,.0f} instructions a call on these paths; the case's change "
        f"{went.total_delta:+,.0f} a call; functions only base ran are in the table, not here",
        colour, tooltip)
