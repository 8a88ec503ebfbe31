"""Library placement: identical libraries loaded from one file, differing ones copied per pair.

The end-to-end tests use real torch: a second install of this interpreter's torch package (its
libraries copied, as two installs of one wheel have them), imported by a virtualenv through a
`.pth` file (tests/conftest.py's second_install), and real A/B workers whose memory maps are
read from /proc.
"""

import os
import shutil
import tempfile
import sys
import time

import pytest

from overrides.ab.config import ABConfig
from overrides.ab.paired import _hash_seed_base, run_ab
from overrides.builds import samepath, placement, trash
from overrides.cases import seedcases
from overrides.cases.ops import DEFAULT_OP

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="views are Linux-only")
TINY = ABConfig(pairs=2, seconds_per_pair=0.3)  # behaviour, not precision


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__)


def test_plan_shares_identical_libraries_and_replaces_differing_ones(tmp_path):
    for side in ("a", "b"):
        (tmp_path / side / "torch" / "lib").mkdir(parents=True)
        (tmp_path / side / "torch" / "__init__.py").write_text("")
        (tmp_path / side / "torch" / "lib" / "libsame.so").write_bytes(b"\x7fELF same")
        (tmp_path / side / "torch" / "lib" / "libtorch_cuda.so").write_bytes(b"gpu " + side.encode())
    (tmp_path / "a" / "torch" / "lib" / "libchanged.so").write_bytes(b"\x7fELF old")
    (tmp_path / "b" / "torch" / "lib" / "libchanged.so").write_bytes(b"\x7fELF new")
    plan = placement.plan(str(tmp_path / "a" / "torch"), str(tmp_path / "b" / "torch"))
    assert plan.shared == ("torch/lib/libsame.so",)
    assert plan.replaced == ("torch/lib/libchanged.so",)
    assert plan.fixed == ("torch/lib/libtorch_cuda.so",)  # GPU-only: never run, not copied

    with placement.Views(plan) as views:
        base_view, branch_view = views.paths
        assert len(base_view) == len(branch_view)  # the two import paths stay alike
        both = [os.path.realpath(os.path.join(v, "torch/lib/libsame.so")) for v in (base_view, branch_view)]
        assert both[0] == both[1] == str(tmp_path / "a" / "torch" / "lib" / "libsame.so")
        copies = []
        for index in range(2):
            views.for_pair(index)
            changed = [os.path.realpath(os.path.join(v, "torch/lib/libchanged.so"))
                       for v in (base_view, branch_view)]
            assert open(changed[0], "rb").read() == b"\x7fELF old"
            assert open(changed[1], "rb").read() == b"\x7fELF new"
            assert not any(path.startswith(str(tmp_path)) for path in changed)  # fresh copies
            copies.append(changed)
        assert copies[0] != copies[1] and not os.path.exists(copies[0][0])  # last pair's removed
        assert open(os.path.join(branch_view, "torch", "__init__.py")).read() == ""
        # Python files are copies inside the view: their real paths are the view's, one length
        # on both sides (inspect caches every module's real path while torch imports)
        for view, side in ((base_view, "a"), (branch_view, "b")):
            source = os.path.join(view, "torch", "__init__.py")
            assert os.path.realpath(source) == source and not os.path.islink(source)
            original = tmp_path / side / "torch" / "__init__.py"
            assert os.stat(source).st_mtime == original.stat().st_mtime  # __pycache__ stays valid
        assert views.record()["python_files_copied"] == 1
        folder = views.folder
    assert not os.path.exists(folder)


def test_which_libraries_are_identical_is_remembered_until_a_file_changes(tmp_path):
    a, b = tmp_path / "a.so", tmp_path / "b.so"
    a.write_bytes(b"\x7fELF same")
    b.write_bytes(b"\x7fELF same")
    memo = placement.SameBytesMemo(str(tmp_path / "memo.json"))
    assert placement.same_bytes(str(a), str(b), memo) and list(memo.values()) == [True]
    memo.save()
    again = placement.SameBytesMemo(str(tmp_path / "memo.json"))
    assert dict(again) == dict(memo)  # kept between comparisons
    # Rewritten with other bytes of the same length: a new key, so read again. (File times move
    # by the kernel's clock tick, a few ms: a rebuild is never that close to the last look.)
    time.sleep(0.05)
    b.write_bytes(b"\x7fELF diff")
    assert not placement.same_bytes(str(b), str(a), again) and not placement.same_bytes(str(a), str(b), again)
    assert sorted(again.values()) == [False, False, True]


def test_against_a_kept_copy_both_views_hold_torch_alone(tmp_path):
    """A kept copy's folder holds torch and its siblings; a site-packages holds every package.
    Views listing different names counted SubTensor up to 222 instructions apart (A/A)."""
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    kept = tmp_path / "label" / "kept"
    for root in (site, kept):
        for package in ("torch", "torchgen"):
            (root / package).mkdir(parents=True)
            (root / package / "__init__.py").write_text("")
    (site / "sympy").mkdir()
    (site / "sympy" / "__init__.py").write_text("")
    (site / "typing_extensions.py").write_text("")
    whole = placement.plan(str(site / "torch"), str(kept / "torch"))
    with placement.Views(whole) as views:
        assert "sympy" in os.listdir(views.paths.base) and "sympy" not in os.listdir(views.paths.branch)
    alone = placement.plan(str(site / "torch"), str(kept / "torch"), torch_only=True)
    with placement.Views(alone) as views:
        listed = [sorted(os.listdir(view)) for view in views.paths]
        assert listed[0] == listed[1] == ["torch", "torchgen"]


