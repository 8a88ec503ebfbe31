"""The builds of a history, resolved: an interpreter, a virtualenv, a record.sh label, or a pip
requirement installed once into a cached virtualenv of its own (the user's environments are
never touched); refused when listed twice or out of order."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Callable, Sequence

from overrides.builds.interpreters import Build, probe_interpreter
from overrides.errors import UsageError
from overrides.files import make_folder
from overrides import variables

CACHE_VARIABLE = variables.BUILD_CACHE  # where installed requirements live, if not the default
INSTALL_HEARTBEAT_S = 15.0  # a CUDA wheel takes ~40 s to install here: say it is still going
INSTALL_TIMEOUT_S = 1800
# A pip requirement, not a path: a distribution name followed by a version operator or a URL.
_REQUIREMENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[^\]]*\])?\s*(===|==|~=|!=|>=|<=|<|>|@)\s*\S")
_COMPLETE_MARKER = ".overrides-installed"


@dataclasses.dataclass(frozen=True)
class HistoryBuild:
    """One build of the history, resolved: what it is, how it runs, its torch."""

    spec: str  # as the user gave it
    name: str  # short and unique: the column and axis label
    kind: str  # "interpreter", "label" or "requirement"
    python: str  # the interpreter's real path
    torch_root: str | None  # a kept copy's folder (record.sh label), imported first
    torch_dir: str | None
    torch_version: str

    def to_dict(self) -> dict:
        return {"spec": self.spec, "name": self.name, "kind": self.kind, "python": self.python,
                "torch_root": self.torch_root, "torch_dir": self.torch_dir,
                "torch_version": self.torch_version}


def is_requirement(spec: str) -> bool:
    return not os.path.exists(spec) and bool(_REQUIREMENT.match(spec))


def cache_root(given: str | None = None) -> str:
    """Where installed requirements are kept: --cache, $OVERRIDES_BUILD_CACHE, or the user's
    cache folder."""
    root = given or os.environ.get(CACHE_VARIABLE)
    if not root:
        home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(home, "torch-function-overhead", "builds")
    return os.path.abspath(root)


def _cache_folder(requirement: str, index_url: str | None, root: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9.+-]+", "-", requirement).strip("-")[:60]
    key = hashlib.sha256(f"{requirement}\n{index_url or ''}\n{sys.version_info[:2]}".encode()).hexdigest()[:10]
    return os.path.join(root, f"{readable}-{key}")


def install_requirement(requirement: str, index_url: str | None, root: str,
                        say: Callable[[str], None]) -> str:
    """The interpreter of a virtualenv holding `requirement`, installed on first use and kept in
    `root` (a folder per requirement and index). A failed install leaves nothing behind and is
    one UsageError naming pip's last line."""
    folder = _cache_folder(requirement, index_url, root)
    python = os.path.join(folder, "bin", "python")
    if os.path.isfile(os.path.join(folder, _COMPLETE_MARKER)) and os.access(python, os.X_OK):
        say(f"{requirement}: from the cache ({folder})")
        return python
    make_folder(root, "--cache")
    partial = folder + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    say(f"{requirement}: installing into {folder} (once; later runs take it from the cache)")
    started = time.monotonic()
    try:
        made = subprocess.run([sys.executable, "-m", "venv", partial], capture_output=True, text=True)
        if made.returncode:
            raise UsageError(f"could not make a virtualenv for {requirement} at {partial}: "
                             f"{_last_line(made.stderr)}")
        command = [os.path.join(partial, "bin", "python"), "-m", "pip", "install",
                   "--disable-pip-version-check", "--no-input", "-q", requirement]
        if index_url:
            command += ["--index-url", index_url]
        returncode, err = _run_pip(command, requirement, started, say)
        if returncode:
            raise UsageError(f"{requirement} did not install ({_last_line(err)}); check the "
                             "requirement, or pass --index-url for a wheel that is elsewhere")
        with open(os.path.join(partial, _COMPLETE_MARKER), "w", encoding="utf-8") as marker:
            marker.write(f"{requirement}\n{index_url or ''}\n")
        os.rename(partial, folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    say(f"{requirement}: installed in {time.monotonic() - started:.0f} s")
    return python


def _run_pip(command: list[str], requirement: str, started: float,
             say: Callable[[str], None]) -> tuple[int, str]:
    """pip's exit status and stderr, saying every INSTALL_HEARTBEAT_S that it is still going;
    stopped (a UsageError) past INSTALL_TIMEOUT_S from `started`, and killed on Ctrl-C."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        while True:
            try:
                _, err = process.communicate(timeout=INSTALL_HEARTBEAT_S)
                return process.returncode, err
            except subprocess.TimeoutExpired:
                waited = time.monotonic() - started
                if waited > INSTALL_TIMEOUT_S:
                    process.kill()
                    raise UsageError(f"{requirement} did not install within {INSTALL_TIMEOUT_S} s")
                say(f"{requirement}: still installing ({waited:.0f} s)")
    except BaseException:
        process.kill()
        process.wait()
        raise


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def version_key(version: str) -> tuple | None:
    """An ordering key for a torch version ("2.14.1+cu130", "2.15.0.dev20260101"), or None when
    it does not read as one."""
    found = re.match(r"^(\d+(?:\.\d+)*)(?:\.?(a|b|rc|dev)(\d+))?", version or "")
    if not found:
        return None
    release = tuple(int(part) for part in found.group(1).split("."))
    release += (0,) * (3 - len(release))
    stage = {"dev": 0, "a": 1, "b": 2, "rc": 3, None: 4}[found.group(2)]
    return release + (stage, int(found.group(3) or 0))


def _short_name(spec: str, kind: str, version: str) -> str:
    if kind == "requirement":
        return re.sub(r"^torch\s*==\s*", "", spec)
    if kind == "label":
        return spec
    path = spec.rstrip(os.sep)
    if os.path.basename(path) in ("python", "python3") or re.match(r"python3(\.\d+)?$", os.path.basename(path)):
        parent = os.path.dirname(os.path.dirname(path))  # ENV/bin/python -> ENV
        path = parent or path
    name = os.path.basename(path) or version
    # pyenv's /root/.pyenv/versions/3.11.7: a bare version would read as torch's
    return f"python-{name}" if re.fullmatch(r"\d+(\.\d+)*", name) else name


def resolve_builds(specs: Sequence[str], *, index_url: str | None = None, cache: str | None = None,
                   runs: str | None = None, any_order: bool = False,
                   say: Callable[[str], None] = lambda message: None) -> list[HistoryBuild]:
    """Each spec made a build that runs, in the order given: installs first (cached), then each
    interpreter probed for torch. Duplicates, and torch versions that go backwards (unless
    `any_order`), are refused before anything is counted."""
    from overrides.review import runs as recorded_runs

    if len(specs) < 2:
        raise UsageError("--history needs at least two builds, oldest first")
    runs_folder = recorded_runs.runs_dir(runs)
    labels = set(recorded_runs.recorded_labels(runs_folder)) if os.path.isdir(runs_folder) else set()
    builds: list[HistoryBuild] = []
    for spec in specs:
        if is_requirement(spec):
            python = install_requirement(spec, index_url, cache_root(cache), say)
            kind, target = "requirement", Build(python)
        elif os.sep not in spec and spec in labels:
            recorded = recorded_runs.load_label(runs_folder, spec)
            if not recorded.complete:
                raise UsageError(recorded.incomplete_line())
            if recorded.kept_root is None:
                raise UsageError(f"label {spec!r} cannot be run again: {recorded.why_not_kept()}; "
                                 f"record it with `scripts/record.sh --label {spec} --force`")
            kind, target = "label", Build(recorded.python, recorded.kept_root)
        else:
            looks = os.sep in spec or os.path.isdir(spec) or shutil.which(spec)
            if not looks:
                raise UsageError(f"{spec!r} is neither an interpreter, a virtualenv, a label recorded in "
                                 f"{runs_folder}, nor a pip requirement such as torch==2.14.1")
            kind, target = "interpreter", Build(spec)
        probed = probe_interpreter(target)
        builds.append(HistoryBuild(spec, _short_name(spec, kind, probed.torch_version), kind,
                                   probed.executable, target.torch_root, probed.torch_dir,
                                   probed.torch_version))
    return _checked(builds, any_order)


def _checked(builds: list[HistoryBuild], any_order: bool) -> list[HistoryBuild]:
    """`builds` refused if one is listed twice or (unless `any_order`) their torch versions go
    backwards; names made unique (`main#1`, `main#2`) where two folders share one."""
    seen: dict[tuple, HistoryBuild] = {}
    for build in builds:
        # the environment the interpreter runs in (its folder: a virtualenv named by its folder,
        # bin/python or bin/python3 is one; two virtualenvs sharing one torch are two builds)
        identity = (os.path.dirname(os.path.dirname(os.path.abspath(build.python))), build.torch_root,
                    build.torch_dir)
        if identity in seen:
            raise UsageError(f"{build.spec} and {seen[identity].spec} are one build (torch at "
                             f"{build.torch_dir}); list each build once")
        seen[identity] = build
    if not any_order:
        for earlier, later in zip(builds, builds[1:]):
            a, b = version_key(earlier.torch_version), version_key(later.torch_version)
            if a is not None and b is not None and b < a:
                raise UsageError(f"builds out of order: {earlier.spec} (torch {earlier.torch_version}) "
                                 f"comes before {later.spec} (torch {later.torch_version}); list them "
                                 "oldest first, or pass --any-order")
    names = [build.name for build in builds]
    unique = []
    for i, build in enumerate(builds):
        if names.count(build.name) > 1:
            build = dataclasses.replace(build, name=f"{build.name}#{names[:i + 1].count(build.name)}")
        unique.append(build)
    return unique


