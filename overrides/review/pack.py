"""What goes into the report's ZIP beside report.md: the figures (SVGs and their PNGs, drawn on
a thread of its own while the report goes on), differential.json's entries, and the ZIP itself,
written whole or not at all."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import zipfile
from typing import Callable, Sequence

from overrides import case_comparison, run_report, results
from overrides.files import atomic_path, write_json_atomic, write_text_atomic

DIFFERENTIAL_SCHEMA = "torch-function-overhead/differential/1"
# One PNG at a time: matplotlib draws while holding the GIL and is not thread-safe
# (overrides/flame/flamepng.py locks it), so a second thread would only wait.
PICTURES_AT_ONCE = 1


@dataclasses.dataclass(frozen=True)
class Figure:
    """A file for the ZIP: its name in the ZIP and where it is now."""

    name: str
    path: str


class Pack:
    """The report's files, made in `workdir` until they are zipped; `notes` is the report's own
    list of notes (a PNG that could not be drawn adds one)."""

    def __init__(self, workdir: str, say: Callable[[str], None], notes: list[str]):
        self.workdir = workdir
        self.say = say
        self.notes = notes
        self.files: list[Figure] = []
        # differential.json: per case, what each view (counts, py-spy) names, machine-readable
        self.differentials: dict[str, dict] = {}
        # PNGs are drawn on a thread of their own while the report goes on (py-spy records
        # meanwhile, in other processes); finish_pictures() waits for them. Nothing is timed
        # after the clock's pairs, so the drawing costs no measurement.
        self._drawer = concurrent.futures.ThreadPoolExecutor(max_workers=PICTURES_AT_ONCE,
                                                             thread_name_prefix="picture")
        self._pictures: list[tuple[concurrent.futures.Future, str]] = []
        self._cannot_draw_said = False

    def add(self, name: str, path: str) -> None:
        """A file for the ZIP, named `name` there."""
        self.files.append(Figure(name, path))

    def picture(self, svg: str, png_name: str) -> bool:
        """Start drawing the PNG of `svg` as `png_name`; the PNG is counted on (its Figure
        listed, the markdown pointing at it) until finish_pictures() finds it failed. False, and
        one note for the whole report, where this interpreter cannot draw one (no matplotlib)."""
        from overrides.flame import flamepng

        reason = flamepng.missing()
        if reason:
            if not self._cannot_draw_said:
                self.notes.append(f"No PNGs were drawn: {reason}.")
                self._cannot_draw_said = True
            return False
        png = os.path.join(self.workdir, png_name)

        def draw() -> None:
            self.say(f"report: drawing {png_name}")
            flamepng.write_png(svg, png)

        self._pictures.append((self._drawer.submit(draw), png_name))
        self.add(png_name, png)
        return True

    def stop_pictures(self) -> None:
        """Cancel the PNGs not begun and wait for the one being drawn (on the way out)."""
        self._drawer.shutdown(wait=True, cancel_futures=True)

    def finish_pictures(self) -> list[str]:
        """Wait for every PNG; a failed one leaves its figure out and a note saying why.
        Returns the failed PNGs' names, for the markdown to name their SVGs instead
        (`without_picture`)."""
        from overrides.flame import flamepng

        failed = []
        try:
            for future, png_name in self._pictures:
                try:
                    future.result()
                except flamepng.PngError as exc:
                    self.notes.append(f"No {png_name}: {exc}.")
                    self.files = [f for f in self.files if f.name != png_name]
                    failed.append(png_name)
        finally:
            self._pictures = []
            self.stop_pictures()
        return failed

    def _write(self, name: str, payload) -> str:
        """`payload` (text, or what goes into JSON) as `name` in the work folder; its path."""
        path = os.path.join(self.workdir, name)
        if isinstance(payload, str):
            write_text_atomic(path, payload)
        else:
            write_json_atomic(path, payload)
        return path

    def differential_entry(self, comparison) -> dict:
        """The case's entry in differential.json: what each view (counts, py-spy) names."""
        return self.differentials.setdefault(
            f"{comparison.case} [{comparison.op}]",
            {"case": comparison.case, "op": comparison.op, "verdict": comparison.verdict,
             "python_calls": None, "instructions": None, "wall_clock": None})

    def write_zip(self, output: str, report_md: str, evidence) -> None:
        """The ZIP, whole or not at all: report.md, each side's bench output (.json, .txt),
        comparison.json, differential.json and every figure."""
        members = {"report.md": self._write("report.md", report_md)}
        for role, run in evidence.runs.roles():
            members[f"{role}.json"] = self._write(f"{role}.json", results.to_dict(run))
            members[f"{role}.txt"] = self._write(f"{role}.txt", run_report.table(run) + "\n")
        members["comparison.json"] = self._write("comparison.json", comparison_list(evidence.comparisons))
        members["differential.json"] = self._write("differential.json", {
            "schema": DIFFERENTIAL_SCHEMA, "cases": list(self.differentials.values())})
        for figure in self.files:
            members[figure.name] = figure.path
        with atomic_path(output, suffix=".zip", what="the report") as tmp:
            with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as bundle:
                for name, path in members.items():
                    bundle.write(path, name)


def comparison_list(comparisons) -> list[dict]:
    """comparison.json: one object per case, each saying which schema it follows."""
    return [dict(schema=case_comparison.CASE_COMPARISON_SCHEMA, **c.to_dict()) for c in comparisons]


def without_picture(texts: Sequence[str], png_name: str) -> list[str]:
    """The markdown `texts` with a failed PNG's image replaced by its SVG's name."""
    stem = png_name[:-len(".png")]
    image, instead = f"![{stem}]({png_name})", f"`{stem}.svg` (no PNG, see the notes)"
    return [text.replace(image, instead) for text in texts]
