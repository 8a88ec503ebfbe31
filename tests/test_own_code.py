"""Each side runs its own code, and the output says which: a user case (`units:pair`) is found
by every process of a side as that side finds it, the comparison names the file each side ran,
and the report never claims "the same Python functions ran" from counts of another file.

The library here is written the way subclass authors write theirs: metadata set in `__new__`,
a classmethod `__torch_function__` that calls `super()` and re-attaches the metadata.
"""

import json
import os
import sys
import textwrap

import pytest

from conftest import ROOT
from overrides.counts import pycalls
from overrides.comparison_settings import ComparisonSettings
from overrides.review import sections
from overrides.sides import Sides

UNITS = '''
import torch


class UnitTensor(torch.Tensor):
    @staticmethod
    def __new__(cls, data, unit="m"):
        out = torch.Tensor._make_subclass(cls, data)
        out.unit = unit
        return out

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        units = {{getattr(a, "unit", None) for a in args if isinstance(a, UnitTensor)}}
        {extra}
        out = super().__torch_function__(func, types, args, kwargs or {{}})
        if isinstance(out, UnitTensor):
            out.unit = units.pop() if len(units) == 1 else None
        return out


def pair():
    return UnitTensor(torch.ones(1)), UnitTensor(torch.ones(1) * 2)
'''


def _library(folder, extra: str = "pass"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "units.py").write_text(textwrap.dedent(UNITS.format(extra=extra)))
    return str(folder / "units.py")


def test_each_side_counts_the_python_calls_of_its_own_copy(tmp_path, monkeypatch):
    """Two copies of `units` first on each side's path (as a virtualenv's .pth or a kept copy
    puts them), a third in the working directory: each side counts its own, never the working
    directory's (which both sides once counted, while their clocks each ran its own)."""
    base_file = _library(tmp_path / "base")
    branch_file = _library(tmp_path / "branch", "for _ in range(3): isinstance(func, type)")
    _library(tmp_path / "here", "for _ in range(9): isinstance(func, type)")
    monkeypatch.chdir(tmp_path / "here")
    base, = pycalls.count_build(sys.executable, [("units:pair", "torch.add")], import_path=str(tmp_path / "base"))
    branch, = pycalls.count_build(sys.executable, [("units:pair", "torch.add")],
                                  import_path=str(tmp_path / "branch"))
    assert (base.module_file, branch.module_file) == (os.path.realpath(base_file), os.path.realpath(branch_file))
    isinstance_calls = [calls.per_call("builtins.isinstance [C]")[0] for calls in (base, branch)]
    assert isinstance_calls[1] - isinstance_calls[0] == 3  # the branch's own loop, not the 9 here


def test_counts_of_another_file_than_the_clock_ran_are_never_read_as_the_same_code(tmp_path):
    from overrides.review.measuring import Evidence
    from overrides.review.pack import Pack
    from overrides.case_comparison import Comparison

    same = {"UnitTensor.__torch_function__ (units.py)": (1000, 50000, 12)}
    counted = [pycalls.CaseCalls("units:pair", "torch.add", 1000, same, module_file="/here/units.py")]
    clock_ran = Sides({"units:pair": "/a/units.py"}, {"units:pair": "/b/units.py"})
    comparison = Comparison("units:pair", "torch.add", 4500.0, 3100.0, -1400.0, (-1450.0, -1350.0),
                            "improvement", True)
    evidence = Evidence([comparison], {}, ComparisonSettings(user_modules=clock_ran), python_calls=[counted, counted])
    text = "\n".join(sections.python_call_sections(evidence, [comparison], False, Pack(str(tmp_path), print, [])))
    assert "The same Python functions ran" not in text
    assert "counted in /here/units.py on the base side, where its clock ran /a/units.py" in text
    # counted where the clock ran: compared, and said the same when it is
    right = [[pycalls.CaseCalls("units:pair", "torch.add", 1000, same, module_file=f"/{side}/units.py")]
             for side in ("a", "b")]
    evidence = Evidence([comparison], {}, ComparisonSettings(user_modules=clock_ran), python_calls=right)
    text = "\n".join(sections.python_call_sections(evidence, [comparison], False, Pack(str(tmp_path), print, [])))
    assert "The same Python functions ran" in text


