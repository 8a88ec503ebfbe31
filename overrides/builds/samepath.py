"""Every side starts from one path: a build's processes see their folders at fixed places.

Why it exists. Instruction counts (and, less visibly, the clock) depend on the history of
allocations before the measured loop, and that history depends on every path string the process
builds while it starts: `sys.executable`, `sys.prefix`, site-packages, every module's `__file__`,
the checkout on `sys.path`. Two virtualenvs of one wheel whose paths differed in length and name
(`/tmp/x/main`, `/tmp/x/fix-subclass-dispatch-env`) counted SubWithTorchFunction apart, mostly
in one direction over the seeds, and a `cp -a` copy at a longer path read SubTensor apart
through `--compare` (figures: benchmarks/history.md, 'Docstring figures'): an offset that belongs
to the pair of environments, which no interval over seeds carries, on code that is byte for
byte the same.

So each counting process (and each timing worker of a comparison) runs in a private mount
namespace of its own (`samepath_enter.py`: user + mount namespaces, which unprivileged users
have on most Linux systems; root needs only the mount namespace) where a small tmpfs at
FIXED_ROOT holds, as bind mounts:
- `env`: the interpreter's prefix (a virtualenv's folder, or an installation's), so the
  interpreter runs as `FIXED_ROOT/env/bin/python` whichever side it is;
- `view`: the folder torch is imported from first (the side's placement view, or a kept copy);
- `tool`: this checkout, put first on `PYTHONPATH`;
- `user`: the working directory, for `pkg.module:factory` cases;
- `env/pyvenv.cfg`: a virtualenv's configuration without the lines that differ per virtualenv
  (the one naming its folder, its prompt);
- `env/bin`: a virtualenv's interpreter names, each a link straight to the file it runs, whether
  the virtualenv linked its interpreter (`python -m venv`) or copied it (`--copies`);
- `pycache`: the side's own bytecode cache (`PYTHONPYCACHEPREFIX`), compiled in the namespace.
  A module's `.pyc` holds the path it was compiled at: pip compiles at install, so two
  virtualenvs' caches hold their own paths, and loading one allocates those strings before the
  import fixes them up. With the fixed path alone, a `cp -a` copy counted the same as its
  original on every case and seed, while a second install of the wheel still counted apart.
  So each side's imports are first run natively in its namespace (`prime`), which writes
  every module it loads into a cache of its own (one per interpreter, torch folder and
  checkout, kept between runs, refreshed as sources change), compiled at the fixed paths. What
  that loaded is remembered beside the cache (`primed.py`), so a later process that finds every
  file and folder as it was skips the prime (seconds a side; figures:
  benchmarks/history.md, 'Docstring figures').
Nothing is mounted outside the namespace and nothing is left behind; the kernel removes the
mounts when the process ends.

Where it cannot be done (not Linux, namespaces refused, an interpreter outside its prefix), a
`Placement` says so and why, each side keeps its own paths, and the counts' comparison widens
its threshold by PATH_ALLOWANCE_INSTRUCTIONS (the offset measured between environments whose
paths differ) instead of claiming exactness.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from overrides import ROOT, entry, workers
from overrides.builds import primed, samepath_enter
from overrides.files import one_process_at_a_time
from overrides import variables

FIXED_ROOT = "/tmp/overrides-same-path"
ENTER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "samepath_enter.py")
# What a comparison between environments whose paths differ must allow its counts (a floor under
# the threshold, which the mean over seeds must pass): without the fixed path, two installs of
# one wheel and a `cp -a` copy at a longer path read means over three seeds of up to +104
# instructions a call (SubWithTorchFunction; single seeds up to +202), nothing changed
# (benchmarks/history.md, "One path for both sides"). 150 clears the largest mean by ~1.4x.
PATH_ALLOWANCE_INSTRUCTIONS = 150.0
PROBE_TIMEOUT_S = 60
VENV_CONFIG = "pyvenv.cfg"
# pyvenv.cfg's keys that differ from one virtualenv to the next and that the interpreter does not
# use: `command` names the folder it was made in; `prompt` (`venv --prompt`, and uv's default,
# the folder's name) is for the activate scripts. Each line is read at start-up: a prompt alone
# moved the counts -4..-65 instructions a call between two installs of one wheel.
VENV_CONFIG_PER_FOLDER = ("command", "prompt")
PRIME_TIMEOUT_S = 600  # compiling a torch's modules from nothing on a busy machine
# What every counting process and timing worker imports before it measures: run natively once per
# side so that each of these modules' bytecode sits in the side's cache, compiled at the fixed path.
PRIMED_MODULES = ("torch", "overrides.ab.worker", "overrides.counts.callgrind", "overrides.cases.registry",
                  "overrides.cases.seedcases", "overrides.cases.catalog", "overrides.cases.ops",
                  "overrides.clock.timer", "overrides.single_run")


def serve_prime(channel) -> None:
    """In a side's process at the fixed path (entry.py's `prime` role): import PRIMED_MODULES, then
    say what was loaded (as this process sees the paths) for its manifest (primed.py), and the `.pth`
    files on its path, which decide at start-up what else is found and imported."""
    import glob
    import importlib

    for name in PRIMED_MODULES:
        importlib.import_module(name)
    loaded = {m.__file__ for m in list(sys.modules.values()) if isinstance(getattr(m, "__file__", None), str)}
    pth = {f for d in sys.path if os.path.isdir(d) for f in glob.glob(os.path.join(d, "*.pth"))}
    channel.say({"loaded": sorted(loaded | {sys.executable} | pth)})


PRIME_LOCK = "prime.lock"  # beside the bytecode folder: one process primes a cache at a time
# `OVERRIDES_SAME_PATH=off` starts every side from its own paths, as before this module: for the
# validation benchmarks that measure what the fixed path buys (benchmarks/samepath_validation.py).
SWITCH_VARIABLE = variables.SAME_PATH


@dataclasses.dataclass(frozen=True)
class Placement:
    """How one process of a side is started: its command prefix and the paths it sees."""

    python: str  # the interpreter as the process sees it
    import_path: str | None  # the folder torch is imported from first, as the process sees it
    tool: str  # this checkout, as the process sees it
    user_dir: str | None
    prefix: tuple[str, ...] = ()  # put before the command: the namespace launcher
    fixed: bool = False  # True: every path above is one of FIXED_ROOT's, the same for every build
    reason: str = ""  # why not fixed
    pycache: str | None = None  # PYTHONPYCACHEPREFIX as the process sees it (fixed only)
    # What the bytecode `prime` compiles depends on: the side's cache and the folders mounted for
    # it, not the working directory or the user's folder (a comparison's counting processes and
    # timing workers differ only in those, and share one cache).
    prime_key: tuple = ()
    binds: tuple[tuple[str, str], ...] = ()  # (a folder, where FIXED_ROOT shows it) when fixed

    def wrap(self, command: list[str]) -> list[str]:
        return [*self.prefix, *command]

    def seen_from_outside(self, path: str) -> str:
        """A path as the process reported it, as it is outside the namespace: under the most
        specific folder mounted at it, else as it is."""
        best = None
        for source, name in self.binds:
            inside = os.path.join(FIXED_ROOT, name)
            if (path == inside or path.startswith(inside + os.sep)) and (best is None or len(inside) > len(best[1])):
                best = (source, inside)
        return path if best is None else best[0] + path[len(best[1]):]


@functools.lru_cache(maxsize=None)
def interpreter_prefix(python: str) -> str | None:
    """`sys.prefix` of the interpreter, asked once per interpreter."""
    try:
        out = subprocess.run(entry.command(python, "prefix", flags=("-I",)), capture_output=True,
                             text=True, timeout=PROBE_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return workers.value_of(entry.last_message(out), "prefix")


@functools.lru_cache(maxsize=None)
def unavailable_reason() -> str:
    """'' when a private mount namespace can be entered here, else why not (tried once)."""
    if not sys.platform.startswith("linux"):
        return "private mount namespaces are Linux only"
    try:
        os.makedirs(FIXED_ROOT, exist_ok=True)
    except OSError as error:
        return f"cannot create {FIXED_ROOT} ({error.strerror})"
    try:
        trial = subprocess.run(_launcher(samepath_enter.Spec(FIXED_ROOT, ((ROOT, "tool"),)))
                               + [shutil.which("test") or "/usr/bin/test", "-d", f"{FIXED_ROOT}/tool/overrides"],
                               capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as error:
        return f"the namespace launcher did not run ({error})"
    if trial.returncode != 0:
        said = (trial.stderr.strip().splitlines() or ["no message"])[-1]
        return f"no private mount namespace here ({said})"
    return ""


def _launcher(spec: samepath_enter.Spec) -> list[str]:
    # The parent's own interpreter runs the launcher, isolated from the side's variables.
    return [sys.executable, "-I", ENTER_SCRIPT, json.dumps(spec.to_dict())]


def cache_root() -> str:
    """This tool's folder under the user's cache directory: the bytecode caches (`pycache`) and
    the counts kept for reuse (`counts`, counts/kept.py) beside them."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(home, "torch-function-overhead")


