"""Both sides start from one path: processes of two environments at different paths see the same
interpreter, prefix and checkout paths, and get their environment block byte for byte."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from overrides.builds import samepath
from overrides.case_comparison import Comparison
from overrides.counts import judge, records
from overrides.comparison_settings import ComparisonSettings
from overrides.run_settings import RunSettings
from overrides.environment import Environment

_SHOW = ("import json, os, sys; print(json.dumps({'executable': sys.executable, 'prefix': sys.prefix, "
         "'path': sys.path, 'cwd': os.getcwd(), 'environ': open('/proc/self/environ', 'rb').read().hex(), "
         "'config': open(os.path.join(sys.prefix, 'pyvenv.cfg')).read()}))")

needs_namespaces = pytest.mark.skipif(bool(samepath.unavailable_reason()),
                                      reason=f"no private mount namespace: {samepath.unavailable_reason()}")


@pytest.fixture(scope="module")
def two_envs(tmp_path_factory):
    """Two bare virtualenvs of this interpreter, at paths of different lengths and names."""
    top = tmp_path_factory.mktemp("envs")
    made = []
    for name in ("main", "fix-subclass-dispatch-env"):
        made.append(_venv(top / name))
    return made


def _show(where: samepath.Placement, env: dict) -> dict:
    out = subprocess.run(where.wrap([where.python, "-c", _SHOW]), capture_output=True, text=True,
                         env=env, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@needs_namespaces
def test_two_environments_at_different_paths_see_one_path(two_envs, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "x", "LANG": "C"}  # C: the launcher must not coerce it
    seen = []
    for python in two_envs:
        where = samepath.place(python, str(tmp_path), in_tool=True)
        assert where.fixed, where.reason
        seen.append(_show(where, env))
    assert seen[0] == seen[1]
    assert seen[0]["executable"] == os.path.join(samepath.FIXED_ROOT, "env", "bin", "python")
    assert seen[0]["prefix"] == os.path.join(samepath.FIXED_ROOT, "env")
    assert seen[0]["cwd"] == os.path.join(samepath.FIXED_ROOT, "tool")
    assert "home" in seen[0]["config"] and "command" not in seen[0]["config"]  # no folder named
    # The environment block arrives exactly as given: nothing added by the launcher.
    given = b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())
    assert bytes.fromhex(seen[0]["environ"]) == given


@needs_namespaces
def test_the_mounts_stay_inside_the_process(two_envs):
    where = samepath.place(two_envs[0])
    subprocess.run(where.wrap([where.python, "-c", "pass"]), check=True, timeout=120)
    assert not os.path.exists(os.path.join(samepath.FIXED_ROOT, "env", "bin"))


_SHOW_START = ("import json, os, sys; print(json.dumps({'executable': sys.executable, "
               "'base': sys._base_executable, 'exe': os.readlink('/proc/self/exe'), 'prefix': sys.prefix, "
               "'path': sys.path, 'bin': sorted(os.listdir(os.path.dirname(sys.executable))), "
               "'config': open(os.path.join(sys.prefix, 'pyvenv.cfg')).read()}))")


def _venv(folder, *flags: str) -> str:
    """A bare virtualenv of this interpreter at `folder` (`python -m venv FLAGS`); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(folder)], check=True, timeout=120)
    return str(folder / "bin" / "python")


