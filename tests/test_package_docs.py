"""Each package's docstring is its table of contents, checked: a wing's `__init__.py` names every
module of its folder, and the root's names every layer of tests/test_imports.py's ROWS, lowest
first, each wing's folder and each root module under its layer's line (basics, records,
workflows, command). A newcomer finds a module from the docstring without reading the import
graph, and a module added without its line fails here (issue 59: `overrides/__init__.py` left
out `step/` and `compiled/`; five wings left out 29 modules)."""

from __future__ import annotations

import ast
import os
import re

from conftest import ROOT
from test_imports import PACKAGE, ROWS, package_modules

_BACKTICKED = re.compile(r"`([^`\s]+)`")


def _docstring(path: str) -> str:
    with open(path, encoding="utf-8") as src:
        return ast.get_docstring(ast.parse(src.read())) or ""


def unnamed_in_wings(root: str = ROOT, package: str = PACKAGE) -> list[str]:
    """`wing/module.py` for each module its wing's `__init__.py` docstring does not name (as
    `module.py`, backticked or not)."""
    missing = []
    for name, path in sorted(package_modules(root, package).items()):
        parts = name.split(".")
        if len(parts) != 3 or path.endswith("__init__.py"):
            continue
        said = _docstring(os.path.join(os.path.dirname(path), "__init__.py"))
        if not re.search(rf"(?<![\w/.]){re.escape(parts[2])}\.py\b", said):
            missing.append(f"{parts[1]}/{parts[2]}.py")
    return missing


def _bullets(text: str) -> list[str]:
    """The docstring's `- ` items, each with its continuation lines, as one line."""
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line[2:])
        elif items and line.startswith("  "):
            items[-1] += " " + line.strip()
        elif items and line.strip():
            items.append("")  # prose after the list: nothing continues it
    return [item for item in items if item]


def root_layer_gaps(root: str = ROOT, package: str = PACKAGE, rows=ROWS) -> list[str]:
    """What the package's own docstring gets wrong about the layers: a wing not named (a
    subpackage as `wing/`, a layer of root modules as an item `WING, at the root: ...`), a root
    module not named in its layer's item (or named in another's), or the layers out of order."""
    said = _docstring(os.path.join(root, package, "__init__.py"))
    items = _bullets(said)
    gaps, places = [], []
    root_items = {}
    for item in items:
        match = re.match(r"(\w+), at the root:", item)
        if match:
            root_items[match.group(1)] = set(_BACKTICKED.findall(item))
    for row, wings in enumerate(rows):
        for wing, members in wings.items():
            modules = [m.split(".", 1)[1] for m in members if "." in m]
            subpackage = len(members) == 1 and os.path.isdir(os.path.join(root, *members[0].split(".")))
            if subpackage:
                place = said.find(f"`{wing}/`")
                if place < 0:
                    gaps.append(f"{wing}/ not named")
            else:
                place = said.find(f"- {wing}, at the root:")
                if place < 0:
                    gaps.append(f"no item '{wing}, at the root: ...'")
                named = root_items.get(wing, set())
                gaps += [f"{module} not named under {wing}" for module in modules if module not in named]
                gaps += [f"{module} named under {other}, not {wing}" for module in modules
                         for other, names in sorted(root_items.items()) if other != wing and module in names]
            if place >= 0:
                places.append((place, row, wing))
    order = [wing for _, _, wing in sorted(places)]
    rows_order = [wing for _, _, wing in sorted(places, key=lambda p: (p[1], p[0]))]
    if order != rows_order:
        gaps.append("layers not lowest first: " + ", ".join(order))
    return gaps


def test_each_wings_docstring_names_every_module_in_it():
    missing = unnamed_in_wings()
    assert not missing, "name these in their wing's __init__.py docstring: " + ", ".join(missing)


def test_the_package_docstring_names_every_layer_wing_and_root_module_in_order():
    gaps = root_layer_gaps()
    assert not gaps, "overrides/__init__.py's docstring: " + "; ".join(gaps)


def test_the_checks_find_a_module_and_a_layer_left_out(tmp_path):
    (tmp_path / "pkg" / "counts").mkdir(parents=True)
    (tmp_path / "pkg" / "step").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(
        '"""Layers.\n- basics, at the root: `errors`, `files`;\n- `step/`: a training step;\n'
        "- `counts/`: counting;\n- records, at the root: `results`, `files`.\n\nAfter the list.\n\"\"\"\n")
    (tmp_path / "pkg" / "counts" / "__init__.py").write_text('"""- `judge.py`: verdicts; not `xjudge`."""\n')
    (tmp_path / "pkg" / "step" / "__init__.py").write_text('"""A step."""\n')
    for module in ("errors.py", "files.py", "results.py", "cli.py", "counts/judge.py", "counts/dumps.py",
                   "step/timing.py"):
        (tmp_path / "pkg" / module).write_text("")
    rows = ({"basics": ("pkg", "pkg.errors", "pkg.files")}, {"counts": ("pkg.counts",)},
            {"records": ("pkg.results",)}, {"step": ("pkg.step",)}, {"command": ("pkg.cli",)})
    assert unnamed_in_wings(str(tmp_path), "pkg") == ["counts/dumps.py", "step/timing.py"]
    assert root_layer_gaps(str(tmp_path), "pkg", rows) == [
        "files named under records, not basics", "no item 'command, at the root: ...'",
        "cli not named under command", "layers not lowest first: basics, step, counts, records"]
