"""Kept builds: a runnable copy of the torch a label was recorded with, for the one-checkout workflow.

Why it exists. Most contributors have one PyTorch checkout: record base, switch branch, rebuild,
record branch. Two separate runs can only be compared unpaired, where machine drift between the
runs sits in the interval and only changes of several percent get a verdict. If `record.sh`
keeps a copy of the build it measured, `report.sh base branch` can run base's copy and the
branch side by side, paired, like two environments, and count instructions on both.

What is kept: the `torch` package folder the interpreter imports (site-packages or a checkout
on `sys.path`), with `functorch` and `torchgen` when they sit beside it. The copy is made of new
files, never hard links, and symlinks are copied as the files they point to: a rebuild that
rewrites a file in place, or a library symlinked into a build tree, must not change the copy.
The copy is written under a temporary name and renamed when whole; it stops at the first file
that cannot be written (a full disk: shutil.copytree tried every other file first, thousands of
errors, then raised them all as one), and what it wrote is removed. A side then runs the
recorded interpreter with the copy's folder first on its import path (`interpreters.Build`); the views of
`overrides/builds/placement.py` load its libraries from the same pages as the other side's wherever
the two are byte-identical, so a copy carries no placement offset of its own.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from typing import Mapping

KEPT_DIR = "kept"  # runs/LABEL/kept/torch, ...
SIBLINGS = ("functorch", "torchgen")  # packages of a PyTorch build kept beside torch when present
# Room left on the disk after a copy. Below it the copy is skipped with a warning: a full disk
# breaks the user's next build, which matters more than a paired report.
DISK_MARGIN_BYTES = 2 * 2**30
# Above this much in kept copies, record.sh reminds the user how to list and delete them.
KEPT_WARNING_BYTES = 10 * 2**30


@dataclasses.dataclass(frozen=True)
class KeptCopy:
    """What keep() made."""

    root: str  # the folder to put first on the import path
    packages: tuple[str, ...]
    bytes: int
    seconds: float
    source: str  # the torch folder it was copied from

    def entry(self, label_dir: str) -> "Kept":
        """record.json's "kept" entry for this copy (its root relative to the label's folder)."""
        return Kept(root=os.path.relpath(self.root, label_dir), packages=self.packages, bytes=self.bytes,
                    seconds=round(self.seconds, 1), source=self.source)


@dataclasses.dataclass(frozen=True)
class Kept:
    """record.json's "kept" entry: a copy (its folder relative to the label's, what it holds), or
    why there is none: `skipped` (never made), `failed` (made in part, removed), `deleted`
    (`record.sh --clean`, when). A manifest of a record.sh older than kept copies has no entry
    (None where one is read)."""

    root: str | None = None
    packages: tuple[str, ...] = ()
    bytes: int = 0
    seconds: float = 0.0
    source: str = ""
    skipped: str | None = None
    failed: str | None = None
    deleted: str | None = None

    def to_dict(self) -> dict:
        for why in ("skipped", "failed", "deleted"):
            if getattr(self, why) is not None:
                return {why: getattr(self, why)}
        return {"root": self.root, "packages": list(self.packages), "bytes": self.bytes, "seconds": self.seconds,
                "source": self.source}

    @classmethod
    def from_dict(cls, data: Mapping) -> "Kept":
        return cls(root=data.get("root"), packages=tuple(data.get("packages", ())), bytes=data.get("bytes", 0),
                   seconds=data.get("seconds", 0.0), source=data.get("source", ""), skipped=data.get("skipped"),
                   failed=data.get("failed"), deleted=data.get("deleted"))


class DiskShort(Exception):
    """Not enough free disk for the copy (the message says how much is needed)."""


def packages_of(torch_dir: str) -> list[str]:
    """The folders to copy: torch itself and the build's sibling packages that exist."""
    torch_dir = os.path.realpath(torch_dir)
    parent = os.path.dirname(torch_dir)
    found = [torch_dir]
    for name in SIBLINGS:
        path = os.path.join(parent, name)
        if os.path.isdir(path) and os.path.isfile(os.path.join(path, "__init__.py")):
            found.append(path)
    return found


