"""One owner per concern, checked: the verdict is decided in `overrides/verdicts.py` alone,
each command's flags are declared by one parser, a JSON document's schema is read in
`overrides/files.py` alone, a table is laid out in `overrides/tables.py` alone, an
environment's fields are read by string key in `overrides/environment.py` alone, settings by
string key only in their records' modules, a loaded document (parsed JSON, found by where a value
comes from) by string key only in its record's `from_dict`, and the unpaired comparison's process
term is worded from its constant alone.

Each check reads the source (no import), so a made-up violation in a scratch package shows
that each can fail. The Markdown check (no tables laid out in the measuring wings) is
`tests/test_imports.py`'s, beside the other rules about where code lives.
"""

from __future__ import annotations

import ast
import os
import re

from conftest import ROOT, made_package
from test_imports import PACKAGE, package_modules

VERDICT_OWNER = "overrides.verdicts"
VERDICT_WORDS = ("regression", "improvement", "no change", "clock only", "disagree", "inconclusive",
                 # a budget row's (--check-budget)
                 "within", "over budget", "under budget: tighten", "not measured", "no row in the budget")
VERDICT_NAMES = ("REGRESSION", "IMPROVEMENT", "NO_CHANGE", "CLOCK_ONLY", "DISAGREE", "INCONCLUSIVE",
                 "WITHIN", "OVER", "UNDER", "MISSING", "NO_ROW")
# Where a verdict's name may stand without deciding anything: compared with, a key or an index
# that looks one up, a member of a collection that is iterated or tested against.
_READING = (ast.Compare, ast.Tuple, ast.List, ast.Set)


def _docstrings(tree: ast.AST) -> set[int]:
    """id() of every docstring's node: words about verdicts are not verdicts."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def verdicts_decided(source: str, name: str = "module") -> list[str]:
    """`name:line` wherever `source` writes a verdict: a verdict word as a string (not in a
    docstring, nor inside a longer sentence), or one of verdicts.py's names used as a value
    (returned, assigned, passed) rather than read (compared with, looked up, listed)."""
    tree = ast.parse(source)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value in VERDICT_WORDS and id(node) not in docs:
            found.append(f"{name}:{node.lineno}")
        named = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                 else None)
        if named in VERDICT_NAMES and isinstance(getattr(node, "ctx", None), ast.Load):
            parent = parents.get(id(node))
            looked_up = (isinstance(parent, ast.Subscript) and parent.slice is node) or (
                isinstance(parent, ast.Dict) and node in parent.keys)
            if not (isinstance(parent, _READING) or looked_up):
                found.append(f"{name}:{node.lineno}")
    return sorted(set(found), key=lambda where: int(where.rsplit(":", 1)[1]))


def verdicts_decided_outside_owner(root: str = ROOT, package: str = PACKAGE,
                                   owner: str = VERDICT_OWNER) -> list[str]:
    return found_outside(verdicts_decided, (owner,), root, package)


def test_verdicts_are_decided_in_verdicts_py_alone():
    found = verdicts_decided_outside_owner()
    assert not found, ("a verdict decided outside overrides/verdicts.py (call its judge, "
                       "clock_and_counts, unmeasured or known instead): " + ", ".join(found))


def test_the_verdict_check_finds_a_verdict_written_elsewhere():
    made_up = '''
from overrides.verdicts import INCONCLUSIVE, MOVED, REGRESSION
"""A docstring may say regression."""
def contended(verdict, busy):
    if verdict == REGRESSION and verdict in (REGRESSION, INCONCLUSIVE):  # reading: fine
        pass
    COLOURS = {REGRESSION: "red"}
    colour = COLOURS[INCONCLUSIVE]
    note = "a regression here"  # a sentence, not a verdict
    if busy:
        return "inconclusive"
    verdict = INCONCLUSIVE
    return dataclasses.replace(verdict, clock_verdict=REGRESSION)
'''
    assert verdicts_decided(made_up, "m") == ["m:11", "m:12", "m:13"]


# The commands of the project, and the one module whose parser declares each one's flags.
COMMAND_PARSERS = {
    "bench.py": "overrides.cli",
    "pyspybench.py": "overrides.flame.hotloop",
    "scripts/record.sh": "overrides.review.record",
    "scripts/report.sh": "overrides.review.pr_report",
}
_PARSER_CLASSES = ("ArgumentParser", "OneLineParser")


def parsers_built(source: str, name: str = "module") -> list[tuple[str | None, str]]:
    """(prog, `name:line`) of every argument parser `source` builds (prog None when not given
    as a string)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            called = (node.func.id if isinstance(node.func, ast.Name) else node.func.attr
                      if isinstance(node.func, ast.Attribute) else None)
            if called in _PARSER_CLASSES:
                prog = next((k.value.value for k in node.keywords if k.arg == "prog"
                             and isinstance(k.value, ast.Constant)), None)
                out.append((prog, f"{name}:{node.lineno}"))
    return out


