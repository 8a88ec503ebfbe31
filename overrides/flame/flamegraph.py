"""Flamegraphs with py-spy: record a case's hot loop, and draw it.

`record_case` runs `py-spy record --native` on `pyspybench.py CASE` for its raw collapsed
stacks, which the differential view reads, and draws the SVG a person looks at from the same
samples (overrides/flame/flamesvg.py): the hot loop as the root, titled with what it shows. (The
first version ran py-spy twice at once, once per format: two loops on two cores, and a title
that was py-spy's command line with a temp path.)

Beside this module: `pyspy.py` (which py-spy, at what rate), `stacks.py` (the collapsed stacks
read back) and `differential.py` (base against branch, function by function).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
from typing import Mapping

from overrides import ROOT, children
from overrides.errors import UsageError
from overrides.files import write_text_atomic
from overrides.flame import flamesvg
from overrides.flame.hotloop import DEFAULT_SECONDS
from overrides.flame.pyspy import PYSPY_RATE_HZ, find_pyspy
from overrides.flame.stacks import hot_loop_stacks, hot_loop_total, read_folded

PYSPYBENCH = os.path.join(ROOT, "pyspybench.py")
START_TIMEOUT_S = 120  # importing torch under py-spy, on a cold disk


@dataclasses.dataclass(frozen=True)
class Recording:
    case: str
    svg_path: str
    folded_path: str  # the first recording's
    samples: int  # samples inside the hot loop, in the raw recordings together
    seconds: float  # all recordings together
    folded_paths: tuple[str, ...] = ()  # every recording's, one process each

    def __post_init__(self):
        if not self.folded_paths:
            object.__setattr__(self, "folded_paths", (self.folded_path,))


def title(case: str, op: str | None, who: str, python: str, import_path: str | None = None) -> str:
    """A flamegraph's title: what it shows and of which build."""
    return f"{case} · {op or 'torch.add'} · {who} · torch {_torch_version(python, import_path)}"


@functools.lru_cache(maxsize=None)
def _torch_version(python: str, import_path: str | None = None) -> str:
    """Asked once per build (a subprocess), not once per case and side."""
    from overrides.builds.interpreters import Build, probe_interpreter

    return probe_interpreter(Build(python, import_path)).torch_version


def _explain_failure(stderr: str, case: str) -> str:
    """One line saying why a py-spy run failed, and what to do about it."""
    for line in stderr.splitlines():
        if "pyspybench.py: error:" in line:
            return line.split("pyspybench.py: error:", 1)[1].strip()
    lowered = stderr.lower()
    if any(word in lowered for word in ("permission denied", "operation not permitted", "ptrace")):
        return ("py-spy was refused access to the benchmark process it started (ptrace): allow "
                "it with /proc/sys/kernel/yama/ptrace_scope at 0 or 1 (`sysctl "
                "kernel.yama.ptrace_scope=1`), and in a container add CAP_SYS_PTRACE "
                "(`docker run --cap-add SYS_PTRACE`)")
    last = [line for line in stderr.strip().splitlines() if line.strip()]
    return f"py-spy failed on {case}: {last[-1] if last else 'no message'}"


def recording_paths(folded_path: str, recordings: int) -> tuple[str, ...]:
    """Where each of `recordings` recordings goes: `NAME.folded`, then `NAME.2.folded`, ..."""
    stem = folded_path[:-len(".folded")] if folded_path.endswith(".folded") else folded_path
    return (folded_path,) + tuple(f"{stem}.{index}.folded" for index in range(2, recordings + 1))


