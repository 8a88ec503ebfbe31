"""Python calls per call: real counts in real interpreters (the bare shim, a user case), and
the order of the rows on hand-made counts."""

import dataclasses
import sys
import textwrap

import pytest

from overrides.ab import shimenv
from overrides.counts import pycalls, pyhook
from overrides.review import count_tables
from overrides.comparison_settings import ComparisonSettings

SEED_TARGETS = [("SubTensor", "torch.add"), ("SubWithTorchFunction", "torch.add"),
                ("Tensor", "torch.add")]


@pytest.fixture(scope="module")
def bare_shim(tmp_path_factory):
    return shimenv.make_shim_env(sys.executable, str(tmp_path_factory.mktemp("env") / "bare"), "bare")


@pytest.fixture(scope="module")
def base_counts():
    return pycalls.count_build(sys.executable, SEED_TARGETS)


def test_the_same_build_gives_the_same_counts(base_counts):
    again = pycalls.count_build(sys.executable, SEED_TARGETS)
    assert [c.functions for c in again] == [c.functions for c in base_counts]
    sub = pycalls.find(base_counts, "SubTensor", "torch.add")
    # torch's own Python: the subclass goes through Tensor.__torch_function__ once a call,
    # keyed by the file relative to site-packages, so two installs give the same key
    assert sub.per_call("Tensor.__torch_function__ (torch/_tensor.py)")[0] == 1
    assert sub.per_call("builtins.isinstance [C]")[0] >= 1
    assert not any("site-packages" in key or key.startswith("/") for key in sub.functions)
    # plain tensors run no Python at all
    tensor = pycalls.find(base_counts, "Tensor", "torch.add")
    assert tensor.totals() == (0.0, 0.0)


def test_the_bare_shim_is_named_first_as_new_and_only_where_it_runs(base_counts, bare_shim):
    shimmed = pycalls.count_build(bare_shim.python, SEED_TARGETS)
    for case in ("SubTensor", "SubWithTorchFunction"):
        rows = pycalls.compare(pycalls.find(base_counts, case, "torch.add"),
                               pycalls.find(shimmed, case, "torch.add"))
        assert rows[0].function == "_shim (_overrides_shim.py)" and rows[0].new
        assert rows[0].delta_calls == 1 and rows[0].branch_bytecodes > 0
        assert pycalls.pyspy_frame(rows[0].function) == "_shim (_overrides_shim.py)"
    tensor = pycalls.compare(pycalls.find(base_counts, "Tensor", "torch.add"),
                             pycalls.find(shimmed, "Tensor", "torch.add"))
    assert tensor == []  # plain tensors never reach __torch_function__


def test_a_user_case_helper_is_counted_from_the_users_directory(tmp_path, monkeypatch):
    (tmp_path / "my_checked.py").write_text(textwrap.dedent('''
        import torch

        def _check_types_extra(types):
            for t in types:
                isinstance(t, type)

        class Checked(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                _check_types_extra(types)
                return super().__torch_function__(func, types, args, kwargs or {})
    '''))
    monkeypatch.chdir(tmp_path)
    counted = pycalls.count_build(sys.executable, [("my_checked:Checked", "torch.add"),
                                                   ("NoSuchCase", "torch.add")])
    checked = pycalls.find(counted, "my_checked:Checked", "torch.add")
    calls, bytecodes = checked.per_call("_check_types_extra (my_checked.py)")
    assert calls == 1 and bytecodes > 0
    assert checked.functions["_check_types_extra (my_checked.py)"][2] == 4  # its line
    # a case that fails costs only its own counts
    assert counted[1].error and pycalls.find(counted, "NoSuchCase", "torch.add") is None


def _two_lines(x):
    y = x + 1
    return y * 2


def _calls_it(times):
    for value in range(times):
        _two_lines(value)


