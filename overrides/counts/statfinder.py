"""Imports from the folders people write into, found by stat: a folder's listing never enters
the counted process.

Why it exists. Python's own finder reads a folder's whole listing the first time it searches it
and keeps every name as a string for the life of the process. Those strings are allocated
before the user's module and its attribute names, so the names land at other addresses, and the
interpreter's type-attribute cache (indexed by a name's address) collides elsewhere: one more
file in the user's folder (a `--json` output, a budget file, `subtensor.svg`) moved SubTensor by
+119 instructions a call and a user case by +63; one untracked file in this checkout moved them
by +74 and -88, on the same seed, in the same interpreter (figures: benchmarks/history.md,
'Counts that do not read a folder'). A budget written in one checkout and checked in a clean CI
clone would fail on nothing.

So a counting process finds modules in the tool's checkout and the user's folder through
`StatFinder`, which asks the file system for exactly the names it is asked to import (the order
Python's FileFinder tries them in: a package's `__init__`, then a module file, then a namespace
folder, extensions before sources before bytecode). Sources in the user's folder are compiled
from source every time (`SourceOnlyLoader`): whether a `.pyc` had been left by an earlier run
decided whether the import compiled or only loaded, which is another history of allocations.

It imports nothing of this package: the worker loads it by its file path before this checkout
is on `sys.path` (overrides/entry.py's `count` role), since the interpreter lists every
`PYTHONPATH` folder while it starts. Linux file systems are case-sensitive, as this finder assumes.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import (
    BYTECODE_SUFFIXES,
    EXTENSION_SUFFIXES,
    SOURCE_SUFFIXES,
    ExtensionFileLoader,
    ModuleSpec,
    SourceFileLoader,
    SourcelessFileLoader,
)
from importlib.util import spec_from_file_location


# A budget's layout variant (counts/isolated.py): this many unused functions are compiled onto
# the end of each of the user's sources, the harmless edit whose effect on the counts sizes a
# budget's margins. Unset (0) in every other count.
LAYOUT_VARIANT_VARIABLE = "OVERRIDES_LAYOUT_VARIANT"


def variant_tail(variant: int) -> bytes:
    """The unused functions a layout variant adds to a source: each with names, constants and a
    body of its own, as a helper someone adds and does not call yet."""
    return b"".join(b"\n\ndef _overrides_layout_variant_%d(x, scale=%d):\n    return [x, x * scale, {'k%d': x}]\n"
                    % (i, i, i) for i in range(variant))


class SourceOnlyLoader(SourceFileLoader):
    """A source file's loader that compiles the source on every import and never reads or
    writes its bytecode cache."""

    def get_code(self, fullname):
        path = self.get_filename(fullname)
        variant = int(os.environ.get(LAYOUT_VARIANT_VARIABLE) or 0)
        return self.source_to_code(self.get_data(path) + variant_tail(variant), path)


class StatFinder:
    """A path-entry finder for one folder that stats the candidate files of each name asked
    for instead of listing the folder."""

    def __init__(self, path: str, compile_sources: bool):
        self.path = path
        source = SourceOnlyLoader if compile_sources else SourceFileLoader
        self._loaders = ([(suffix, ExtensionFileLoader) for suffix in EXTENSION_SUFFIXES]
                         + [(suffix, source) for suffix in SOURCE_SUFFIXES]
                         + [(suffix, SourcelessFileLoader) for suffix in BYTECODE_SUFFIXES])

    def invalidate_caches(self) -> None:
        """Nothing is cached."""

    def find_spec(self, fullname: str, target=None):
        tail = fullname.rpartition(".")[2]
        base = os.path.join(self.path, tail)
        folder = os.path.isdir(base)
        if folder:
            for suffix, loader in self._loaders:
                init = os.path.join(base, "__init__" + suffix)
                if os.path.isfile(init):
                    return spec_from_file_location(fullname, init, loader=loader(fullname, init),
                                                   submodule_search_locations=[base])
        for suffix, loader in self._loaders:
            path = base + suffix
            if os.path.isfile(path):
                return spec_from_file_location(fullname, path, loader=loader(fullname, path))
        if folder:  # a namespace package's portion
            spec = ModuleSpec(fullname, None)
            spec.submodule_search_locations = [base]
            return spec
        return None


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


# What a counting process is started with instead of PYTHONPATH (read by `enter`).
TOOL_VARIABLE = "OVERRIDES_COUNT_TOOL"  # this checkout, as the process sees it
VIEW_VARIABLE = "OVERRIDES_COUNT_VIEW"  # the side's torch folder, first on the path (optional)
OWN_PATH_VARIABLE = "OVERRIDES_COUNT_OWN_PATH"  # the caller's own PYTHONPATH, in order


def install(tool: str, user: str | None = None, own: tuple = ()) -> None:
    """Find modules in `tool` and the caller's own path entries `own` (bytecode caches used as
    Python would) and in `user` (sources always compiled), and in every folder below them, by
    stat from now on."""
    folders = [(os.path.abspath(user), True)] if user else []
    _install(folders + [(os.path.abspath(folder), False) for folder in (tool, *own)])


def _install(folders: list) -> None:
    """A path hook for `folders` ((folder, compile sources)), first in line."""

    def hook(path: str):
        full = os.path.abspath(path) if path else path
        for folder, compile_sources in folders:
            if full and _under(full, folder):
                return StatFinder(full, compile_sources)
        raise ImportError("not a folder found by stat")

    sys.path_hooks.insert(0, hook)
    for path in list(sys.path_importer_cache):
        if path and any(_under(os.path.abspath(path), folder) for folder, _ in folders):
            del sys.path_importer_cache[path]


def add_user_folder(user: str) -> None:
    """Find modules in the user's folder `user` (and below) by stat from now on, compiling their
    sources: a forked counting child's own folder (forkserver.py), which its server, counting
    nothing of the user's, started without."""
    _install([(os.path.abspath(user), True)])


def enter(tool: str, view: str | None, own_path: str, user: str | None) -> None:
    """Set up a counting process's imports: the finder above, then the path as PYTHONPATH
    would have made it (this checkout, the side's torch folder, the caller's own entries), but
    only now, after the interpreter's start-up imports would have listed those folders."""
    own = tuple(path for path in own_path.split(os.pathsep) if path)
    install(tool, user, own)
    sys.path[0:0] = [tool, *([view] if view else []), *own]