@pytest.mark.slow
def test_a_comparison_names_the_file_of_yours_each_side_ran(tmp_path):
    import subprocess

    library = os.path.realpath(_library(tmp_path))
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--compare", sys.executable,
                           sys.executable, "--cases", "Tensor", "units:pair", "--no-instructions", "--pairs", "2",
                           "--pair-seconds", "0.5", "--json", "out.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    settings = json.loads((tmp_path / "out.json").read_text())["settings"]
    assert settings["user_modules"] == {"base": {"units:pair": library}, "branch": {"units:pair": library}}
    assert f"units:pair: both sides ran one file of yours, {library}" in done.stdout


def test_your_case_is_judged_against_its_own_operands_as_plain_tensors(tmp_path):
    """A factory of 64x64 operands: its overhead is against the same operands unwrapped into
    plain tensors (`units:pair64@plain`, run beside it), not against a 1-element Tensor."""
    import subprocess

    _library(tmp_path)
    with open(tmp_path / "units.py", "a", encoding="utf-8") as src:
        src.write("\n\ndef pair64():\n    return UnitTensor(torch.ones(64, 64)), UnitTensor(torch.ones(64, 64))\n")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--cases", "units:pair64", "--op",
                           "torch.matmul(x, y)", "--min-time", "0.1", "-q", "--json", "out.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {r["case"]: r for r in json.loads((tmp_path / "out.json").read_text())["results"]}
    assert list(rows) == ["units:pair64@plain", "units:pair64"]
    assert rows["units:pair64"]["baseline"] == "units:pair64@plain"
    # a 64x64 matmul costs microseconds: the twin carries that work, the overhead does not
    assert rows["units:pair64@plain"]["per_call_ns"] > 2_000
    assert ("against units:pair64@plain (its own operands as plain tensors: as_subclass(torch.Tensor), "
            "sharing their data)") in done.stdout


def _two_versions(folder, extra: str, names=("units", "units_slow")) -> tuple[str, str]:
    """Two versions of the library side by side in one folder, as a user keeps them while
    optimising: the original and one with `extra` in its `__torch_function__`."""
    base = _library(folder)
    branch = folder / f"{names[1]}.py"
    branch.write_text(textwrap.dedent(UNITS.format(extra=extra)))
    if names[0] != "units":
        os.rename(base, folder / f"{names[0]}.py")
        base = str(folder / f"{names[0]}.py")
    return os.path.realpath(base), os.path.realpath(str(branch))


