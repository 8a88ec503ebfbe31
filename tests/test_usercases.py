"""`--cases pkg.module:factory`: a user's own class or factory, end to end, and every way a spec
can be wrong (exit 2 and the reason)."""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

USER_MODULE = textwrap.dedent('''
    import torch

    class MyTensor(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            return super().__torch_function__(func, types, args, kwargs or {})

    def make_pair():
        """Two plain tensors, built by hand."""
        return torch.tensor([1.0]), torch.tensor([2.0])

    def broken():
        raise RuntimeError("no GPU here")

    def not_operands():
        return 42

    def three():
        return torch.tensor([1.0]), torch.tensor([2.0]), torch.tensor([3.0])

    NOT_CALLABLE = 7
''')


@pytest.fixture
def user_dir(tmp_path):
    (tmp_path / "my_cases.py").write_text(USER_MODULE)
    return tmp_path


def run_in(directory, *args, timeout=300):
    """Run a project entry point from the user's directory, as a user would."""
    return subprocess.run([sys.executable, *args], cwd=directory, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_a_user_subclass_and_factory_run_end_to_end_in_bench(user_dir):
    path = user_dir / "out.json"
    out = run_in(user_dir, f"{ROOT}/bench.py", "-q", "--cases", "Tensor", "my_cases:MyTensor",
                 "my_cases:make_pair", "-m", "30", "--json", str(path))
    assert out.returncode == 0, out.stderr
    assert "my_cases:MyTensor" in out.stdout and "my_cases:make_pair" in out.stdout
    results = {r["case"]: r for r in json.loads(path.read_text())["results"]}
    mine, plain = results["my_cases:MyTensor"], results["my_cases:make_pair"]
    # The subclass goes through __torch_function__; the factory's plain tensors do not.
    assert mine["per_call_ns"] > 1.5 * plain["per_call_ns"]
    assert len(mine["samples_ns"]) == 30


def test_a_user_subclass_runs_under_pyspybench(user_dir):
    out = run_in(user_dir, f"{ROOT}/pyspybench.py", "my_cases:MyTensor", "--nreps", "200")
    assert out.returncode == 0, out.stderr
    assert out.stdout == ""  # nothing printed: py-spy should see only the loop


@pytest.mark.parametrize("spec,reason", [
    ("no_such_module:Thing", "no module named 'no_such_module'"),
    ("my_cases:Missing", "has no attribute 'Missing'"),
    ("my_cases:broken", "raised RuntimeError: no GPU here"),
    ("my_cases:not_operands", "it must return the operands (x, y)"),
    ("my_cases:three", "a tuple of 3"),
    ("my_cases:NOT_CALLABLE", "name a torch.Tensor subclass or a zero-argument function"),
    ("my_cases:", "is not of the form pkg.module:factory"),
])
@pytest.mark.slow
def test_a_bad_spec_exits_2_with_the_reason(user_dir, spec, reason):
    # Both tools at once (each mostly imports torch): the test takes one start-up, not two.
    commands = {tool: [sys.executable, f"{ROOT}/{tool}", *(["--cases", spec] if tool == "bench.py" else [spec])]
                for tool in ("bench.py", "pyspybench.py")}
    started = {tool: subprocess.Popen(command, cwd=user_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for tool, command in commands.items()}
    for tool, process in started.items():
        _, err = process.communicate(timeout=300)
        assert process.returncode == 2, (tool, err)
        assert reason in err, (tool, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_subclass_shipped_in_torch_needs_no_change_to_this_project(tmp_path):
    # nn.Parameter is a Tensor subclass that ships in PyTorch (with __torch_function__ disabled).
    out = run_in(tmp_path, f"{ROOT}/bench.py", "-q", "--cases", "torch.nn:Parameter", "-m", "20")
    assert out.returncode == 0, out.stderr
    assert "torch.nn:Parameter" in out.stdout


UNIT_MODULE = textwrap.dedent('''
    import torch

    class UnitTensor(torch.Tensor):
        """Metadata set in __new__, as subclass authors write it."""

        @staticmethod
        def __new__(cls, data, unit):
            t = torch.Tensor._make_subclass(cls, torch.as_tensor(data))
            t.unit = unit
            return t

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            units = [a.unit for a in args if isinstance(a, UnitTensor)]
            out = super().__torch_function__(func, types, args, kwargs or {})
            if isinstance(out, UnitTensor) and units:
                out.unit = units[0]
            return out

    def pair():
        return UnitTensor(torch.ones(1), "m"), UnitTensor(torch.ones(1), "m")
''')


def test_a_class_that_needs_its_constructor_says_to_give_a_factory_and_fails_the_run(tmp_path):
    (tmp_path / "units.py").write_text(UNIT_MODULE)
    out = run_in(tmp_path, f"{ROOT}/bench.py", "-q", "--cases", "Tensor", "units:UnitTensor",
                 "-n", "50", "-m", "20")
    assert out.returncode == 1, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.split()[0] == "units:UnitTensor")
    assert row.split(None, 1)[1] == "n/a: UnitTensor has no .unit (see below)"  # the table stays narrow
    assert ("UnitTensor defines __new__, which as_subclass skips: give a factory that builds the "
            "operands as you do, e.g. in units.py `def pair(): return UnitTensor(torch.ones(1), ...), "
            "UnitTensor(torch.ones(1), ...)`, and pass units:pair") in out.stdout
    assert "units:UnitTensor ran on none of the ops asked" in out.stderr
    # built the author's way, through the factory the hint names, it runs
    out = run_in(tmp_path, f"{ROOT}/bench.py", "-q", "--cases", "Tensor", "units:pair", "-n", "50", "-m", "20")
    assert out.returncode == 0 and "units:pair" in out.stdout and "n/a" not in out.stdout, out.stderr


def test_a_built_in_case_n_a_on_the_one_op_asked_is_no_failure(tmp_path):
    out = run_in(tmp_path, f"{ROOT}/bench.py", "-q", "--cases", "Tensor", "WithTorchFunction",
                 "--op", "x.shape", "-n", "50", "-m", "20")
    assert out.returncode == 0 and "n/a" in out.stdout, out.stderr
