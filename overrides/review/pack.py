"""What goes into the report's ZIP beside report.md: the figures (SVGs and their screenshots,
taken on threads of their own while the report goes on), differential.json's entries, and the
ZIP itself, written whole or not at all."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import zipfile
from typing import Callable, Sequence

from overrides import case_comparison, run_report, results
from overrides.files import atomic_path, write_json_atomic, write_text_atomic
from overrides.review.sides import ROLES

DIFFERENTIAL_SCHEMA = "torch-function-overhead/differential/1"
SCREENSHOTS_AT_ONCE = 2  # one Chromium per core of this kind of machine


@dataclasses.dataclass(frozen=True)
class Figure:
    """A file for the ZIP: its name in the ZIP and where it is now."""

    name: str
    path: str


class Pack:
    """The report's files, made in `workdir` until they are zipped; `notes` is the report's own
    list of notes (a failed screenshot adds one)."""

    def __init__(self, workdir: str, say: Callable[[str], None], notes: list[str]):
        self.workdir = workdir
        self.say = say
        self.notes = notes
        self.files: list[Figure] = []
        # differential.json: per case, what each view (counts, py-spy) names, machine-readable
        self.differentials: dict[str, dict] = {}
        # Screenshots are taken on threads of their own while the report goes on (py-spy
        # records meanwhile); finish_screenshots() waits for them. Two at once: the flamegraphs'
        # PNGs come together once py-spy is done, and nothing is timed after the clock's pairs.
        self._shooter = concurrent.futures.ThreadPoolExecutor(max_workers=SCREENSHOTS_AT_ONCE,
                                                              thread_name_prefix="screenshot")
        self._shots: list[tuple[concurrent.futures.Future, str]] = []

    def add(self, name: str, path: str) -> None:
        """A file for the ZIP, named `name` there."""
        self.files.append(Figure(name, path))

    def shoot(self, svg: str, png_name: str, browser: str) -> bool:
        """Start a screenshot of `svg` as `png_name`; the PNG is counted on (its Figure listed,
        the markdown pointing at it) until finish_screenshots() finds it failed."""
        from overrides.flame import screenshot

        png = os.path.join(self.workdir, png_name)

        def shoot() -> None:
            self.say(f"report: screenshot {png_name}")
            screenshot.screenshot(svg, png, browser)

        self._shots.append((self._shooter.submit(shoot), png_name))
        self.add(png_name, png)
        return True

    def stop_screenshots(self) -> None:
        """Cancel the screenshots not begun and wait for the one running (on the way out)."""
        self._shooter.shutdown(wait=True, cancel_futures=True)

    def finish_screenshots(self) -> list[str]:
        """Wait for every screenshot; a failed one leaves its figure out and a note saying why.
        Returns the failed PNGs' names, for the markdown to name their SVGs instead
        (`without_screenshot`)."""
        from overrides.flame import screenshot

        failed = []
        try:
            for future, png_name in self._shots:
                try:
                    future.result()
                except screenshot.ScreenshotError as exc:
                    self.notes.append(f"No {png_name}: {exc}.")
                    self.files = [f for f in self.files if f.name != png_name]
                    failed.append(png_name)
        finally:
            self._shots = []
            self.stop_screenshots()
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
        for role in ROLES:
            members[f"{role}.json"] = self._write(f"{role}.json", results.to_dict(evidence.runs[role]))
            members[f"{role}.txt"] = self._write(f"{role}.txt", run_report.table(evidence.runs[role]) + "\n")
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


def without_screenshot(texts: Sequence[str], png_name: str) -> list[str]:
    """The markdown `texts` with a failed screenshot's image replaced by its SVG's name."""
    stem = png_name[:-len(".png")]
    image, instead = f"![{stem}]({png_name})", f"`{stem}.svg` (no screenshot, see the notes)"
    return [text.replace(image, instead) for text in texts]
