"""`bench.py --step SPEC --instructions`: a training step counted as the project counts an op.

Why it exists: a step's cost on the clock moves with the machine's load; its instructions do not.
The step is counted by the same machinery as a case (counts/callgrind.py, counts/valgrind.py):
one forked child of a server per hash seed (counts/forkserver.py), running entry.py's `count-step`
role (`serve` below) and speaking the `count` role's protocol (ready, the parent switches
instrumentation on, the dumps in order), with the same fixed environment, empty working folder
and padding, so that two runs under one seed make the same memory layout. Only what is looped differs: both steps of the
factory (built with torch's generator seeded, so both runs build the same data), each run
WARM_STEPS times uninstrumented, then STEPS_PER_REPEAT steps between the switch-on and the dump,
DEFAULT_REPEATS times, the first repeat dropped and the figure the minimum of the rest, an empty
loop of as many calls taken off (callgrind.py's docstring says why each).

Beside it, the user's Python functions a step (`python_calls`): counted in this process by the
project's profiler hook (counts/pyhook.py's Counter), exact, over STEPS_PER_REPEAT steps of each
side after the warm steps, and kept only for functions in the user's folder.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import time
from typing import Callable, Sequence

from overrides.counts import callgrind
from overrides.counts.records import CountRun

# a step target's second half: which of the factory's steps
PLAIN = "plain"
YOURS = "yours"
# Steps between the switch-on and the dump. Under valgrind a step of steps:cnn took ~4.4 s,
# instrumented or not (most of it valgrind translating oneDNN's generated kernels), so its run
# is mostly steps: 2 sides x 5 repeats x 5 steps and 30 warm steps a side took 537 s. Every
# repeat of a seed counts the same in every run (steps:mlp's five repeats, identical between two
# runs), so more steps only divide out what fewer already count exactly.
STEPS_PER_REPEAT = 3
# Uninstrumented steps of each side first: bytecode specialisation, the optimizer's lazy state,
# the allocator's and torch's dispatch caches settle in them. A step runs each of its lines
# once, so 10 steps are 10 runs of every specialising bytecode; a late re-specialisation (its
# back-off) lands in some repeats, and the minimum of repeats 2..n leaves it out.
WARM_STEPS = 10
SEED = 0  # torch's generator before each factory call: both runs and seeds build the same data


# ---------------------------------------------------------------------------------------------
# The worker: runs under valgrind, a forked child (entry.py's `count-step` role), as caseloops.serve does.

def _steps(step: Callable[[], object], steps: int) -> None:
    for _ in range(steps):
        step()


def _nothing() -> None:
    """The empty loop's step: the loop, a call and the toggles alone."""


def serve(channel, spec_json: str) -> None:
    """Build both steps, warm them, say ready, wait for instrumentation, count, leave
    (`channel`: entry.Channel; the spec a forkserver.JobSpec, as callgrind.Job makes it, targets (spec, side))."""
    from overrides.counts.forkserver import JobSpec

    spec = JobSpec.from_dict(json.loads(spec_json))
    import torch

    from overrides.step.factory import build_steps

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    pair = build_steps(spec.targets[0][0])
    steps = [pair.plain if side == PLAIN else pair.subclass for _, side in spec.targets]
    for step in steps:
        _steps(step, spec.warmup_calls)
    toggle, toggle_and_dump = torch._C._valgrind_toggle, torch._C._valgrind_toggle_and_dump_stats
    gc.collect()
    gc.disable()  # as for a case, and as the timing does
    channel.say({"ready": os.getpid()})
    channel.wait()
    order = []
    for repeat in range(spec.repeats):
        for index, step in enumerate(steps):
            toggle()
            _steps(step, spec.calls)
            toggle_and_dump()
            order.append(["target", index, repeat, spec.calls])  # steps a dump: what it is divided by
        toggle()
        _steps(_nothing, spec.calls)
        toggle_and_dump()
        order.append(["empty", -1, repeat, spec.calls])
    channel.say({"dumps": order})  # forkserver's child says what it loaded, and leaves


# ---------------------------------------------------------------------------------------------
# The parent's side

@dataclasses.dataclass(frozen=True)
class FunctionCalls:
    """One function of the user's: its calls and own bytecodes a step on each side (exact: totals
    over the steps counted, divided by them)."""

    function: str  # qualified name (file, relative to the user's folder)
    plain: float
    yours: float
    plain_bytecodes: float = 0.0
    yours_bytecodes: float = 0.0