def second_parsers(root: str = ROOT, package: str = PACKAGE,
                   owners: dict[str, str] = COMMAND_PARSERS) -> list[str]:
    """Every parser built in the package other than each command's one: a parser without a
    command's name, or one built outside that command's module."""
    found = []
    for name, path in sorted(package_modules(root, package).items()):
        with open(path, encoding="utf-8") as src:
            for prog, where in parsers_built(src.read(), name):
                if owners.get(prog) != name:
                    found.append(f"{where} ({prog or 'no prog'})")
    return found


def test_each_command_has_one_parser():
    found = second_parsers()
    assert not found, ("an argument parser outside its command's module (parse with that "
                       "module's build_parser instead): " + ", ".join(found))


def test_the_parser_check_finds_a_second_parser_of_bench_flags(tmp_path):
    package = tmp_path / "pkg"
    (package / "counts").mkdir(parents=True)
    for init in (package / "__init__.py", package / "counts" / "__init__.py"):
        init.write_text("")
    (package / "cli.py").write_text(
        'from pkg.argtypes import OneLineParser\n'
        'def build_parser():\n    return OneLineParser(prog="bench.py")\n')
    (package / "counts" / "guess.py").write_text(
        'import argparse\n'
        'def guess(argv):\n    p = argparse.ArgumentParser(add_help=False)\n'
        '    p.add_argument("--instructions")\n    return p.parse_known_args(argv)\n')
    (package / "counts" / "also.py").write_text(
        'from pkg.argtypes import OneLineParser\nP = OneLineParser(prog="bench.py")\n')
    found = second_parsers(str(tmp_path), "pkg", {"bench.py": "pkg.cli"})
    assert found == ["pkg.counts.also:2 (bench.py)", "pkg.counts.guess:3 (no prog)"]


def found_outside(check, owners, root: str = ROOT, package: str = PACKAGE) -> list[str]:
    """Every place `check(source, name)` finds in the package's modules other than `owners`."""
    found = []
    for name, path in sorted(package_modules(root, package).items()):
        if name not in owners:
            with open(path, encoding="utf-8") as src:
                found += check(src.read(), name)
    return found


# Where the argparse namespace may be read: each command's parser module, each wing's command.py
# (it turns the flags into a typed request: step/budget.BudgetRequest), and ab/config, whose
# config_from_arguments makes the A/B's settings of the flags it declares. Below them, values.
ARGS_READERS = frozenset(COMMAND_PARSERS.values()) | {"overrides.ab.config"}


def args_read(source: str, name: str = "module") -> list[str]:
    """`name:line` of every attribute read on a name `args` (the parsed flags) in `source`."""
    return [f"{name}:{node.lineno}" for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "args"]


def args_read_below_commands(root: str = ROOT, package: str = PACKAGE) -> list[str]:
    commands = {name for name in package_modules(root, package) if name.endswith(".command")}
    return found_outside(args_read, ARGS_READERS | commands, root, package)


def test_the_flags_are_read_by_the_commands_alone():
    found = args_read_below_commands()
    assert not found, ("the parsed flags read below a command (make a typed request of them in the "
                       "wing's command.py and pass that): " + ", ".join(found))


def test_the_flags_check_finds_a_read_below_a_command(tmp_path):
    made_package(tmp_path, {"step/command.py": "def run(args):\n    return args.step\n",
                            "step/budget.py": "def run(args, request):\n    seeds = request.seeds\n"
                                              "    return args.write_budget or seeds\n"})
    assert args_read_below_commands(str(tmp_path), "pkg") == ["pkg.step.budget:3"]


def keyed_reads(source: str):
    """(node, key, what is read) for every read by a constant key in `source`: `x["k"]` loaded,
    or `x.get("k")`. Writing one (`{"k": v}`, `x["k"] = v`) is not a read."""
    for node in ast.walk(ast.parse(source)):
        key, owner = _keyed(node)
        if key is not None:
            yield node, key, owner


