"""Flamegraphs with py-spy: record a case's hot loop, and draw it.

`record_cases` runs `py-spy record --native` on `pyspybench.py CASE ...` for their raw collapsed
stacks, which the differential view reads, and draws the SVG a person looks at from the same
samples (overrides/flame/flamesvg.py): the hot loop as the root, titled with what it shows. (The
first version ran py-spy twice at once, once per format: two loops on two cores, and a title
that was py-spy's command line with a temp path.)

Beside this module: `pyspy.py` (which py-spy, at what rate), `stacks.py` (the collapsed stacks
read back) and `differential.py` (base against branch, function by function).
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import re
import subprocess
import tempfile
from typing import Callable, Mapping, Sequence

from overrides import ROOT, children
from overrides.errors import UsageError, place_error
from overrides.files import write_text_atomic
from overrides.flame import flamesvg
from overrides.flame.hotloop import DEFAULT_SECONDS, frame_name, step_name
from overrides.flame.watch import PACE_MAX_S
from overrides.flame.pyspy import PYSPY_RATE_HZ, find_pyspy
from overrides.flame.stacks import (hook_shares, hot_loop_stacks, hot_loop_total, is_subclass_hook, merged,
                                    read_folded)

PYSPYBENCH = os.path.join(ROOT, "pyspybench.py")
START_TIMEOUT_S = 120  # importing torch under py-spy, on a cold disk
# py-spy's own errors end "(os error N)"; these N are the place it writes to, full or read-only
# (EACCES and EPERM are left out: py-spy says those when ptrace refuses it, see _failure).
_OS_ERROR = re.compile(r"\(os error (\d+)\)")
_FULL_OR_READ_ONLY = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


class RecorderDied(Exception):
    """py-spy, or the process that runs it, was killed or crashed (the out-of-memory killer, a
    signal): no fault of the case, so not a reason to try the cases one by one; the message
    says what died and how, in words (`children.ended`). record.py raises it too for a
    seed's valgrind process that died past its retries: the recording stops, incomplete."""


@dataclasses.dataclass(frozen=True)
class Recording:
    case: str
    svg_path: str
    folded_path: str  # the first recording's
    samples: int  # samples inside the hot loop, in the raw recordings together
    seconds: float  # each recording's
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


def _failure(stderr: str, case: str, output: str) -> UsageError:
    """Why a py-spy run failed, and what to do about it, in one line; a full or read-only
    place for its `output` is said as every such place is (`errors.place_error`)."""
    for line in stderr.splitlines():
        if "pyspybench.py: error:" in line:
            return UsageError(line.split("pyspybench.py: error:", 1)[1].strip())
    code = _OS_ERROR.search(stderr)
    if code and int(code.group(1)) in _FULL_OR_READ_ONLY:
        number = int(code.group(1))
        return place_error(output, OSError(number, os.strerror(number), output),
                           f"py-spy's recording of {case}")
    lowered = stderr.lower()
    if any(word in lowered for word in ("permission denied", "operation not permitted", "ptrace")):
        return UsageError(
            "py-spy was refused access to the benchmark process it started (ptrace): allow "
            "it with /proc/sys/kernel/yama/ptrace_scope at 0 or 1 (`sysctl "
            "kernel.yama.ptrace_scope=1`), and in a container add CAP_SYS_PTRACE "
            "(`docker run --cap-add SYS_PTRACE`)")
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    said = next((line for line in lines if line.startswith("Error:")), lines[-1] if lines else "no message")
    return UsageError(f"py-spy failed on {case}: {said}")  # its error, not the backtrace after it


def _died(returncode: int, case: str) -> str | None:
    """What died and how, in words, where the py-spy run ended by a signal; else None.
    pyspybench.py's process passes the signal N that ended py-spy on as status 128 + N."""
    if returncode < 0:
        return f"the process running py-spy on {case} (pyspybench.py) {children.ended(returncode)}"
    if returncode > 128:
        return f"py-spy (recording {case}) {children.ended(returncode)}"
    return None