def _seen_at_start(python: str) -> dict:
    """What an interpreter placed by samepath sees of its own start (_SHOW_START)."""
    where = samepath.place(python)
    out = subprocess.run(where.wrap([where.python, "-c", _SHOW_START]), capture_output=True,
                         text=True, env={"PATH": "/usr/bin:/bin", "LANG": "C"}, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@needs_namespaces
def test_a_copied_interpreter_starts_as_a_linked_one_does(tmp_path):
    # `python -m venv --copies` copies the interpreter where the default links it: the strings
    # it builds from its own file's path moved the counts by up to 97 instructions a call.
    made = [_venv(tmp_path / "main"), _venv(tmp_path / "copied-interpreter-env", "--copies")]
    assert os.path.islink(made[0]) and not os.path.islink(made[1])
    seen = [_seen_at_start(python) for python in made]
    assert seen[0] == seen[1]
    assert seen[0]["exe"] == os.path.realpath(made[0])  # the base interpreter's own file, as linked


def test_the_linked_bin_is_made_once_by_threads_at_once_and_a_stale_one_replaced(tmp_path):
    import concurrent.futures

    env = tmp_path / "env"
    python, cache = _venv(env), tmp_path / "cache"
    cache.mkdir()
    stale = cache / "bin"
    stale.mkdir()
    os.symlink("/nonexistent/python3.11", stale / "python")  # a base interpreter since moved
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        made = set(pool.map(lambda _: samepath._linked_interpreter(python, str(env), str(cache)), range(8)))
    assert made == {str(cache / "bin")}
    assert {os.readlink(cache / "bin" / name) for name in os.listdir(cache / "bin")} == {os.path.realpath(python)}
    assert sorted(os.listdir(cache)) == ["bin"]  # nothing left behind


@needs_namespaces
def test_a_prompt_of_its_own_does_not_tell_two_environments_apart(tmp_path):
    # `venv --prompt` (and uv's default, the folder's name) adds a line the interpreter reads at
    # start-up: it moved the counts by up to 65 instructions a call.
    seen = [_seen_at_start(_venv(tmp_path / "main")),
            _seen_at_start(_venv(tmp_path / "prompted-env", "--prompt", "fix-subclass-dispatch"))]
    assert "prompt" in (tmp_path / "prompted-env" / "pyvenv.cfg").read_text()
    assert seen[0] == seen[1] and "prompt" not in seen[0]["config"]


def test_a_copy_that_is_not_its_base_is_run_as_it_is(tmp_path):
    folder = tmp_path / "patched-env"
    python = _venv(folder, "--copies")
    with open(python, "ab") as out:
        out.write(b"\0")  # other bytes than its base's: another interpreter, never swapped
    cache = tmp_path / "cache"
    cache.mkdir()
    assert samepath._linked_interpreter(str(python), str(folder), str(cache)) is None
    linked = tmp_path / "linked-env"
    bin_folder = samepath._linked_interpreter(_venv(linked), str(linked), str(cache))
    assert {os.readlink(os.path.join(bin_folder, name)) for name in os.listdir(bin_folder)} == {
        os.path.realpath(linked / "bin" / "python")}


def test_switched_off_each_side_keeps_its_own_path_and_says_what_it_costs(two_envs, monkeypatch):
    monkeypatch.setenv(samepath.SWITCH_VARIABLE, "off")
    placed = [samepath.place(python) for python in two_envs]
    assert [p.python for p in placed] == two_envs and not any(p.fixed for p in placed)
    said = samepath.record(placed)
    assert not said["fixed"] and "switched off" in said["summary"]
    assert f"{samepath.PATH_ALLOWANCE_INSTRUCTIONS:.0f} instructions" in said["summary"]


@pytest.mark.slow
@needs_namespaces
def test_a_primed_cache_is_fresh_until_a_file_it_loaded_or_a_folder_it_loaded_from_changes(tmp_path, monkeypatch):
    from overrides.ab import shimenv

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a cache of its own
    side = shimenv.make_shim_env(sys.executable, str(tmp_path / "side"), None)
    site_dir = subprocess.run([side.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
    # imported by every process of the side through a .pth (a sitecustomize.py here would be
    # shadowed where the system's Python has its own, as Debian's and Ubuntu's do)
    custom = os.path.join(site_dir, "side_loaded.py")
    with open(custom, "w", encoding="utf-8") as out:
        out.write("LOADED = 1\n")
    with open(os.path.join(site_dir, "side_loaded.pth"), "w", encoding="utf-8") as out:
        out.write("import side_loaded\n")
    where = samepath.place(side.python)
    assert where.fixed, where.reason
    assert not samepath.still_primed(where, "")
    samepath.prime(where)
    assert samepath.still_primed(where, "")
    assert not samepath.still_primed(where, "/elsewhere")  # primed with another import path
    with open(os.path.join(site_dir, "added.py"), "w", encoding="utf-8") as out:
        out.write("")
    assert not samepath.still_primed(where, "")  # a module that could now be found
    os.remove(os.path.join(site_dir, "added.py"))
    assert samepath.still_primed(where, "")
    with open(custom, "w", encoding="utf-8") as out:
        out.write("LOADED = 22\n")
    assert not samepath.still_primed(where, "")  # its bytecode is stale
    samepath.prime(where)  # not again in this process: a new process would find it stale
    assert not samepath.still_primed(where, "")
    samepath._PRIMED.clear()  # as a new process starts
    samepath.prime(where)
    assert samepath.still_primed(where, "")
    pth = os.path.join(site_dir, "_overrides_base.pth")  # what start-up adds to the path
    with open(pth, "a", encoding="utf-8") as out:
        out.write("/nowhere\n")
    assert not samepath.still_primed(where, "")


# A process priming the side's cache, started with others at once: it says it is ready (a line
# on its stdout), waits for its go-ahead (a line on its stdin), primes, and says whether it ran
# the native prime itself.
_PRIME_AT_ONCE = """
import sys
sys.path.insert(0, {root!r})
from overrides.builds import samepath
ran = []
native = samepath._prime
samepath._prime = lambda *args: (ran.append(1), native(*args))
where = samepath.place({python!r})
print("ready", flush=True)
sys.stdin.readline()
samepath.prime(where)
print(len(ran), samepath.still_primed(where, ""))
"""


@pytest.mark.slow
@needs_namespaces
def test_two_processes_priming_one_fresh_cache_at_once_prime_it_once(tmp_path):
    from overrides.ab import shimenv

    side = shimenv.make_shim_env(sys.executable, str(tmp_path / "side"), None)
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))  # a fresh cache of their own
    code = _PRIME_AT_ONCE.format(root=ROOT, python=side.python)
    processes = [subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    # Both ready before either goes: a fixed sleep here let a child slower to start than the sleep
    # find its go-ahead already given, and prime once the other had, so the test could pass
    # without two primes at once. Each prime is a native `import torch`, seconds long: two
    # go-aheads a moment apart prime at the same time.
    ready = [process.stdout.readline() for process in processes]
    assert ready == ["ready\n"] * 2, [process.communicate(timeout=300)[1][-2000:] for process in processes]
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    said = []
    for process in processes:
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
        said.append(out.split())
    # one primed the cache, the other waited for it and found it primed (without the lock both
    # primed it, the second rewriting the bytecode the first one's worker was loading)
    assert sorted(ran for ran, _ in said) == ["0", "1"] and all(fresh == "True" for _, fresh in said), said


def _runs(python: str, per_call: list[float], same_path: bool) -> list[records.CountRun]:
    return [records.CountRun(seed, (records.CaseCounts("SubTensor", "torch.add", value, (value,) * 3, {}),),
                               {"python": python, "import_path": None, "same_path": same_path}, 1.0)
            for seed, value in enumerate(per_call)]


def test_counts_from_different_paths_get_the_path_allowance():
    # +107 a call on a 10,000-instruction case: beyond its 75-instruction threshold (0.75%), within
    # the 150 that paths of their own may move a count by.
    base = _runs("/a/bin/python", [10_000, 10_010, 10_005], same_path=False)
    branch = _runs("/longer/bin/python", [10_110, 10_115, 10_112], same_path=False)
    assert judge.compare_counts(base, branch)[0].verdict == "no change"
    fixed = judge.compare_counts(_runs("/f/bin/python", [10_000, 10_010, 10_005], True),
                                     _runs("/f/bin/python", [10_110, 10_115, 10_112], True))
    assert fixed[0].verdict == "regression"
    # One environment on both sides needs no allowance, fixed path or not.
    same = judge.compare_counts(_runs("/a/bin/python", [10_000, 10_010, 10_005], False),
                                    _runs("/a/bin/python", [10_110, 10_115, 10_112], False))
    assert same[0].verdict == "regression"


def test_a_clock_change_the_instructions_cannot_explain_is_named():
    from overrides import comparison_report

    # torch 2.12.1 -> 2.14.1 on SubTensor: -544 ns on the clock, -162 instructions.
    c = Comparison("SubTensor", "torch.add", 5_400.0, 4_856.0, -544.0, (-595.0, -492.0), "improvement",
                   True, base_instructions=45_000.0, branch_instructions=44_838.0,
                   instructions_ci95=(-200.0, -120.0), counts_verdict="improvement")
    assert c.clock_unexplained and round(c.clock_to_instructions) == 28
    assert comparison_report.verdict_cell(c) == "improvement, clock 28x"
    note = comparison_report.unexplained_note(c)
    assert "same work got faster" in note and "SubTensor" in note
    assert c.to_dict()["clock_unexplained"] is True
    # A clock change the instructions do account for is not named.
    explained = Comparison("SubTensor", "torch.add", 5_400.0, 5_500.0, 100.0, (80.0, 120.0), "regression",
                           True, base_instructions=45_000.0, branch_instructions=45_800.0,
                           instructions_ci95=(700.0, 900.0), counts_verdict="regression")
    assert not explained.clock_unexplained and comparison_report.verdict_cell(explained) == "regression"
    # Counts that could not decide: the verdict is the clock's, and says so.
    undecided = Comparison("SubTensor", "torch.add", 5_400.0, 5_500.0, 100.0, (80.0, 120.0), "regression",
                           True, base_instructions=45_000.0, branch_instructions=45_100.0,
                           instructions_ci95=(-300.0, 500.0),
                           counts_verdict="inconclusive")
    assert comparison_report.verdict_cell(undecided) == "regression (clock)"
    assert undecided.to_dict()["judged_on"] == "clock"


def test_the_reports_verdict_line_names_a_clock_change_the_instructions_cannot_explain(tmp_path):
    from overrides.results import RunResult
    from overrides.review.markdown import report_markdown
    from overrides.review.measuring import Evidence
    from overrides.review.sides import ROLES, Side
    from overrides.sides import Sides

    c = Comparison("SubTensor", "torch.add", 5_400.0, 4_856.0, -544.0, (-595.0, -492.0), "improvement",
                   True, base_instructions=45_000.0, branch_instructions=44_838.0,
                   instructions_ci95=(-200.0, -120.0), counts_verdict="improvement")
    sides = [Side(role, f"/envs/{role}/bin/python", python=f"/envs/{role}/bin/python") for role in ROLES]
    runs = Sides(RunResult(Environment(), RunSettings(), ()), RunResult(Environment(), RunSettings(), ()))
    text = report_markdown(Evidence([c], runs, ComparisonSettings(threshold_ns=20, threshold_pct=0.75, pairs=5)),
                           sides, wall_s=60.0)
    headline = text.split("## Comparison")[0]
    assert "Clock and counts tell different stories" in headline
    assert "improvement, clock 28x" in headline and "the same work got faster or slower" in headline
