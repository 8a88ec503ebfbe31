"""record.json as a frozen record: what a recorded run's folder holds, read by attribute.

`record.sh` rewrites record.json (whole) after every step, report.sh writes one for a side it
measures from an interpreter, and `record.sh --list`, `--clean`, report.sh and `--history` read
it back. It was a dict read by some forty string keys in four modules and changed in place on a
frozen record. Here it is made once per step (`dataclasses.replace`), never changed; `to_dict`
writes the keys, and their order, the file always had, and `from_dict` reads every version
record.sh wrote: the first kept no copy and said neither its steps nor its recorder (those read
as None, and are not written back).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from overrides.builds.keep import Kept

SCHEMA = "torch-function-overhead/record/1"


@dataclasses.dataclass(frozen=True)
class Flamegraph:
    """A case's entry under "flamegraphs": its SVG and collapsed stacks (file names in the label's
    folder; report.sh's own recordings list each one), or why py-spy made none."""

    case: str
    svg: str = ""
    folded: str = ""
    samples: int = 0
    seconds: float = 0.0
    recordings: tuple[str, ...] = ()  # report.sh's: every recording's stacks, `folded` the first
    error: str | None = None

    def to_dict(self) -> dict:
        if self.error is not None:
            return {"error": self.error}
        out: dict[str, Any] = {"svg": self.svg, "folded": self.folded}
        if self.recordings:
            out["recordings"] = list(self.recordings)
        out.update(samples=self.samples, seconds=self.seconds)
        return out

    @classmethod
    def from_dict(cls, case: str, data: Mapping) -> "Flamegraph":
        return cls(case, data.get("svg", ""), data.get("folded", ""), data.get("samples", 0),
                   data.get("seconds", 0.0), tuple(data.get("recordings") or ()), data.get("error"))


@dataclasses.dataclass(frozen=True)
class Recorder:
    """Which process records the run: `--list` tells one still running from one interrupted."""

    pid: int | None
    host: str | None

    def to_dict(self) -> dict:
        return {"pid": self.pid, "host": self.host}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Recorder":
        return cls(data.get("pid"), data.get("host"))


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a recorded run's folder holds (file names relative to it) and how its recording went."""

    label: str
    python: str
    created: str = ""
    cases: tuple[str, ...] = ()
    op: str | None = None
    results: str | None = None  # LABEL.json, once bench.py finished
    text: str | None = None  # LABEL.txt
    flamegraphs: tuple[Flamegraph, ...] = ()
    instructions: str | None = None  # LABEL-instructions.json, once counted
    complete: bool = True  # a manifest older than the flag was written at the end
    steps: tuple[str, ...] | None = None  # the steps asked for; None: written before they were listed
    recorder: Recorder | None = None
    kept: Kept | None = None  # None: recorded before copies were kept
    stopped: str | None = None  # why an incomplete recording stopped, where it could say
    measured_by: str | None = None  # report.sh's own folder for a side it measured (never a label)

    def flamegraph(self, case: str) -> Flamegraph | None:
        return next((entry for entry in self.flamegraphs if entry.case == case), None)

    def with_flamegraph(self, entry: Flamegraph) -> "Manifest":
        """A copy with `entry` as its case's (in that case's place, or last for a new case)."""
        cases = [e.case for e in self.flamegraphs]
        entries = list(self.flamegraphs)
        if entry.case in cases:
            entries[cases.index(entry.case)] = entry
        else:
            entries.append(entry)
        return dataclasses.replace(self, flamegraphs=tuple(entries))

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "schema": SCHEMA, "label": self.label, "python": self.python, "created": self.created,
            "cases": list(self.cases), "op": self.op, "results": self.results, "text": self.text,
            "flamegraphs": {entry.case: entry.to_dict() for entry in self.flamegraphs},
            "instructions": self.instructions, "complete": self.complete}
        if self.steps is not None:
            out["steps"] = list(self.steps)
        if self.recorder is not None:
            out["recorder"] = self.recorder.to_dict()
        if self.kept is not None:
            out["kept"] = self.kept.to_dict()
        if self.stopped is not None:
            out["stopped"] = self.stopped
        if self.measured_by is not None:
            out["measured_by"] = self.measured_by
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> "Manifest":
        """Any version's record.json (its schema checked by the reader, `runs.load_label`)."""
        steps, recorder, kept = data.get("steps"), data.get("recorder"), data.get("kept")
        return cls(
            label=data.get("label", ""), python=data.get("python", ""), created=data.get("created", ""),
            cases=tuple(data.get("cases") or ()), op=data.get("op"), results=data.get("results"),
            text=data.get("text"),
            flamegraphs=tuple(Flamegraph.from_dict(case, entry)
                              for case, entry in (data.get("flamegraphs") or {}).items()),
            instructions=data.get("instructions"), complete=bool(data.get("complete", True)),
            steps=None if steps is None else tuple(steps),
            recorder=None if recorder is None else Recorder.from_dict(recorder),
            kept=None if kept is None else Kept.from_dict(kept),
            stopped=data.get("stopped"), measured_by=data.get("measured_by"))
