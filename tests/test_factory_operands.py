"""Your factory takes the shape, dtype and device asked (`--shape`, `--dtype`, `--device`) where
its signature has them, under a name that says so (`mine:pair@8x8/meta`); where it has not,
the run says in one note what was not applied, and the JSON records it (issue 45, item 5)."""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

MODULE = textwrap.dedent('''
    import torch

    class Meters(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})

    def pair(shape=(1,), dtype=torch.float32, device="cpu"):
        return (torch.ones(shape, dtype=dtype, device=device).as_subclass(Meters),
                torch.ones(shape, dtype=dtype, device=device).as_subclass(Meters))

    def by_shape(shape=(1,)):
        return torch.ones(shape).as_subclass(Meters), torch.ones(shape).as_subclass(Meters)

    def fixed():
        return torch.ones(2).as_subclass(Meters), torch.ones(2).as_subclass(Meters)
''')


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)  # where usercases looks for your module, as from your folder
    yield tmp_path
    sys.modules.pop("mine", None)


def bench(directory, *args):
    return subprocess.run([sys.executable, f"{ROOT}/bench.py", *args], cwd=directory, capture_output=True,
                          text=True, timeout=300)


def test_a_factory_is_called_with_what_its_name_asks_and_its_twin_alike(user_dir):
    from overrides.cases import casenames, registry

    names = casenames.with_shapes(["Tensor", "mine:pair", "mine:fixed"], ["1", "8x8"], None, "meta")
    assert names == ["Tensor@1/meta", "mine:pair@1/meta", "mine:fixed@1/meta",
                     "Tensor@8x8/meta", "mine:pair@8x8/meta", "mine:fixed@8x8/meta"]
    assert casenames.with_shapes(["mine:pair"], None, "bfloat16") == ["mine:pair@bfloat16"]  # only what was asked
    for name in ("mine:pair@8x8/meta", "mine:pair@8x8/meta@plain", "mine:Meters@8x8/meta"):
        x, y = registry.get_case(name).make_operands()
        assert (tuple(x.shape), x.device.type, tuple(y.shape), y.device.type) == ((8, 8), "meta", (8, 8), "meta")
    x, _ = registry.get_case("mine:pair@bfloat16").make_operands()
    assert (tuple(x.shape), str(x.dtype)) == ((1,), "torch.bfloat16")  # the factory's own shape stands
    assert registry.get_case("mine:pair@8x8/meta").baseline == "mine:pair@8x8/meta@plain"


def test_only_what_a_factory_takes_is_applied_and_the_rest_is_said_once(user_dir):
    from overrides.cases import casenames, usercases

    asked = casenames.with_shapes(["mine:pair", "mine:by_shape", "mine:fixed"], ["1", "8x8"], None, "meta")
    names, not_applied = usercases.applied(asked)
    assert names == ["mine:pair@1/meta", "mine:by_shape@1", "mine:fixed", "mine:pair@8x8/meta", "mine:by_shape@8x8"]
    said = {entry.spec: entry.to_dict() for entry in not_applied}
    assert said["mine:fixed"]["not_applied"] == {"shape": "1 8x8", "device": "meta"}
    assert said["mine:by_shape"]["not_applied"] == {"device": "meta"}
    assert said["mine:by_shape"]["ran_as"] == ["mine:by_shape@1", "mine:by_shape@8x8"]
    assert set(said) == {"mine:fixed", "mine:by_shape"}


