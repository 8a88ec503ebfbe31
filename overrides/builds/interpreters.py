"""The builds a comparison runs: an interpreter (and a kept copy of torch), asked who it is.

A side of a comparison is named by the user as an interpreter, a virtualenv folder or a name on
PATH, and, for a label recorded by record.sh, the folder of its kept torch (`Build`). Before
anything runs, the interpreter is asked for its real path and the torch it would import
(`probe_interpreter`): every process of a side is then started by that path, never through a
wrapper, and one without torch is refused in one line. The A/B, the counts, the flamegraphs and
record.sh all start their processes from what this module answers.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess

from overrides import entry
from overrides.errors import UsageError

PROBE_TIMEOUT_S = 120  # asking an interpreter for its path and torch; a cold disk is slow
# An interpreter asked who it is (entry.py's `interpreter` role) says its real path, whether
# torch is importable and its version (found, not imported: that would take seconds). The version
# is torch/version.py, the module torch.__version__ comes from, run by the interpreter itself (not
# read by a pattern from its text): what `import torch` would say, without the rest of torch; "?"
# where it does not run.


def _interpreter_path(spec: str) -> str:
    """The executable a spec names: an interpreter, a virtualenv directory, or a name on PATH."""
    if os.path.isdir(spec):
        for candidate in ("bin/python", "bin/python3", "Scripts/python.exe"):
            path = os.path.join(spec, candidate)
            if os.access(path, os.X_OK):
                return os.path.abspath(path)
        raise UsageError(f"{spec} is a directory without bin/python; pass a virtualenv or an interpreter")
    if os.sep in spec:
        if os.access(spec, os.X_OK) and not os.path.isdir(spec):
            return os.path.abspath(spec)
        raise UsageError(f"no interpreter at {spec}; pass a Python executable or a virtualenv directory")
    found = shutil.which(spec)
    if not found:
        raise UsageError(f"no interpreter {spec!r} on PATH; pass a Python executable or a virtualenv directory")
    return found


@dataclasses.dataclass(frozen=True)
class Build:
    """What one side of a comparison runs: an interpreter (a spec: a path, a virtualenv, a name
    on PATH) and, for a build kept by record.sh (`overrides/builds/keep.py`), the folder to import
    torch from first instead of the interpreter's own."""

    python: str
    torch_root: str | None = None

    def describe(self) -> str:
        return f"{self.python} with torch from {self.torch_root}" if self.torch_root else self.python


@dataclasses.dataclass(frozen=True)
class Interpreter:
    executable: str  # the real path, as the interpreter reports it
    torch_dir: str | None  # the torch package folder it would import, found without importing it
    torch_root: str | None = None  # Build.torch_root: put first on the import path
    torch_version: str = "?"  # torch.__version__ as that interpreter's torch/version.py sets it


@dataclasses.dataclass(frozen=True)
class Probe:
    """What an interpreter answers to entry.py's `interpreter` role: its real path, whether it
    has torch, and the torch folder and version it would import."""

    executable: str
    torch: bool
    torch_dir: str | None
    torch_version: str

    @classmethod
    def from_dict(cls, data) -> "Probe | None":
        """None where `data` is not a Python's answer (a message without its path and torch)."""
        if not isinstance(data, dict) or "executable" not in data or "torch" not in data:
            return None
        return cls(data["executable"], data["torch"], data.get("torch_dir"), str(data.get("torch_version", "?")))


def resolve_interpreter(spec: str) -> str:
    """The real path of the interpreter `spec` names, checked to run and to have torch.

    The interpreter is asked for its own `sys.executable`, so a wrapper (pyenv's shims, a
    script) is looked through: the workers then start the same way on both sides.
    """
    return probe_interpreter(spec).executable


def probe_interpreter(spec: "str | Build") -> Interpreter:
    """`resolve_interpreter`, with the torch folder that interpreter would import (for a Build
    with a torch_root: the one in that folder, or exit 2)."""
    build = spec if isinstance(spec, Build) else Build(spec)
    path = _interpreter_path(build.python)
    env = with_import_path(dict(os.environ), build.torch_root)
    fix = "pass a Python executable or a virtualenv directory"
    try:
        probe = subprocess.run(entry.command(path, "interpreter"), capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S, env=env)
    except OSError as exc:
        raise UsageError(f"{build.python} does not run ({exc.strerror or exc}): {fix}") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{build.python} did not answer as a Python interpreter within "
                         f"{PROBE_TIMEOUT_S} s: {fix}") from None
    answer = Probe.from_dict(entry.last_message(probe.stdout))
    if answer is None:
        raise UsageError(f"{build.python} is not a Python interpreter (it printed nothing a Python "
                         f"would): {fix}")
    if not answer.torch:
        raise UsageError(f"{build.describe()} has no torch; install torch into that environment or "
                         "pass an interpreter that has it")
    torch_dir = answer.torch_dir
    if build.torch_root and not (torch_dir or "").startswith(os.path.join(build.torch_root, "")):
        raise UsageError(f"{build.python} imports torch from {torch_dir}, not from {build.torch_root}")
    return Interpreter(answer.executable, torch_dir, build.torch_root, answer.torch_version)


def with_import_path(env: dict, *folders: str | None) -> dict:
    """`env` with `folders` (those given) first on PYTHONPATH."""
    front = [folder for folder in folders if folder]
    if front:
        rest = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
        env["PYTHONPATH"] = os.pathsep.join(front + rest)
    return env