def scratch_package(tmp_path, **modules: str) -> str:
    """A package `pkg` under `tmp_path` holding `modules` (name -> source), for a made-up
    violation; the root to hand the checks."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, source in modules.items():
        (package / f"{name}.py").write_text(source)
    return str(tmp_path)


def _in_line_order(found: list[str]) -> list[str]:
    return sorted(found, key=lambda where: int(where.rsplit(":", 1)[1]))


# The one module that reads a JSON document's "schema" (files.schema_of, files.versioned): a
# reader elsewhere that compares it by hand is a second schema check, each with its own wording.
SCHEMA_OWNER = "overrides.files"


def schema_reads(source: str, name: str = "module") -> list[str]:
    """`name:line` of every read of a "schema" key in `source`: `d["schema"]` loaded, or
    `d.get("schema")`. Writing one (`{"schema": SCHEMA}`, `d["schema"] = ...`) is not a read."""
    return _in_line_order([f"{name}:{node.lineno}" for node, key, _ in keyed_reads(source) if key == "schema"])


def schema_checks_outside_owner(root: str = ROOT, package: str = PACKAGE,
                                owner: str = SCHEMA_OWNER) -> list[str]:
    return found_outside(schema_reads, (owner,), root, package)


def test_a_documents_schema_is_read_in_files_py_alone():
    found = schema_checks_outside_owner()
    assert not found, ('a "schema" read outside overrides/files.py (check it with files.versioned, '
                       "or read it with files.schema_of): " + ", ".join(found))


def test_the_schema_check_finds_a_second_one(tmp_path):
    root = scratch_package(tmp_path, files='def schema_of(d):\n    return d.get("schema")\n', reader=(
        'def load(d):\n    out = {"schema": "x/1"}\n    out["schema"] = "x/2"\n'
        '    if d["schema"] != "x/1":\n        raise ValueError\n'
        '    return d.get("schema", None) == out.get("rows")\n'))
    assert schema_checks_outside_owner(root, "pkg", "pkg.files") == ["pkg.reader:4", "pkg.reader:6"]


# The unpaired comparison's process-to-process term per side is one constant
# (case_comparison.UNPAIRED_PROCESS_CV); a sentence typing its figure ("3% per side") would stay
# behind when the constant moves. The docs, which cannot read it, are checked against it.
_TYPED_TERM = re.compile(r"\b\d+(?:\.\d+)?% per\s+side")


def typed_process_terms(source: str, name: str = "module") -> list[str]:
    """`name:line` of every string in `source` that types a percent per side (`"3% per side"`,
    adjacent literals joined); one formatted from a value (`f"{CV:.0%} per side"`) is not typed."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _TYPED_TERM.search(node.value):
            found.append(f"{name}:{node.lineno}")
    return found


def process_terms_typed(root: str = ROOT, package: str = PACKAGE) -> list[str]:
    found = []
    for name, path in sorted(package_modules(root, package).items()):
        with open(path, encoding="utf-8") as src:
            found += typed_process_terms(src.read(), name)
    return found


def test_the_unpaired_process_term_is_worded_from_its_constant():
    found = process_terms_typed()
    assert not found, ("a percent per side typed in a sentence (format "
                       "case_comparison.UNPAIRED_PROCESS_CV instead): " + ", ".join(found))


def test_the_docs_give_the_unpaired_process_term_its_constant_has():
    from overrides.case_comparison import UNPAIRED_PROCESS_CV

    with open(os.path.join(ROOT, "docs", "pr-report.md"), encoding="utf-8") as src:
        said = _TYPED_TERM.findall(src.read())
    assert said and all(term.startswith(f"{UNPAIRED_PROCESS_CV:.0%} ") for term in said), said


def test_the_process_term_check_finds_a_typed_figure():
    source = ('CV = 0.03\nA = f"the interval ({CV:.0%} per side)"\n'
              'B = ("drift is in the interval (3% per "\n     "side); only")\nC = "3 % a side"\n')
    assert typed_process_terms(source, "pkg.report") == ["pkg.report:3"]


# The one module that lays a table out (overrides/tables.py: align, ruled, pipe_table): columns
# padded by hand elsewhere were a second layout, each with its own gap and alignment.
TABLE_OWNER = "overrides.tables"
_PADDING = ("ljust", "rjust", "center")