def test_a_run_on_meta_over_two_shapes_names_each_case_and_notes_what_was_not_applied(user_dir):
    out = user_dir / "run.json"
    done = bench(user_dir, "--cases", "Tensor", "mine:pair", "mine:fixed", "--device", "meta", "--shape", "1", "8x8",
                 "--op", "x.t()", "-n", "20", "-m", "10", "-q", "--json", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    rows = {r["case"]: r for r in data["results"]}
    assert {"mine:pair@1/meta", "mine:pair@8x8/meta", "mine:pair@8x8/meta@plain", "mine:fixed"} <= set(rows)
    assert rows["mine:pair@8x8/meta"]["baseline"] == "mine:pair@8x8/meta@plain"
    assert {name for name in rows if name.startswith("mine:fixed")} == {"mine:fixed", "mine:fixed@plain"}
    assert [e["spec"] for e in data["settings"]["not_applied"]] == ["mine:fixed"]
    notes = [line for line in done.stdout.splitlines() if "not applied" in line]
    assert len(notes) == 1 and "--shape 1 8x8 and --device meta" in notes[0] and "def pair(shape=" in notes[0]


def test_a_name_asking_what_the_factory_has_no_parameter_for_is_one_line_and_exit_2(user_dir):
    done = bench(user_dir, "--cases", "Tensor", "mine:fixed@8x8")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "fixed() takes no shape parameter" in done.stderr and "drop @8x8" in done.stderr
    done = bench(user_dir, "--cases", "mine:pair@8x8/fast")
    assert done.returncode == 2 and "'fast' is not a shape, dtype or device" in done.stderr


def test_pyspybench_says_what_it_did_not_apply(user_dir):
    done = subprocess.run([sys.executable, f"{ROOT}/pyspybench.py", "mine:fixed", "mine:pair", "--device", "meta",
                           "--nreps", "50"], cwd=user_dir, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mine:fixed: --device meta not applied" in done.stderr and "mine:pair" not in done.stderr


UNITS = textwrap.dedent('''
    import torch

    class UnitTensor(torch.Tensor):
        @staticmethod
        def __new__(cls, data, unit):
            t = torch.Tensor._make_subclass(cls, torch.as_tensor(data))
            t.unit = unit
            return t

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            [a.unit for a in args if isinstance(a, UnitTensor)]
            return super().__torch_function__(func, types, args, kwargs or {})

    def pair():
        return UnitTensor(torch.ones(1), "m"), UnitTensor(torch.ones(1), "m")
''')
MATRIX_OPS = ("torch.add", "x.item()", "x.view(3)")  # x.view(3) fails on 1 element: a long error


def test_the_matrix_keeps_its_width_and_shows_the_overhead_in_ns(tmp_path):
    """issue 45, item 6: an n/a or failed cell is a short key, its reason below; `--cells`
    shows each cell's overhead in ns beside (full, the default) or instead of (overhead) its ratio."""
    (tmp_path / "units.py").write_text(UNITS)
    out = tmp_path / "run.json"
    done = bench(tmp_path, "--cases", "Tensor", "units:UnitTensor", "units:pair", "--op", *MATRIX_OPS,
                 "-n", "20", "-m", "20", "-q", "--json", str(out))
    assert done.returncode == 1, done.stderr[-2000:]  # units:UnitTensor ran on none of the ops
    table = done.stdout.split("\n\n")[0].splitlines()
    assert max(map(len, table)) <= 110, "\n".join(table)  # long reasons no longer widen every row
    cells = {line.split()[0]: line for line in table[2:]}
    assert cells["units:UnitTensor"].split()[1:] == ["n/a", "[1]"] * 3  # one reason, one key
    assert cells["units:pair"].endswith("failed [2]") and cells["Tensor"].endswith("failed [2]")
    notes = done.stdout.split("\n\n")[1]
    assert "[1] n/a: UnitTensor has no .unit; UnitTensor defines __new__" in notes
    assert "[2] failed: warm-up: RuntimeError: shape '[3]' is invalid" in notes
    from overrides import results
    from overrides.figures import whole

    run = results.load(str(out))  # the figures recomputed from the samples, as --load prints them
    rows = {(r.case, r.op): r for r in run.results}
    mine, twin = rows[("units:pair", "torch.add")], rows[("units:pair@plain", "torch.add")]
    overhead = whole(mine.per_call_ns - twin.per_call_ns, signed=True)  # against its twin, as every table writes ns
    assert f"{whole(mine.per_call_ns)} {overhead} (" in cells["units:pair"]  # full: ns, overhead, ratio
    loaded = bench(tmp_path, "--load", str(out), "--cells", "overhead")
    row = next(line for line in loaded.stdout.splitlines() if line.startswith("units:pair "))
    assert row.split()[1] == overhead
    refused = bench(tmp_path, "--cells", "overhead")
    assert refused.returncode == 2 and "needs two --op or more" in refused.stderr


def test_two_versions_of_a_factory_are_asked_alike_or_refused(user_dir):
    (user_dir / "mine_fast.py").write_text(MODULE)
    refused = bench(user_dir, "--compare", "mine:pair", "mine:fixed", "--shape", "8x8", "--no-instructions")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "the two factories take different parameters" in refused.stderr and "mine:pair@8x8" in refused.stderr


@pytest.mark.slow
def test_a_comparison_of_your_factory_runs_it_with_the_shape_asked(user_dir):
    (user_dir / "mine_fast.py").write_text(MODULE)
    out = user_dir / "cmp.json"
    done = bench(user_dir, "--compare", "mine:pair", "mine_fast:pair", "--cases", "Tensor", "--shape", "8x8",
                 "--device", "meta", "--op", "x.t()", "--no-instructions", "--pairs", "2", "--pair-seconds", "0.5",
                 "-q", "--json", str(out))
    assert done.returncode in (0, 1), done.stderr[-2000:]
    assert [r["case"] for r in json.loads(out.read_text())["comparisons"]] == ["mine:pair@8x8/meta", "Tensor@8x8/meta"]
    assert "base ran" in done.stdout and "mine_fast.py" in done.stdout


def test_a_twin_of_your_own_gets_the_keywords_it_takes(user_dir):
    (user_dir / "hooked.py").write_text(MODULE + textwrap.dedent('''
        def pair_plain(shape=(1,), device="cpu"):
            return torch.zeros(shape, device=device), torch.zeros(shape, device=device)
    '''))
    from overrides.cases import registry

    twin = registry.get_case("hooked:pair@8x8/meta@plain")
    x, _ = twin.make_operands()
    assert (tuple(x.shape), x.device.type, type(x)) == ((8, 8), "meta", __import__("torch").Tensor)
    assert "pair_plain()" in twin.description and not twin.warning
    sys.modules.pop("hooked", None)