def test_every_call_of_a_function_counts_its_bytecodes_on_this_python():
    # settrace's opcode events counted nothing on 3.12.1 and only some calls on 3.13.0 (the
    # first call of a function, the frame that switched them on): sys.monitoring counts there
    counter = pyhook.Counter(sys.path)
    counter.run(lambda: _calls_it(5))
    key = next(k for k in counter.bytecodes if k.startswith("_two_lines "))
    once = pyhook.Counter(sys.path)
    once.run(lambda: _two_lines(0))
    assert once.bytecodes[key] > 0
    assert counter.calls[key] == 5 and counter.bytecodes[key] == 5 * once.bytecodes[key]
    # the caller's frame is counted too, the harness's own frames are not
    assert counter.bytecodes[next(k for k in counter.bytecodes if k.startswith("_calls_it "))] > 0
    assert not [k for k in counter.bytecodes if "Counter." in k or "<lambda>" in k]
    assert pyhook.bytecode_counter() == ("sys.monitoring INSTRUCTION" if sys.version_info >= (3, 12)
                                          else "sys.settrace opcodes")


def test_bytecodes_not_counted_are_never_read_as_evidence():
    counted = _calls({"f (torch/a.py)": (1, 40)})
    uncounted = dataclasses.replace(_calls({"f (torch/a.py)": (1, 0), "g (torch/a.py)": (1, 0)}),
                                    bytecode_counter=None, python="3.12.1")
    rows = pycalls.compare(counted, uncounted)
    # g is new; f's 40 -> 0 is no change of bytecodes: they were not counted on the branch
    assert [r.function for r in rows] == ["g (torch/a.py)"]
    assert rows[0].to_dict()["delta_bytecodes"] is None
    table = "\n".join(count_tables.python_calls_table(rows, counted, uncounted))
    assert "not counted" in table and "branch (Python 3.12.1)" in table
    assert "| new | `g (torch/a.py:10)` | 0 | 1 | +1 | - | - | - |" in table


def _calls(functions: dict, calls: int = 100) -> pycalls.CaseCalls:
    """Hand-made counts: key -> (calls, bytecodes) per call of the case."""
    return pycalls.CaseCalls("X", "torch.add", calls,
                             {k: (round(c * calls), round(b * calls), 10) for k, (c, b) in functions.items()})


def test_rows_are_new_first_then_by_calls_times_cost_then_by_name():
    base = _calls({"f (torch/a.py)": (1, 40), "g (torch/a.py)": (2, 10), "h (torch/a.py)": (1, 5),
                   "same (torch/a.py)": (3, 30), "gone (torch/a.py)": (1, 3),
                   "builtins.len [C]": (1, 0)})
    branch = _calls({"f (torch/a.py)": (1, 46),  # same calls, 6 more of its own bytecodes
                     "g (torch/a.py)": (3, 15),  # one more call of 5 bytecodes
                     "h (torch/a.py)": (2, 10),  # one more call of 5: ties g, named after it
                     "same (torch/a.py)": (3, 30),
                     "zz_new (torch/a.py)": (1, 2), "a_new (torch/a.py)": (1, 2),
                     "builtins.len [C]": (4, 0)})
    rows = pycalls.compare(base, branch)
    assert [r.function for r in rows] == [
        "a_new (torch/a.py)", "zz_new (torch/a.py)",  # new first, by name when they weigh alike
        "f (torch/a.py)",  # +6 bytecodes
        "g (torch/a.py)", "h (torch/a.py)",  # +1 call x 5 bytecodes each
        "builtins.len [C]", "gone (torch/a.py)"]  # +3 calls of a C function; -1 call x 3
    assert [r.tag for r in rows] == ["new", "new", "more bytecodes", "more calls", "more calls",
                                     "more calls", "gone"]
    # the same rows whatever order the counts came in
    shuffled = _calls(dict(reversed(list({k: v for k, v in [
        ("f (torch/a.py)", (1, 46)), ("g (torch/a.py)", (3, 15)), ("h (torch/a.py)", (2, 10)),
        ("same (torch/a.py)", (3, 30)), ("zz_new (torch/a.py)", (1, 2)),
        ("a_new (torch/a.py)", (1, 2)), ("builtins.len [C]", (4, 0))]}.items()))))
    assert pycalls.compare(base, shuffled) == rows
    table = count_tables.python_calls_table(rows, base, branch)
    assert table[2].startswith("| new | `a_new (torch/a.py:10)` | 0 | 1 | +1 | 0 | 2 | +2 |")
    assert "| more calls | `builtins.len [C]` | 1 | 4 | +3 | - | - | - |" in table
    assert table[-1].startswith("| | **all Python functions** |")


