"""The package's imports point one way: no circles, and no import up the stack of wings.

docs/layout.md draws the stack; ROWS below is the same drawing, checked. Every `import` counts,
at module level and inside functions alike: an import inside a function is still a dependency,
only a later one (the three circles this package once had were all closed that way). Module
paths named in strings (entry.py's ROLES, scripts/*.sh)
and file paths named in the docs must exist too: nothing imports them, so nothing else would
notice a move.
"""

from __future__ import annotations

import ast
import os
import re

from conftest import ROOT

PACKAGE = "overrides"
# The rows, lowest first; each row holds one wing or several side by side, each wing a
# subpackage or a list of the root's modules. A module may import from its own wing and from
# wings on lower rows: never from a higher row, nor from another wing on its own row.
ROWS = (
    {"basics": ("overrides", "overrides.errors", "overrides.files", "overrides.progress",
                "overrides.children", "overrides.entry", "overrides.workers", "overrides.argtypes", "overrides.modes", "overrides.variables", "overrides.verdicts", "overrides.tables",
                "overrides.figures", "overrides.sides")},
    {"cases": ("overrides.cases",)},
    {"clock": ("overrides.clock",), "builds": ("overrides.builds",)},
    {"flame": ("overrides.flame",)},
    {"counts": ("overrides.counts",)},
    {"records": ("overrides.results", "overrides.case_comparison", "overrides.comparison_settings",
                 "overrides.run_settings",
                 "overrides.environment")},
    {"workflows": ("overrides.single_run", "overrides.run_report", "overrides.run_notes",
                   "overrides.comparison_report", "overrides.budget", "overrides.device_report"),
     "compiled": ("overrides.compiled",)},
    {"step": ("overrides.step",)},
    {"ab": ("overrides.ab",)},
    {"review": ("overrides.review",)},
    {"history": ("overrides.history",)},
    {"command": ("overrides.cli",)},
)


def package_modules(root: str, package: str = PACKAGE) -> dict[str, str]:
    """Dotted module name -> file, for every module of the package under `root`."""
    modules = {}
    for folder, dirs, files in os.walk(os.path.join(root, package)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in files:
            if name.endswith(".py"):
                parts = os.path.relpath(os.path.join(folder, name), root)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                modules[".".join(parts)] = os.path.join(folder, name)
    return modules


def imports_of(name: str, path: str, modules: dict[str, str], package: str = PACKAGE) -> set[str]:
    """The package's modules `name` imports, anywhere in it (functions included). `from P
    import X` is the module P.X where there is one, else P itself (X is a name in P)."""
    with open(path, encoding="utf-8") as src:
        tree = ast.parse(src.read(), path)
    is_package = path.endswith("__init__.py")
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package up
                parts = name.split(".")[:len(name.split(".")) - node.level + is_package]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                       for alias in node.names]
        else:
            continue
        found.update(t for t in targets if t == package or t.startswith(package + "."))
    found.discard(name)
    unknown = sorted(t for t in found if t not in modules)
    assert not unknown, f"{name} imports {', '.join(unknown)}, which do not exist"
    return found