def cache_folder(*sources: str | None) -> str:
    """The bytecode cache of one side: one folder per interpreter prefix, torch source and
    checkout, under the user's cache directory."""
    key = hashlib.sha1("\0".join(os.path.realpath(s) if s else "" for s in sources).encode()).hexdigest()
    folder = os.path.join(cache_root(), "pycache", key[:16])
    os.makedirs(folder, exist_ok=True)
    return folder


def place(python: str, import_path: str | None = None, user_dir: str | None = None,
          enabled: bool = True, in_tool: bool = False, source: str | None = None) -> Placement:
    """Where a process of the interpreter `python`, importing torch first from `import_path`,
    should see its folders: at FIXED_ROOT when a namespace can be had, else where they are.
    `in_tool`: the process starts in this checkout (`FIXED_ROOT/tool` when fixed), not in the
    working directory its caller gives it. `source`: the folder `import_path` stands for (a
    view's original), which names the side's bytecode cache; `import_path` itself by default.
    Worked out once per set of arguments: every pair and every seed asks again."""
    return _place(python, import_path, user_dir, enabled and os.environ.get(SWITCH_VARIABLE) != "off",
                  in_tool, source)


@functools.lru_cache(maxsize=None)
def _place(python: str, import_path: str | None, user_dir: str | None, enabled: bool, in_tool: bool,
           source: str | None) -> Placement:
    own = Placement(python, import_path, ROOT, user_dir)
    if not enabled:
        return dataclasses.replace(own, reason="switched off")
    why = unavailable_reason()
    if why:
        return dataclasses.replace(own, reason=why)
    prefix = interpreter_prefix(python)
    if not prefix:
        return dataclasses.replace(own, reason=f"{python} did not report its prefix")
    rel = os.path.relpath(python, prefix)
    if rel.startswith(os.pardir):
        return dataclasses.replace(own, reason=f"{python} lies outside its prefix {prefix}")
    cache = cache_folder(prefix, source or import_path, ROOT)
    bytecode = os.path.join(cache, "bytecode")
    os.makedirs(bytecode, exist_ok=True)
    binds = [[prefix, "env"], [ROOT, "tool"], [bytecode, "pycache"]]
    config = _same_venv_config(prefix, cache)
    if config:
        binds.append([config, os.path.join("env", VENV_CONFIG)])
    linked = _linked_interpreter(python, prefix, cache)
    if linked:
        binds.append([linked, os.path.join("env", os.path.dirname(rel))])
    if import_path:
        binds.append([import_path, "view"])
    if user_dir:
        binds.append([user_dir, "user"])
    tool = os.path.join(FIXED_ROOT, "tool")
    spec = samepath_enter.Spec(FIXED_ROOT, tuple(tuple(bind) for bind in binds), tool if in_tool else None)
    return Placement(os.path.join(FIXED_ROOT, "env", rel),
                     os.path.join(FIXED_ROOT, "view") if import_path else None, tool,
                     os.path.join(FIXED_ROOT, "user") if user_dir else None,
                     tuple(_launcher(spec)), fixed=True, pycache=os.path.join(FIXED_ROOT, "pycache"),
                     prime_key=tuple(tuple(bind) for bind in binds if bind[1] != "user"),
                     binds=tuple((source, name) for source, name in binds))


