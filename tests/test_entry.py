"""overrides/entry.py: every role it declares is there, and answers in its protocol; a role that
cannot go on says so as its last message and exits 1; a user's print cannot corrupt a message;
its own folder is never on the path of the process it starts."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

from conftest import ROOT

from overrides import entry, workers

CHILD_TIMEOUT_S = 300  # importing torch beside other work


def _run(role: str, *args: str, cwd: str = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run(entry.command(sys.executable, role, *args), capture_output=True, text=True,
                          cwd=cwd, env=environment, timeout=CHILD_TIMEOUT_S)


def test_every_role_names_a_function_that_takes_a_channel():
    for role, (module, function) in entry.ROLES.items():
        served = getattr(importlib.import_module(module), function)
        first = next(iter(inspect.signature(served).parameters))
        assert first == "channel", f"{role}: {module}.{function} takes {first!r} first, not the channel"


def test_an_unknown_role_is_refused_by_the_parent():
    try:
        entry.command(sys.executable, "no-such-role")
    except ValueError as error:
        assert "no-such-role" in str(error)
    else:
        raise AssertionError("an unknown role was given a command line")


def test_an_interpreter_says_who_it_is_without_the_checkout_on_its_path(tmp_path):
    done = subprocess.run(entry.command(sys.executable, "interpreter"), capture_output=True, text=True,
                          cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                          timeout=CHILD_TIMEOUT_S)
    said = entry.last_message(done.stdout)
    assert done.returncode == 0, done.stderr
    assert said["torch"] is True and said["executable"] and said["torch_version"] != "?"


def test_a_role_that_fails_says_fatal_last_and_exits_1(tmp_path):
    (tmp_path / "broken_cases.py").write_text("raise RuntimeError('this factory module is broken')\n")
    done = _run("applicable", json.dumps([["broken_cases:pair", "torch.add"]]),
                env={"OVERRIDES_USER_DIR": str(tmp_path)})
    said = entry.last_message(done.stdout)
    fatal = workers.value_of(said, workers.FATAL)
    assert done.returncode in (0, 1), done.stderr
    # A case that cannot be built is the user's to fix: said as an error, or as a fatal.
    assert fatal or "error" in said, done.stdout
    assert "broken" in (fatal or said["error"])


def test_a_print_in_the_users_code_does_not_corrupt_a_message(tmp_path):
    (tmp_path / "noisy_cases.py").write_text(
        "import torch\nprint('{\"reasons\": \"a print of yours\"}')\n"
        "class Noisy(torch.Tensor):\n    pass\n"
        "def pair():\n    print('building')\n"
        "    return torch.ones(1).as_subclass(Noisy), torch.ones(1).as_subclass(Noisy)\n")
    done = _run("applicable", json.dumps([["noisy_cases:pair", "x.view(-1)"]]),
                env={"OVERRIDES_USER_DIR": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    messages = [entry.message(line) for line in done.stdout.splitlines()]
    assert messages == [{"reasons": [None]}], done.stdout
    assert "a print of yours" in done.stderr


def test_the_entry_folder_is_not_on_the_path_of_a_process_it_starts(tmp_path):
    # overrides/errors.py must never answer a user's `import errors`: a role's process imports
    # the user's module, which imports a module named like one of the package's.
    (tmp_path / "errors.py").write_text("MINE = True\n")
    (tmp_path / "shadow_cases.py").write_text(
        "import errors, torch\nassert errors.MINE, errors.__file__\n"
        "def pair():\n    return torch.ones(1), torch.ones(1)\n")
    done = _run("applicable", json.dumps([["shadow_cases:pair", "x.view(-1)"]]),
                env={"OVERRIDES_USER_DIR": str(tmp_path)})
    assert entry.last_message(done.stdout) == {"reasons": [None]}, done.stdout + done.stderr