def tables_laid_out(source: str, name: str = "module") -> list[str]:
    """`name:line` wherever `source` pads a cell by hand: str.ljust/rjust/center, or a format
    spec that aligns to a width (`{x:>12}`, `{x:<{w}}`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PADDING:
            found.append(f"{name}:{node.lineno}")
        elif isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            spec = "".join(part.value if isinstance(part, ast.Constant) else "{}"
                           for part in node.format_spec.values)
            if any(mark in spec for mark in "<>^") and any(ch.isdigit() or ch == "{" for ch in spec):
                found.append(f"{name}:{node.lineno}")
    return _in_line_order(sorted(set(found)))


def tables_outside_owner(root: str = ROOT, package: str = PACKAGE, owner: str = TABLE_OWNER) -> list[str]:
    return found_outside(tables_laid_out, (owner,), root, package)


def test_tables_are_laid_out_in_tables_py_alone():
    found = tables_outside_owner()
    assert not found, ("a table padded by hand outside overrides/tables.py (give its rows to "
                       "tables.align, ruled or pipe_table): " + ", ".join(found))


def test_the_table_check_finds_a_column_padded_by_hand(tmp_path):
    root = scratch_package(tmp_path, tables="def align(rows):\n    return [r[0].ljust(9) for r in rows]\n", report=(
        'def lines(rows, w):\n    out = [f"{r[0]:<{w}} {r[1]:>8}" for r in rows]\n'
        '    out.append(rows[0][0].rjust(w))\n    return out + [f"{w:.1f} {w:+,}"]\n'))
    assert tables_outside_owner(root, "pkg", "pkg.tables") == ["pkg.report:2", "pkg.report:3"]


# The one module that reads an environment's fields by name (overrides/environment.py): its
# records' JSON keys. A reader elsewhere gets them by attribute, where a misspelling fails.
ENVIRONMENT_OWNER = "overrides.environment"


def _environment_keys() -> frozenset[str]:
    import dataclasses

    from overrides.environment import Environment, Fingerprint

    return frozenset(f.name for record in (Environment, Fingerprint) for f in dataclasses.fields(record)
                     if f.name not in ("keys", "unknown"))


def environment_reads(source: str, name: str = "module") -> list[str]:
    """`name:line` of every environment read by string key in `source`: `x["torch_version"]`
    loaded, or `x.get("python")`, where the key is one of the environment records' and `x` is
    named for an environment (`env`, `run.environment`, `environments[side]`). A dict of other
    things with a key of the same name (`settings["threads"]`, `manifest["python"]`) is not one."""
    keys = _environment_keys()
    return _in_line_order([f"{name}:{node.lineno}" for node, key, owner in keyed_reads(source)
                           if key in keys and "env" in ast.unparse(owner).lower()])


def environment_reads_outside_owner(root: str = ROOT, package: str = PACKAGE,
                                    owner: str = ENVIRONMENT_OWNER) -> list[str]:
    return found_outside(environment_reads, (owner,), root, package)


def test_an_environment_is_read_by_attribute_outside_environment_py():
    found = environment_reads_outside_owner()
    assert not found, ("an environment read by string key outside overrides/environment.py (read "
                       "the Environment's or Fingerprint's attribute instead): " + ", ".join(found))


def test_the_environment_check_finds_a_read_by_string_key(tmp_path):
    root = scratch_package(tmp_path, environment='def one_line(env):\n    return env["python"]\n', reader=(
        'def title(run, environment, env, settings, manifest, environments):\n'
        '    version = environment.get("torch_version")\n'
        '    line = env["python"] + run.environment.get("cuda_device", "")\n'
        '    ok = run.environment.torch_version, settings["threads"], manifest.get("python")\n'
        '    path = env["PYTHONPATH"]\n'
        '    return environments["base"]["torch_git_hash"]\n'))
    assert environment_reads_outside_owner(root, "pkg", "pkg.environment") == [
        "pkg.reader:2", "pkg.reader:3", "pkg.reader:3", "pkg.reader:6"]


# The modules that own how a run, a comparison or a count was made (their records, and the count
# settings' producer and merger): anywhere else they are read by attribute.
SETTINGS_OWNERS = ("overrides.run_settings", "overrides.comparison_settings", "overrides.counts.records",
                   "overrides.counts.callgrind", "overrides.counts.isolated")


# Settings, or any part of them: `settings`, `run.settings`, `settings.same_path`, ...
_SETTINGS = re.compile(r"(^|\.)settings(\.\w+)*$")


def settings_reads(source: str, name: str = "module") -> list[str]:
    """`name:line` of every read by string key (`x["k"]` loaded, `x.get("k")`) of something named
    for settings (`settings`, `run.settings`, `outcome.settings`) or of a part of them
    (`settings.same_path["summary"]`): the parts are records too, read by attribute."""
    return _in_line_order(sorted({f"{name}:{node.lineno}" for node, _, owner in keyed_reads(source)
                                  if _SETTINGS.search(ast.unparse(owner))}))


def settings_reads_outside_owners(root: str = ROOT, package: str = PACKAGE,
                                  owners: tuple[str, ...] = SETTINGS_OWNERS) -> list[str]:
    return found_outside(settings_reads, owners, root, package)


def test_settings_are_read_by_attribute_outside_their_records():
    found = settings_reads_outside_owners()
    assert not found, ("settings read by string key outside their record (read RunSettings', "
                       "ComparisonSettings' or CountRun's attribute instead): " + ", ".join(found))


def test_the_settings_check_finds_a_read_by_string_key(tmp_path):
    root = scratch_package(tmp_path, run_settings='def stopped(d):\n    return d["stopped"]\n', notes=(
        'def notes(run, outcome, settings, manifest):\n'
        '    a = run.settings.get("recalibrated")\n'
        '    b = outcome.settings["pairs"], run.settings.stopped, manifest.get("settings")\n'
        '    c = settings.same_path["summary"]\n'
        '    return settings.get("instructions", {}).get("seeds")\n'))
    assert settings_reads_outside_owners(root, "pkg", ("pkg.run_settings",)) == [
        "pkg.notes:2", "pkg.notes:3", "pkg.notes:4", "pkg.notes:5"]


# A loaded document (parsed JSON: a file read back, a message of entry.py's protocol, a request
# on a worker's stdin) is read by string key in its record's parser alone, a classmethod
# `from_dict`; everywhere else by attribute, where a misspelt or missing key fails once, where it
# is parsed. What is a document is decided by where a value comes from, not by its name: these
# calls parse JSON, and every other reader is found from them (a function of the package that
# returns or yields a document: files.read_json, workers.Client's read and ask, workers.answer,
# entry.message and last_message, entry.Channel.requests, ...).
JSON_PARSERS = ("json.load", "json.loads")
DOCUMENT_PARSER = "from_dict"
# And the one reader of any document's "schema", whatever its record (the schema check above).
SCHEMA_READER = (SCHEMA_OWNER, "schema_of")
# What passes a document's part on: `doc.get("k")`, `doc.items()`, `dict(doc)`, `zip(a, b)`, ...
_PART_METHODS = ("get", "items", "values", "keys", "copy", "pop", "setdefault")
_PART_CALLS = ("dict", "list", "tuple", "sorted", "reversed", "enumerate", "zip", "iter", "next", "set")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _own_nodes(scope: ast.AST):
    """The nodes of `scope`'s own body: not those of a function or class defined in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _bound_names(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