def test_file_keys_do_not_depend_on_where_the_build_is_installed():
    roots = ["/a/venv/lib/python3.11/site-packages", "/work/checkout", "/work/checkout/runs/base/kept"]
    assert pyhook.relative_file("/a/venv/lib/python3.11/site-packages/torch/_tensor.py", roots) == \
        pyhook.relative_file("/work/checkout/runs/base/kept/torch/_tensor.py", roots) == "torch/_tensor.py"
    assert pyhook.relative_file("<hot loop: x>", roots) == "<hot loop: x>"
    assert pycalls.pyspy_frame("Tensor.__torch_function__ (torch/utils/_foo.py)") == \
        "Tensor.__torch_function__ (utils/_foo.py)"


def test_the_report_section_lists_changed_cases_new_rows_first_and_fills_differential_json(tmp_path):
    from overrides import case_comparison
    from overrides.review import sections
    from overrides.review.measuring import Evidence
    from overrides.review.pack import Pack

    base = [_calls({"f (torch/a.py)": (1, 40), "builtins.isinstance [C]": (3, 0)}),
            pycalls.CaseCalls("Tensor", "torch.add", 100, {})]
    branch = [_calls({"f (torch/a.py)": (1, 45), "_check_types_extra (torch/a.py)": (1, 14),
                      "builtins.isinstance [C]": (4, 0)}),
              pycalls.CaseCalls("Tensor", "torch.add", 100, {})]
    pack = Pack(str(tmp_path), lambda message: None, [])
    comparisons = [case_comparison.Comparison("X", "torch.add", 4000.0, 4100.0, 100.0, (50.0, 150.0),
                                      "regression", True),
                   case_comparison.Comparison("Tensor", "torch.add", 1000.0, 1001.0, 1.0, (-5.0, 7.0),
                                      "no change", True)]
    parts = sections.python_call_sections(Evidence(comparisons, {}, ComparisonSettings(), python_calls=[base, branch]),
                                          comparisons, all_cases=False, pack=pack)
    text = "\n".join(parts)
    assert parts[0] == "## Where the Python calls went"
    assert "### X: +1 Python call, +19 bytecodes per call (regression)" in text
    rows = [line for line in parts if line.startswith("| ") and "`" in line]
    assert rows[0].startswith("| new | `_check_types_extra (torch/a.py:10)`")
    assert rows[1].startswith("| more bytecodes | `f (torch/a.py:10)`")
    assert "Tensor" not in text  # no change, and the same Python ran: nothing to say
    entry = pack.differentials["X [torch.add]"]["python_calls"]
    assert [f["function"] for f in entry["functions"]][0] == "_check_types_extra (torch/a.py)"
    assert entry["functions"][0]["change"] == "new" and entry["branch"]["calls"] == 2
    assert pack.differentials["Tensor [torch.add]"]["python_calls"]["functions"] == []
    # a side that cannot run (an unpaired label) costs the section, with a note
    from overrides.review.measuring import count_python_calls
    from overrides.review.sides import Side

    quiet = Evidence(comparisons, {}, ComparisonSettings())
    count_python_calls(quiet, [Side("base", "base", label="base", unpaired_reason="no copy kept"),
                               Side("branch", "/x/python", python="/x/python", build=object())],
                       lambda message: None)
    assert quiet.python_calls is None and "Python calls were not counted: base (no copy kept)" in quiet.notes[0]


_CHECKED = '''
import torch

def _check_types_extra(types):
    for t in types:
        isinstance(t, type)

def _check_twice(types):
    return len(types)

class Checked(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
{body}        return super().__torch_function__(func, types, args, kwargs or {{}})
'''


