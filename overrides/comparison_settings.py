"""How a comparison was made, as one frozen record: what the notes under its table say and what
its JSON's "settings" holds.

A paired comparison (`ab/paired.py`) and an unpaired one (report.sh's recorded runs,
`review/measuring.py`) both build one; `comparison_report.py` and the report read it by
attribute, down to its parts (the libraries' placement, the start-up paths, what was not timed,
each side's torch, your code and your files: small records of their own, base and branch as
`sides.Sides`). It was a dict of ~25 string keys, written in one module and read by string in
three others, where a renamed key was silently a missing note. `to_dict` writes the same keys
the JSON always had (comparison/3), so files written before read the same.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from overrides.files import fields_from_dict, fields_to_dict
from overrides.sides import Sides

PAIRED = "paired A/B"
UNPAIRED = "unpaired"


@dataclasses.dataclass(frozen=True)
class LibraryPlacement:
    """Where both sides' shared libraries were loaded from (builds/placement.py's Views, as its
    `record()` says it): one file for those identical on both sides, fresh copies each pair
    for those that differ; or why not."""

    views: bool = False
    reason: str | None = None  # why there are no views
    roots: tuple[str, ...] | None = None
    shared_libraries: int = 0
    shared_mb: float = 0.0
    replaced_per_pair: tuple[str, ...] = ()
    replaced_mb_per_side: float = 0.0
    fixed: tuple[str, ...] = ()  # GPU-only libraries that differ, left in place
    matched: bool = False
    failure: str | None = None  # why the views did not do what the plan says
    verified_shared: tuple[str, ...] = ()
    copy_seconds: float = 0.0
    python_files_copied: int = 0
    copies_on: str | None = None  # the file system the copies sit on
    python_mb_copied: float = 0.0
    view_seconds: float = 0.0

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "LibraryPlacement":
        return fields_from_dict(cls, data)


@dataclasses.dataclass(frozen=True)
class StartupPaths:
    """How both sides were started (builds/samepath.py's `record`): from one fixed path, or each
    from its own, and why; `summary` says it in one line for people."""

    fixed: bool = False
    root: str | None = None
    reason: str | None = None
    summary: str = ""

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "StartupPaths":
        return fields_from_dict(cls, data)


@dataclasses.dataclass(frozen=True)
class NotTimed:
    """A target ("case [op]") the pairs did not time, and why (n/a, or how it failed)."""

    target: str
    why: str


@dataclasses.dataclass(frozen=True)
class CountSettings:
    """How the instruction counts that judged the comparison were made."""

    seeds: tuple[int, ...]
    threshold: float  # instructions a call: the absolute part of the counts' threshold
    threshold_pct: float
    seeds_added: tuple[int, ...] = ()  # counted only for the cases the first seeds left undecided
    counted_first_s: float | None = None  # paired: the counts ran before the clock, this long
    settled_by_counts: tuple[str, ...] = ()  # "case op" the counts decided before any pair ran

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"seeds": list(self.seeds), "threshold": self.threshold,
                               "threshold_pct": self.threshold_pct}
        if self.counted_first_s is not None:
            out.update(seeds_added=list(self.seeds_added), counted_first_s=self.counted_first_s,
                       settled_by_counts=list(self.settled_by_counts))
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> "CountSettings":
        return cls(tuple(data.get("seeds", ())), data.get("threshold", 0.0), data.get("threshold_pct", 0.0),
                   tuple(data.get("seeds_added", ())), data.get("counted_first_s"),
                   tuple(data.get("settled_by_counts", ())))


# The paired run's own figures, written even where None (as they always were).
_PAIRED_FIELDS = ("pairs", "pairs_asked", "max_seconds", "stopped", "min_pairs", "seconds_per_pair",
                  "threads", "fix_layout", "hash_seed_base", "threshold_ns", "threshold_pct",
                  "no_change_confidence", "calls_per_sample", "placement", "same_path", "torch_roots",
                  "estimator")
# Written only where they hold something, in this order after those.
_OPTIONAL_FIELDS = ("not_timed", "your_code", "workers_died", "incomplete", "user_modules",
                    "instructions_skipped", "instructions", "not_applied")


@dataclasses.dataclass(frozen=True)
class ComparisonSettings:
    mode: str = PAIRED
    threshold_ns: float | None = None
    threshold_pct: float | None = None
    # paired only: the pairs run and why they stopped
    pairs: int | None = None
    pairs_asked: int | None = None
    max_seconds: float | None = None  # the time cap, where no pair count was asked
    stopped: str = ""  # "decided", "time cap", "pair limit", "interrupted"
    min_pairs: int | None = None
    seconds_per_pair: float | None = None
    threads: int | None = None
    fix_layout: bool | None = None
    hash_seed_base: int | None = None
    no_change_confidence: float | None = None
    calls_per_sample: tuple[int, ...] = ()
    placement: LibraryPlacement | None = None
    same_path: StartupPaths | None = None
    torch_roots: Sides[str | None] | None = None  # each side's kept copy, where it ran one
    estimator: str = ""
    # what happened on the way, where anything did
    not_timed: tuple[NotTimed, ...] = ()
    your_code: Sides[str] | None = None  # two versions of your code in one interpreter: each side's spec
    workers_died: tuple[str, ...] = ()  # each cost its pair, which was run again
    incomplete: str = ""  # a worker died past its retries: the verdicts gate nothing
    user_modules: Sides[Mapping[str, str]] | None = None  # each side: your case -> the file its clock ran
    instructions_skipped: str = ""  # why no counts judged it
    instructions: CountSettings | None = None
    not_applied: tuple[Mapping, ...] = ()  # factory settings a case could not take, with a note each

    @property
    def paired(self) -> bool:
        return self.mode.startswith("paired")

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"mode": self.mode}
        if self.paired:
            for name in _PAIRED_FIELDS:
                out[name] = _json(getattr(self, name))
        else:
            out.update(threshold_ns=self.threshold_ns, threshold_pct=self.threshold_pct)
        for name in _OPTIONAL_FIELDS:
            value = getattr(self, name)
            if value:
                out[name] = ({entry.target: entry.why for entry in value} if name == "not_timed"
                             else _json(value))
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> "ComparisonSettings":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("calls_per_sample", "workers_died", "not_applied"):
            if name in values:
                values[name] = tuple(values[name] or ())
        records = {"instructions": CountSettings.from_dict, "placement": LibraryPlacement.from_dict,
                   "same_path": StartupPaths.from_dict, "torch_roots": Sides.from_dict,
                   "your_code": Sides.from_dict, "user_modules": Sides.from_dict}
        for name, read in records.items():
            if values.get(name) is not None:
                values[name] = read(values[name])
        if "not_timed" in values:
            values["not_timed"] = tuple(NotTimed(target, why) for target, why in (values["not_timed"] or {}).items())
        return cls(**values)


def _json(value):
    """A field's JSON: a record's own dict, a tuple as a list, anything else as it is."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return list(value) if isinstance(value, tuple) else value