class _Documents:
    """Where documents are, in a package: which functions return one (`readers`), which of their
    parameters are given one at some call (`given`), and in each scope the names bound to one.
    Found by running to a fixpoint over every module, as a reader found makes more documents."""

    def __init__(self, modules: dict[str, str]):
        self.trees = {name: ast.parse(source) for name, source in modules.items()}
        self.functions: dict[str, dict[str, list[ast.AST]]] = {}  # module -> name -> its defs
        self.imported: dict[str, dict[str, tuple[str, str | None]]] = {}  # alias -> (module, name)
        self.module_of: dict[int, str] = {}  # id(function) -> its module
        for module, tree in self.trees.items():
            defined = self.functions.setdefault(module, {})
            aliases = self.imported.setdefault(module, {})
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defined.setdefault(node.name, []).append(node)
                    self.module_of[id(node)] = module
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            aliases[alias.asname] = (alias.name, None)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    for alias in node.names:
                        whole = f"{node.module}.{alias.name}"
                        aliases[alias.asname or alias.name] = (
                            (whole, None) if whole in self.trees else (node.module, alias.name))
        self.readers: set[tuple[str, str]] = set()  # (module, function) returning a document
        self.reader_names: set[str] = set()  # their names, for a method of some object (`worker.ask`)
        self.given: dict[int, set[str]] = {}  # id(function) -> its parameters given a document
        self.names: dict[int, set[str]] = {}  # id(scope) -> its names bound to a document
        self._settle()

    def _resolve(self, module: str, func: ast.AST) -> tuple[list[ast.AST], int]:
        """The package's functions a call of `func` in `module` may run, and how many of their
        parameters it fills itself (1 for `self.f`: self). None found: a method of some object."""
        if isinstance(func, ast.Name):
            if func.id in self.functions[module]:
                return self.functions[module][func.id], 0
            found, name = self.imported[module].get(func.id, (None, None))
            return self.functions.get(found, {}).get(name, []), 0
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            if func.value.id in ("self", "cls"):
                return self.functions[module].get(func.attr, []), 1
            found, name = self.imported[module].get(func.value.id, (None, None))
            if name is None and found in self.functions:
                return self.functions[found].get(func.attr, []), 0
        return [], 0

    def _reads(self, module: str, func: ast.AST) -> bool:
        """Whether calling `func` in `module` gives a document: JSON parsed, or a reader's return."""
        if ast.unparse(func) in JSON_PARSERS:
            return True
        targets, _ = self._resolve(module, func)
        if targets:
            return any((self.module_of[id(f)], f.name) in self.readers for f in targets)
        return isinstance(func, ast.Attribute) and func.attr in self.reader_names

    def is_document(self, module: str, expr: ast.AST | None, names: set[str]) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in names
        if isinstance(expr, (ast.Subscript, ast.Starred)):
            return self.is_document(module, expr.value, names)
        if isinstance(expr, ast.BoolOp):
            return any(self.is_document(module, v, names) for v in expr.values)
        if isinstance(expr, ast.IfExp):
            return self.is_document(module, expr.body, names) or self.is_document(module, expr.orelse, names)
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Attribute) and func.attr in _PART_METHODS:
                if self.is_document(module, func.value, names):
                    return True
            if isinstance(func, ast.Name) and func.id in _PART_CALLS:
                return any(self.is_document(module, a, names) for a in expr.args)
            return self._reads(module, func)
        return False

    def _scope_names(self, module: str, scope: ast.AST, inherited: set[str]) -> set[str]:
        """The names `scope` binds to a document (its own, and those it sees of its encloser)."""
        names = set(inherited) | self.given.get(id(scope), set())
        bindings = []
        for node in _own_nodes(scope):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                            and len(target.elts) == len(node.value.elts)):  # `a, b = doc, other`
                        bindings += list(zip(target.elts, node.value.elts))
                    else:
                        bindings.append((target, node.value))
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                bindings.append((node.target, node.value))
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                bindings.append((node.target, node.iter))
        grown = True
        while grown:  # a name bound late in a loop may be read early in it
            grown = False
            for target, value in bindings:
                if self.is_document(module, value, names):
                    new = set(_bound_names(target)) - names
                    names |= new
                    grown = grown or bool(new)
        return names

    def scopes(self, module: str):
        """(scope, the functions it lies in, its names bound to a document), outermost first."""
        todo = [(self.trees[module], (), set())]
        while todo:
            scope, within, inherited = todo.pop(0)
            names = self._scope_names(module, scope, inherited)
            yield scope, within, names
            for node in _own_nodes(scope):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    todo.append((node, within + (node.name,), names - {a.arg for a in _parameters(node)}))
                elif isinstance(node, ast.ClassDef):
                    todo.append((node, within, set()))

    def _settle(self) -> None:
        while True:
            before = (len(self.readers), sum(len(g) for g in self.given.values()))
            for module in self.trees:
                for scope, _, names in self.scopes(module):
                    for node in _own_nodes(scope):
                        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) and not isinstance(scope, ast.Module):
                            if self.is_document(module, node.value, names):
                                self.readers.add((module, scope.name))
                                self.reader_names.add(scope.name)
                        if isinstance(node, ast.Call):
                            self._give(module, node, names)
            if before == (len(self.readers), sum(len(g) for g in self.given.values())):
                return

    def _give(self, module: str, call: ast.Call, names: set[str]) -> None:
        """A document passed to a function of the package makes that parameter one."""
        targets, filled = self._resolve(module, call.func)
        for function in targets:
            parameters = [a.arg for a in _parameters(function)]
            for index, arg in enumerate(call.args, start=filled):
                if index < len(parameters) and self.is_document(module, arg, names):
                    self.given.setdefault(id(function), set()).add(parameters[index])
            for keyword in call.keywords:
                if keyword.arg in parameters and self.is_document(module, keyword.value, names):
                    self.given.setdefault(id(function), set()).add(keyword.arg)