@pytest.mark.slow
def test_a_new_call_is_placed_at_the_callers_line_and_matched_against_the_base_source(tmp_path, monkeypatch):
    """Real counts of two versions of one user case: the branch inserts a helper call (its line
    has no base counterpart) and rewrites another line to call a second helper (it stands
    against the line it replaced)."""
    from overrides.counts import callsites

    counted = {}
    for side, body in (("base", "        n = len(types)\n"),
                       ("branch", "        _check_types_extra(types)\n        n = _check_twice(types)\n")):
        folder = tmp_path / side
        folder.mkdir()
        (folder / "my_checked.py").write_text(_CHECKED.format(body=body))
        monkeypatch.chdir(folder)
        counted[side] = pycalls.find(pycalls.count_build(sys.executable, [("my_checked:Checked", "torch.add")]),
                                     "my_checked:Checked", "torch.add")
    base, branch = counted["base"], counted["branch"]
    caller = "Checked.__torch_function__ (my_checked.py)"
    # the source from its decorator on, stripped; line 14 is the body's first
    assert base.sources[caller][0] == 12 and base.sources[caller][1][2] == "n = len(types)"
    sites = {s.function: s for s in callsites.call_sites(base, branch, pycalls.compare(base, branch))}
    inserted = sites["_check_types_extra (my_checked.py)"]
    assert (inserted.caller, inserted.branch_lines, inserted.base_lines) == (caller, (14,), ())
    assert inserted.text == "_check_types_extra(types)" and inserted.inserted
    rewritten = sites["_check_twice (my_checked.py)"]
    assert (rewritten.branch_lines, rewritten.base_lines, rewritten.text) == ((15,), (14,), "n = _check_twice(types)")
    # torch's own Python, called from C code (no line names it), has no call site
    assert all(s.caller == caller for s in sites.values())


def test_source_alignment_keeps_equal_lines_and_replaced_blocks():
    from overrides.counts import callsites

    base = (10, ("def f(x):", "a = g(x)", "return a"))
    branch = (20, ("def f(x):", "h(x)", "a = g(x)", "return a + k(x)"))
    assert callsites.matching_lines(base, branch, {21}) == set()  # inserted
    assert callsites.matching_lines(base, branch, {22}) == {11}  # unchanged, moved down
    assert callsites.matching_lines(base, branch, {23}) == {12}  # rewritten
    assert callsites.matching_lines(None, branch, {22}) == set()
    # an inserted call beside a rewritten line: one block to difflib, told apart by likeness
    base = (10, ("def f(x):", "n = len(x)", "return n"))
    branch = (10, ("def f(x):", "_check_types_extra(x)", "n = _check_twice(x)", "return n"))
    assert callsites.matching_lines(base, branch, {11}) == set()
    assert callsites.matching_lines(base, branch, {12}) == {11}


