"""Counts kept for reuse, by content: a job counted once under a seed is not counted again while
nothing it depends on has changed.

Why it exists. A count is exact: the same build, case source, tool code and seed count the same
to the instruction (forkserver.py), so counting them again only costs time, and under valgrind a
lot of it: the base of a pull request compared again, a budget checked after it was written, a
report run twice. So every job a child counts is kept, and found again before anything starts.

What a kept count is keyed by, never a path or a time:
- what the process is told (`Identity`): valgrind's version and options, the server's command
  line and environment as the process sees them (samepath's fixed paths, the padding, the side's
  own variables; the seed apart, a folder of its own so that `seeds` can list them), the job
  (its targets, calls, repeats, layout variant), the tool's code (`tool_digest`) and how counts
  are made (forkserver.COUNTED_BY);
- what the process loaded (`loaded`, said by the child after counting): every module's file,
  every file mapped (libtorch, the interpreter), the `.pth` files on its path, and the listing of
  every folder those came from (a module added where the imports look); each by the SHA-256 of
  its content, and checked again before a kept count is taken. Two builds that start from one
  fixed path (samepath) have one Identity and are told apart by what they loaded: a folder holds
  an entry per content.
A file's digest is remembered by its inode, size and modification and change times
(`digests.json`), so that a file nothing changed is not read again (libtorch is ~400 MB), as git
and make decide; `--fresh` counts anew and rewrites what it counts.

Where: beside the bytecode caches (samepath.cache_root()/counts), or OVERRIDES_COUNTS_CACHE
(`off`: nothing kept or reused; the tests that count run so). Safe when runs share it: every
file is written whole (files.write_text_atomic), and the digests are merged under
files.one_process_at_a_time. Each folder keeps its KEPT_PER_FOLDER newest entries.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import threading
from typing import Sequence

from overrides import ROOT, variables
from overrides.builds import samepath
from overrides.files import one_process_at_a_time, write_text_atomic

VERSION = 1  # of an entry's JSON; another version's entries are not read
OFF = "off"
KEPT_PER_FOLDER = 8  # entries (contents) kept per identity and seed, the newest: a build or two a side
DIGESTS = "digests.json"
_STATE = {"fresh": False}
_LOCK = threading.Lock()


# `--fresh`, as bench.py, record.sh and report.sh take it
FRESH_HELP = ("count instructions anew: reuse no count kept from an earlier run (counts are kept by content, "
              "beside the bytecode cache, and reused while the build, your cases, the tool and the seed are "
              "unchanged); what is counted is kept")


def count_anew() -> None:
    """`--fresh`: nothing kept is reused in this process; what is counted is kept."""
    _STATE["fresh"] = True


def folder() -> str | None:
    """Where counts are kept, or None where keeping is off."""
    chosen = os.environ.get(variables.COUNTS_CACHE)
    if chosen == OFF:
        return None
    return chosen or os.path.join(samepath.cache_root(), "counts")


def reusing() -> bool:
    return folder() is not None and not _STATE["fresh"]


def tool_digest(root: str | None = None) -> str:
    """SHA-256 of this tool's own code (every .py file of the package, by path and content): the
    counting process runs it beside your code, so another version of it moves every count."""
    package = os.path.join(root or ROOT, "overrides")
    digest = hashlib.sha256()
    for where, _, files in sorted(os.walk(package)):
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(where, name)
            digest.update(os.path.relpath(path, package).encode() + b"\0")
            with open(path, "rb") as src:
                digest.update(src.read() + b"\0")
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class Identity:
    """Everything a server's child is told that its counts depend on, the seed apart."""

    valgrind: str  # its version line
    options: tuple[str, ...]  # valgrind.options(tree)
    command: tuple[str, ...]  # the server's command line as it sees it, valgrind's own apart
    environment: tuple[tuple[str, str], ...]  # as it sees it, PYTHONHASHSEED apart
    job: str  # the job's spec, as the child reads it
    tool: str  # tool_digest()
    counted_by: str

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Kept:
    """A kept count: what it holds (`run`: records.CountRun's fields, exact) and when it was made."""

    run: dict
    written: str  # ISO time, for people ("reused from ...")


@dataclasses.dataclass(frozen=True)
class Entry:
    """A kept count's file: its JSON's `version` (VERSION), the Identity it was counted under (its
    fields, for people), the digest of every file it `loaded` and of every folder's listing (by
    the path as the process saw it), the `run` (records.CountRun.to_dict) and when it was written."""

    version: int | None
    identity: dict
    loaded: dict
    run: dict | None
    written: str

    def to_dict(self) -> dict:
        return {"version": self.version, "identity": self.identity, "loaded": self.loaded, "run": self.run,
                "written": self.written}

    @classmethod
    def from_dict(cls, data) -> "Entry | None":
        """None where `data` is no entry (not a JSON object)."""
        if not isinstance(data, dict):
            return None
        return cls(data.get("version"), data.get("identity") or {}, data.get("loaded") or {}, data.get("run"),
                   data.get("written", "?"))


