"""record.json as a frozen record (overrides/review/manifest.py): manifests written before the
record existed load, say the same, and write back byte for byte; a step makes a new manifest,
never changes one.

tests/old_files/ holds three written by the tool before the record (main at 541a900):
`record1.json` by `record.sh --no-keep --instructions` (label A: two cases, their flamegraphs),
`record1_live.json` by report.sh for a side it measured from an interpreter (each flamegraph's
recordings, "measured_by"), and `record1_first.json`, record1.json as the first record.sh
(ab736ec) wrote it: no steps, no recorder, no kept copy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest

from conftest import ROOT
from overrides.review import runs
from overrides.review.manifest import Flamegraph, Manifest

OLD = os.path.join(ROOT, "tests", "old_files")
WRITTEN_BEFORE = ("record1.json", "record1_live.json", "record1_first.json")


def _text(name: str) -> str:
    with open(os.path.join(OLD, name), encoding="utf-8") as src:
        return src.read()


def _label_folder(tmp_path, name: str, label: str = "A") -> str:
    """A runs folder holding label `label` whose record.json is the old file `name`, with the
    files it names (empty: only the manifest is read here)."""
    folder = tmp_path / "runs" / label
    folder.mkdir(parents=True)
    shutil.copy(os.path.join(OLD, name), folder / "record.json")
    data = json.loads(_text(name))
    for entry in data["flamegraphs"].values():
        for key in ("svg", "folded"):
            (folder / entry[key]).write_text("")
    return str(tmp_path / "runs")


@pytest.mark.parametrize("name", WRITTEN_BEFORE)
def test_a_manifest_written_before_loads_and_writes_back_the_same_bytes(name, tmp_path):
    directory = _label_folder(tmp_path, name)
    run = runs.load_label(directory, "A")
    assert isinstance(run.manifest, Manifest) and run.complete and run.python.endswith("python")
    again = runs.saved(run)  # nothing changed: the file rewritten whole, as --clean and report.sh do
    assert again == run
    assert (tmp_path / "runs" / "A" / "record.json").read_text() == _text(name)


def test_what_an_old_manifest_says_is_read_by_attribute(tmp_path):
    first = runs.load_label(_label_folder(tmp_path / "first", "record1_first.json"), "A")
    assert first.manifest.steps is None and first.manifest.recorder is None and first.manifest.kept is None
    assert first.why_not_kept() == "it was recorded by a version of record.sh that kept no copy"
    assert not first.still_recording() and first.missing() == []
    assert first.flamegraph("SubTensor") == tuple(os.path.join(first.directory, f"A-subtensor.{kind}")
                                                 for kind in ("svg", "folded"))
    assert "none (older record.sh)" in runs.listing(str(tmp_path / "first" / "runs"))
    now = runs.load_label(_label_folder(tmp_path / "now", "record1.json"), "A")
    assert now.manifest.steps == ("bench", "instructions", "flamegraphs") and now.manifest.recorder.host
    assert now.why_not_kept() == "no copy was kept (recorded with --no-keep)"
    assert now.instructions_path() is None  # named, but not in the folder made here
    live = Manifest.from_dict(json.loads(_text("record1_live.json")))
    assert live.measured_by == "paired A/B in report.sh"
    assert live.flamegraph("Tensor").recordings == ("base-tensor.folded", "base-tensor.2.folded")


def test_a_changed_manifest_is_a_new_one(tmp_path):
    run = runs.load_label(_label_folder(tmp_path, "record1.json"), "A")
    before = run.manifest
    later = runs.saved(run, measured_by="report.sh, unpaired",
                       flamegraphs=before.with_flamegraph(Flamegraph("Tensor", error="py-spy died")).flamegraphs)
    assert run.manifest is before and before.measured_by is None and before.flamegraph("Tensor").error is None
    assert later.manifest.flamegraph("Tensor").error == "py-spy died"
    assert [e.case for e in later.manifest.flamegraphs] == ["Tensor", "SubTensor"]  # in its place
    assert runs.load_label(str(tmp_path / "runs"), "A") == later
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.complete = False  # type: ignore[misc]