def recording_paths(folded_path: str, recordings: int) -> tuple[str, ...]:
    """Where each of `recordings` recordings goes: `NAME.folded`, then `NAME.2.folded`, ..."""
    stem = folded_path[:-len(".folded")] if folded_path.endswith(".folded") else folded_path
    return (folded_path,) + tuple(f"{stem}.{index}.folded" for index in range(2, recordings + 1))


@dataclasses.dataclass(frozen=True)
class Target:
    """One case to record, and where its picture and collapsed stacks go."""

    case: str
    svg_path: str
    folded_path: str
    title: str | None = None  # default: the case and op


def record_case(python: str, case: str, svg_path: str, folded_path: str, *, op: str | None = None,
                seconds: float = DEFAULT_SECONDS, rate_hz: int = PYSPY_RATE_HZ,
                pyspy: str | None = None, title: str | None = None,
                import_path: str | None = None, recordings: int = 1) -> Recording:
    """One case's recordings (`record_cases`)."""
    return record_cases(python, [Target(case, svg_path, folded_path, title)], op=op, seconds=seconds,
                        rate_hz=rate_hz, pyspy=pyspy, import_path=import_path,
                        recordings=recordings)[0]


def record_cases(python: str, targets: Sequence[Target], *, op: str | None = None,
                 seconds: float = DEFAULT_SECONDS, rate_hz: int = PYSPY_RATE_HZ,
                 pyspy: str | None = None, import_path: str | None = None,
                 recordings: int = 1) -> list[Recording]:
    """Record each target's hot loop under `python` into py-spy's collapsed stacks, and draw
    them as an SVG (`flamegraph_svg`). The cases run one after the other in one process, each
    for `seconds`: torch is imported once for all of them (seconds for a CUDA build). With
    `recordings` > 1, that many such processes at once, into `recording_paths`: the
    differential view takes each function's spread from them; the SVG draws them together.
    `import_path`: a folder to import torch from first (a kept copy of a build).

    Every file is written whole or not at all; a failure raises UsageError with the reason
    (for any case: record the cases one by one to keep the others), and py-spy killed or
    crashed raises RecorderDied, saying so."""
    pyspy = pyspy or find_pyspy(python)
    paths = [recording_paths(target.folded_path, recordings) for target in targets]
    # All recordings at once: py-spy samples at its rate in wall time whether or not the loop
    # has a core to itself, and a sample lands where the loop was, so shares do not change
    # when processes share a core; their torch imports overlap instead of adding up.
    recorded = children.parallel(lambda index: _record_folded(
        python, [target.case for target in targets], [case_paths[index] for case_paths in paths],
        op=op, seconds=seconds, rate_hz=rate_hz, pyspy=pyspy, import_path=import_path),
        range(recordings), recordings)
    made = []
    for number, target in enumerate(targets):
        stacks = merged([one[number] for one in recorded])
        write_text_atomic(target.svg_path, flamegraph_svg(
            stacks, target.title or f"{target.case} · {op or 'torch.add'}", rate_hz))
        made.append(Recording(target.case, target.svg_path, target.folded_path,
                              hot_loop_total(stacks), seconds, paths[number]))
    return made


def record_step(python: str, spec: str, svg_path: str, folded_path: str, *, plain: bool = False,
                seconds: float = DEFAULT_SECONDS, rate_hz: int = PYSPY_RATE_HZ, pyspy: str | None = None,
                title: str | None = None, import_path: str | None = None, recordings: int = 1) -> Recording:
    """Your training step (`pyspybench.py --step SPEC`, its plain twin with `plain`) recorded
    under `python` from the current folder, where its factory is found: raw stacks into
    `folded_path` (with `recordings` > 1, that many processes at once, into `recording_paths`,
    as `record_cases` does), and our SVG of them together with your subclass's hooks labelled
    (`flamegraph_svg(hooks=True)`). Failures as `record_cases`'s."""
    name = step_name(spec, plain)
    paths = recording_paths(folded_path, recordings)
    pyspy = pyspy or find_pyspy(python)
    recorded = children.parallel(lambda path: _record_folded(
        python, [name], [path], op=None, seconds=seconds, rate_hz=rate_hz, pyspy=pyspy, import_path=import_path,
        selection=["--step", spec] + (["--plain"] if plain else []))[0], paths, recordings)
    stacks = merged(recorded)
    write_text_atomic(svg_path, flamegraph_svg(stacks, title or f"{name} · a training step", rate_hz, hooks=True))
    return Recording(name, svg_path, folded_path, hot_loop_total(stacks), seconds, paths)