def import_graph(root: str = ROOT, package: str = PACKAGE) -> dict[str, set[str]]:
    modules = package_modules(root, package)
    return {name: imports_of(name, path, modules, package) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of modules larger than one (Tarjan), each as a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(_cycle_through(sorted(group), graph))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _cycle_through(group: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle inside a strongly connected group, for the message: a -> b -> a."""
    members, path = set(group), [group[0]]
    while True:
        nxt = sorted(graph[path[-1]] & members)
        step = next((n for n in nxt if n == group[0]), None) or next((n for n in nxt if n not in path), nxt[0])
        path.append(step)
        if step in path[:-1]:
            return path[path.index(step):]


def wing_of(module: str, rows=ROWS) -> tuple[int, str]:
    """(row, wing) of a module: the wing listing it, or its subpackage."""
    for row, wings in enumerate(rows):
        for wing, members in wings.items():
            for member in members:
                exact_only = "." not in member  # the package itself, not everything in it
                if module == member or (not exact_only and module.startswith(member + ".")):
                    return row, wing
    raise LookupError(module)


def upward_imports(graph: dict[str, set[str]], rows=ROWS) -> list[str]:
    """Every import of a higher row's module, or of another wing's on the same row."""
    wrong = []
    for module, targets in sorted(graph.items()):
        row, wing = wing_of(module, rows)
        for target in sorted(targets):
            target_row, target_wing = wing_of(target, rows)
            if target_wing != wing and target_row >= row:
                where = "a higher row" if target_row > row else "another wing on its row"
                wrong.append(f"{module} ({wing}) imports {target} ({target_wing}, {where})")
    return wrong


def test_every_module_sits_in_a_wing_of_the_drawing():
    unplaced = []
    for module in package_modules(ROOT):
        try:
            wing_of(module)
        except LookupError:
            unplaced.append(module)
    assert not unplaced, f"not in ROWS (and docs/layout.md): {', '.join(unplaced)}"


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" -> ".join(cycle) for cycle in found)


def test_imports_point_down_the_stack():
    wrong = upward_imports(import_graph())
    assert not wrong, "imports against the direction of docs/layout.md:\n" + "\n".join(wrong)


def test_the_checks_find_a_circle_and_an_upward_import(tmp_path):
    """The checks above can fail: a small package with a circle made by an import inside a
    function, and a lower wing importing a higher one."""
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "high").mkdir()
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "high" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("from pkg.low import b\n")
    (package / "low" / "b.py").write_text("def later():\n    from pkg.low.a import x\n")
    (package / "low" / "c.py").write_text("def later():\n    from pkg.high import d\n")
    (package / "high" / "d.py").write_text("from pkg.low import c\n")
    graph = import_graph(str(tmp_path), "pkg")
    rows = ({"root": ("pkg",)}, {"low": ("pkg.low",)}, {"high": ("pkg.high",)})
    assert sorted(sorted(set(cycle)) for cycle in circles(graph)) == [
        ["pkg.high.d", "pkg.low.c"], ["pkg.low.a", "pkg.low.b"]]
    assert upward_imports(graph, rows) == ["pkg.low.c (low) imports pkg.high.d (high, a higher row)"]



# How long a module may be: past this it holds more than one concern, and a newcomer no longer
# guesses the file from the concern (the house's rule). Split it by concern into modules named
# for what they hold, each placed in docs/layout.md.
MAX_MODULE_LINES = 500


def oversized_modules(root: str = ROOT, package: str = PACKAGE, limit: int = MAX_MODULE_LINES) -> list[str]:
    """`path (N lines)` of every module of the package longer than `limit` lines."""
    found = []
    for name, path in sorted(package_modules(root, package).items()):
        with open(path, encoding="utf-8") as src:
            lines = sum(1 for _ in src)
        if lines > limit:
            found.append(f"{os.path.relpath(path, root).replace(os.sep, '/')} ({lines} lines)")
    return found


def test_every_module_is_at_most_500_lines():
    found = oversized_modules()
    assert not found, (f"modules over {MAX_MODULE_LINES} lines (split each by concern into modules "
                       "named for what they hold, and place them in docs/layout.md): " + ", ".join(found))


def test_the_size_check_names_a_module_over_the_limit(tmp_path):
    package = tmp_path / "pkg"
    (package / "counts").mkdir(parents=True)
    for init in (package / "__init__.py", package / "counts" / "__init__.py"):
        init.write_text("")
    (package / "counts" / "long.py").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (package / "counts" / "full.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    (package / "short.py").write_text("x = 1\n" * 20 + "x = 2")  # no newline at the end: 21 lines
    assert oversized_modules(str(tmp_path), "pkg") == [f"pkg/counts/long.py ({MAX_MODULE_LINES + 1} lines)"]
    assert oversized_modules(str(tmp_path), "pkg", limit=20) == [
        f"pkg/counts/full.py ({MAX_MODULE_LINES} lines)", f"pkg/counts/long.py ({MAX_MODULE_LINES + 1} lines)",
        "pkg/short.py (21 lines)"]

# Where tables for people are laid out: `overrides/tables.py` alone joins cells into a pipe table;
# the wings below the records (cases, clock, builds, flame, counts) measure and count, and word
# nothing as Markdown. A string literal that is a table's rule or row is Markdown rendered.
MARKDOWN_FREE_WINGS = ("cases", "clock", "builds", "flame", "counts")
_TABLE_LITERAL = re.compile(r"^\|(-|\s|.*\s\|\s)")


def markdown_rendered(root: str = ROOT, package: str = PACKAGE,
                      wings: tuple[str, ...] = MARKDOWN_FREE_WINGS) -> list[str]:
    """`module:line` of every string literal in `wings` that starts a Markdown table row or rule."""
    found = []
    for name, path in sorted(package_modules(root, package).items()):
        if name.split(".")[1:2] and name.split(".")[1] in wings:
            with open(path, encoding="utf-8") as src:
                tree = ast.parse(src.read(), path)
            for node in ast.walk(tree):
                texts = ([node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str)
                         else [part.value for part in node.values if isinstance(part, ast.Constant)]
                         if isinstance(node, ast.JoinedStr) else [])
                if any(_TABLE_LITERAL.match(text) for text in texts if isinstance(text, str)):
                    found.append(f"{name}:{node.lineno}")
    return sorted(set(found))


def test_markdown_is_laid_out_above_the_counts_and_measurements():
    found = markdown_rendered()
    assert not found, ("Markdown tables rendered in a measuring wing (word them in review/ or "
                       "history/, lay them out with overrides.tables.pipe_table): " + ", ".join(found))


def tables_laid_out_by_hand(root: str = ROOT, package: str = PACKAGE) -> list[str]:
    """`module:line` of every Markdown table row or rule written as a string anywhere but
    overrides/tables.py, the one place a table is laid out."""
    wings = tuple({name.split(".")[1] for name in package_modules(root, package) if "." in name})
    return [where for where in markdown_rendered(root, package, wings)
            if not where.startswith(f"{package}.tables:")]


def test_every_markdown_table_is_laid_out_by_tables_py():
    found = tables_laid_out_by_hand()
    assert not found, "a Markdown table laid out by hand (use overrides.tables.pipe_table): " + ", ".join(found)


def test_the_markdown_check_finds_a_table_in_the_counts(tmp_path):
    package = tmp_path / "pkg"
    (package / "counts").mkdir(parents=True)
    (package / "review").mkdir()
    for init in (package / "__init__.py", package / "counts" / "__init__.py", package / "review" / "__init__.py"):
        init.write_text("")
    (package / "counts" / "table.py").write_text(
        'def rows(d):\n    return ["| a | b |", "|---|---:|", f"| {d} | 1 |"]\n')
    (package / "review" / "fine.py").write_text('LINE = "| a | b |"\n')
    (package / "counts" / "words.py").write_text('SAY = "a | b"\nPIPE = "|"\n')
    assert markdown_rendered(str(tmp_path), "pkg") == ["pkg.counts.table:2"]
    assert tables_laid_out_by_hand(str(tmp_path), "pkg") == ["pkg.counts.table:2", "pkg.review.fine:1"]


def _top_level_names(path: str) -> set[str]:
    """What a module defines or imports at its top level (functions, classes, assignments)."""
    with open(path, encoding="utf-8") as src:
        tree = ast.parse(src.read(), path)
    names, statements = set(), list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)  # not what is inside it
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For)):
            statements += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
            statements += [s for handler in getattr(node, "handlers", []) for s in handler.body]
    return names


def test_every_name_imported_from_the_package_is_there():
    """`from overrides.x import name`, anywhere in the package, tests, benchmarks and entry
    points (inside functions too, where nothing runs it until that function is called)."""
    modules = package_modules(ROOT)
    defined: dict[str, set[str]] = {}
    missing = []
    for path in _text_files():
        if not path.endswith(".py"):
            continue
        with open(path, encoding="utf-8") as src:
            tree = ast.parse(src.read(), path)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and not node.level and node.module in modules):
                continue
            for alias in node.names:
                if f"{node.module}.{alias.name}" in modules:
                    continue
                names = defined.setdefault(node.module, _top_level_names(modules[node.module]))
                if alias.name not in names:
                    missing.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}: from {node.module} "
                                   f"import {alias.name}")
    assert not missing, "imported but not there:\n" + "\n".join(missing)


# -- module and file paths named in text --------------------------------------------------------

_DOTTED = re.compile(r"(?<![\w./-])overrides(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(r"\bfrom (overrides(?:\.\w+)*) import ([\w ,]+)")
_FILE = re.compile(r"(?<![\w./-])overrides/[\w/]*\w\.py\b")


def _named_module(dotted: str, modules) -> bool:
    """`overrides.a.b.name` names a module of the package, or a name inside one: its longest
    module prefix is followed by at most attributes, never by a submodule that is missing."""
    parts = dotted.split(".")
    longest = max(n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in modules)
    package = modules[".".join(parts[:longest])].endswith("__init__.py")
    return longest == len(parts) or not package or longest == 1 and parts[1] in ("ROOT", "__version__")


def _imported_name(base: str, name: str, modules) -> bool:
    """`from BASE import NAME` in text: a module of the package, or a name inside a module (or
    assigned in a package's __init__)."""
    if f"{base}.{name}" in modules or not modules[base].endswith("__init__.py"):
        return True
    with open(modules[base], encoding="utf-8") as src:
        tree = ast.parse(src.read())
    return name in {target.id for node in tree.body if isinstance(node, ast.Assign)
                    for target in node.targets if isinstance(target, ast.Name)}


def _text_files():
    for folder, extensions in (("overrides", (".py",)), ("scripts", (".sh",)), ("tests", (".py",)),
                               ("benchmarks", (".py", ".md")), ("docs", (".md",)), ("", (".py", ".md"))):
        top = os.path.join(ROOT, folder)
        for dirpath, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__"] if folder else []
            for name in sorted(files):
                if name.endswith(extensions) and name != os.path.basename(__file__):  # ours: made-up names
                    yield os.path.join(dirpath, name)


def test_module_and_file_paths_in_code_strings_and_docs_exist():
    modules = package_modules(ROOT)
    missing = []
    for path in _text_files():
        with open(path, encoding="utf-8") as src:
            text = src.read()
        rel = os.path.relpath(path, ROOT)
        missing += [f"{rel}: {dotted}" for dotted in sorted(set(_DOTTED.findall(text)))
                    if not _named_module(dotted, modules)]
        missing += [f"{rel}: {name}" for name in sorted(set(_FILE.findall(text)))
                    if not os.path.exists(os.path.join(ROOT, name))]
        missing += [f"{rel}: from {base} import {name}" for base, names in _FROM_IMPORT.findall(text)
                    for name in (n.split(" as ")[0].strip() for n in names.split(","))
                    if name and base in modules and not _imported_name(base, name, modules)]
    assert not missing, "named but not there:\n" + "\n".join(missing)


_BACKTICKED = re.compile(r"`([^`\s]+)`")


def stale_package_names(root: str = ROOT, package: str = PACKAGE) -> list[str]:
    """`package: name` for each module a package's docstring names that is not there: in every
    `__init__.py` docstring, a backticked `name.py` (in that package, or a path from the
    checkout); in the top package's, also `name/` and a bare `name` (it lists its wings and its
    root modules so; elsewhere `history/` is a folder written)."""
    modules = package_modules(root, package)
    found = []
    for name, path in sorted(modules.items()):
        if not path.endswith("__init__.py"):
            continue
        with open(path, encoding="utf-8") as src:
            said = ast.get_docstring(ast.parse(src.read())) or ""
        folder = os.path.dirname(path)
        for token in _BACKTICKED.findall(said):
            if token.endswith(".py"):
                there = any(os.path.isfile(os.path.join(base, token)) for base in (folder, root))
            elif name == package and re.fullmatch(r"[a-z][a-z0-9_]*/?", token):
                there = f"{name}.{token.rstrip('/')}" in modules
            else:
                continue
            if not there:
                found.append(f"{name}: {token}")
    return found


def test_each_package_docstring_names_modules_that_are_there():
    found = stale_package_names()
    assert not found, "a package's docstring names a module that is not there: " + ", ".join(found)


def test_the_package_docstring_check_finds_a_module_renamed(tmp_path):
    (tmp_path / "pkg" / "counts").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text(
        '"""Measure `__torch_function__`: the wings `counts/` and `clock/`; at the root `results`,\n'
        '`measure` and `cli`; run as `bench.py --x`."""\n')
    (tmp_path / "pkg" / "counts" / "__init__.py").write_text(
        '"""- `judge.py`: verdicts; `old.py`: gone; `run_ab` is a function; `bench.py` is at the top;\n'
        'writes `out/`."""\n')
    for module in ("results.py", "cli.py", "counts/judge.py"):
        (tmp_path / "pkg" / module).write_text("")
    (tmp_path / "bench.py").write_text("")
    assert stale_package_names(str(tmp_path), "pkg") == ["pkg: clock/", "pkg: measure", "pkg.counts: old.py"]

def layout_gaps(root: str = ROOT, package: str = PACKAGE) -> list[str]:
    """Modules of the package that docs/layout.md does not place: missing from the table of
    what each file holds (named by path, or by file name in a row of its own folder), or, in a
    subpackage, from its wing's list in the drawing."""
    with open(os.path.join(root, "docs", "layout.md"), encoding="utf-8") as src:
        text = src.read()
    drawing = text.split("```")[1]
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    in_table = set()
    for row in rows:
        cell = row.split(" | ")[0]
        folder = None
        for named in re.findall(r"`([^`]+\.py)`", cell):
            if "/" in named:
                folder = os.path.dirname(named)
                in_table.add(named)
            elif folder is not None:
                in_table.add(f"{folder}/{named}")
    gaps = []
    for name, path in sorted(package_modules(root, package).items()):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel.endswith("__init__.py"):
            continue
        if rel not in in_table:
            gaps.append(f"{rel} (not in the table)")
        parts = rel.split("/")
        if len(parts) == 3:  # overrides/WING/module.py: listed beside its wing in the drawing
            block = re.search(rf"^ (?:\S+/ )*{parts[1]}/.*?(?=^ \S|\Z)", drawing, re.M | re.S)
            if block is None or not re.search(rf"\b{parts[2][:-3]}\b", block.group(0)):
                gaps.append(f"{rel} (not in the drawing)")
    return gaps


def test_docs_layout_places_every_module():
    gaps = layout_gaps()
    assert not gaps, "docs/layout.md does not place: " + ", ".join(gaps)


def test_the_layout_check_finds_a_module_the_docs_do_not_place(tmp_path):
    (tmp_path / "pkg" / "counts").mkdir(parents=True)
    for init in ("pkg/__init__.py", "pkg/counts/__init__.py", "pkg/counts/judge.py", "pkg/counts/new.py"):
        (tmp_path / init).write_text("")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "layout.md").write_text(
        "```\n counts/   counting    judge\n    │\n```\n\n| path | what |\n|---|---|\n"
        "| `pkg/counts/judge.py` | verdicts |\n")
    assert layout_gaps(str(tmp_path), "pkg") == ["pkg/counts/new.py (not in the table)",
                                                  "pkg/counts/new.py (not in the drawing)"]