def _parameters(function: ast.AST) -> list[ast.arg]:
    args = function.args
    return [*args.posonlyargs, *args.args, *args.kwonlyargs]


def document_reads(root: str = ROOT, package: str = PACKAGE,
                   schema_reader: tuple[str, str] = SCHEMA_READER) -> list[str]:
    """`module:line` of every read by string key (`x["k"]` loaded, `x.get("k")`) of a document,
    or of a reader's result itself (`worker.ask(...)["targets"]`), outside a `from_dict` (and
    `schema_reader`, module and function)."""
    modules = {}
    for name, path in sorted(package_modules(root, package).items()):
        with open(path, encoding="utf-8") as src:
            modules[name] = src.read()
    documents = _Documents(modules)
    found = []
    for module in modules:
        for scope, within, names in documents.scopes(module):
            if DOCUMENT_PARSER in within or (module == schema_reader[0] and schema_reader[1] in within):
                continue
            for node in _own_nodes(scope):
                key, owner = _keyed(node)
                if key is not None and documents.is_document(module, owner, names):
                    found.append(f"{module}:{node.lineno}")
    return sorted(set(found), key=lambda where: (where.rsplit(":", 1)[0], int(where.rsplit(":", 1)[1])))


def _keyed(node: ast.AST) -> tuple[str | None, ast.AST | None]:
    """(key, what is read) where `node` reads by a constant string key, else (None, None)."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        key, owner = node.slice, node.value
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == "get" and node.args):
        key, owner = node.args[0], node.func.value
    else:
        return None, None
    return (key.value, owner) if isinstance(key, ast.Constant) and isinstance(key.value, str) else (None, None)



def test_a_loaded_document_is_read_by_string_key_in_its_records_from_dict_alone():
    found = document_reads()
    assert not found, ("a loaded document read by string key outside its record's from_dict (give it "
                       "a frozen record that parses it in `from_dict`, and read its attributes): "
                       + ", ".join(found))


def test_the_document_check_finds_reads_by_where_a_value_comes_from(tmp_path):
    root = scratch_package(tmp_path, files=(
        'import json\n\n\ndef read_json(path):\n    with open(path) as src:\n        return json.load(src)\n'
        '\n\ndef schema_of(data):\n    return data.get("schema")\n'), workers=(
        'import json\nimport sys\n\n\nclass Channel:\n    def requests(self):\n        for line in sys.stdin:\n'
        '            yield json.loads(line)\n\n\nclass Client:\n    def read(self, key=None):\n'
        '        said = json.loads(self.process.stdout.readline())\n        return said\n\n'
        '    def ask(self, request):\n        return self.read()\n'), reader=(
        'import json\nimport os\nimport sys\nimport xml.etree.ElementTree as ET\n\nfrom pkg import files\n'
        '\n\nclass Budget:\n    @classmethod\n    def from_dict(cls, data):\n'  # 11: a record's parser
        '        return cls(data["seeds"], [row.get("case") for row in data["rows"]])\n'
        '\n\ndef load(path):\n    data = files.read_json(path)\n'  # 16: a document, by its reader
        '    if files.schema_of(data) != "b/1":\n        return Budget.from_dict(data)\n'
        '    for row in data["rows"]:\n'  # 19
        '        seeds = row["seeds"]\n'  # 20: a part of it
        '    return seeds.get("first"), Budget.from_dict(data).seeds\n'  # 21: a part of a part
        '\n\ndef serve(channel):\n    for request in channel.requests():\n        answer(request)\n'
        '\n\ndef answer(request):\n    return request["cmd"]\n'  # 30: given a request read from stdin
        '\n\ndef sample(worker, argv):\n    spec, command = json.loads(argv[1]), argv[2:]\n'
        '    return worker.ask({"cmd": "result"})["targets"], spec.get("root"), command[0]\n'  # 35: an answer, a parse
        '\n\ndef not_documents(klass, svg, **kwargs):\n'
        '    request = {"cmd": "exit"}\n'  # named as a request is, built here
        '    home = os.environ["HOME"] + os.environ.get("USER", "")\n'
        '    root = ET.parse(svg).getroot()\n    width, height = root.attrib["width"], root.get("height")\n'
        '    torch = sys.modules["torch"]\n'
        '    return request["cmd"], kwargs["threads"], vars(klass)["__torch_function__"], home, width, torch\n'))
    assert document_reads(root, "pkg", ("pkg.files", "schema_of")) == [
        "pkg.reader:19", "pkg.reader:20", "pkg.reader:21", "pkg.reader:30", "pkg.reader:35"]

# Every environment variable of the tool's own is named in overrides/variables.py; statfinder.py
# names its four itself, as it runs before the package can be imported.
VARIABLE_OWNERS = ("overrides.variables", "overrides.counts.statfinder")


def variables_named(source: str, name: str = "module") -> list[str]:
    """`name:line` of every string that is an OVERRIDES_ variable's name."""
    return _in_line_order([f"{name}:{node.lineno}" for node in ast.walk(ast.parse(source))
                           if isinstance(node, ast.Constant) and isinstance(node.value, str)
                           and re.fullmatch(r"OVERRIDES_[A-Z_]+", node.value)])