def test_no_views_when_torch_cannot_be_located():
    plan = placement.plan(None, "/somewhere/torch")
    assert not plan.active and "could not be found" in plan.summary()


def test_two_installs_of_one_torch_map_the_same_library_pages(second_install, torch_python):
    python, torch_dir = second_install
    outcome = run_ab(torch_python, python, seedcases.SEED_CASES[:1], [DEFAULT_OP], TINY)
    record = outcome.settings.placement
    assert record.views and record.matched, record
    assert record.replaced_per_pair == () and record.shared_libraries >= 5
    # read from both workers' /proc/PID/maps: the big library is one file for both
    assert {"libtorch_cpu.so", "libtorch_python.so"} <= set(record.verified_shared)
    # ... and imported torch from its view, seen at the one fixed path both sides share
    expected = os.path.join(samepath.FIXED_ROOT, "view") if samepath.place(sys.executable).fixed else "overrides-views-"
    assert expected in outcome.branch_run.environment.torch_path


def test_a_changed_library_is_copied_anew_for_every_pair(second_install, torch_python):
    python, torch_dir = second_install
    changed = os.path.join(torch_dir, "lib", "libshm.so")
    original = open(changed, "rb").read()
    try:
        with open(changed, "ab") as library:
            library.write(b"\0" * 64)  # trailing bytes: the loader ignores them, the bytes differ
        outcome = run_ab(torch_python, python, seedcases.SEED_CASES[:1], [DEFAULT_OP], TINY)
    finally:
        with open(changed, "wb") as library:
            library.write(original)
    record = outcome.settings.placement
    assert record.matched, record
    assert record.replaced_per_pair == ("torch/lib/libshm.so",)
    assert record.copies_on not in placement.MEMORY_FILE_SYSTEMS  # tmpfs pages move the clock
    assert "libshm.so" not in record.verified_shared and "libtorch_cpu.so" in record.verified_shared
    assert outcome.settings.pairs == 2 and all(c.ci95_ns for c in outcome.comparisons)


def test_copies_never_go_to_a_memory_file_system_when_a_disk_is_there(monkeypatch, tmp_path):
    if placement.file_system_of(tempfile.gettempdir()) in placement.MEMORY_FILE_SYSTEMS:
        pytest.skip("the temp folder is in memory here: nothing on disk to choose")
    monkeypatch.setenv("XDG_CACHE_HOME", "/dev/shm/overrides-test-cache")
    folder, kind = placement.copies_parent()
    assert placement.file_system_of("/dev/shm") == "tmpfs"
    assert kind not in placement.MEMORY_FILE_SYSTEMS and not folder.startswith("/dev/shm")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert placement.copies_parent()[0].startswith(str(tmp_path))


def test_every_comparison_draws_fresh_layouts():
    seeds = {_hash_seed_base(ABConfig()) for _ in range(5)}
    assert len(seeds) == 5
    assert _hash_seed_base(ABConfig(hash_seed_base=77)) == 77


def test_mapped_libraries_of_this_process_include_torch():
    maps = placement.mapped_libraries()
    assert any(os.path.basename(path) == "libtorch_cpu.so" for path in maps)
    device, inode = maps[next(p for p in maps if p.endswith("libtorch_cpu.so"))]
    assert os.stat(os.path.join(_torch_dir(), "lib", "libtorch_cpu.so")).st_ino == inode


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_two_copies_of_one_torch_at_paths_of_different_lengths_count_the_same(copies_counted_first):
    """Kept copies sit at runs/base/kept and runs/branch/kept: different lengths. Through links
    to the Python files, an A/A of two such copies counted SubTensor -583 instructions a call on
    one seed; through the views' copies of the Python files it counts exactly the same."""
    outcome = copies_counted_first  # conftest.py: the copies, counted under seed 1
    assert outcome.settings.placement.matched, outcome.settings.placement
    assert outcome.settings.instructions.seeds == (1,)
    for c in outcome.comparisons:
        assert c.base_instructions and c.branch_instructions == c.base_instructions, c


def test_views_are_removed_by_a_process_that_outlives_the_comparison_with_what_an_earlier_left(tmp_path):
    """bench.py does not wait at exit for thousands of unlinks: the folder leaves its path at
    once, a detached process removes it, and a folder an earlier remover left long ago goes too."""
    def folder(name: str) -> str:
        path = tmp_path / name / "torch" / "lib"
        path.mkdir(parents=True)
        (path / "libc10.so").write_bytes(b"\0" * 1000)
        return str(tmp_path / name)

    views, stale, recent = folder("overrides-views-a"), folder("overrides-views-b.removing"), folder("overrides-views-c.removing")
    long_ago = time.time() - trash.STALE_S - 60
    os.utime(stale, (long_ago, long_ago))
    trash.remove_later(views)
    assert not os.path.exists(views)  # gone from its path before remove_later returns
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sorted(os.listdir(tmp_path)) != ["overrides-views-c.removing"]:
        time.sleep(0.1)
    assert sorted(os.listdir(tmp_path)) == ["overrides-views-c.removing"]  # too recent: another remover may be on it
    assert os.path.exists(recent)