def record_together_or_alone(python: str, targets: Sequence[Target], *,
                             on_recorded: Callable[[list[Recording]], None] | None = None,
                             on_alone: Callable[[int, Target], None] | None = None,
                             on_failed: Callable[[Target, str], None] | None = None,
                             on_together_failed: Callable[[str], None] | None = None,
                             stop_at_first: bool = False, **options) -> list[Recording]:
    """`record_cases` of every target in one process (one torch import); if that fails, each
    target alone, so a failing case (a user case, an op it refuses) costs only itself. Returns
    what was recorded; `on_recorded` hears of each success as it lands, `on_alone` of each lone
    attempt before it starts (`on_together_failed` first, of why all at once failed: a case that
    raised, or the traced process killed), `on_failed` of each case that failed alone. With `stop_at_first`,
    the first target failing alone (or the only one failing) raises: py-spy cannot record here
    at all, or the case is bad. RecorderDied (py-spy killed) is no case's failure: it goes up at
    once, the recordings made before it already heard of. `options` go to record_cases."""
    try:
        made = record_cases(python, targets, **options)
    except UsageError as exc:
        if len(targets) == 1:
            if stop_at_first:
                raise
            if on_failed:
                on_failed(targets[0], str(exc))
            return []
        if on_together_failed:
            on_together_failed(str(exc))
    else:
        if on_recorded:
            on_recorded(made)
        return made
    made = []
    for index, target in enumerate(targets):
        if on_alone:
            on_alone(index, target)
        try:
            one = record_cases(python, [target], **options)
        except UsageError as exc:
            if stop_at_first and index == 0:
                raise
            if on_failed:
                on_failed(target, str(exc))
            continue
        made += one
        if on_recorded:
            on_recorded(one)
    return made