def _helper_recordings(tmp_path, helper_samples=(12, 12)):
    """Hand-made recordings (two a side, lines as py-spy writes them) and Python-call counts of a
    branch whose `Tensor.__torch_function__` calls a new `_check_types_extra` at line 1510; the
    branch's recordings put `helper_samples` samples inside the helper. Returns (evidence,
    comparison, folded, (caller, helper), write a branch recording, write a base recording)."""
    from overrides import case_comparison
    from overrides.review.measuring import Evidence

    caller, helper = "Tensor.__torch_function__ (torch/_tensor.py)", "_check_types_extra (torch/_tensor.py)"
    source = {"base": (1500, ("def __torch_function__(cls, func, types):", "if not all(types):",
                              "return func()")),
              "branch": (1509, ("def __torch_function__(cls, func, types):", "_check_types_extra(types)",
                                "if not all(types):", "return func()"))}
    functions = {"base": {caller: (100, 3000, 1500)},
                 "branch": {caller: (100, 3200, 1509), helper: (100, 1400, 102)}}
    sites = {"base": (), "branch": ((helper, caller, 1510, 100),)}
    calls = {role: [pycalls.CaseCalls("SubTensor", "torch.add", 100, functions[role], None, sites[role],
                                      {caller: source[role]})] for role in ("base", "branch")}
    loop = "hot_loop_SubTensor (<hot loop: torch.add(x, y)>:3)"
    path = "/env/lib/python3.11/site-packages/torch/_tensor.py"
    base_lines = {f"{loop};Tensor.__torch_function__ ({path}:1502);kernel (libtorch_cpu.so)": 900,
                  f"{loop};Tensor.__torch_function__ ({path}:1501)": 100}

    def branch_lines(inside: int) -> dict:
        return {f"{loop};Tensor.__torch_function__ ({path}:1512);kernel (libtorch_cpu.so)": 900,
                f"{loop};Tensor.__torch_function__ ({path}:1511)": 100,
                f"{loop};Tensor.__torch_function__ ({path}:1510)": 10,
                f"{loop};Tensor.__torch_function__ ({path}:1510);_check_types_extra ({path}:104)": inside,
                f"{loop};Tensor.__torch_function__ ({path}:1510);_check_types_extra ({path}:105);"
                "PyObject_IsInstance (libpython3.11.so)": 3}

    def write(name: str, stacks: dict) -> str:
        file = tmp_path / f"{name}.folded"
        file.write_text("".join(f"{stack} {count}\n" for stack, count in stacks.items()))
        return str(file)

    folded = {"base": [write(f"base.{i}", base_lines) for i in (1, 2)],
              "branch": [write(f"branch.{i}", branch_lines(n)) for i, n in enumerate(helper_samples, 1)]}
    comparison = case_comparison.Comparison("SubTensor", "torch.add", 4000.0, 4100.0, 100.0, (60.0, 140.0),
                                    "regression", True)
    evidence = Evidence([comparison], {}, ComparisonSettings(), python_calls=[calls["base"], calls["branch"]])
    return (evidence, comparison, folded, (caller, helper),
            lambda name, inside: write(name, branch_lines(inside)), lambda name: write(name, base_lines))


def test_the_time_table_prices_a_new_helper_at_its_call_site_and_its_rows_add_up(tmp_path):
    """report.md's py-spy table on hand-made recordings (two a side, lines as py-spy writes
    them): the helper's row is its call site's time with everything under it, named with the
    caller's line; frames under it are not listed again."""
    from overrides.review import time_sections
    from overrides.review.pack import Pack

    evidence, comparison, folded, (caller, helper), _, _ = _helper_recordings(tmp_path)
    pack = Pack(str(tmp_path), lambda message: None, [])
    text = "\n".join(time_sections.differential_section(evidence, comparison, folded, "subtensor", pack))
    row = next(line for line in text.splitlines() if "_check_types_extra" in line and line.startswith("|"))
    assert row.startswith("| Python calls: new, more | `_check_types_extra (torch/_tensor.py)` at "
                          "`Tensor.__torch_function__ (torch/_tensor.py)` line 1510: `_check_types_extra(types)`")
    site_ns = 25 / 1025 * 4100
    assert f"+{site_ns:.0f} |" in row  # the call (10), the helper (12) and what it called (3)
    assert "PyObject_IsInstance" not in text.split("| **total")[0].split("function | own ns")[1]
    # the rows are read against the change with its own interval: it is measured too
    assert f"(listed: +{site_ns:.0f} of +100 ns; the change itself is +60..+140 ns at 95%)" in text
    entry = pack.differentials["SubTensor [torch.add]"]["wall_clock"]
    first = entry["functions"][0]
    assert first["python_calls"] == "new" and first["call_sites"] == [
        {"function": helper, "caller": caller, "base_lines": [], "branch_lines": [1510],
         "text": "_check_types_extra(types)"}]
    assert first["delta_self"] == pytest.approx(site_ns, abs=0.1)
    assert entry["everything_else"] == pytest.approx(100.0 - sum(f["delta_self"] for f in entry["functions"]), abs=0.2)


