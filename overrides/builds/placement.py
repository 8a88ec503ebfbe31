"""Where two builds' shared libraries sit in physical memory, made fair between base and branch.

Why it exists. Caches are physically indexed, so how fast a library's code runs depends on which
physical pages the kernel gave its file, and those pages stay put while the file stays cached:
every separate install of a library carries a fixed "placement" offset of its own. In the
paired A/B, with nothing changed in the code, a virtualenv against its `cp -a` copy (and further
copies) read SubTensor apart by amounts of either sign, and a hard-linked copy (`cp -al`: the
same inode, so the same pages) close to nothing (figures: benchmarks/history.md, 'Docstring
figures'). Two installs of one wheel differ for no reason in the code, by more than the
threshold, and no interval over pairs sees it, because every pair maps the same pages.

What it does, once per comparison:
- Each side imports torch from a *view*: a folder that stands in for the folder torch is
  installed in (site-packages, or the checkout on `sys.path`). Folders that hold a shared
  library or a Python file are real folders in the view; the others (`__pycache__`, headers)
  are one symlink each. Python resolves the view's paths as given, and so does the dynamic
  loader (`$ORIGIN` in torch's RPATH is the view's folder, checked: a library linked from the
  view to a copy was mapped from the copy), so the view decides which file each library is
  mapped from.
- A shared library that is byte-identical on both sides is linked, in both views, to base's
  file: both processes map the same pages, as with `cp -al`, and placement cannot differ.
- A library that differs is the change itself (or another release): its placement cannot be
  matched, only randomised. Before every pair each side gets fresh copies of it, so each pair
  draws a new placement and the interval over pairs carries that luck instead of one fixed
  offset. The copies go on a disk's file system, never tmpfs (`copies_parent`): tmpfs backs a
  file with scattered 4 KB pages where a disk file system (ext4 on this kernel) caches it in
  large folios, and two torch releases compared with the copies on /dev/shm read SubTensor's
  change many times larger than with them on ext4, mapped from each install, or without views
  (benchmarks/gap_probe.py; figures: benchmarks/history.md, 'Docstring figures'): the tmpfs
  copies made an "improvement" of page-backing, which no user's install has. Libraries only a
  GPU runs (CUDA, ROCm, Triton) are left where they are: the benchmark never executes them, and
  copying them would cost seconds per pair.
- Python source files are hard-linked into the views (copied where the view is on another file
  system): real files, not symbolic links, in real folders, so every module's *real* path is the
  view's path and has one length on both sides. While torch imports, `inspect.getmodule`
  caches `os.path.realpath` of every loaded module's file; through symbolic links those were the
  two installs' own paths, and their lengths moved allocations: with nothing changed, two kept
  copies counted apart (Callgrind) when the views linked the Python files, and alike to the
  instruction on every case and seed with the files copied, or with links whose targets had
  paths of one length (figures: benchmarks/history.md, 'Docstring figures'). Copying torch's
  files is quick, a whole site-packages takes seconds, more beside a busy neighbour; hard links
  take a fraction of that. Other files (headers, binaries, `__pycache__`) stay links: nothing
  resolves them.

The two views' paths have the same length, so both sides' strings and stacks stay alike. Linux
only: elsewhere (or when torch cannot be located without importing it) each side imports torch
as it is, and the plan says why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Iterable

from overrides import children
from overrides.builds.keep import SIBLINGS
from overrides.builds.trash import remove_later
from overrides.sides import ROLES, Sides

SIDES = ROLES
_VIEW_NAMES = Sides("a", "b")  # same length: the two import paths stay alike
COMPARE_CHUNK_BYTES = 1 << 20
# Folders that pip fills with packages whose shared libraries torch loads through its RPATH
# (`$ORIGIN/../../nvidia/...`): mirrored whole. Any other folder torch sits in (a checkout) is
# mirrored only under torch/: walking a PyTorch checkout's build tree would take seconds.
_PACKAGE_FOLDERS = ("site-packages", "dist-packages")
# Libraries that only run on a GPU: never executed by a CPU benchmark, and large (libtorch_cuda
# alone is >1 GB), so they are not copied per pair even when they differ.
GPU_ONLY = re.compile(r"cuda|cudnn|nccl|cublas|cufft|curand|cusolver|cusparse|nvrtc|nvjitlink|"
                      r"cupti|nvtx|cufile|nvshmem|triton|hip|rocm|miopen|rccl", re.IGNORECASE)
# Where the views and the per-pair copies go, first that is not tmpfs (see the module doc).
_COPIES_HOME = ("XDG_CACHE_HOME", os.path.join("~", ".cache"))
MEMORY_FILE_SYSTEMS = ("tmpfs", "ramfs")


def is_shared_library(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


@dataclasses.dataclass(frozen=True)
class PlacementPlan:
    """What each side loads from where. Paths of libraries are relative to the import roots."""

    roots: tuple[str, str] | None  # (base, branch) folder torch is imported from; None: no views
    shared: tuple[str, ...] = ()  # byte-identical on both sides: both load base's file
    replaced: tuple[str, ...] = ()  # differ: fresh copies for every pair
    fixed: tuple[str, ...] = ()  # differ, GPU-only: left where they are
    shared_bytes: int = 0
    replaced_bytes: int = 0  # per side
    reason: str = ""  # why there are no views, when roots is None
    # Per side, the folders (relative to its root) that hold a library or a Python source file:
    # the ones a view mirrors as real folders.
    mirrored_dirs: tuple[frozenset, frozenset] = (frozenset(), frozenset())
    torch_only: bool = False  # the views hold torch and its siblings alone (see plan)

    @property
    def active(self) -> bool:
        return self.roots is not None

    def to_dict(self) -> dict:
        return {"views": self.active, "reason": self.reason or None,
                "roots": list(self.roots) if self.roots else None,
                "shared_libraries": len(self.shared), "shared_mb": round(self.shared_bytes / 2**20, 1),
                "replaced_per_pair": list(self.replaced),
                "replaced_mb_per_side": round(self.replaced_bytes / 2**20, 1),
                "fixed": list(self.fixed)}

    def summary(self) -> str:
        """One line for the report: what the placement of libraries could and could not do."""
        if not self.active:
            return f"library placement not matched ({self.reason})"
        text = (f"{len(self.shared)} shared libraries identical on both sides "
                f"({self.shared_bytes / 2**20:,.0f} MB) are loaded by both from one file")
        if self.replaced:
            names = ", ".join(os.path.basename(p) for p in self.replaced[:4])
            more = f" and {len(self.replaced) - 4} more" if len(self.replaced) > 4 else ""
            text += (f"; {len(self.replaced)} that differ ({names}{more}) are copied anew for every "
                     "pair, so their placement is a random effect inside the interval")
        if self.fixed:
            text += f"; {len(self.fixed)} GPU-only libraries that differ are left in place"
        return text


def is_python_source(name: str) -> bool:
    return name.endswith(".py")


def _walk(root: str, torch_dir: str, torch_only: bool = False) -> tuple[dict[str, os.stat_result], set[str]]:
    """What a view of `root` mirrors: every shared library (by path relative to `root`) and every
    Python source file (the same), under torch, its build's sibling packages, and in a
    site-packages folder every package beside it (unless `torch_only`)."""
    tops = [torch_dir] + [os.path.join(root, name) for name in SIBLINGS]
    if os.path.basename(root) in _PACKAGE_FOLDERS and not torch_only:
        tops = [os.path.join(root, name) for name in sorted(os.listdir(root))]
    libraries, sources = {}, set()
    for top in tops:
        if os.path.islink(top):
            continue
        if os.path.isfile(top) and is_python_source(top):  # a module at site-packages' top
            sources.add(os.path.relpath(top, root))
        if not os.path.isdir(top):
            continue
        for folder, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
            for name in files:
                path = os.path.join(folder, name)
                if os.path.islink(path):
                    continue
                if is_shared_library(name):
                    libraries[os.path.relpath(path, root)] = os.stat(path)
                elif is_python_source(name):
                    sources.add(os.path.relpath(path, root))
    return libraries, sources


def same_bytes(a: str, b: str, known: dict | None = None) -> bool:
    """Whether files `a` and `b` hold the same bytes. `known` (see `SameBytesMemo`) remembers
    the answers for files as they stand (device, inode, size, modification and change times):
    two installs of a CUDA wheel share gigabytes of libraries, which would otherwise be read
    whole every comparison, for seconds (figures: benchmarks/history.md, 'Docstring figures')."""
    if os.path.samefile(a, b):
        return True
    stat_a, stat_b = os.stat(a), os.stat(b)
    if stat_a.st_size != stat_b.st_size:
        return False
    key = None
    if known is not None:
        key = "|".join(f"{os.path.realpath(path)}:{st.st_dev}:{st.st_ino}:{st.st_size}:"
                       f"{st.st_mtime_ns}:{st.st_ctime_ns}" for path, st in ((a, stat_a), (b, stat_b)))
        if key in known:
            return known[key]
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            chunk = fa.read(COMPARE_CHUNK_BYTES)
            if chunk != fb.read(COMPARE_CHUNK_BYTES):
                same = False
                break
            if not chunk:
                same = True
                break
    if key is not None:
        known[key] = same
    return same


class SameBytesMemo(dict):
    """same_bytes' answers kept between comparisons, in the user's cache folder (`same-bytes.json`
    under torch-function-overhead/): a file that changes in any way gets a new key. Only the
    MEMO_ENTRIES newest are kept; a lost or damaged file costs one comparison its reads."""

    MEMO_ENTRIES = 4096

    def __init__(self, path: str | None = None):
        super().__init__()
        home = os.environ.get(_COPIES_HOME[0]) or os.path.expanduser(_COPIES_HOME[1])
        self.path = path or os.path.join(home, "torch-function-overhead", "same-bytes.json")
        try:
            with open(self.path, encoding="utf-8") as src:
                self.update({k: bool(v) for k, v in json.load(src).items()})
        except (OSError, ValueError, AttributeError):
            pass
        self._loaded = dict(self)

    def save(self) -> None:
        if dict(self) == self._loaded:
            return
        from overrides.files import write_text_atomic

        kept = dict(list(self.items())[-self.MEMO_ENTRIES:])
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            write_text_atomic(self.path, json.dumps(kept))
        except OSError:
            pass  # a cache: the next comparison reads the files again


def plan(base_torch_dir: str | None, branch_torch_dir: str | None, torch_only: bool = False) -> PlacementPlan:
    """Match the two sides' shared libraries: which are identical, which differ. `torch_only`:
    both views hold torch and its sibling packages alone, even where torch sits in a
    site-packages folder; for a side that is a kept copy (record.sh), whose folder holds nothing
    else: the two views then list the same names, and every other package is imported from each
    interpreter's own site-packages, at the same fixed path on both sides (samepath). A view of a
    whole site-packages against a kept copy's counted SubTensor apart with nothing changed
    (figures: benchmarks/history.md, 'Docstring figures')."""
    if not sys.platform.startswith("linux"):
        return PlacementPlan(None, reason="views are made on Linux only")
    if not base_torch_dir or not branch_torch_dir:
        return PlacementPlan(None, reason="torch's folder could not be found without importing it")
    dirs = (os.path.realpath(base_torch_dir), os.path.realpath(branch_torch_dir))
    roots = tuple(os.path.dirname(d) for d in dirs)
    walked = [_walk(root, d, torch_only) for root, d in zip(roots, dirs)]
    libraries = [found for found, _ in walked]
    shared, replaced, fixed = [], [], []
    shared_bytes = replaced_bytes = 0
    known = SameBytesMemo()
    for rel in sorted(set(libraries[0]) & set(libraries[1])):
        base_path, branch_path = (os.path.join(root, rel) for root in roots)
        if same_bytes(base_path, branch_path, known):
            shared.append(rel)
            shared_bytes += libraries[0][rel].st_size
        elif GPU_ONLY.search(rel):  # by path: triton/'s libraries have plain names
            fixed.append(rel)
        else:
            replaced.append(rel)
            replaced_bytes += max(libraries[0][rel].st_size, libraries[1][rel].st_size)
    known.save()
    return PlacementPlan(roots, tuple(shared), tuple(replaced), tuple(fixed), shared_bytes,
                         replaced_bytes, torch_only=torch_only,
                         mirrored_dirs=tuple(_ancestors(set(found) | sources) for found, sources in walked))


def _ancestors(relpaths: Iterable[str]) -> frozenset:
    dirs = set()
    for rel in relpaths:
        folder = os.path.dirname(rel)
        while folder and folder not in dirs:
            dirs.add(folder)
            folder = os.path.dirname(folder)
    return frozenset(dirs)


class Views:
    """The two views of a plan, on disk for as long as the comparison runs (a context manager)."""

    def __init__(self, placement: PlacementPlan):
        self.plan = placement
        self.folder: str | None = None
        self.paths: Sides[str | None] = Sides(None, None)  # each side's view
        self.copy_seconds = 0.0
        self.verified: list[str] = []  # shared libraries seen mapped from one file by both sides
        self.python_files = 0  # Python sources copied into each view
        self.python_bytes = 0
        self.build_seconds = 0.0  # making both views
        self.failure: str | None = None  # why the views did not do what the plan says
        self._copies: str | None = None
        self.file_system: str | None = None  # what the copies sit on
        if not placement.active:
            return
        parent, self.file_system = copies_parent()
        self.folder = tempfile.mkdtemp(prefix="overrides-views-", dir=parent)
        started = time.monotonic()
        shared = set(placement.shared)
        only = _torch_names(placement.roots) if placement.torch_only else None

        def build(side_root_dirs: tuple) -> tuple[int, int]:
            side, root, dirs = side_root_dirs
            return _mirror(root, os.path.join(self.folder, _VIEW_NAMES.side(side)), root, dirs,
                           lambda rel, own: os.path.join(placement.roots[0], rel) if rel in shared else own,
                           only=only)

        # Both views at once: thousands of links, each a system call that frees the GIL, so two
        # threads take ~0.6x one's time (benchmarks/README.md, 'Where a verdict's seconds go').
        built = children.parallel(build, list(zip(SIDES, placement.roots, placement.mirrored_dirs)), len(SIDES))
        for files, size in built:
            self.python_files = max(self.python_files, files)
            self.python_bytes = max(self.python_bytes, size)
        self.paths = _VIEW_NAMES.map(lambda name: os.path.join(self.folder, name))
        self.build_seconds = time.monotonic() - started

    def __enter__(self) -> "Views":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def for_pair(self, index: int) -> float:
        """Fresh copies of the differing libraries for pair `index` (the previous pair's workers
        must be gone). Returns the seconds it took."""
        if not self.plan.replaced or self.folder is None:
            return 0.0
        started = time.monotonic()
        previous = self._copies
        self._copies = os.path.join(self.folder, f"pair{index}")
        for name, root, view in zip(_VIEW_NAMES, self.plan.roots, self.paths):
            for rel in self.plan.replaced:
                copy = os.path.join(self._copies, name, rel)
                os.makedirs(os.path.dirname(copy), exist_ok=True)
                shutil.copyfile(os.path.join(root, rel), copy)
                _relink(os.path.join(view, rel), copy)
        if previous:
            shutil.rmtree(previous, ignore_errors=True)
        seconds = time.monotonic() - started
        self.copy_seconds += seconds
        return seconds

    def failed(self, why: str) -> None:
        self.failure = why

    @property
    def matched(self) -> bool:
        return self.plan.active and self.failure is None

    def record(self) -> dict:
        """What the comparison's settings say about placement."""
        return dict(self.plan.to_dict(), matched=self.matched, failure=self.failure,
                    verified_shared=self.verified, copy_seconds=round(self.copy_seconds, 2),
                    python_files_copied=self.python_files, copies_on=self.file_system,
                    python_mb_copied=round(self.python_bytes / 2**20, 1),
                    view_seconds=round(self.build_seconds, 2))

    def close(self) -> None:
        """The views are gone from their path at once; their files are removed by a detached
        process (thousands of links: seconds on a busy disk, benchmarks/history.md's
        'Docstring figures'), which this one does not wait for (`trash.remove_later`)."""
        if self.folder:
            remove_later(self.folder)
            self.folder = None


