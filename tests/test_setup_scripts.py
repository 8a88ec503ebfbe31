"""The set-up scripts as a newcomer met them: `make bench` (scripts/install_deps.sh) never installs
into an interpreter without torch and leaves nothing half-made, `pip install .` says the tool runs
from its checkout (scripts/checkout_only.py), `make test-matrix` (scripts/matrix.sh) refuses a
version it cannot read, and `make test` installs no browser."""

import pytest


@pytest.mark.slow
def test_make_bench_never_installs_into_an_interpreter_without_torch(tmp_path):
    """An interpreter without torch (Debian's system one here) gets nothing installed: torch goes
    into the checkout's own virtualenv, made from it, whose interpreter is printed for make to run;
    a second run reuses it. The torch installed is a hand-made wheel (OVERRIDES_TORCH_PIN): what
    is checked is where it goes, in seconds, not torch."""
    import os
    import subprocess

    import pytest

    from conftest import ROOT, make_wheel, python_without_torch

    python = python_without_torch()
    if python is None:
        pytest.skip("needs an interpreter without torch at /usr/bin/python3")
    pin = f"torch @ file://{make_wheel(str(tmp_path), 'torch', '1.99.0', {'torch/__init__.py': ''})}"
    venv = tmp_path / "checkout-venv"
    env = dict(os.environ, OVERRIDES_VENV=str(venv), OVERRIDES_TORCH_PIN=pin)
    script = os.path.join(ROOT, "scripts", "install_deps.sh")
    made = subprocess.run(["bash", script, python], capture_output=True, text=True, timeout=300, env=env)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == str(venv / "bin" / "python")
    assert f"nothing is installed into {python}" in made.stderr
    assert (venv / "bin" / "python").exists() and python_without_torch() == python  # untouched
    again = subprocess.run(["bash", script, python], capture_output=True, text=True, timeout=120, env=env)
    assert again.returncode == 0 and again.stdout.strip() == str(venv / "bin" / "python")
    assert "using this checkout's virtualenv" in again.stderr and "making" not in again.stderr
    # An interpreter that has torch is used as it is, and nothing is made.
    mine = subprocess.run(["bash", script, str(venv / "bin" / "python")], capture_output=True, text=True,
                          timeout=120, env=dict(env, OVERRIDES_VENV=str(tmp_path / "not-made")))
    assert mine.returncode == 0 and mine.stdout.strip() == str(venv / "bin" / "python")
    assert not (tmp_path / "not-made").exists()


@pytest.mark.slow
def test_a_torch_that_will_not_install_is_one_line_and_leaves_no_half_made_virtualenv(tmp_path):
    import os
    import subprocess

    import pytest

    from conftest import ROOT, python_without_torch

    python = python_without_torch()
    if python is None:
        pytest.skip("needs an interpreter without torch at /usr/bin/python3")
    venv = tmp_path / "checkout-venv"
    env = dict(os.environ, OVERRIDES_VENV=str(venv), OVERRIDES_TORCH_PIN="torch==0.0.0.1")
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install_deps.sh"), python],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 2 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert "pip could not install torch==0.0.0.1" in last and "OVERRIDES_TORCH_PIN" in last
    assert not venv.exists()


def test_pip_install_of_the_checkout_says_it_runs_from_there_and_installs_nothing(tmp_path):
    # The package is named `overrides`, as PyPI's is: an install would replace that one, and the
    # commands run from the checkout anyway. pip stops with the reason (scripts/checkout_only.py).
    import os
    import subprocess
    import sys

    from conftest import ROOT

    target = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                          "--no-index", "--target", str(target), ROOT],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert "is not installed with pip: it runs from this checkout" in out.stdout + out.stderr
    assert not (target / "overrides").exists() and "Traceback" not in out.stdout + out.stderr
    assert os.path.isfile(os.path.join(ROOT, "bench.py"))


def test_the_matrix_refuses_a_version_it_cannot_read_and_says_when_it_tested_nothing():
    import subprocess

    from conftest import ROOT

    def matrix(*versions, **env):
        import os

        # MATRIX_REQUIRED as each call says, not as the run of this test was started (CI sets 1)
        return subprocess.run(["bash", "scripts/matrix.sh", *versions], cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env=dict(os.environ, **{"MATRIX_REQUIRED": "0", **env}))

    out = matrix("abc")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a Python version like 3.12" in out.stderr
    out = matrix("3.99")
    assert out.returncode == 2 and "no Python 3.99 here" in out.stderr and "nothing was tested" in out.stderr
    out = matrix("3.99", MATRIX_REQUIRED="1")  # CI: a supported version missing is a failure
    assert out.returncode == 1 and "failed on Python 3.99 (missing)" in out.stderr


@pytest.mark.slow
def test_make_test_installs_no_browser_on_a_machine_without_one(tmp_path):
    """scripts/install_deps.sh --test, as `make test` runs it, where no Chromium is found: it asks
    apt-get for nothing but valgrind (where that is missing), never a browser. apt-get is a
    stand-in that notes what it was asked for; Chromium is hidden (conftest.without_chromium)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, without_chromium

    asked = tmp_path / "apt-get-asked"
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {asked}\n')
    (fake / "apt-get").chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}")
    env.pop("CHROMIUM", None)
    (tmp_path / "bin-underneath").mkdir()
    done = subprocess.run(without_chromium(["bash", os.path.join(ROOT, "scripts", "install_deps.sh"), "--test",
                                            sys.executable], str(tmp_path / "bin-underneath")),
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == sys.executable
    said = asked.read_text() if asked.exists() else ""
    assert "chromium" not in said.lower() and "chromium" not in done.stderr.lower(), said + done.stderr
