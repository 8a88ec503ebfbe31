"""The one way this tool starts a Python process of its own, and the one protocol it speaks.

Why it exists. The tool runs Python in other interpreters (each side's build, under valgrind, at
samepath's fixed path): a timing worker per side, a counting process per seed, a Python-call
counter, and short questions (who an interpreter is, which cases apply). Each used to be started
its own way: `python -m` one module, `python -c` one of ten code strings in six modules, each with
its own idea of stdout. Now every one is `python TOOL/overrides/entry.py ROLE ARGS...` (`command`),
and every one answers the same way:

- it writes JSON lines on the stdout it started with, one message each (`Channel.say`); its
  `sys.stdout` is pointed at stderr first, so a print in the user's code cannot corrupt them;
- a role that cannot go on says `{"fatal": "Type: message"}` as its last line, prints the
  traceback to stderr and exits 1; the parent tells that (the user's to fix) from a death;
- an interactive role reads its requests as JSON lines on stdin (`Channel.requests`).

This file is the process's side. The parent's side, for every parent, is `overrides/workers.py`:
one client for a live process, one reading of a finished one's answer, and the two exceptions
(said why, died) every parent raises.

This file runs as a script in any interpreter, with or without this checkout importable, so it
imports nothing of the package at its top and nothing newer than Python 3.8 allows. Its own folder
(which `python FILE` puts first on `sys.path`) is taken off the path before anything is imported:
`overrides/errors.py` must never answer a user's `import errors`. A counting process loads
`counts/statfinder.py` by its file path before any other import (why: that module's docstring).
The variables each role reads are declared in `overrides/variables.py` (statfinder's four
bootstrap ones in statfinder.py, which imports nothing).
"""

from __future__ import annotations

import os
import sys

# role -> (module, function): the function is called with a Channel and the role's arguments.
ROLES = {
    "time": ("overrides.ab.worker", "serve"),  # a side's timing worker, driven over stdin
    "count-fork": ("overrides.counts.forkserver", "serve"),  # imports torch under valgrind, forks a child a job
    "count": ("overrides.counts.caseloops", "serve"),  # a job of cases, in a child of count-fork
    "count-step": ("overrides.step.counting", "serve"),  # a training step counted, in a child of count-fork
    "pycalls": ("overrides.counts.pyhook", "serve"),  # Python calls per call of each case
    "applicable": ("overrides.ab.countfirst", "serve"),  # which (case, op)s a side can run
    "prime": ("overrides.builds.samepath", "serve_prime"),  # import what workers import, list it
    "shim-truth": ("overrides.ab.shimenv", "serve_truth"),  # a shim's true cost, one process
}
# Roles answered here, with the standard library alone: they run in interpreters that may not
# see this checkout (an interpreter the user named, asked who it is).
_OWN_ROLES = ("interpreter", "prefix", "site-packages", "purelib", "remove")
# Roles run under valgrind: their imports are set up by statfinder before any other import.
COUNTING_ROLES = ("count-fork", "count", "count-step")
SCRIPT = os.path.join("overrides", "entry.py")  # relative to the checkout, as a process sees it


def command(python: str, role: str, *args: str, tool: str | None = None, flags: tuple = ()) -> list:
    """The command line starting `role` in `python`: `tool` is this checkout as the process sees
    it (samepath's fixed path, or this one), `flags` the interpreter's own (`-I`)."""
    if role not in ROLES and role not in _OWN_ROLES:
        raise ValueError(f"no process role {role!r}")
    if tool is None:
        tool = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [python, *flags, os.path.join(tool, SCRIPT), role, *args]


def message(line: str):
    """The message a line holds, or None where it is not one (a line of someone else's)."""
    import json

    line = line.strip()
    if not line.startswith(("{", "[")):
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def last_message(stdout: str):
    """The last message in a finished process's output, or None."""
    for line in reversed(stdout.splitlines()):
        found = message(line)
        if found is not None:
            return found
    return None


class Channel:
    """A process's half of the protocol: messages on the stdout it started with."""

    def __init__(self):
        self._out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
        sys.stdout = sys.stderr

    def say(self, payload) -> None:
        import json

        self._out.write(json.dumps(payload) + "\n")
        self._out.flush()

    def requests(self):
        """Each request on stdin, parsed, until stdin ends."""
        import json

        for line in sys.stdin:
            yield json.loads(line)

    def wait(self) -> None:
        """Block until the parent writes a line (a go-ahead that carries nothing)."""
        sys.stdin.readline()


def _own_role(channel: Channel, role: str, args: list) -> None:
    if role == "interpreter":  # its real path, and the torch it would import, found not imported
        import importlib.util

        spec = importlib.util.find_spec("torch")
        folder = (list(spec.submodule_search_locations or []) or [None])[0] if spec else None
        version = {}
        try:  # torch/version.py, where torch.__version__ comes from, run here
            with open(os.path.join(folder, "version.py"), encoding="utf-8") as source:
                exec(compile(source.read(), source.name, "exec"), version)
        except Exception:
            pass
        channel.say({"executable": sys.executable, "torch": spec is not None, "torch_dir": folder,
                     "torch_version": str(version.get("__version__", "?"))})
    elif role == "prefix":
        channel.say({"prefix": sys.prefix})
    elif role == "site-packages":
        import site

        channel.say({"site_packages": site.getsitepackages()})
    elif role == "purelib":
        import sysconfig

        channel.say({"purelib": sysconfig.get_paths()["purelib"]})
    elif role == "remove":  # folders deleted by a process the caller does not wait for (builds/trash.py)
        import shutil

        if os.fork():
            os._exit(0)
        os.setsid()
        for folder in args:
            shutil.rmtree(folder, ignore_errors=True)


def _load(tool_dir: str, *parts: str):
    """A module of this checkout loaded by its file path, before the checkout is importable."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("overrides_" + parts[-1][:-3],
                                                  os.path.join(tool_dir, "overrides", *parts))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _enter_counting(tool_dir: str) -> None:
    """A counting process's imports, set up before anything else is imported (statfinder)."""
    finder, names, environ = _load(tool_dir, "counts", "statfinder.py"), _load(tool_dir, "variables.py"), os.environ
    finder.enter(environ[finder.TOOL_VARIABLE], environ.get(finder.VIEW_VARIABLE),
                 environ.get(finder.OWN_PATH_VARIABLE, ""), environ.get(names.USER_DIR))


def main(argv: list) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == here:
        del sys.path[0]  # `python FILE` put this folder first: nothing is found in it
    role, args = argv[1], argv[2:]
    if role in COUNTING_ROLES:
        _enter_counting(os.path.dirname(here))
    channel = Channel()
    if role in _OWN_ROLES:
        _own_role(channel, role, args)
        return
    module_name, function = ROLES[role]
    try:
        import importlib

        getattr(importlib.import_module(module_name), function)(channel, *args)
    except Exception as exc:
        channel.say({"fatal": f"{type(exc).__name__}: {exc}"})
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # not the interpreter's exit: tearing torch down takes a second, and can hang


if __name__ == "__main__":
    main(sys.argv)