def test_recordings_that_disagree_on_the_cause_get_a_third_a_side_and_its_median(tmp_path):
    """One branch process put 90 samples inside the new helper, the other 12: the report asks for
    one more recording a side, prices the call site at the median recording's, and says so."""
    from overrides.review import time_sections
    from overrides.review.pack import Pack

    evidence, comparison, folded, _, branch_file, base_file = _helper_recordings(tmp_path, (12, 90))
    asked = []

    def more(case):
        asked.append(case)
        return {"base": base_file("base.3"), "branch": branch_file("branch.3", 13)}

    pack = Pack(str(tmp_path), lambda message: None, [])
    text = "\n".join(time_sections.differential_section(evidence, comparison, folded, "subtensor",
                                                      pack, more))
    assert asked == ["SubTensor"]
    assert "recorded a third time and its figures are the medians of its 3 and 3 recordings" in text
    first = pack.differentials["SubTensor [torch.add]"]["wall_clock"]["functions"][0]
    assert first["function"].startswith("calls of _check_types_extra")
    assert first["delta_self"] == pytest.approx(26 / 1026 * 4100, abs=0.1)  # 10 + 13 + 3: the median
    # Recordings that agree ask for nothing more.
    evidence, comparison, folded, _, _, _ = _helper_recordings(tmp_path, (12, 14))
    time_sections.differential_section(evidence, comparison, folded, "subtensor",
                                     Pack(str(tmp_path), lambda message: None, []), more)
    assert asked == ["SubTensor"]


def test_a_change_the_clock_could_not_size_is_sized_by_the_counts_and_says_so(tmp_path):
    """The bare shim's +50 ns read +24 (-76..+125) and -24 ns on five clock pairs while the counts
    found +429 instructions: the heading said "-24 ns per call (regression)" and the rows were
    read against that. Where the counts decided a change the clock's own verdict did not, the
    size is the counts' (at the case's ns per instruction), and the heading and the sentence say
    where each figure comes from; a change the clock sized stays the clock's."""
    from overrides.review import time_sections
    from overrides.review.pack import Pack

    evidence, measured, folded, _, _, _ = _helper_recordings(tmp_path)
    unsized = dataclasses.replace(measured, delta_ns=-24.0, ci95_ns=(-130.0, 83.0), branch_ns=3976.0,
                                  base_instructions=40000.0, branch_instructions=40500.0,
                                  clock_verdict="inconclusive", counts_verdict="regression")
    assert not unsized.clock_sized and unsized.change_ns == pytest.approx(50.0)
    assert time_sections.case_heading(unsized) == (
        "### SubTensor: about +50 ns per call by the counts (+500 instructions; regression); "
        "the clock: -24 ns, -130..+83 at 95%")
    pack = Pack(str(tmp_path), lambda message: None, [])
    text = "\n".join(time_sections.differential_section(evidence, unsized, folded, "subtensor", pack))
    assert ("of about +50 ns: the counts' +500 instructions at this case's 0.100 ns each, as the "
            "clock's -24 ns, -130..+83 at 95% could not size it)") in text
    assert "| **total: the case's change, by the counts** | | | **+50** |" in text
    entry = pack.differentials["SubTensor [torch.add]"]["wall_clock"]
    assert (entry["total_delta"], entry["total_from"], entry["clock_delta"]) == (50.0, "instructions", -24.0)
    assert entry["everything_else"] == pytest.approx(50.0 - sum(f["delta_self"] for f in entry["functions"]), abs=0.2)
    # the clock found it too: its figure is the size
    sized = dataclasses.replace(unsized, delta_ns=100.0, ci95_ns=(60.0, 140.0), clock_verdict="regression")
    assert sized.clock_sized and sized.change_ns == 100.0
    assert time_sections.case_heading(sized) == "### SubTensor: +100 ns per call (regression)"


