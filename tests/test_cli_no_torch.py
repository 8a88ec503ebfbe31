"""bench.py before and without torch: names are checked before torch is imported, the parent of
`--compare` never imports it, and a command that needs it says so in one line.

The interpreter without torch is the system's `/usr/bin/python3` (Debian's, without torch); the
tests that need it skip where it is missing or has torch after all.
"""

import os
import subprocess
import sys

import pytest

from conftest import NO_TORCH_PYTHON, ROOT, python_without_torch


def _python_without_torch() -> str:
    if python_without_torch() is None:
        pytest.skip(f"{NO_TORCH_PYTHON} is missing, has torch or does not run: no interpreter without torch "
                    "to run bench.py with")
    return NO_TORCH_PYTHON


def _bench(python: str, *args: str, env: dict | None = None, timeout: float = 300):
    return subprocess.run([python, "bench.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def torch_that_must_not_be_imported(tmp_path):
    """An environment whose first `torch` on the import path stops the process when imported:
    whatever still works under it was done before (or without) importing torch."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise SystemExit('torch was imported')\n")
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(tmp_path)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))


def test_a_typo_is_refused_before_torch_is_imported_with_a_suggestion(torch_that_must_not_be_imported):
    # It took 7-13 s on a busy machine: torch was imported before the names were checked.
    for args, message in (
            (("--cases", "SubTensr"), "unknown case 'SubTensr'; did you mean SubTensor? valid cases: Tensor"),
            (("--cases", "Tensor", "subtensor"), "did you mean SubTensor?"),
            (("--op", "x.ad"), "unknown op 'x.ad'; did you mean x.add? valid ops: torch.add"),
            (("--instructions", "--cases", "SubTensr"), "did you mean SubTensor?"),
            (("--compare", "a", "b", "--cases", "SubTensr"), "did you mean SubTensor?"),
            (("--cases", "Tensor", "mine"), "unknown case 'mine'; valid cases:"),  # nothing near
            (("--cases", "pkg.module:"), "not of the form pkg.module:factory")):
        out = _bench(sys.executable, *args, env=torch_that_must_not_be_imported)
        assert out.returncode == 2, (args, out.stderr)
        assert message in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "torch was imported" not in out.stderr


def test_listing_needs_no_torch(torch_that_must_not_be_imported):
    out = _bench(sys.executable, "--list", "--list-ops", env=torch_that_must_not_be_imported)
    assert out.returncode == 0, out.stderr
    names = [line.split()[0] for line in out.stdout.splitlines()]
    assert {"SubTensor", "Cat8SubWithTorchFunction", "torch.add", "x.shape"} <= set(names)


def test_the_compare_parent_imports_no_torch():
    # Everything the parent of --compare runs, imported and driven as far as it goes without
    # starting workers; torch is importable here, and must still not be imported.
    code = (
        "import sys\n"
        "from overrides import case_comparison, cli, environment, run_report\n"
        "from overrides.ab import paired\n"
        "from overrides.ab.countfirst import countable\n"
        "from overrides.cases import casenames, ops\n"
        "from overrides.counts import callgrind, rounds\n"
        "args = cli.build_parser().parse_args(['--compare', 'a', 'b', '--cases', 'all', 'm:f'])\n"
        "selected = casenames.resolve(args.cases)\n"
        "assert selected[-1].name == 'm:f' and selected[0].name == 'Tensor', selected\n"
        "countable([(c, o) for c in selected[:-1] for o in ops.all_ops()], sys.executable, None)\n"
        "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def test_compare_runs_from_a_python_without_torch(a_a_compare, torch_python):
    parent, out, _ = a_a_compare  # the A/A comparison tests/test_ab.py judges, run by this parent
    if parent != NO_TORCH_PYTHON:
        _python_without_torch()  # skips, saying why
    assert out.returncode in (0, 1), out.stderr  # 1 would be a (false) regression: not a crash
    assert "Traceback" not in out.stderr
    assert out.stdout.startswith("case ") and "\nTensor " in out.stdout, out.stdout
    assert f"base: {torch_python}: torch " in out.stdout


def test_commands_that_need_torch_say_so_in_one_line():
    python = _python_without_torch()
    for args in ((), ("--cases", "Tensor", "--op", "x.add"), ("--instructions",)):
        out = _bench(python, *args)
        assert out.returncode == 2, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr, out.stderr
        assert f"{python} has none; run" in out.stderr, out.stderr
        # where `make bench` made this checkout's virtualenv, the line names it
        assert (".venv/bin/python bench.py" in out.stderr) == os.path.exists(os.path.join(ROOT, ".venv", "bin", "python"))
        assert "--compare BASE_PY BRANCH_PY" in out.stderr
    listed = _bench(python, "--list")
    assert listed.returncode == 0 and listed.stdout.startswith("Tensor "), listed.stderr


@pytest.mark.slow
def test_the_compare_parent_asks_an_interpreter_which_ops_a_user_case_takes(tmp_path, monkeypatch):
    # The parent cannot try a user case's operands (no torch); it must still leave out of the
    # counts an op the case has no form for, and refuse a bad spec with the reason.
    from overrides.ab.countfirst import countable
    from overrides.cases import casenames, ops
    from overrides.errors import UsageError

    (tmp_path / "likes.py").write_text(
        "import torch\n"
        "class Like:\n"
        "    def __init__(self, t): self.t = t\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        return func(*[a.t if isinstance(a, Like) else a for a in args], **(kwargs or {}))\n"
        "def like():\n"
        "    return Like(torch.tensor([1.0])), Like(torch.tensor([2.0]))\n")
    monkeypatch.chdir(tmp_path)
    targets = [(case, op) for case in casenames.resolve(["WithTorchFunction", "likes:like"])
               for op in ops.resolve_ops(["torch.add", "x.add"])]
    assert countable(targets, sys.executable, None) == [
        ("WithTorchFunction", "torch.add"), ("likes:like", "torch.add")]
    with pytest.raises(UsageError, match="module likes has no attribute 'nope'"):
        countable([(casenames.resolve(["likes:nope"])[0], ops.DEFAULT_OP)], sys.executable, None)


def test_a_torch_that_is_found_but_does_not_import_is_one_line(tmp_path):
    """A develop build on PYTHONPATH without its siblings (torchgen): found, then its import
    fails inside torch. One line naming the interpreter and the fix, exit 2, not a traceback;
    for bench.py and for the scripts, whose driver is picked by a look-up, not an import."""
    fake = tmp_path / "checkout" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import torchgen_is_not_here  # a sibling the checkout lacks\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "checkout"))
    for command in ([sys.executable, "bench.py", "--cases", "Tensor", "-m", "2"],
                    ["bash", "scripts/record.sh", "--label", "x", "--no-keep", "--runs-dir", str(tmp_path / "runs")],
                    ["bash", "scripts/report.sh", sys.executable, sys.executable, "-o", str(tmp_path / "r.zip"),
                     "--runs-dir", str(tmp_path / "runs")]):
        out = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env=dict(env, PYTHON=sys.executable))
        lines = [line for line in out.stderr.strip().splitlines() if not line.startswith("[")]
        assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert "finds torch but cannot import it" in lines[0] and "torchgen_is_not_here" in lines[0]
