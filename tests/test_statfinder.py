"""A counting process's imports found by stat (overrides/counts/statfinder.py): modules,
packages and namespace folders import as Python's own finder would, no folder is listed, and a
user's source is compiled whatever bytecode lies beside it. Each check runs in a fresh
interpreter, as a counting process does."""

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

_PROBE = textwrap.dedent('''
    import os, sys
    sys.path.insert(0, {root!r})
    from overrides.counts import statfinder
    listed = []
    real = os.listdir
    os.listdir = lambda path=".": listed.append(os.fspath(path)) or real(path)
    os.scandir = None  # nothing may walk a folder either
    statfinder.enter({tool!r}, None, {own!r}, {user!r})
    sys.path.append({user!r})
    {body}
    print("LISTED", sorted(p for p in listed if p.startswith(({tool!r}, {user!r}, {own!r}))))
''')


def _probe(tmp_path, body: str) -> str:
    user, tool, own = (tmp_path / "user", tmp_path / "tool", tmp_path / "own")
    for folder in (user, tool, own):
        folder.mkdir(exist_ok=True)
    code = _PROBE.format(root=ROOT, tool=str(tool), own=str(own), user=str(user), body=body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_modules_packages_and_namespace_folders_import_without_a_listing(tmp_path):
    user = tmp_path / "user"
    (user / "pkg" / "sub").mkdir(parents=True)
    (user / "pkg" / "__init__.py").write_text("WHERE = 'package'\n")
    (user / "pkg" / "sub" / "leaf.py").write_text("from pkg import WHERE\nVALUE = WHERE + '/leaf'\n")
    (user / "mod.py").write_text("import helper\nVALUE = helper.VALUE * 2\n")
    (user / "helper.py").write_text("VALUE = 21\n")
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "ownmod.py").write_text("VALUE = 'own'\n")
    for junk in range(20):
        (user / f"output-{junk}.json").write_text("{}")
    out = _probe(tmp_path, "import mod, pkg.sub.leaf, ownmod; "
                           "print(mod.VALUE, pkg.sub.leaf.VALUE, ownmod.VALUE, type(mod.__loader__).__name__)")
    assert "42 package/leaf own SourceOnlyLoader" in out
    assert "LISTED []" in out


def test_a_missing_module_is_not_found_and_the_path_keeps_pythonpaths_order(tmp_path):
    out = _probe(tmp_path, textwrap.dedent('''
        try:
            import no_such_module_here
        except ModuleNotFoundError as exc:
            print("missing", exc.name)
        print("ORDER", [p for p in sys.path if p.startswith({!r})])
    ''').format(str(tmp_path)))
    assert "missing no_such_module_here" in out
    assert f"ORDER {[str(tmp_path / 'tool'), str(tmp_path / 'own'), str(tmp_path / 'user')]}" in out


def test_a_users_source_is_compiled_whatever_bytecode_lies_beside_it(tmp_path):
    """A `.pyc` that Python would take as fresh (same size and time as the source) but holding
    other code: the user's folder compiles the source; this checkout's bytecode is used as usual."""
    user = tmp_path / "user"
    user.mkdir()
    source = user / "stale.py"
    source.write_text("VALUE = 1\n")
    subprocess.run([sys.executable, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1])", str(source)],
                   check=True, timeout=60)
    stat = source.stat()
    source.write_text("VALUE = 2\n")  # same size
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert "VALUE = 2" in source.read_text()
    out = _probe(tmp_path, "import stale; print('VALUE', stale.VALUE)")
    assert "VALUE 2" in out