def test_the_tools_environment_variables_are_named_in_variables_py_alone():
    found = found_outside(variables_named, VARIABLE_OWNERS)
    assert not found, ("an OVERRIDES_ variable named outside overrides/variables.py (declare it "
                       "there and import it): " + ", ".join(found))


def test_the_variable_check_finds_a_second_name(tmp_path):
    root = scratch_package(tmp_path, variables='THREADS = "OVERRIDES_WORKER_THREADS"\n', worker=(
        'import os\nt = os.environ.get("OVERRIDES_WORKER_THREADS", "1")\n'
        'said = "set OVERRIDES_WORKER_THREADS to 2"\n'))
    assert found_outside(variables_named, ("pkg.variables",), root, "pkg") == ["pkg.worker:2"]


# Every Python process of the tool's own starts as `overrides/entry.py ROLE` (entry.command): no
# other module starts Python with a code string (`-c`) or one of this package's modules (`-m
# overrides...`), and no other module is a program of its own, except these, each for a reason.
ENTRY_OWNER = "overrides.entry"
PROGRAMS = {
    "overrides.review.record": "scripts/record.sh runs it",
    "overrides.review.pr_report": "scripts/report.sh runs it",
    "overrides.builds.samepath_enter": "the namespace launcher, run before any path of a side exists",
    "overrides.ab.shimenv": "benchmarks make a shim environment by hand with it",
}