def _same_venv_config(prefix: str, cache: str) -> str | None:
    """A virtualenv's `pyvenv.cfg` without the lines that differ per virtualenv
    (VENV_CONFIG_PER_FOLDER: `command = ... -m venv /the/env`, `prompt = ...`), written into
    the side's cache, to be mounted over the original: the interpreter reads the whole file at
    start-up, and the `command` line was what still told two installs of one wheel apart
    (figures: benchmarks/history.md, 'Docstring figures'). None for an interpreter that is not a
    virtualenv."""
    lines = _venv_config_lines(prefix)
    if lines is None:
        return None
    kept = "".join(line for line in lines if line.partition("=")[0].strip() not in VENV_CONFIG_PER_FOLDER)
    target = os.path.join(cache, VENV_CONFIG)
    try:
        with open(target, encoding="utf-8") as old:
            if old.read() == kept:
                return target
    except OSError:
        pass
    from overrides.files import write_text_atomic

    write_text_atomic(target, kept)
    return target


_LINKING = threading.Lock()


def _linked_interpreter(python: str, prefix: str, cache: str) -> str | None:
    """A virtualenv's `bin` as every side sees it: a folder of symbolic links, each straight to
    the one file the interpreter runs, mounted over the virtualenv's own. How a virtualenv
    reaches that file differs: `python -m venv` links `python -> python3 -> /base/python3 ->
    python3.11`, `--copies` (some tools' default) copies it. The interpreter builds strings from
    that path as it starts (`/proc/self/exe`, `sys._base_executable`, each link resolved on the
    way), and those alone told a `--copies` virtualenv from a linked one of the same wheel apart
    (figures: benchmarks/history.md, 'Docstring figures'). The same bytes run either way: a copy
    only when it is byte for byte its base's file. None when the prefix is no virtualenv or the
    copy differs."""
    home = _venv_home(prefix)
    if not home:
        return None
    folder = os.path.dirname(python)
    names = sorted({os.path.basename(python)} | {
        name for name in os.listdir(folder)
        if re.fullmatch(r"python(\d+(\.\d+)?)?", name) and os.path.isfile(os.path.join(folder, name))})
    if os.path.islink(python):
        base = os.path.realpath(python)
    else:
        # The base's file of that name, else of another the copies go by (`python` may be
        # missing from the base's folder, as `make install` leaves it).
        found = [os.path.join(home, name) for name in dict.fromkeys([os.path.basename(python), *names])
                 if os.path.isfile(os.path.join(home, name))]
        base = os.path.realpath(found[0]) if found else ""
        from overrides.builds.placement import same_bytes

        if not base or not same_bytes(python, base):
            return None
    target = os.path.join(cache, "bin")
    wanted = {name: base for name in names}
    # Seeds of one build count in parallel threads: one makes the folder, the others find it. A
    # folder that is right is never removed (another process may have it mounted).
    with _LINKING:
        if _links_in(target) == wanted:
            return target
        made = tempfile.mkdtemp(prefix="bin-", dir=cache)
        for name in names:
            os.symlink(base, os.path.join(made, name))
        if os.path.lexists(target):  # stale: moved aside whole, then removed
            aside = tempfile.mkdtemp(prefix="stale-", dir=cache)
            os.rename(target, os.path.join(aside, "bin"))
            shutil.rmtree(aside, ignore_errors=True)
        try:
            os.rename(made, target)
        except OSError:  # another process made it meanwhile
            shutil.rmtree(made, ignore_errors=True)
            if _links_in(target) != wanted:
                raise
    return target