def _record_folded(python: str, cases: Sequence[str], folded_paths: Sequence[str], *,
                   op: str | None, seconds: float, rate_hz: int, pyspy: str,
                   import_path: str | None, selection: Sequence[str] = ()) -> list[dict[tuple[str, ...], int]]:
    """One py-spy process on the cases' hot loops, one after the other; each case's raw stacks
    into its `folded_paths` entry (whole or not at all). Returns them, cleaned. `selection`:
    pyspybench.py's arguments naming what to run, where not the cases (a step: `--step SPEC`)."""
    from overrides.builds.interpreters import with_import_path

    env = with_import_path(dict(os.environ), ROOT, import_path)
    for path in folded_paths:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = folded_paths[0] + ".partial"
    what = cases[0] if len(cases) == 1 else ", ".join(cases)
    # pyspybench imports and warms up unsampled, then hands its hot loops to py-spy.
    command = [python, PYSPYBENCH, *(selection or cases), "--seconds", f"{seconds:g}", "--record", partial,
               "--format", "raw", "--rate", str(rate_hz), "--pyspy", pyspy]
    if op:
        command += ["--op", op]
    timeout = seconds * len(cases) + PACE_MAX_S + START_TIMEOUT_S
    # stderr into a file, not a pipe: the loop py-spy traces holds it too, and a pipe would be
    # read until that loop ends, long after a py-spy that died. Once pyspybench.py's process
    # ends, whatever is left of its group (the loop, or py-spy if that process was killed) is
    # killed. In a process group of its own (overrides/children.py): Ctrl-C kills py-spy and the
    # loop it traces at once, and py-spy never sees the Ctrl-C (it would write half a profile).
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as said:
        process = children.start(command, stdout=subprocess.DEVNULL, stderr=said,
                                 env=env)  # cwd: the user's, for their cases
        failure: Exception | None = None
        try:
            process.wait(timeout=timeout)
            died = _died(process.returncode, what)
            if died:
                failure = RecorderDied(died)
            elif process.returncode != 0 or not os.path.exists(partial):
                said.seek(0)
                failure = _failure(said.read(), what, folded_paths[0])
        except subprocess.TimeoutExpired:
            failure = UsageError(f"py-spy on {what} did not finish within {timeout:.0f} s")
        except BaseException:  # Ctrl-C: nothing half-recorded stays behind
            children.kill_group(process)
            children.reap(process)
            if os.path.exists(partial):
                os.unlink(partial)
            raise
        finally:
            children.kill_group(process)
            children.reap(process)
    try:
        if failure:
            raise failure
        if len(cases) == 1:
            split = {cases[0]: None}
        else:
            split = _split_by_case(partial, cases)
        found = []
        for case, path in zip(cases, folded_paths):
            if split[case] is None:
                stacks = read_folded(partial)
            else:
                write_text_atomic(path, split[case])
                stacks = read_folded(path)
            if not hot_loop_total(stacks):
                raise UsageError(f"py-spy took no sample inside {case}'s hot loop")
            found.append(stacks)
        if len(cases) == 1:
            os.replace(partial, folded_paths[0])
        return found
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _split_by_case(raw_path: str, cases: Sequence[str]) -> dict[str, str]:
    """py-spy's raw lines of one process that ran several cases, by the case whose hot-loop frame
    each goes through (lines in none of them, the harness between loops, are dropped)."""
    marks = {case: frame_name(case) + " (" for case in cases}
    lines: dict[str, list[str]] = {case: [] for case in cases}
    with open(raw_path, encoding="utf-8", errors="replace") as src:
        for line in src:
            frames = line.rpartition(" ")[0].split(";")
            case = next((c for c, mark in marks.items() if any(f.startswith(mark) for f in frames)), None)
            if case is not None:
                lines[case].append(line if line.endswith("\n") else line + "\n")
    return {case: "".join(found) for case, found in lines.items()}


# ---------------------------------------------------------------------------------------------
# Pictures (overrides/flame/flamesvg.py draws them)

def flamegraph_svg(stacks: Mapping[tuple[str, ...], int], title: str, rate_hz: int = PYSPY_RATE_HZ,
                   hooks: bool = False) -> str:
    """One build's hot loop as a flamegraph: the loop is the root, one box per call path. With
    `hooks` (a step's): the subclass's `__torch_function__` / `__torch_dispatch__` frames are
    labelled whatever their width, as the differential labels what the counts name, and the
    footer gives each one's share of the step (or says the step entered none)."""
    loop = hot_loop_stacks(stacks)
    total = sum(loop.values())
    weights = flamesvg.tree_from_stacks(loop)
    footer = ("Python frames yellow, native frames orange-red; a name too long for its box is cut "
              "(the SVG in the report names every box and its samples)")
    if hooks:
        shares = hook_shares(stacks)
        footer = ("labelled (bold where narrow): your subclass's hooks, each one's share of the step with all "
                  "it calls, the op and any backward too (bench.py --step prices it): "
                  + ", ".join(f"{flamesvg.short_name(frame)} ({frame.rsplit(' (', 1)[1][:-1]}) {share:.0%}"
                              for frame, share in shares.items())
                  if shares else "no __torch_function__ or __torch_dispatch__ frame: this step never "
                  "entered a subclass's hook")
    return flamesvg.render(
        weights, title,
        f"py-spy --native, {total:,} samples inside the hot loop ({rate_hz} a second); width: share "
        f"of those samples; root: the hot loop, callees below",
        footer,
        lambda path: flamesvg.warm_colour(path[-1]),
        lambda path, weight: f"{path[-1]}: {weight:,.0f} samples ({100 * weight / total:.1f}%)",
        named=(lambda path: is_subclass_hook(path[-1])) if hooks else (lambda path: False))