@dataclasses.dataclass(frozen=True)
class StepCounts:
    """Instructions a step of both sides, per seed, and the user's functions a step."""

    spec: str
    runs: tuple[CountRun, ...]  # one per seed; cases: (spec, "plain") and (spec, "yours")
    functions: tuple[FunctionCalls, ...]
    steps_per_repeat: int
    warm_steps: int
    wall_s: float
    # a step budget's layout variants (budget.LAYOUT_VARIANTS): the same counts, one variant a seed
    variant_runs: tuple[CountRun, ...] = ()

    def figure(self, run: CountRun, side: str) -> float:
        found = run.get(self.spec, side)
        return found.per_call if found is not None else float("nan")

    def per_seed(self) -> list[tuple[int, float, float]]:
        """(seed, plain, yours) instructions a step, per seed counted."""
        return [(run.seed, self.figure(run, PLAIN), self.figure(run, YOURS)) for run in self.runs]

    @property
    def died(self) -> list[str]:
        return [f"seed {run.seed}: {run.died}" for run in self.runs if run.died]


def count_instructions(spec: str, seeds: Sequence[int], say: Callable[[str], None] | None = None,
                       python: str | None = None) -> list[CountRun]:
    """Both steps of `spec` counted in a child of one server per seed (callgrind.count_builds)."""
    return callgrind.count_builds([python or sys.executable], [(spec, PLAIN), (spec, YOURS)], seeds, say=say,
                                  role="count-step", calls=STEPS_PER_REPEAT, warmup_calls=WARM_STEPS)[0]


def count_with_variants(spec: str, seeds: Sequence[int], variants: Sequence[int],
                        say: Callable[[str], None] | None = None) -> tuple[list[CountRun], list[CountRun]]:
    """Both steps under every seed, and again under `variants` (per seed, in order: how many
    unused functions are compiled onto each of your sources, statfinder.LAYOUT_VARIANT_VARIABLE),
    each seed's two jobs children of one server (callgrind.count_served): (the runs, the
    variants' runs)."""
    def job(variant: int) -> callgrind.Job:
        return callgrind.Job(((spec, PLAIN), (spec, YOURS)), variant, role="count-step", calls=STEPS_PER_REPEAT,
                             warmup_calls=WARM_STEPS)

    jobs = {seed: [job(0), job(variant)] for seed, variant in zip(seeds, variants)}
    runs = callgrind.count_served([callgrind.Build(sys.executable)], seeds, jobs, say=say)[0]
    return [pair[0] for pair in runs], [pair[1] for pair in runs]


def _is_under(filename: str, folder: str) -> bool:
    return not filename.startswith("<") and os.path.realpath(filename).startswith(os.path.join(folder, ""))


def side_calls(step: Callable[[], object], user_dir: str, steps: int = STEPS_PER_REPEAT,
               warm_steps: int = WARM_STEPS) -> dict[str, tuple[float, float]]:
    """(calls, own bytecodes) a step of each Python function of the user's (a file under
    `user_dir`) that `step` runs: warm steps first, then `steps` under pyhook's counter."""
    from overrides.counts.pyhook import Counter

    folder = os.path.realpath(user_dir)
    _steps(step, warm_steps)
    counter = Counter([folder, *sys.path], ignore_code=[_steps.__code__],
                      ignore_c=[sys.setprofile, sys.settrace])
    counter.run(lambda: _steps(step, steps))
    return {key: (counter.calls.get(key, 0) / steps, counter.bytecodes.get(key, 0) / steps)
            for key, code in counter.codes.items()
            if _is_under(code.co_filename, folder) and counter.calls.get(key)}


def python_calls(plain: Callable[[], object], subclass: Callable[[], object], user_dir: str,
                 steps: int = STEPS_PER_REPEAT) -> tuple[FunctionCalls, ...]:
    """The user's functions a step on both sides, most calls by yours first."""
    mine, base = side_calls(subclass, user_dir, steps), side_calls(plain, user_dir, steps)
    none = (0.0, 0.0)
    rows = [FunctionCalls(key, base.get(key, none)[0], mine.get(key, none)[0], base.get(key, none)[1],
                          mine.get(key, none)[1]) for key in set(mine) | set(base)]
    return tuple(sorted(rows, key=lambda r: (-r.yours, -r.plain, r.function)))


def count_step(spec: str, seeds: Sequence[int], say: Callable[[str], None] | None = None,
               variants: Sequence[int] = ()) -> StepCounts:
    """The whole count: the user's functions here (a second), then valgrind's processes (with
    `variants`, a step budget's layout variants too: count_with_variants)."""
    import torch

    from overrides.step.factory import build_steps

    started = time.monotonic()
    torch.manual_seed(SEED)
    pair = build_steps(spec)
    functions = python_calls(pair.plain, pair.subclass, pair.user_dir)
    if variants:
        runs, variant_runs = count_with_variants(spec, seeds, variants, say)
    else:
        runs, variant_runs = count_instructions(spec, seeds, say), []
    return StepCounts(spec, tuple(runs), functions, STEPS_PER_REPEAT, WARM_STEPS, time.monotonic() - started,
                      tuple(variant_runs))
