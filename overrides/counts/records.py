"""Instruction counts as records: one case's counts, one valgrind run, and their JSON.

The JSON (schema SCHEMA) sits inside a results file (`RunResult.instructions`, written by
`bench.py --instructions` and by comparisons) and is record.sh's `LABEL-instructions.json`; every
reader of counts (the results records, the verdicts on counts, the tables, the report) reads it
through `from_dict`, so no reader needs the valgrind machinery (`callgrind.py`) to do it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from overrides.errors import UsageError
from overrides.files import versioned

SCHEMA = "torch-function-overhead/instructions/1"


@dataclasses.dataclass(frozen=True)
class CaseCounts:
    """One case's instruction counts in one valgrind run (one layout)."""

    case: str
    op: str
    per_call: float  # minimum of the repeats after the first: the figure
    repeats: tuple[float, ...]  # every repeat's per-call count, the dropped first one included
    functions: dict  # function -> self instructions per call (last repeat), largest first
    error: str | None = None
    # call path (root first) -> self instructions per call, in the repeat that gave `per_call`;
    # empty without tree
    stacks: dict = dataclasses.field(default_factory=dict)

    @property
    def spread_pct(self) -> float:
        """(max - min) / figure, over the repeats that make the figure."""
        used = self.repeats[1:]
        if len(used) < 2 or not self.per_call:
            return 0.0
        return 100.0 * (max(used) - min(used)) / self.per_call


@dataclasses.dataclass(frozen=True)
class CountRun:
    """One valgrind process: every case counted under one hash seed."""

    seed: int
    cases: tuple[CaseCounts, ...]
    settings: dict
    wall_s: float

    def get(self, case: str, op: str) -> CaseCounts | None:
        return next((c for c in self.cases if c.case == case and c.op == op), None)

    @property
    def died(self) -> str:
        """How its process died past its retries (callgrind.died_run), or ""."""
        return self.settings.get("died", "")

    @property
    def repeats(self) -> int | None:
        """How many times each case's loop ran (the first dropped), where it counted."""
        return self.settings.get("repeats")

    @property
    def calls_per_repeat(self) -> int | None:
        return self.settings.get("calls_per_repeat")

    @property
    def calls_each(self) -> list[int]:
        """Every size of repeat its cases were counted over, largest first (an expensive op counts
        fewer calls: counts/caseloops.py)."""
        return list(self.settings.get("calls_per_repeat_each") or [self.calls_per_repeat])

    def to_dict(self) -> dict:
        """This run as JSON, every figure as counted (the instruction-count document, the module's
        `to_dict`, rounds them for people): what counts/kept.py keeps, read back by `from_dict`
        the same to the last digit."""
        return {"seed": self.seed, "settings": self.settings, "wall_s": self.wall_s,
                "cases": [{"case": c.case, "op": c.op, "per_call": c.per_call, "repeats": list(c.repeats),
                           "functions": c.functions, "error": c.error, "stacks": PackedStacks(c.stacks).to_dict()}
                          for c in self.cases]}

    @classmethod
    def from_dict(cls, data: dict) -> "CountRun":
        cases = tuple(CaseCounts(c["case"], c["op"], c["per_call"], tuple(c["repeats"]), c["functions"], c["error"],
                                 PackedStacks.from_dict(c["stacks"]).stacks) for c in data["cases"])
        return cls(data["seed"], cases, data["settings"], data["wall_s"])


@dataclasses.dataclass(frozen=True)
class PackedStacks:
    """A case's call paths as its JSON holds them: each path as indices into one list of names,
    as the same few hundred names recur in thousands of paths (a results file written out in
    full was many megabytes for the four seed cases; figures: benchmarks/history.md, 'Docstring
    figures')."""

    stacks: dict  # call path (root first) -> self instructions per call

    def to_dict(self) -> dict:
        names: dict[str, int] = {}
        paths = [[[names.setdefault(name, len(names)) for name in path], round(value, 3)]
                 for path, value in self.stacks.items()]
        return {"names": list(names), "paths": paths}

    @classmethod
    def from_dict(cls, data: dict | None) -> "PackedStacks":
        """The paths packed in `data`; none where it is empty or absent (counted without tree)."""
        if not data:
            return cls({})
        names = data["names"]
        return cls({tuple(names[i] for i in path): value for path, value in data["paths"]})


def _as_written(c: CaseCounts) -> CaseCounts:
    """`c` with its figures rounded as the JSON holds them: the spread written is then the one
    its file reads back, and a file read and written again is the same file."""
    return dataclasses.replace(c, per_call=round(c.per_call, 1), repeats=tuple(round(r, 1) for r in c.repeats))


def to_dict(runs: Sequence[CountRun]) -> dict:
    return {
        "schema": SCHEMA,
        "seeds": [run.seed for run in runs],
        "settings": next((run.settings for run in runs if not run.died), runs[0].settings if runs else {}),
        "runs": [{"seed": run.seed, "wall_s": round(run.wall_s, 1), **({"died": run.died} if run.died else {}),
                  "cases": [{"case": c.case, "op": c.op, "instructions_per_call": round(c.per_call, 1),
                             "repeats": [round(r, 1) for r in c.repeats],
                             "spread_pct": round(_as_written(c).spread_pct, 4), "error": c.error,
                             "functions": {k: round(v, 2) for k, v in c.functions.items()},
                             **({"stacks": PackedStacks(c.stacks).to_dict()} if c.stacks else {})}
                            for c in run.cases]}
                 for run in runs],
    }


def as_saved(runs: Sequence[CountRun]) -> tuple[CountRun, ...]:
    """`runs` as their JSON holds them (figures rounded as `to_dict` writes them): what a run
    keeps, so that it prints what `--load` of its file prints."""
    return tuple(from_dict(to_dict(runs)))


def from_dict(data: dict, source: str = "instructions") -> list[CountRun]:
    versioned(data, SCHEMA, source, "an instruction-count file", "count again with --instructions")
    try:
        return [CountRun(run["seed"], tuple(
            CaseCounts(c["case"], c["op"], c["instructions_per_call"], tuple(c["repeats"]),
                       c.get("functions", {}), c.get("error"), PackedStacks.from_dict(c.get("stacks")).stacks)
            for c in run["cases"]),
            dict(data.get("settings", {}), **({"died": run["died"]} if run.get("died") else {})),
            run.get("wall_s", math.nan)) for run in data["runs"]]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise UsageError(f"{source} is damaged or was written by another version of this tool "
                         f"({type(exc).__name__}: {exc}); count or record it again") from None


def same_seeds(base_runs: Sequence[CountRun], branch_runs: Sequence[CountRun]
               ) -> list[tuple[CountRun, CountRun]]:
    """(base run, branch run) for every seed both sides were counted under, in base's order:
    counts are compared layout by layout, never across seeds."""
    branch_by_seed = {run.seed: run for run in branch_runs}
    return [(run, branch_by_seed[run.seed]) for run in base_runs if run.seed in branch_by_seed]


def deaths(runs: Sequence[CountRun]) -> list[str]:
    """Each seed whose process died past its retries, in words, in seed order."""
    return [f"seed {run.seed}: {run.died}" for run in runs if run.died]


def per_call_by_case(runs: Sequence[CountRun]) -> dict[tuple[str, str], list[float]]:
    """(case, op) -> the per-call count under each seed, in seed order."""
    out: dict[tuple[str, str], list[float]] = {}
    for run in runs:
        for c in run.cases:
            if c.error is None:
                out.setdefault((c.case, c.op), []).append(c.per_call)
    return out
