"""Shared helpers: run the project's own entry points as a user would.

The expensive runs several test modules read (a paired report.sh with instruction counts, an
A/A `bench.py --compare`, ...) are session fixtures here: each runs once per test session and
every test that reads it asserts on its outputs."""

import base64
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# An interpreter without torch: the system's (Debian's), where there is one (tests/test_cli_no_torch.py).
NO_TORCH_PYTHON = "/usr/bin/python3"
_PACKAGE_FOLDERS = ("site-packages", "dist-packages")
_TORCH_PACKAGES = ("torch", "torchgen", "functorch")  # torch and its build's sibling packages


def run_tool(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run `python <tool> args...` from the project root and capture its output."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def user_library(folder, **modules: str) -> str:
    """benchmarks/userlib copied into `folder` (a user's own folder, as `--cases`/`--step` find
    theirs), with `modules` (name -> source) written beside it."""
    shutil.copytree(os.path.join(ROOT, "benchmarks", "userlib"), folder)
    for name, source in modules.items():
        with open(os.path.join(folder, f"{name}.py"), "w", encoding="utf-8") as out:
            out.write(source)
    return str(folder)


# A tiny step's parts, for tiny_steps: each {placeholder} filled per class or factory.
_TINY_CLASS = '''

class {name}(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
{body}        return super().__torch_function__(func, types, args, kwargs or {{}})
'''
_TINY_STEP = '''

def _step(cls, plain, zero=True, keep=None):
    torch.manual_seed(0)
    w = torch.randn(8, 8) * 0.1
    if cls is not None and not plain:
        w = w.as_subclass(cls)
    w.requires_grad_()
    x = torch.randn(4, 8)
    opt = torch.optim.SGD([w], lr=0.01)

    def step():
        if zero:
            opt.zero_grad()
        loss = F.linear(x, w).square().sum()
        loss.backward()
        opt.step()
        if keep is not None:
            keep.append(loss)

    return step
'''
_TINY_FACTORY = '''

def {name}(plain=False):
    """{doc}"""
    return _step({cls}, plain{more})
'''


def tiny_steps(classes: dict[str, str], factories: dict[str, tuple], prelude: str = "", rest: str = "") -> str:
    """The text of a user's module of tiny training steps, as the step tests write it into a
    folder of the user's own: `prelude` after the imports, each of `classes` (name -> the lines
    its classmethod `__torch_function__` runs before it calls super(), indented 8 spaces), and each
    of `factories` (name -> (its weight's class, None for plain on both sides; its docstring[;
    more arguments of `_step`: `zero=False` never zeroes the grads, `keep=[]` keeps each loss])) a
    `factory(plain=False)` of one step: an 8x8 weight, `F.linear`, backward and SGD; `rest` last."""
    text = "import io\nimport time\n\nimport torch\nimport torch.nn.functional as F\n\n" + prelude
    text += "".join(_TINY_CLASS.format(name=name, body=body) for name, body in classes.items())
    text += _TINY_STEP
    text += "".join(_TINY_FACTORY.format(name=name, cls=spec[0], doc=spec[1], more="".join(f", {a}" for a in spec[2:]))
                    for name, spec in factories.items())
    return text + rest


def made_package(root, files: dict[str, str], name: str = "pkg"):
    """A package `name` under `root` for the structure checks to read: each of `files` (a path
    below the package -> its text), with an `__init__.py` in every folder; the package's path."""
    package = root / name
    for relative, text in files.items():
        path = package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {package, *((package / r).parent for r in files)}:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text("")
    return package


def as_users_folder(monkeypatch, folder) -> None:
    """This test runs from `folder` as a user does from theirs: its working folder, and none of
    its modules already imported from an earlier test's folder (`steps` would import `units`
    from there, whose functions are then no file of this folder's: not "yours")."""
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in os.listdir(folder):
        if name.endswith(".py"):
            monkeypatch.delitem(sys.modules, name[:-3], raising=False)


def bench_in(folder, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python bench.py args...` run from `folder`, as a user runs it from theirs."""
    return subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), *args], cwd=folder,
                          capture_output=True, text=True, timeout=timeout)


# The scripts run their driver with $PYTHON when it has torch: this interpreter, the one under
# test (`make test PYTHON=python3` exports PYTHON=python3, and python3 on PATH may have no torch,
# or find a develop build on PYTHONPATH without the packages beside it).
os.environ["PYTHON"] = sys.executable
# Counts are not kept between runs (counts/kept.py), nor reused, except where a test asks for it:
# a test that counts (a fault it makes while a process counts, a count it compares) must count.
os.environ["OVERRIDES_COUNTS_CACHE"] = "off"


# What a browser is called: commands of these names are hidden from a command that must run
# as on a machine without one, and Debian's Chromium folder is emptied.
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
CHROMIUM_FOLDER = "/usr/lib/chromium"
BIN = "/usr/bin"  # where the browsers' commands are (/bin is a link to it on merged-/usr systems)


def without_chromium(command: list[str], scratch: str) -> list[str]:
    """`command` run as on a machine without Chromium: in user and mount namespaces of its own
    (`unshare -rm`, no root needed), /usr/bin replaced by links to each of its commands but the
    browsers (the real one bound at `scratch`, an empty folder), CHROMIUM_FOLDER emptied. (A
    file bound over a command is not enough: bash's `command -v` still finds it.) Skips the
    test where namespaces are refused."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("needs user namespaces (unshare -rm) to hide Chromium")
    skip = "|".join(BROWSER_NAMES)
    shell = (f'mount --bind {BIN} "$0" && mount -t tmpfs none {BIN} && '
             f'for f in "$0"/*; do case "${{f##*/}}" in {skip}) ;; *) "$0"/ln -s "$f" {BIN}/ ;; esac; done && '
             + (f"mount -t tmpfs none {CHROMIUM_FOLDER} && " if os.path.isdir(CHROMIUM_FOLDER) else "")
             + 'exec "$@"')
    return ["unshare", "-rm", "sh", "-c", shell, scratch, *command]


def script(name, *args, env=None, timeout=600, no_chromium=None):
    """Run scripts/NAME from the project root, with `env` added to this process's environment
    (`no_chromium`: an empty folder, to run it as on a machine without Chromium, `without_chromium`)."""
    command = ["bash", f"scripts/{name}", *args]
    return subprocess.run(without_chromium(command, no_chromium) if no_chromium else command, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


# -- running in two workers (pytest-xdist, `make test`) -----------------------------------------
#
# A session or module fixture runs once per worker that needs it, so the tests that read one
# (or several together) form one xdist group and run in one worker (`--dist loadgroup`). The
# groups that count instructions with valgrind, the longest runs, are started first
# (`--no-loadscope-reorder` keeps this order), so the short tests fill the other worker
# meanwhile and both end together. Without xdist none of this changes anything.
SHARED_BUT_CHEAP = {"torch_python", "tmp_path_factory", "worker_id", "testrun_uid"}
START_FIRST = ("paired_report", "copies_counted_first", "ahead_and_fresh", "history_measured")
# test_report's label recordings (unpaired bench runs and py-spy) run after the paired report,
# in its worker, not beside a valgrind group: beside one (load 6 on 2 cores, with another
# tenant's work) py-spy once took no sample inside a hot loop and record.sh failed.
RUN_AFTER = {"runs": "paired_report"}


def _shared_fixtures(item) -> set[str]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {name for name, defs in info.name2fixturedefs.items()
            if defs and defs[-1].scope in ("session", "module") and name not in SHARED_BUT_CHEAP}


# `make test-matrix` (scripts/matrix.sh) runs, on every other Python, those marked `matrix` (and
# on the newest the fast tests too): one slow test or shared run of each part that meets the interpreter, where a
# Python version has broken something before. The whole suite on three Pythons took 72 min in
# CI; the rest of the slow tests read records these produce, alike on every version. Tests that
# read one of these shared runs are marked here, as its cost is paid once for all of them.
MATRIX_RUNS = {
    "ahead_and_fresh": "Callgrind's counts exact, and the call paths' frame names",
    "copies_counted_first": "a comparison counted first: start-up paths, library placement, verdicts",
    "base_counts": "Python-call counts: sys.settrace to 3.11, sys.monitoring from 3.12",
    "two_envs": "one start-up path for two environments (pyvenv.cfg, the mount namespace)",
    "runs": "a report of recorded runs: py-spy's frame names, the pictures",
    "counted_twice": "a step's instructions (a spin's cost an iteration differs by version)",
}
# Of those, the runs whose checks are valgrind's side of a count (Callgrind's exactness, library
# placement, a step counted twice alike: its figures differ by version, what it checks does not)
# run on the ends of the supported range only (marked `ends`; scripts/matrix.sh leaves them out
# between), which bracket the versions between; the rest (start-up paths, py-spy's frames, the
# Python-call counter, Dynamo) on every version. On Python 3.12 these three took 269 of the
# matrix's 488 worker-seconds (its run 5:01 by hand, 5:45 in a fresh clone's CI).
ENDS_ONLY = {"ahead_and_fresh", "copies_counted_first", "counted_twice"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # `make test-fast` (-m "not slow"): a test that reads an expensive shared run is slow, as is
    # one marked so by hand
    for item in items:
        shared = _shared_fixtures(item)
        if shared:
            item.add_marker(pytest.mark.slow)
        matrix_runs = shared & set(MATRIX_RUNS)
        if matrix_runs:
            item.add_marker(pytest.mark.matrix)
            if matrix_runs <= ENDS_ONLY:
                item.add_marker(pytest.mark.ends)
    # The workers collect (where xdist sets dist to "no" and loadgroup to True); the controller
    # only schedules what they collected.
    if not (getattr(config.option, "loadgroup", False) or config.getoption("dist", "no") == "loadgroup"):
        return
    parent: dict[str, str] = {}  # union-find over fixtures read by one test

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    needs = {item.nodeid: _shared_fixtures(item) for item in items}
    for later, first in RUN_AFTER.items():
        if any(later in names for names in needs.values()) and any(first in names for names in needs.values()):
            parent[root(later)] = root(first)
    for names in needs.values():
        first, *rest = sorted(names) or [None]
        for name in rest:
            parent[root(name)] = root(first)
    groups = {}
    for item in items:
        if needs[item.nodeid]:
            group = root(next(iter(needs[item.nodeid])))
            groups[item.nodeid] = group
            item.add_marker(pytest.mark.xdist_group(group))
    order = {root(name): rank for rank, name in enumerate(START_FIRST) if name in parent}
    items.sort(key=lambda item: order.get(groups.get(item.nodeid), len(START_FIRST)))


def pytest_configure(config):
    """`--dist loadgroup` schedules by a suffix pytest-xdist adds to each grouped test's id, by
    renaming Node._nodeid; pytest 9.2 reads ids from Node._id, so with xdist 3.8 nothing is
    grouped and every worker runs the shared valgrind runs itself (the suite took 506 s, not
    ~330). Refuse that pair at once, saying what to install, rather than run slowly."""
    if config.getoption("dist", "no") != "loadgroup" or hasattr(config, "workerinput"):
        return
    import importlib.metadata

    def version(name: str) -> tuple[int, ...]:
        return tuple(int(part) for part in importlib.metadata.version(name).split(".")[:2] if part.isdigit())

    if version("pytest") >= (9, 2) and version("pytest-xdist") <= (3, 8):
        pytest.exit(f"pytest {importlib.metadata.version('pytest')} with pytest-xdist "
                    f"{importlib.metadata.version('pytest-xdist')}: --dist loadgroup groups nothing; "
                    "install the versions requirements-test.txt pins "
                    "(python -m pip install -r requirements-test.txt)", returncode=4)


@pytest.fixture
def bench():
    return lambda *args, **kw: run_tool("bench.py", *args, **kw)


def python_without_torch() -> str | None:
    """NO_TORCH_PYTHON when it runs and has no torch, else None."""
    if not os.access(NO_TORCH_PYTHON, os.X_OK):
        return None
    has_torch = subprocess.run(
        [NO_TORCH_PYTHON, "-c", "import importlib.util, sys; "
                                "sys.exit(importlib.util.find_spec('torch') is not None)"],
        capture_output=True, timeout=60)
    return NO_TORCH_PYTHON if has_torch.returncode == 0 else None


@pytest.fixture(scope="session")
def torch_python(tmp_path_factory) -> str:
    """This interpreter with its own torch and packages, as a virtualenv whose site-packages
    holds torch (and its sibling packages) as hard links of this interpreter's files and every
    other entry as a symlink: the interpreter the paired comparisons (run_ab, `--compare`,
    report.sh) are run on.

    Why: a comparison mirrors the folder torch is imported from into two views, copying every
    Python file of the folders it mirrors (overrides/builds/placement.py), and where torch sits in a
    site-packages, that is every package there. This machine's site-packages holds 14,000
    Python files (1.5 GB); mirroring and removing it took 20-47 s per comparison, ~3 s for
    this one's torch. The same files run: the hard links are torch's own (its libraries are
    the same inodes), and every other package is reached through its link. Where torch is not
    in a site-packages folder (a develop build), or hard links cannot be made (another file
    system), this interpreter itself."""
    spec = importlib.util.find_spec("torch")
    folder = os.path.dirname(os.path.realpath(spec.submodule_search_locations[0]))
    if os.path.basename(folder) not in _PACKAGE_FOLDERS:
        return sys.executable
    env = tmp_path_factory.mktemp("torch-env") / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    python = str(env / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        for name in sorted(os.listdir(folder)):
            source, target = os.path.join(folder, name), os.path.join(site, name)
            if name in _TORCH_PACKAGES and os.path.isdir(source) and not os.path.islink(source):
                shutil.copytree(source, target, symlinks=True, copy_function=os.link)
            elif not os.path.exists(target):
                os.symlink(source, target)
    except OSError:
        return sys.executable
    found = subprocess.run([python, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
                           capture_output=True, text=True, timeout=300)
    assert found.stdout.strip() == os.path.join(site, "torch"), found.stderr
    return python


@pytest.fixture(scope="session")
def paired_report(tmp_path_factory, torch_python):
    """report.sh on two interpreters: paired timing, instruction counts with call paths (valgrind
    is installed for the tests), flamegraphs of what regressed. The branch's shim on
    Tensor.__torch_function__ runs a 40-turn Python loop: thousands of instructions a call, far
    beyond what layout moves from seed to seed. (The bare shim, ~+400, was "inconclusive" on two
    seeds once: +345 and +612 give t(1) = 12.7 an interval of +-1,700.)

    Two cases: SubTensor, which reaches the shim, and Tensor, which does not (what the other
    two seed cases would add is checked by test_ab's and test_report's label comparisons, which
    flag exactly the cases the shim reaches). Every valgrind process imports torch (12-24 s)
    and counts each case; WithTorchFunction's counts, moved by layout alone, often left it
    undecided for several rounds of seeds.

    Read by tests/test_report.py (the ZIP) and tests/test_callgrind.py (the instruction counts
    in its base.json and branch.json: each build under the same drawn hash seeds, with call
    paths): one valgrind run of both builds for both. Returns (the finished process, the ZIP)."""
    from overrides.ab import shimenv

    folder = tmp_path_factory.mktemp("paired")
    shim = shimenv.make_shim_env(torch_python, str(folder / "loop40"), "loop40")
    path = folder / "report.zip"
    out = script("report.sh", torch_python, shim.python, "-o", str(path), "--runs-dir",
                 str(folder / "runs"), "--cases", "Tensor", "SubTensor", "--pairs", "3",
                 "--pair-seconds", "0.5", "--seconds", "2", timeout=900)
    return out, path


@pytest.fixture(scope="session")
def a_a_compare(tmp_path_factory, torch_python):
    """`bench.py --compare` of one interpreter against itself, the four seed cases in four 1-s
    pairs, run by an interpreter without torch where there is one (the parent of --compare
    never imports torch). Returns (the parent's path, the finished process, the JSON).
    Read by tests/test_ab.py (nothing flagged) and tests/test_cli_no_torch.py."""
    import json

    parent = python_without_torch() or sys.executable
    path = tmp_path_factory.mktemp("a-a") / "cmp.json"
    out = subprocess.run([parent, "bench.py", "--compare", torch_python, torch_python,
                          "--no-instructions", "--pairs", "4", "--pair-seconds", "1",
                          "--threshold-pct", "2", "--json", str(path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode in (0, 1), out.stderr  # 1: a (false) regression, for the tests to name
    return parent, out, json.loads(path.read_text())


@pytest.fixture(scope="session")
def second_install(tmp_path_factory):
    """(python, torch folder): a virtualenv importing a byte-identical copy of this torch
    through a `.pth` file. Its shared libraries are copies (other files with the same bytes, as
    two installs of one wheel have them: what placement compares and maps); its other files
    are hard links (0.3 GB neither written nor deleted; nothing writes to them)."""
    from overrides.builds.placement import is_shared_library

    folder = tmp_path_factory.mktemp("install")
    site = folder / "site"
    site.mkdir()
    torch_dir = os.path.dirname(importlib.util.find_spec("torch").origin)

    def copy_libraries_link_the_rest(source, target):
        if is_shared_library(os.path.basename(source)):
            shutil.copy2(source, target)
        else:
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)

    shutil.copytree(torch_dir, site / "torch", symlinks=True, copy_function=copy_libraries_link_the_rest)
    env = folder / "env"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env)
    python = env / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    import site as site_module

    with open(os.path.join(purelib, "zz_second_install.pth"), "w", encoding="utf-8") as pth:
        pth.write("\n".join([str(site)] + site_module.getsitepackages()) + "\n")
    return str(python), str(site / "torch")


@pytest.fixture(scope="session")
def copies_counted_first(tmp_path_factory, second_install):
    """A/A with instruction counts first: two byte-identical copies of this torch, kept-copy
    style, at paths of different lengths (as runs/base/kept and runs/branch/kept are), Tensor
    and SubTensor, counted under hash seed 1 (counts exact on one seed decide; a second seed
    cost a wave of two valgrind processes, ~30 s of the suite), then timed in 0.3-s pairs until
    decided.
    Read by tests/test_placement.py (the copies count exactly the same) and tests/test_ab.py
    (counts that decide every case end the clock at its minimum of pairs)."""
    from overrides.ab.config import ABConfig
    from overrides.ab.paired import run_ab
    from overrides.builds import interpreters
    from overrides.cases import seedcases
    from overrides.cases.ops import DEFAULT_OP

    _, torch_dir = second_install
    longer = tmp_path_factory.mktemp("a-folder-with-a-much-longer-name")
    subprocess.run(["cp", "-al", torch_dir, str(longer / "torch")], check=True)  # hard links: quick
    # pairs of 1 s, cut to 0.3 s once the counts decide every case (they do: one torch twice)
    config = ABConfig(seconds_per_pair=1.0, check_seconds_per_pair=0.3, max_seconds=120, instruction_seeds=(1,))
    return run_ab(interpreters.Build(sys.executable, os.path.dirname(torch_dir)),
                     interpreters.Build(sys.executable, str(longer)), seedcases.SEED_CASES[:2], [DEFAULT_OP], config)


def make_wheel(folder, name: str, version: str, files: dict[str, str]) -> str:
    """A minimal wheel pip installs: the files, METADATA, WHEEL and a RECORD."""
    dist = f"{name}-{version}.dist-info"
    contents = dict(files)
    contents[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    contents[f"{dist}/WHEEL"] = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{dist}/RECORD,,")
    contents[f"{dist}/RECORD"] = "\n".join(record) + "\n"
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in contents.items():
            whl.writestr(member, text)
    return path
