"""Is the step the same step every time? A step whose state drifts is said, never timed silently.

A step that keeps something (losses appended to a list, a cache keyed by step, an autograd
graph held alive) or accumulates grads (no `zero_grad`) runs a different step as it goes: the
later samples time more work, or other numbers, than the first. Two views, each robust on a
busy machine because neither reads the clock:
- the live tensors and objects the collector tracks, counted after a collection: a step that
  keeps a tensor per call grows them by one a step, a sound step by nothing at all;
- the grads, seen as backward reaches each leaf tensor that requires grad (a hook on it, for
  the probe only): where a step's first backward finds the leaf's grad already holding values,
  the last step's grads were never zeroed, and this step's add to them. Their norms (the first
  version) did not show it: a step that accumulates shrinks its weights, and the grads with them.
Each is read around PROBE_STEPS steps of one step alone (the plain, then yours), which are also
their warm-up: both steps live in one process, and only a step run alone can be blamed.
"""

from __future__ import annotations

import dataclasses
import gc
from typing import Callable

import torch

PROBE_STEPS = 30  # a step's drift shows within tens of steps; the probe is its warm-up too
# Live tensors (or tracked objects) gained a step, over the probe, past which the step keeps
# something. A sound step gains nothing once warm (its graph and temporaries die with it); one
# that keeps a loss per step gains at least one.
GROWTH_PER_STEP = 0.5
# ... and at least this many in all, so a one-off (a lazily built cache filled once) is no drift.
MIN_GROWTH = 8
# The share of (step, leaf) meetings, after the first step, in which a step's first backward
# found the leaf's grad already holding values, past which the grads accumulate. Zeroed grads:
# none; a step that never zeroes: all. A step that zeroes once and then runs backward over
# several micro-batches (accumulating by design) meets no grad at its first backward.
ACCUMULATED_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the process's state looked like after `steps` steps."""

    steps: int
    tensors: int  # live tensors the collector tracks
    objects: int  # every object it tracks


def _live() -> tuple[list, list]:
    gc.collect()
    objects = gc.get_objects()
    # type(), not isinstance: an object's __class__ property (a deprecated alias) may warn or raise
    return objects, [o for o in objects if issubclass(type(o), torch.Tensor)]


def snapshot(steps: int) -> Snapshot:
    """The state now: a collection first, so that only what is alive is counted."""
    objects, tensors = _live()
    return Snapshot(steps, len(tensors), len(objects))


class _GradWatch:
    """Hooks on every leaf that requires grad: did a step's first backward find a grad there?"""

    def __init__(self):
        self.handles = []
        self.met: dict[int, bool] = {}  # leaf -> whether this step's first meeting found a grad
        self.found = self.meetings = 0
        _, tensors = _live()
        for tensor in tensors:
            try:
                if tensor.is_leaf and tensor.requires_grad:
                    self.handles.append(tensor.register_hook(self._hook(tensor)))
            except Exception:  # a tensor whose attributes cannot be read plainly: not watched
                continue

    def _hook(self, tensor: torch.Tensor):
        key = id(tensor)

        def seen(grad):
            if key not in self.met:
                with torch._C.DisableTorchFunctionSubclass(), torch.no_grad():
                    held = tensor.grad
                    self.met[key] = held is not None and bool(held.detach().ne(0).any())
            return None

        return seen

    def step_done(self, counted: bool) -> None:
        if counted:
            self.found += sum(self.met.values())
            self.meetings += len(self.met)
        self.met = {}

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def probe(step, which: str, before: Snapshot) -> tuple[Snapshot, list[str]]:
    """PROBE_STEPS steps of `step` alone after `before`: the state then, and how it drifted.

    Both snapshots are taken with the grad watch in place: its hooks leave objects behind on
    each leaf (a hooks dict, two a leaf), which counted against the step read a sound step of
    ten weights as "+0.7 live objects a step"."""
    watch = _GradWatch()
    try:
        start = snapshot(before.steps)
        for index in range(PROBE_STEPS):
            step()
            watch.step_done(counted=index > 0)  # the first step meets what the last run left
        after = snapshot(before.steps + PROBE_STEPS)
    finally:
        watch.remove()
    return after, drifted(start, after, which) + accumulated(watch.found, watch.meetings, which)


def check(*steps: tuple[str, Callable]) -> list[str]:
    """Each (name, step) run alone for PROBE_STEPS in turn (their warm-up too), each probe
    starting where the one before it left: one line per drift found. The one drift check of
    every mode (`--step`, `--compare --step`, `--compiled`, `--device`)."""
    before, lines = snapshot(0), []
    for which, step in steps:
        before, found = probe(step, which, before)
        lines += found
    return lines


def drifted(before: Snapshot, after: Snapshot, which: str) -> list[str]:
    """One line where `which` step kept something between the two snapshots (none: it did not)."""
    steps = after.steps - before.steps
    for what, start, end in (("live tensors", before.tensors, after.tensors),
                             ("live objects", before.objects, after.objects)):
        gained = end - start
        if steps > 0 and gained >= max(MIN_GROWTH, GROWTH_PER_STEP * steps):
            return [f"the {which} step drifts: {what} grew from {start:,} to {end:,} over {steps:,} steps "
                    f"(+{gained / steps:.1f} a step): it keeps something each step (a list, a cache, a graph "
                    "held alive); its time grows with the run, so the figures below mix steps"]
    return []


def accumulated(found: int, meetings: int, which: str) -> list[str]:
    """One line where `which` step's backward found grads from the step before (none: it did not)."""
    if meetings and found / meetings > ACCUMULATED_SHARE:
        return [f"the {which} step drifts: {found} of the {meetings} grads its backward wrote to leaf tensors "
                "found the step before's grad still there: they accumulate from step to step (zero_grad "
                "missing?), so the figures below time a changing step"]
    return []