def test_the_only_python_function_that_changed_is_priced_by_the_interpreters_instructions(tmp_path):
    """A new function whose work (with the line that calls it) is the only change the
    Python-call counts found: the counts' change of the interpreter's own instructions is its
    work, priced at the case's ns per instruction beside its sampled time (py-spy put 36-110 ns
    on the bare shim's ~50 ns `_shim`, 54-126 ns on a ~100 ns helper's call site). Where its
    caller changed by more than a call line, nothing is priced so."""
    from overrides.counts.records import CaseCounts, CountRun
    from overrides.review import time_sections
    from overrides.review.measuring import Evidence
    from overrides.review.pack import Pack

    evidence, comparison, folded, (caller, helper), _, _ = _helper_recordings(tmp_path)
    comparison = dataclasses.replace(comparison, base_instructions=40000.0, branch_instructions=40420.0,
                                     clock_verdict="regression", counts_verdict="regression")
    interpreter = "_PyEval_EvalFrameDefault [libpython3.11.so.1.0]"

    def runs(extra_eval: float, extra_c: float) -> list:
        stacks = {("root", interpreter): 3000.0 + extra_eval,
                  ("root", "handle_torch_function [libtorch_python.so]"): 1000.0 + extra_c}
        return [CountRun(seed, (CaseCounts("SubTensor", "torch.add", 4000.0, (4000.0,), {}, None, stacks),), {}, 1.0)
                for seed in (1, 2)]

    counts = [runs(0.0, 0.0), runs(400.0, 20.0)]
    base_calls, branch_calls = evidence.python_calls
    # the caller ran as many bytecodes: the helper is the only Python change
    same_caller = [dataclasses.replace(c, functions={**c.functions, caller: base_calls[0].functions[caller]})
                   for c in branch_calls]
    sole = Evidence([comparison], {}, ComparisonSettings(), counts=counts, python_calls=[base_calls, same_caller])
    pack = Pack(str(tmp_path), lambda message: None, [])
    text = "\n".join(time_sections.differential_section(sole, comparison, folded, "subtensor", pack))
    row = next(line for line in text.splitlines() if line.startswith("| Python calls: new"))
    assert row.endswith("| +400 (the interpreter's) |")
    assert ("is the only Python function whose calls or bytecodes changed in this case, so the "
            "interpreter's own instruction change, +400 a call, is its work: about +40 ns at this "
            "case's 0.100 ns per instruction") in text
    first = pack.differentials["SubTensor [torch.add]"]["wall_clock"]["functions"][0]
    assert (first["counted_instructions"], first["counted_ns"]) == (400.0, 40.0)
    # where the counts size the change (the clock could not), the row is read at their price
    unsized = dataclasses.replace(comparison, delta_ns=-24.0, ci95_ns=(-130.0, 83.0), clock_verdict="inconclusive")
    pack = Pack(str(tmp_path), lambda message: None, [])
    text = "\n".join(time_sections.differential_section(sole, unsized, folded, "subtensor", pack))
    sampled = 25 / 1025 * 4100
    assert f"| +40 by the counts (sampled +{sampled:.0f}) |" in text
    assert "(listed: +40 of about +42 ns: the counts' +420 instructions" in text
    entry = pack.differentials["SubTensor [torch.add]"]["wall_clock"]
    assert entry["everything_else"] == pytest.approx(2.0, abs=0.05) and entry["total_from"] == "instructions"
    # recordings that disagree on it ask for no third: the counts price it, not the samples
    _, _, disagreeing, _, _, _ = _helper_recordings(tmp_path, (12, 90))
    asked = []
    time_sections.differential_section(sole, comparison, disagreeing, "subtensor",
                                     Pack(str(tmp_path), lambda message: None, []),
                                     lambda case: asked.append(case))
    assert asked == []
    # the caller's bytecodes moved by its call line (+2 a call): the work of those calls
    with_line = Evidence([comparison], {}, ComparisonSettings(), counts=counts, python_calls=evidence.python_calls)
    pack = Pack(str(tmp_path), lambda message: None, [])
    text = "\n".join(time_sections.differential_section(with_line, comparison, folded, "subtensor", pack))
    assert ("is the only Python function called differently in this case, and the only other "
            "Python change is in the lines that call it (`Tensor.__torch_function__ (torch/_tensor.py)` "
            "+2 bytecodes a call), so the interpreter's own instruction change, +400 a call, is the "
            "work of those calls: about +40 ns") in text
    assert pack.differentials["SubTensor [torch.add]"]["wall_clock"]["functions"][0]["counted_ns"] == 40.0
    # the caller ran 20 more bytecodes a call: more than a call line, so the counts price nothing
    rewritten = [dataclasses.replace(c, functions={**c.functions, caller: (100, 5000, 1509)}) for c in branch_calls]
    more = Evidence([comparison], {}, ComparisonSettings(), counts=counts, python_calls=[base_calls, rewritten])
    pack = Pack(str(tmp_path), lambda message: None, [])
    text = "\n".join(time_sections.differential_section(more, comparison, folded, "subtensor", pack))
    assert "(the interpreter's)" not in text and "By the counts" not in text
    assert "counted_ns" not in pack.differentials["SubTensor [torch.add]"]["wall_clock"]["functions"][0]


