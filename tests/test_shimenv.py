"""The validation shims must reach torch however it is first looked up: bench.py asks
`importlib.util.find_spec("torch")` before importing it (a missing torch is one line, exit 2),
and a hook that answered only the first look-up left the shim out of every plain bench run."""

import subprocess
import sys

import pytest

from overrides.ab import shimenv

_ASK_FIRST = ("import importlib.util; assert importlib.util.find_spec('torch') is not None; "
              "import torch; print(torch.Tensor.__torch_function__.__name__)")


@pytest.mark.slow
def test_the_shim_is_installed_after_a_find_spec_look_up(tmp_path):
    env = shimenv.make_shim_env(sys.executable, str(tmp_path / "slow"), "sleep1us")
    out = subprocess.run([env.python, "-c", _ASK_FIRST], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "_shim"
    plain = subprocess.run([sys.executable, "-c", _ASK_FIRST], capture_output=True, text=True, timeout=300)
    assert plain.stdout.strip() == "__torch_function__"