def tree_bytes(path: str) -> int:
    """Bytes of every file under `path`, following symlinks the way the copy will."""
    total = 0
    for folder, _, files in os.walk(path, followlinks=True):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                pass  # a dangling link: the copy skips it too
    return total


def keep(torch_dir: str, label_dir: str) -> KeptCopy:
    """Copy the build whose torch package is `torch_dir` into `label_dir/kept`, replacing an
    earlier copy there. Raises DiskShort when the disk cannot take it with room to spare."""
    sources = packages_of(torch_dir)
    needed = sum(tree_bytes(path) for path in sources)
    os.makedirs(label_dir, exist_ok=True)
    free = shutil.disk_usage(label_dir).free
    if free < needed + DISK_MARGIN_BYTES:
        raise DiskShort(f"keeping a copy of torch needs {needed / 2**30:.1f} GB and leaves less than "
                        f"{DISK_MARGIN_BYTES / 2**30:.0f} GB of the {free / 2**30:.1f} GB free")
    started = time.monotonic()
    final = os.path.join(label_dir, KEPT_DIR)
    partial = final + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        os.makedirs(partial)
        for source in sources:
            copy_tree(source, os.path.join(partial, os.path.basename(source)))
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(partial, final)
    return KeptCopy(final, tuple(os.path.basename(s) for s in sources), needed,
                    time.monotonic() - started, os.path.realpath(torch_dir))


def copy_tree(source: str, target: str) -> None:
    """`source` copied into `target` as new files, symlinks followed (a dangling one skipped,
    as tree_bytes skips it), metadata kept as shutil.copy2 keeps it; the first OSError (a full
    disk, a file gone mid-rebuild) goes up at once, naming its file."""
    def fail(exc: OSError) -> None:
        raise exc

    for folder, _, files in os.walk(source, onerror=fail, followlinks=True):
        into = os.path.join(target, os.path.relpath(folder, source))
        os.makedirs(into, exist_ok=True)
        for name in files:
            path = os.path.join(folder, name)
            if os.path.exists(path):
                shutil.copy2(path, os.path.join(into, name))


def kept_root(label_dir: str, kept: Kept | None) -> str | None:
    """The kept copy's folder, if the entry names one and it is still on disk."""
    root = os.path.join(label_dir, kept.root) if kept is not None and kept.root else None
    return root if root and os.path.isdir(os.path.join(root, "torch")) else None


def why_not_kept(label_dir: str, kept: Kept | None) -> str:
    """Why a label has no usable copy, in words for the report."""
    if kept is None:
        return "it was recorded by a version of record.sh that kept no copy"
    if kept.skipped:
        return f"no copy was kept ({kept.skipped})"
    if kept.deleted:
        return f"its copy was deleted (`record.sh --clean`, {kept.deleted})"
    if kept.failed:
        return f"its copy failed ({kept.failed}) and was removed"
    return f"its copy is gone from {os.path.join(label_dir, kept.root or KEPT_DIR)}"


def status_word(label_dir: str, kept: Kept | None) -> str:
    """The kept copy's state for `record.sh --list`, in a word or two (why_not_kept says more)."""
    if kept is None:
        return "none (older record.sh)"
    if kept.skipped == "recorded with --no-keep":
        return "none (--no-keep)"
    if kept.skipped:
        return "none (not kept)"
    if kept.deleted:
        return "deleted"
    if kept.failed:
        return "none (copy failed)"
    if not os.path.isdir(os.path.join(label_dir, kept.root or KEPT_DIR)):
        return "gone"
    return human(int(kept.bytes))


def remove(label_dir: str) -> int:
    """Delete a label's kept copy; returns the bytes freed."""
    freed = 0
    for name in (KEPT_DIR, KEPT_DIR + ".partial"):
        path = os.path.join(label_dir, name)
        if os.path.isdir(path):
            freed += tree_bytes(path)
            shutil.rmtree(path)
    return freed


def human(size: int) -> str:
    return f"{size / 2**30:.1f} GB" if size >= 2**30 else f"{size / 2**20:,.0f} MB"