def test_a_side_builds_your_case_from_its_own_code_under_the_base_name(tmp_path, monkeypatch):
    from overrides.cases import casenames, registry
    from overrides.cases.usercases import module_files

    _, branch_file = _two_versions(tmp_path, "pass", ("sides_a", "sides_b"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(casenames.YOUR_CODE_VARIABLE, "sides_a:pair=sides_b:pair")
    case = registry.get_case("sides_a:pair")
    x, _ = case.make_operands()
    assert case.name == "sides_a:pair" and case.baseline == "sides_a:pair@plain"
    assert type(x).__module__ == "sides_b"  # built from the branch's code
    assert module_files(["sides_a:pair"]) == {"sides_a:pair": branch_file}
    twin = registry.get_case("sides_a:pair@plain")
    assert twin.name == "sides_a:pair@plain" and type(twin.make_operands()[0]).__name__ == "Tensor"


def test_a_side_is_an_interpreter_or_your_case_not_both(tmp_path):
    import subprocess

    _library(tmp_path)
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--compare", "units:pair",
                           sys.executable], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert "'units:pair' is your case" in line and "two versions of your case" in line


@pytest.mark.slow
def test_two_versions_of_your_case_in_one_python_are_paired_counted_and_judged(tmp_path):
    """`--compare units:pair units_slow:pair`: one interpreter, each side building the case from
    its own file, timed in pairs and counted under the same seeds; the branch's extra work is a
    regression by the clock and by the counts (which, counting one file on both sides, would
    see none), and a case asked beside it runs alike on both sides."""
    import subprocess

    base_file, branch_file = _two_versions(tmp_path, "for _ in range(100): isinstance(func, type)")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--compare", "units:pair",
                           "units_slow:pair", "--cases", "Tensor", "--op", "torch.add", "--pairs", "5",
                           "--pair-seconds", "0.3", "--seeds", "1", "--json", "out.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    settings = out["settings"]
    assert settings["your_code"] == {"base": "units:pair", "branch": "units_slow:pair"}
    assert settings["user_modules"] == {"base": {"units:pair": base_file}, "branch": {"units:pair": branch_file}}
    rows = {c["case"]: c for c in out["comparisons"]}
    assert list(rows) == ["units:pair", "Tensor"]
    assert rows["units:pair"]["verdict"] == "regression"
    assert rows["units:pair"]["delta_instructions"] > 1_000  # 100 isinstance calls, counted on the branch only
    assert rows["Tensor"]["verdict"] != "regression"
    assert f"base: units:pair in {sys.executable}" in done.stdout
    assert "base built units:pair, branch units_slow:pair" in done.stdout
    # what changed, by name: the function the edit grew, matched across the two files, and the
    # calls it added; Tensor, which did not move, gets no list
    named = rows["units:pair"]["changed_functions"]
    assert named["looked_for"] is True
    assert (named["functions"][0]["function"], named["functions"][0]["change"]) == (
        "UnitTensor.__torch_function__ (units_slow.py)", "more bytecodes")
    assert {f["function"]: f["delta_calls"] for f in named["functions"]}["builtins.isinstance [C]"] == 100
    assert "changed_functions" not in rows["Tensor"] or rows["Tensor"]["verdict"] in ("improvement", "disagree")
    assert "units:pair: what changed, per call (Python calls counted on both sides" in done.stdout


def test_a_version_of_your_case_that_is_not_there_is_one_line_before_any_worker_starts(tmp_path):
    import subprocess
    import time

    _library(tmp_path)
    started = time.monotonic()
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--compare", "units:pair",
                           "units_fsat:pair"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    line, = done.stderr.strip().splitlines()
    assert line == ("bench.py: error: case 'units_fsat:pair': no module named 'units_fsat'; the module must be "
                    "importable from the current directory or PYTHONPATH")
    assert time.monotonic() - started < 20  # no side imported torch to find out (~27 s it took)


def _userlib(folder) -> str:
    """benchmarks/userlib copied into a folder of the user's own, as they would hold it."""
    import shutil

    folder.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(os.path.join(ROOT, "benchmarks", "userlib")):
        if name.endswith(".py"):
            shutil.copy(os.path.join(ROOT, "benchmarks", "userlib", name), folder)
    return str(folder)


def test_what_your_edit_added_is_named_first_and_the_rest_matched_across_your_two_files(tmp_path, monkeypatch):
    """`--compare units:pair units_tiny:pair` (and units_slow): each side's Python calls, counted
    with its own version of your code, name the helper the edit added first (`_audit` before its
    own list comprehension, which runs more bytecodes), and match `UnitTensor.__torch_function__`
    across units.py and units_tiny.py rather than calling it gone and new; units against itself
    names nothing."""
    from overrides import children
    from overrides.ab.config import ABConfig, side_env
    from overrides.comparison_report import changed_functions_notes
    from overrides.case_comparison import Comparison

    monkeypatch.chdir(_userlib(tmp_path / "lib"))
    versions = ("units:pair", "units_tiny:pair", "units_slow:pair")
    counted = children.parallel(lambda spec: pycalls.count_build(
        sys.executable, [("units:pair", "torch.add")], own_env=side_env(ABConfig(your_code=("units:pair", spec)),
                                                                      "branch"))[0], versions, 2)
    base, tiny, slow = counted
    assert [c.module_file for c in counted] == [os.path.join(str(tmp_path / "lib"), f"{v.split(':')[0]}.py")
                                               for v in versions]
    assert pycalls.NamedChanges.of(base, base).functions == ()
    named = pycalls.NamedChanges.of(base, tiny)
    first = named.functions[0]
    assert (first.function, first.tag, first.delta_calls) == ("_note (units_tiny.py)", "new", 1)
    assert first.branch_bytecodes > 0
    rows = {d.function: d for d in named.functions}
    assert rows["UnitTensor.__torch_function__ (units_tiny.py)"].tag == "more bytecodes"
    assert not any(d.gone for d in named.functions)
    slow_rows = pycalls.NamedChanges.of(base, slow).functions
    # up to 3.11 a list comprehension runs as a function of its own, named right after the helper
    # that holds it; from 3.12 on it is inlined there (PEP 709) and is no row of its own
    inlined = sys.version_info >= (3, 12)
    assert [d.function for d in slow_rows[:1 if inlined else 2]] == (
        ["_audit (units_slow.py)"] + ([] if inlined else ["_audit.<locals>.<listcomp> (units_slow.py)"]))
    if not inlined:
        assert slow_rows[1].weight > slow_rows[0].weight  # named second all the same: it is _audit's
    moved = Comparison("units:pair", "torch.add", 4500.0, 4650.0, 150.0, (120.0, 180.0), "regression", True,
                       changed_functions=named)
    note = changed_functions_notes([moved])[0]
    assert note.startswith("units:pair: what changed, per call")
    assert note.index("new `_note (units_tiny.py:26)` 0 -> 1 call") < note.index("UnitTensor.__torch_function__")


def test_a_case_that_did_not_move_gets_no_list_and_counts_off_say_the_names_were_not_looked_for():
    from overrides.ab.config import ABConfig
    from overrides.ab.named import with_names
    from overrides.builds.interpreters import Interpreter
    from overrides.case_comparison import Comparison
    from overrides.comparison_report import comparison_notes

    still = Comparison("units:pair", "torch.add", 4500.0, 4502.0, 2.0, (-5.0, 9.0), "no change", True)
    here = Interpreter(sys.executable, None)
    said = []
    assert with_names([still], here, here, ABConfig(), None, said.append) == (still,)
    assert said == []  # nothing counted for a case that did not move
    off, = with_names([still], here, here, ABConfig(), "--no-instructions", said.append)
    assert not off.changed_functions.looked_for
    assert off.to_dict()["changed_functions"] == {"looked_for": False, "why": off.changed_functions.not_looked_for}
    assert "--no-instructions" in off.changed_functions.not_looked_for
    note = comparison_notes([off], ComparisonSettings())[0]
    assert note.startswith("what changed, by name: not looked for (units:pair): the Python calls are counted only")


@pytest.mark.slow
def test_with_the_counts_off_a_comparison_says_the_names_were_not_looked_for(tmp_path):
    import subprocess

    from overrides.ab.named import COUNTS_OFF

    folder = _userlib(tmp_path / "lib")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "bench.py"), "--compare", "units:pair",
                           "units_tiny:pair", "--no-instructions", "--pairs", "2", "--pair-seconds", "0.3",
                           "--json", "out.json"], cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    row, = json.loads((tmp_path / "lib" / "out.json").read_text())["comparisons"]
    assert row["changed_functions"] == {"looked_for": False, "why": COUNTS_OFF}
    assert f"what changed, by name: not looked for (units:pair): {COUNTS_OFF}." in done.stdout