def _is_main_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.test.comparators))


def processes_started(source: str, name: str = "module") -> list[str]:
    """`name:line` wherever `source` starts Python its own way: a command (a list) holding "-c",
    or "-m" before one of this package's modules; and where it is a program (a `__main__` guard)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.List):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            module_after_m = [after for before, after in zip(words, words[1:] + [None]) if before == "-m"]
            if "-c" in words or any(isinstance(m, str) and m.startswith("overrides") for m in module_after_m):
                found.append(f"{name}:{node.lineno}")
        if _is_main_guard(node) and name not in PROGRAMS:
            found.append(f"{name}:{node.lineno}")
    return _in_line_order(found)


def test_every_process_of_the_tools_own_starts_through_entry_py():
    found = found_outside(processes_started, (ENTRY_OWNER,))
    assert not found, ("a process started its own way (use overrides.entry.command with a role, and "
                       "declare the role in entry.ROLES): " + ", ".join(found))


def test_the_process_check_finds_a_second_entry_point_and_a_code_string(tmp_path):
    root = scratch_package(tmp_path, entry='ROLES = {}\nif __name__ == "__main__":\n    pass\n', worker=(
        'import subprocess, sys\n'
        'subprocess.run([sys.executable, "-c", "import torch"])\n'
        'subprocess.run([sys.executable, "-m", "overrides.ab.worker"])\n'
        'subprocess.run([sys.executable, "-m", "venv", "/tmp/v"])\n'
        'ok = ("-n", "-m", "-c")\n'
        'if __name__ == "__main__":\n    pass\n'))
    assert found_outside(processes_started, ("pkg.entry",), root, "pkg") == [
        "pkg.worker:2", "pkg.worker:3", "pkg.worker:6"]