class Digests:
    """SHA-256 of files, remembered by (device, inode, size, mtime, ctime)."""

    def __init__(self, where: str):
        self.path = os.path.join(where, DIGESTS)
        self.known: dict[str, str] = _read(self.path) or {}
        self.added: dict[str, str] = {}

    def of(self, path: str) -> str | None:
        try:
            stat = os.stat(path)
        except OSError:
            return None
        if os.path.isdir(path):
            try:
                return hashlib.sha256("\0".join(sorted(os.listdir(path))).encode()).hexdigest()
            except OSError:
                return None
        key = f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ctime_ns}"
        found = self.known.get(key) or self.added.get(key)
        if found:
            return found
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
        except OSError:
            return None
        self.added[key] = digest.hexdigest()
        return self.added[key]

    def save(self) -> None:
        if not self.added:
            return
        with one_process_at_a_time(self.path + ".lock"):
            merged = dict(_read(self.path) or {}, **self.added)
            write_text_atomic(self.path, json.dumps(merged))
        self.known, self.added = merged, {}


def _read(path: str):
    try:
        with open(path, encoding="utf-8") as src:
            return json.load(src)
    except (OSError, ValueError):
        return None


_DIGESTS: dict[str, Digests] = {}


def _digests(where: str) -> Digests:
    with _LOCK:
        return _DIGESTS.setdefault(where, Digests(where))


def _seed_folder(identity: Identity, seed: int) -> str | None:
    where = folder()
    return None if where is None else os.path.join(where, identity.key[:2], identity.key, str(seed))


def find(identity: Identity, seed: int, seen_from_outside) -> Kept | None:
    """The count kept for `identity` under `seed` whose loaded files all read as they did, the
    newest first; None where none does (or keeping is off, or --fresh). `seen_from_outside`:
    a path as the process saw it -> where it is here (samepath.Placement's)."""
    seed_folder = _seed_folder(identity, seed) if reusing() else None
    if seed_folder is None or not os.path.isdir(seed_folder):
        return None
    digests = _digests(folder())
    entries = sorted((os.path.join(seed_folder, name) for name in os.listdir(seed_folder) if name.endswith(".json")),
                     key=_mtime, reverse=True)
    for path in entries:
        entry = Entry.from_dict(_read(path))
        if entry is None or entry.version != VERSION:
            continue
        if entry.loaded and all(digests.of(seen_from_outside(name)) == digest for name, digest in entry.loaded.items()):
            with _LOCK:
                digests.save()
            return Kept(entry.run, entry.written)
    with _LOCK:
        digests.save()
    return None


def seeds(identity: Identity, seen_from_outside, among: Sequence[int] | None = None) -> list[int]:
    """The seeds a count of `identity` is kept under (found as `find` finds it), oldest first."""
    where = folder()
    if where is None or not reusing():
        return []
    base = os.path.join(where, identity.key[:2], identity.key)
    try:
        names = sorted((n for n in os.listdir(base) if n.isdigit()), key=lambda n: _mtime(os.path.join(base, n)))
    except OSError:
        return []
    return [int(n) for n in names if (among is None or int(n) in among)
            and find(identity, int(n), seen_from_outside) is not None]


def keep(identity: Identity, seed: int, run: dict, loaded: Sequence[str], seen_from_outside,
         unlisted: Sequence[str | None] = ()) -> None:
    """Keep `run` (records.CountRun's fields) for `identity` under `seed`, with the digest of
    every file in `loaded` (paths as the process saw them) and the listing of every folder they
    lie in, but those under `unlisted` (the user's folder and the tool's: what is imported there is
    found by stat, and a file written there, a budget or a results file, moves no count)."""
    seed_folder = _seed_folder(identity, seed)
    if seed_folder is None:
        return
    digests = _digests(folder())
    apart = [folder_.rstrip(os.sep) + os.sep for folder_ in unlisted if folder_]
    names = set(loaded) | {os.path.dirname(name) for name in loaded
                           if not any((os.path.dirname(name) + os.sep).startswith(a) for a in apart)}
    content = {name: digests.of(seen_from_outside(name)) for name in sorted(names)}
    if not content or any(digest is None for digest in content.values()):
        return  # a file it loaded is gone already: nothing to check a reuse against
    entry = Entry(VERSION, dataclasses.asdict(identity), content, run,
                  datetime.datetime.now().isoformat(timespec="seconds"))
    name = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:24] + ".json"
    os.makedirs(seed_folder, exist_ok=True)
    write_text_atomic(os.path.join(seed_folder, name), json.dumps(entry.to_dict()))
    with _LOCK:
        digests.save()
    _prune(seed_folder)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _prune(seed_folder: str) -> None:
    entries = sorted((os.path.join(seed_folder, n) for n in os.listdir(seed_folder) if n.endswith(".json")),
                     key=_mtime, reverse=True)
    for stale in entries[KEPT_PER_FOLDER:]:
        try:
            os.unlink(stale)
        except OSError:
            pass
