"""How one run was measured, as one frozen record: what the notes under its table say and what
its results file's "settings" holds.

Three kinds of run carry one: a timed run (`single_run.run_benchmark`: the stop rule, the
sample sizes, a calibration a slow spell fooled), a counted run (`single_run.count_benchmark`:
its hash seeds), and one side of a paired comparison (`ab/paired.py`: its side, and the
comparison's own settings). It was a dict of string keys, written in three places and read by
string in the notes. `to_dict` writes the keys each kind always wrote (results/2), and
`from_dict` reads files written before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from overrides.comparison_settings import ComparisonSettings

COUNTED = "instruction counts (Callgrind)"  # a counted run's method

# A timed run's figures, written even where None (as they always were), in this order.
_TIMED_FIELDS = ("min_time_s", "max_time_s", "precision", "stopped", "min_time_scaled_from_s",
                 "calls_per_sample", "samples", "threads", "rounds", "recalibrated", "method")


@dataclasses.dataclass(frozen=True)
class RunSettings:
    method: str = ""
    # a timed run
    min_time_s: float | None = None
    max_time_s: float | None = None  # the time cap per case, where a precision was asked
    precision: float | None = None  # stop once every figure is known to +- this share
    stopped: str = ""  # why sampling stopped (timer.TimingRun.stopped)
    min_time_scaled_from_s: float | None = None  # many targets share one run budget: the time asked
    calls_per_sample: int | None = None  # -n, where given
    samples: int | None = None  # -m, where given
    threads: int | None = None
    rounds: int | None = None
    recalibrated: tuple[str, ...] = ()  # calibrated during a slow spell, resized from their samples
    # a counted run
    seeds: tuple[int, ...] = ()
    # either: what your factories were asked and have no parameter for, with a note each
    not_applied: tuple[Mapping, ...] = ()
    # one side of a paired comparison
    side: str = ""
    comparison: ComparisonSettings | None = None

    @property
    def counted(self) -> bool:
        return self.method == COUNTED

    def to_dict(self) -> dict:
        if self.comparison is not None:
            out: dict[str, Any] = dict(self.comparison.to_dict(), side=self.side)
        elif self.counted:
            out = {"method": self.method, "seeds": list(self.seeds)}
        else:
            out = {name: list(getattr(self, name)) if name == "recalibrated" else getattr(self, name)
                   for name in _TIMED_FIELDS}
        if self.not_applied:
            out["not_applied"] = list(self.not_applied)
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> "RunSettings":
        """The record of a results file's "settings", from any version this tool wrote."""
        if "mode" in data:  # one side of a comparison
            return cls(side=data.get("side", ""), comparison=ComparisonSettings.from_dict(data))
        known = {f.name for f in dataclasses.fields(cls)} - {"side", "comparison"}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("recalibrated", "seeds", "not_applied"):
            if name in values:
                values[name] = tuple(values[name] or ())
        return cls(**values)
