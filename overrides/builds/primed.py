"""What a side's bytecode cache was last primed with, and how those files stood: `primed.json`.

Why it exists. samepath.py primes each side's cache once (its `prime` role imports what every
worker imports, at the fixed paths) and remembers beside the cache what that loaded, so that a
new process finds the cache fresh from a few thousand stat calls (~15 ms) instead of importing
torch once more (~1.4 s a side on the CPU wheel, before the first counting round of every
comparison and report). Here is that memory: its record, written and read back by samepath.py,
and the fingerprint that tells whether the files still stand as they did.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os

from overrides.files import fields_from_dict, fields_to_dict

MANIFEST = "primed.json"  # in the side's bytecode folder, gone with it
MANIFEST_VERSION = 1


@dataclasses.dataclass(frozen=True)
class PrimeManifest:
    """A side's `primed.json`: the arguments it was written for (`version`, `extra_path`, the
    interpreter as the process sees it), the `files` the prime loaded and how they stood then
    (`fingerprint`). A field the file lacks is None: the cache then reads as not primed."""

    version: int | None = None
    extra_path: str | None = None
    python: str | None = None
    files: tuple[str, ...] | None = None
    fingerprint: dict | None = None

    def to_dict(self) -> dict:
        return fields_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PrimeManifest":
        return fields_from_dict(cls, data)


def _host_path(path: str, mounts: list) -> str:
    """Where a path as a side's process sees it lies outside the namespace; `mounts`:
    (folder under the fixed root, its source), deepest first."""
    for mounted, source in mounts:
        if path == mounted or path.startswith(mounted + os.sep):
            return source + path[len(mounted):]
    return path


def fingerprint(files: list, mounts: list) -> dict:
    """How the files a prime loaded, and their folders, stand now (samepath.still_primed); keyed
    by the paths as the side's process sees them, so a view made afresh for every comparison
    (the same files, hard-linked) fingerprints as its source does. `mounts`: samepath._mounts."""
    out: dict = {}
    folders = set()
    for path in files:
        host = _host_path(path, mounts)
        try:
            stat = os.stat(host)
        except OSError:
            out[path] = None
            continue
        # A library's size only: a view may link it to a copy made for the comparison.
        out[path] = [stat.st_mtime_ns, stat.st_size] if path.endswith((".py", ".pth")) else [stat.st_size]
        folders.add(os.path.dirname(path))
    for folder in folders:
        try:
            names = sorted(os.listdir(_host_path(folder, mounts)))
        except OSError:
            names = None
        out[folder + os.sep] = hashlib.sha1(json.dumps(names).encode()).hexdigest()
    return out
