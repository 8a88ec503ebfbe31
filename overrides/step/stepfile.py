"""The `torch-function-overhead/step/1` JSON's records: one batch's figures and one op's row, as
`bench.py --step --json` writes them (`output.payload`) and as a reader gets them back
(`StepFile.from_dict`: report.sh's `--step` reads each build's file here).

Writer and reader share these records, so the keys are named once: report.sh read the file by
`payload["timings"][0]["plain_step_ns"]`, with its own copy of the schema string. Figures are
as the file holds them (rounded; None where not finite). Files written before an op row carried
its own kernels (own_kernels_ns, own_kernels_ci_ns, dispatch_ns, kernels, redistributes) read
with those unknown (None, or none).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping

from overrides.figures import json_figure
from overrides.files import fields_from_dict, fields_to_dict

if TYPE_CHECKING:  # read by attribute only: a reader of the file needs no torch
    from overrides.step.optable import OpRow
    from overrides.step.timing import StepTiming

SCHEMA = "torch-function-overhead/step/1"
MAKE = "run the report from a checkout whose bench.py has --step"  # how to get a step file


@dataclasses.dataclass(frozen=True)
class TimingFigures:
    """One batch size's figures: the plain twin's step and yours, the overhead, its share, every sample."""

    batch: int | None = None
    steps_per_sample: tuple[int, ...] = ()  # plain, yours
    threads: int = 1
    wall_s: float | None = None
    quantile: float | None = None  # each step's figure: the headline quantile, or the median on a GPU
    plain_step_ns: float | None = None
    subclass_step_ns: float | None = None
    overhead_ns: float | None = None
    overhead_ci_ns: tuple[float | None, ...] = (None, None)
    share: float | None = None
    share_ci: tuple[float | None, ...] = (None, None)
    drift: tuple[str, ...] = ()
    plain_samples_ns: tuple[float | None, ...] = ()
    subclass_samples_ns: tuple[float | None, ...] = ()
    # each build's overhead (timing.StepTiming.stretch_overheads_ns): the overhead is their median
    stretch_overheads_ns: tuple[float | None, ...] = ()
    incomplete: str = ""  # why fewer builds ran than planned (timing.StepTiming.incomplete); empty: all did

    @classmethod
    def of(cls, t: StepTiming) -> "TimingFigures":
        return cls(t.batch, tuple(t.steps_per_sample), t.threads, json_figure(t.wall_s), t.quantile,
                   json_figure(t.plain_step_ns), json_figure(t.subclass_step_ns), json_figure(t.overhead_ns),
                   tuple(json_figure(v) for v in t.overhead_ci_ns), json_figure(t.share, 4),
                   tuple(json_figure(v, 4) for v in t.share_ci), tuple(t.drift),
                   tuple(json_figure(v) for v in t.plain_ns), tuple(json_figure(v) for v in t.subclass_ns),
                   tuple(json_figure(v) for v in t.stretch_overheads_ns), t.incomplete)

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "TimingFigures":
        return fields_from_dict(cls, data)


@dataclasses.dataclass(frozen=True)
class OpFigures:
    """One op row of the op table: an op on one set of operands, its calls a step and its overhead."""

    kind: str = ""
    op: str = ""
    operands: str = ""
    calls: int = 0
    nested: bool = False
    sites: tuple[str, ...] = ()
    subclass_ns: float | None = None
    plain_ns: float | None = None
    overhead_ns: float | None = None
    overhead_ci_ns: tuple[float | None, ...] = (None, None)
    cost_ns: float | None = None
    not_applicable: str | None = None
    twin: str | None = None
    # where its dispatch ran other aten work than its twin's: that work apart (kernels.py)
    own_kernels_ns: float | None = None
    own_kernels_ci_ns: tuple[float | None, ...] = (None, None)
    dispatch_ns: float | None = None
    kernels: str | None = None
    no_twin: bool = False  # priced on its own (no plain twin runs it): its cost, not an overhead
    kernels_ns: float | None = None
    redistributes: tuple[str, ...] = ()

    @classmethod
    def of(cls, r: OpRow) -> "OpFigures":
        return cls(r.kind, r.op, r.signature, r.calls, r.nested, tuple(r.sites), json_figure(r.subclass_ns),
                   json_figure(r.plain_ns), json_figure(r.overhead_ns), tuple(json_figure(v) for v in r.overhead_ci_ns),
                   json_figure(r.cost_ns), r.not_applicable or None, r.twin or None, json_figure(r.own_kernels_ns),
                   tuple(json_figure(v) for v in r.own_kernels_ci_ns), json_figure(r.dispatch_ns), r.kernels or None,
                   r.mine_only, json_figure(r.kernels_ns), tuple(r.redistributes))

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "OpFigures":
        return fields_from_dict(cls, data)


@dataclasses.dataclass(frozen=True)
class StepFile:
    """What report.sh reads of a step file: the step, its figures per batch (the first is the
    batch the op table was made at), and its op rows. The rest of the file (calls, closure,
    compiled, on_device) is for people and other tools; nothing here reads it."""

    spec: str
    description: str
    timings: tuple[TimingFigures, ...]
    ops: tuple[OpFigures, ...] = ()

    @property
    def first(self) -> TimingFigures:
        return self.timings[0]

    @classmethod
    def from_dict(cls, data: Any, source: str = "step result") -> "StepFile":
        """A step file's JSON, its schema checked (a UsageError naming `source` otherwise)."""
        from overrides.errors import UsageError
        from overrides.files import versioned

        versioned(data, SCHEMA, source, "a step result", MAKE)
        try:
            timings = tuple(TimingFigures.from_dict(t) for t in data["timings"])
            if not timings:
                raise KeyError("timings")
            return cls(data.get("spec", ""), data.get("description", ""), timings,
                       tuple(OpFigures.from_dict(op) for op in data.get("ops") or ()))
        except (KeyError, TypeError, AttributeError) as exc:
            raise UsageError(f"{source} is damaged ({type(exc).__name__}: {exc}); {MAKE}") from None
