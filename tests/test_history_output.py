"""What `bench.py --history` writes, from a history made by hand: the picture, the table, the
markdown and the JSON say the same figures and verdicts.

test_history.py runs the real thing (Callgrind on two builds, minutes); these read the writers
alone, in a second, so a change to how a history is presented is checked without counting. The
counts and verdicts here are made up; nothing measured is mocked.
"""

import json
import os
import xml.etree.ElementTree as ET

from overrides.counts.judge import CountComparison
from overrides.history import HISTORY_SCHEMA, output, plot
from overrides.history.lineup import HistoryBuild
from overrides.history.steps import Step

SVG = "{http://www.w3.org/2000/svg}"
BUILDS = [HistoryBuild("torch==2.1.0", "2.1.0", "requirement", "/c/a/bin/python", None, "/c/a/torch", "2.1.0"),
          HistoryBuild("main", "main", "label", "/k/python", "/k/main", "/k/main/torch", "2.2.0"),
          HistoryBuild("/e/branch", "branch", "interpreter", "/e/branch/bin/python", None, "/e/t", "2.2.0")]
FIGURES = {("SubTensor", "torch.add"): {"2.1.0": (40000.0, (39990.0, 40010.0), 2), "main": (40000.5, None, 1),
                                        "branch": (40700.0, (40650.0, 40750.0), 3)},
           ("Tensor", "torch.add"): {"2.1.0": (9000.0, None, 1), "main": (8900.0, (8890.0, 8910.0), 2)}}


def _counts(case, base, delta, verdict, exact=False):
    return CountComparison(case, "torch.add", base, base + delta, delta, (delta - 10, delta + 10), verdict,
                           2, 5.0, 0.0075 * base, exact)


STEPS = [Step("SubTensor", "torch.add", "2.1.0", "main", _counts("SubTensor", 40000, 0.5, "no change", True)),
         Step("SubTensor", "torch.add", "main", "branch", _counts("SubTensor", 40000.5, 699.5, "regression")),
         Step("Tensor", "torch.add", "2.1.0", "main", _counts("Tensor", 9000, -100, "improvement"))]


def picture_marks(svg_path) -> list[list[str]]:
    """The marks plot.py drew, read back from its SVG: each a gid split at "|" (what it is,
    the case, the build or step, then its figures and verdict)."""
    return [g.get("id").split("|") for g in ET.parse(svg_path).getroot().iter(f"{SVG}g")
            if "|" in (g.get("id") or "")]


def test_the_picture_carries_each_build_and_step(tmp_path):
    said = []
    svg_path, png_path = plot.draw(str(tmp_path), BUILDS, FIGURES, STEPS, 2, said.append)
    assert not said and os.path.basename(svg_path) == "history.svg"
    with open(png_path, "rb") as png:
        assert png.read(8) == b"\x89PNG\r\n\x1a\n"  # matplotlib's own PNG: no browser needed
    marks = picture_marks(svg_path)
    points = {(case, name): float(mean) for kind, case, name, mean, _ in
              (m for m in marks if m[0] == "point")}
    assert points == {(case, name): mean for (case, _), per_name in FIGURES.items()
                      for name, (mean, _, _) in per_name.items()}
    lines = {(case, step): verdict for kind, case, step, verdict, _ in (m for m in marks if m[0] == "step")}
    assert lines == {("SubTensor", "2.1.0->main"): "no change", ("SubTensor", "main->branch"): "regression",
                     ("Tensor", "2.1.0->main"): "improvement"}
    # A build a case was not counted in says so in that case's panel.
    assert ["missing", "Tensor", "branch"] in marks


def test_table_markdown_and_json_agree():
    table = output.table(BUILDS, STEPS, FIGURES)
    sub, tensor = table.split("\n\n")
    assert sub.splitlines()[0] == "SubTensor (torch.add)" and "no change (exact)" in sub
    assert "regression" in next(line for line in sub.splitlines() if line.lstrip().startswith("branch"))
    assert "failed" in next(line for line in tensor.splitlines() if line.lstrip().startswith("branch"))
    md = output.markdown(BUILDS, STEPS, FIGURES, [11, 12], ["where"], "history.png", 3.0, output.notes(False))
    assert "![instructions per call across builds](history.png)" in md and "**SubTensor (torch.add)**" in md
    assert "the clock was not run" in md and md.rstrip().endswith("where")
    data = json.loads(json.dumps(output.payload(BUILDS, STEPS, FIGURES, [11, 12], {}, True, 3.0)))
    assert data["schema"] == HISTORY_SCHEMA and data["complete"] is True and data["seeds"] == [11, 12]
    assert [(s["from"], s["to"], s["verdict"]) for s in data["steps"] if s["case"] == "SubTensor"] == [
        ("2.1.0", "main", "no change"), ("main", "branch", "regression")]
    assert output.largest_step(STEPS) is STEPS[1]  # +1.75% of its count, against Tensor's -1.1%
    assert output.largest_step(STEPS[:1]) is None