def test_the_hot_loops_own_time_is_not_listed_where_the_counts_found_its_work_unchanged(tmp_path):
    """The hot loop is the same statement on both sides; py-spy once put +210 +- 61 ns of a
    +100 ns helper's report in its own time (samples it placed no deeper), listing 335 ns of a
    100 ns change. The counts' loop root (`calltree.LOOP_ROOT`) moved by 2 instructions: the
    loop's frame is "same work", drawn amber and never listed; without call paths it stays."""
    from overrides.counts import calltree
    from overrides.counts.records import CaseCounts, CountRun
    from overrides.review import time_sections
    from overrides.review.measuring import Evidence
    from overrides.review.pack import Pack

    evidence, comparison, folded, _, _, _ = _helper_recordings(tmp_path)
    loop = "hot_loop_SubTensor (<hot loop: torch.add(x, y)>:3)"
    for index, path in enumerate(folded["branch"]):  # both branch processes: +150 samples in the loop
        with open(path, "a") as out:
            out.write(f"{loop} {150 + index}\n")

    def runs(root: float) -> list:
        stacks = {(calltree.LOOP_ROOT,): root, (calltree.LOOP_ROOT, "handle_torch_function [libtorch_python.so]"): 900.0}
        return [CountRun(seed, (CaseCounts("SubTensor", "torch.add", 4000.0, (4000.0,), {}, None, stacks),), {}, 1.0)
                for seed in (1, 2)]

    def table(evidence) -> str:
        pack = Pack(str(tmp_path), lambda message: None, [])
        text = "\n".join(time_sections.differential_section(evidence, comparison, folded, "subtensor", pack))
        return text.split("| **total")[0].split("function | own ns")[1]

    assert "hot_loop_SubTensor" in table(evidence)  # no counts: the sampled move is listed
    counted = Evidence([comparison], {}, ComparisonSettings(), counts=[runs(100.0), runs(102.0)], python_calls=evidence.python_calls)
    assert "hot_loop_SubTensor" not in table(counted)


def test_rows_that_add_up_to_more_than_the_change_say_why():
    """SubWithTorchFunction's `_shim` row read +76 +- 36 ns under a +44 ns change: the table
    must say that its rows overshoot and why, not leave "everything else -32" unexplained."""
    from types import SimpleNamespace

    from overrides.review import time_sections

    row = SimpleNamespace(error_ns=36.0)
    said = time_sections._overshoot(SimpleNamespace(explained=76.0, size=44.0, listed=[row]))
    assert said.startswith("The listed rows add up to +76 ns, more than the case's +44") and "±36" in said
    assert "(-32)" in said
    assert time_sections._overshoot(SimpleNamespace(explained=40.0, size=44.0, listed=[row])) == ""
    assert time_sections._overshoot(SimpleNamespace(explained=-60.0, size=44.0, listed=[row])) == ""