def file_system_of(path: str) -> str:
    """The type of the file system `path` is on (/proc/self/mounts), '?' where unknown."""
    path = os.path.realpath(path)
    found, best = "?", -1
    try:
        with open("/proc/self/mounts", encoding="utf-8") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) < 3:
                    continue
                point = fields[1].replace("\\040", " ")
                inside = path == point or path.startswith(point.rstrip("/") + "/")
                if inside and len(point) > best:
                    found, best = fields[2], len(point)
    except OSError:
        pass
    return found


def copies_parent() -> tuple[str, str]:
    """(folder, its file system type) for the views and the per-pair library copies: the user's
    cache folder, else the temp folder, the first that is not in memory (tmpfs); the temp folder
    anyway when both are, and the record says so."""
    variable, default = _COPIES_HOME
    home = os.path.join(os.environ.get(variable) or os.path.expanduser(default), "torch-function-overhead", "views")
    candidates = [home, tempfile.gettempdir()]
    for folder in candidates:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        kind = file_system_of(folder)
        if os.access(folder, os.W_OK) and kind not in MEMORY_FILE_SYSTEMS:
            return folder, kind
    folder = tempfile.gettempdir()
    return folder, file_system_of(folder)


def _relink(link: str, target: str) -> None:
    """Point `link` at `target`, replacing it in one step."""
    tmp = link + ".relink"
    os.symlink(target, tmp)
    os.replace(tmp, link)