def _venv_config_lines(prefix: str) -> list[str] | None:
    """The lines of the virtualenv's pyvenv.cfg at `prefix`; None for no virtualenv."""
    try:
        with open(os.path.join(prefix, VENV_CONFIG), encoding="utf-8") as src:
            return src.readlines()
    except OSError:
        return None


def _venv_home(prefix: str) -> str | None:
    """The `home` of a virtualenv's pyvenv.cfg (its base interpreter's folder), or None."""
    for line in _venv_config_lines(prefix) or ():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return value.strip() or None
    return None


def _links_in(folder: str) -> dict[str, str] | None:
    """name -> target of every symbolic link in `folder`; None when it is missing or holds
    anything else."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return None
    links = {}
    for name in entries:
        path = os.path.join(folder, name)
        if not os.path.islink(path):
            return None
        links[name] = os.readlink(path)
    return links


_PRIMED: set = set()
_PRIMING: dict = {}  # key -> the lock held while that key is primed: one prime per key at once
_PRIMING_GUARD = threading.Lock()


def prime(where: Placement, extra_path: str = "") -> float:
    """Compile what a side imports into its bytecode cache, natively, at the fixed paths (once
    per cache, mounts and import path in a process: Python rewrites what is stale, so a rebuilt
    torch is compiled anew). Returns the seconds it took; nothing to do unless `where` is fixed.
    Keyed by `prime_key`, not the whole launcher: a comparison's timing workers primed their
    side again after its counting processes had (one side after the other, before the first
    pair) (figures: benchmarks/history.md, 'Docstring figures')."""
    if not where.fixed:
        return 0.0
    key = (where.prime_key, extra_path)
    with _PRIMING_GUARD:
        lock = _PRIMING.setdefault(key, threading.Lock())
    with lock:  # seeds of one side counted at once wait for one prime, then find it done
        if key in _PRIMED:
            return 0.0
        started = time.monotonic()
        # One process primes a cache at a time. Two bench.py runs started at once on a fresh cache
        # (a test counting a step twice, CI jobs on one runner) both primed it, and the workers
        # started while the other prime still ran counted a step up to 1.5% apart from every
        # later worker (benchmarks/history.md, 'Two runs at once on a fresh cache').
        lock_file = os.path.join(os.path.dirname(_bind_source(where.prime_key, "pycache")), PRIME_LOCK)
        with one_process_at_a_time(lock_file):
            if not still_primed(where, extra_path):
                _prime(where, extra_path)
        _PRIMED.add(key)
        return time.monotonic() - started


def _prime(where: Placement, extra_path: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
           "LC_ALL": "C.UTF-8", "PYTHONPYCACHEPREFIX": where.pycache, "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (where.tool, where.import_path, extra_path) if p)}
    done = subprocess.run(where.wrap(entry.command(where.python, "prime", tool=where.tool)),
                          capture_output=True, text=True, env=env, timeout=PRIME_TIMEOUT_S, cwd="/")
    if done.returncode != 0:
        raise workers.WorkerSaid(f"{where.python} could not import torch at the fixed path: {workers.reason(done)}")
    loaded = workers.value_of(entry.last_message(done.stdout), "loaded")
    if loaded is None:
        return  # nothing to remember (not a failure): the next process primes again
    from overrides.files import write_text_atomic

    manifest = primed.PrimeManifest(primed.MANIFEST_VERSION, extra_path, where.python, tuple(loaded),
                                    primed.fingerprint(loaded, _mounts(where.prime_key)))
    write_text_atomic(os.path.join(_bind_source(where.prime_key, "pycache"), primed.MANIFEST),
                      json.dumps(manifest.to_dict(), sort_keys=True))


def still_primed(where: Placement, extra_path: str) -> bool:
    """Whether the side's cache holds what a prime would write now: its manifest was written
    for these arguments, and every file the last prime loaded, and every folder it loaded from,
    stands as it did then (a source or `.pth` file's time and size, which Python checks a `.pyc`
    by; a library's size; the names in each folder, so a module added or removed shows)."""
    try:
        with open(os.path.join(_bind_source(where.prime_key, "pycache"), primed.MANIFEST), encoding="utf-8") as src:
            manifest = primed.PrimeManifest.from_dict(json.load(src))
    except (OSError, ValueError):
        return False
    if (manifest.version != primed.MANIFEST_VERSION or manifest.extra_path != extra_path
            or manifest.python != where.python or not isinstance(manifest.files, tuple)):
        return False
    return primed.fingerprint(list(manifest.files), _mounts(where.prime_key)) == manifest.fingerprint


def _bind_source(binds: tuple, name: str) -> str:
    return next(source for source, mounted in binds if mounted == name)


def _mounts(binds: tuple) -> list:
    """(folder under FIXED_ROOT, its source) of each of `binds`, deepest first (primed.fingerprint)."""
    return [(os.path.join(FIXED_ROOT, name), source)
            for source, name in sorted(binds, key=lambda bind: -len(bind[1]))]


def record(placements) -> dict:
    """What a comparison's settings say about its sides' start-up paths, with one line for
    people (`summary`)."""
    placements = list(placements)
    fixed = bool(placements) and all(p.fixed for p in placements)
    reasons = sorted({p.reason for p in placements if not p.fixed})
    if fixed:
        summary = f"every side ran from one path ({FIXED_ROOT}, in a private mount namespace of its own)"
    else:
        summary = (f"the sides started from their own paths ({'; '.join(reasons)}), so counts "
                   f"between environments may differ by up to ~{PATH_ALLOWANCE_INSTRUCTIONS:.0f} "
                   "instructions a call with nothing changed; the counts' threshold allows for it")
    return {"fixed": fixed, "root": FIXED_ROOT if fixed else None,
            "reason": "; ".join(reasons) or None, "summary": summary}


def paths_differ(settings: list[dict]) -> bool:
    """Whether counting runs (their settings) started from different paths: some run not from
    the fixed path, and the interpreters or import paths not all alike."""
    if all(one.get("same_path") for one in settings):
        return False
    return len({(one.get("python"), one.get("import_path")) for one in settings}) > 1