def record_case(python: str, case: str, svg_path: str, folded_path: str, *, op: str | None = None,
                seconds: float = DEFAULT_SECONDS, rate_hz: int = PYSPY_RATE_HZ,
                pyspy: str | None = None, title: str | None = None,
                import_path: str | None = None, recordings: int = 1) -> Recording:
    """Record `case`'s hot loop under `python` into py-spy's collapsed stacks, and draw them as
    an SVG (`flamegraph_svg`) titled `title` (default: the case and op). `import_path`: a folder
    to import torch from first (a kept copy of a build). With `recordings` > 1, that many
    processes one after the other, each for seconds / recordings, into `recording_paths`: the
    differential view takes each function's spread from them; the SVG draws them together.

    Every file is written whole or not at all; a failure raises UsageError with the reason.
    """
    pyspy = pyspy or find_pyspy(python)
    paths = recording_paths(folded_path, recordings)
    stacks: dict[tuple[str, ...], int] = {}
    for path in paths:
        for stack, samples in _record_folded(python, case, path, op=op, seconds=seconds / len(paths),
                                             rate_hz=rate_hz, pyspy=pyspy,
                                             import_path=import_path).items():
            stacks[stack] = stacks.get(stack, 0) + samples
    write_text_atomic(svg_path, flamegraph_svg(stacks, title or f"{case} · {op or 'torch.add'}",
                                               rate_hz))
    return Recording(case, svg_path, folded_path, hot_loop_total(stacks), seconds, paths)


def _record_folded(python: str, case: str, folded_path: str, *, op: str | None, seconds: float,
                   rate_hz: int, pyspy: str, import_path: str | None) -> dict[tuple[str, ...], int]:
    """One py-spy process on the case's hot loop, its raw stacks into `folded_path` (whole or
    not at all); returns them, cleaned."""
    from overrides.builds.interpreters import with_import_path

    env = with_import_path(dict(os.environ), ROOT, import_path)
    os.makedirs(os.path.dirname(os.path.abspath(folded_path)), exist_ok=True)
    partial = folded_path + ".partial"
    # pyspybench imports and warms up unsampled, then hands its hot loop to py-spy.
    command = [python, PYSPYBENCH, case, "--seconds", f"{seconds:g}", "--record", partial,
               "--format", "raw", "--rate", str(rate_hz), "--pyspy", pyspy]
    if op:
        command += ["--op", op]
    # In a process group of its own (overrides/children.py): Ctrl-C kills py-spy and the loop
    # it traces at once, and py-spy never sees the Ctrl-C (it would write half a profile).
    process = children.start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)  # cwd: the user's, for their cases
    failure = None
    try:
        _, stderr = process.communicate(timeout=seconds + START_TIMEOUT_S)
        if process.returncode != 0 or not os.path.exists(partial):
            failure = _explain_failure(stderr, case)
    except subprocess.TimeoutExpired:
        failure = f"py-spy on {case} did not finish within {seconds + START_TIMEOUT_S:.0f} s"
    except BaseException:  # Ctrl-C: nothing half-recorded stays behind
        children.reap(process)
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    finally:
        children.reap(process)
    if failure is None:
        stacks = read_folded(partial)
        if not hot_loop_total(stacks):
            failure = f"py-spy took no sample inside {case}'s hot loop"
    if failure:
        if os.path.exists(partial):
            os.unlink(partial)
        raise UsageError(failure)
    os.replace(partial, folded_path)
    return stacks


# ---------------------------------------------------------------------------------------------
# Pictures (overrides/flame/flamesvg.py draws them)

def flamegraph_svg(stacks: Mapping[tuple[str, ...], int], title: str, rate_hz: int = PYSPY_RATE_HZ) -> str:
    """One build's hot loop as a flamegraph: the loop is the root, one box per call path."""
    loop = hot_loop_stacks(stacks)
    total = sum(loop.values())
    weights = flamesvg.tree_from_stacks(loop)
    return flamesvg.render(
        weights, title,
        f"py-spy --native, {total:,} samples inside the hot loop ({rate_hz} a second); width: share "
        f"of those samples; root: the hot loop, callees below",
        "Python frames yellow, native frames orange-red; a name too long for its box is cut "
        "(the SVG in the report names every box and its samples)",
        lambda path: flamesvg.warm_colour(path[-1]),
        lambda path, weight: f"{path[-1]}: {weight:,.0f} samples ({100 * weight / total:.1f}%)")