def _torch_names(roots) -> frozenset:
    """torch and its sibling packages, as present in both roots: what a torch-only view holds."""
    names = [{name for name in ("torch", *SIBLINGS) if os.path.exists(os.path.join(root, name))}
             for root in roots]
    return frozenset(names[0] & names[1])


def _place_file(source: str, target: str) -> None:
    """A file of its own at `target` with `source`'s bytes and times: a hard link where both are
    on one file system (no bytes move; its real path is `target`), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _mirror(source: str, view: str, root: str, mirrored_dirs: frozenset, library_target,
            only: frozenset | None = None) -> tuple[int, int]:
    """`view` stands in for `source`: folders in `mirrored_dirs` are real folders in the view,
    others one symlink; in a real folder a library links to `library_target(relpath, own_path)`,
    a Python source file is copied (with its times, so `__pycache__` stays valid) and anything
    else is a link. `only`: the names `source` contributes, none other (the top level only).
    Returns the Python files and bytes copied."""
    os.makedirs(view)
    files = size = 0
    for entry in os.scandir(source):
        if only is not None and entry.name not in only:
            continue
        target = os.path.join(view, entry.name)
        rel = os.path.relpath(entry.path, root)
        if entry.is_symlink():
            link = os.readlink(entry.path)
            os.symlink(link if not os.path.isabs(link) else entry.path, target)
        elif entry.is_dir() and rel in mirrored_dirs:
            more = _mirror(entry.path, target, root, mirrored_dirs, library_target)
            files, size = files + more[0], size + more[1]
        elif entry.is_file() and is_shared_library(entry.name):
            os.symlink(library_target(rel, entry.path), target)
        elif entry.is_file() and is_python_source(entry.name):
            _place_file(entry.path, target)
            files, size = files + 1, size + entry.stat().st_size
        else:
            os.symlink(entry.path, target)
    return files, size


def mapped_libraries(pid: int | str = "self") -> dict[str, tuple[int, int]]:
    """Shared libraries a process maps, by file name: (device, inode) of the file it maps."""
    found = {}
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
            for line in maps:
                fields = line.split()
                if len(fields) >= 6 and is_shared_library(os.path.basename(fields[5])):
                    device = tuple(int(part, 16) for part in fields[3].split(":"))
                    found[fields[5]] = (os.makedev(*device), int(fields[4]))
    except OSError:
        pass
    return found


def shared_inodes(base_pid: int, branch_pid: int, names: Iterable[str]) -> dict[str, bool]:
    """For each library file name that either process maps, whether both map it from one file."""
    maps = [mapped_libraries(pid) for pid in (base_pid, branch_pid)]
    by_name = [{os.path.basename(path): inode for path, inode in m.items()} for m in maps]
    return {name: by_name[0].get(name) == by_name[1].get(name)
            for name in names if name in by_name[0] or name in by_name[1]}
