"""`pyspybench.py --step pkg.module:factory`: your training step as the hot loop py-spy records.

A case's hot loop repeats one statement over its operands; a step is a zero-argument function
your factory returns (overrides/step/factory.py finds it beside you, as `bench.py --step` does).
This builds it once and hands `pyspybench.py` a loop that calls it over and over in a generated
frame named after the step (`hot_loop_steps_mlp`, `hot_loop_steps_mlp_plain` for its plain twin
under `--plain`), so the recording reads `<module>`, the loop, then your step function and
everything it calls: your subclass's `__torch_function__` / `__torch_dispatch__` among them.
It lives in the step wing, not beside the case loops in overrides/flame/: the flame wing sits
below the step wing and may not import it.
"""

from __future__ import annotations

import contextlib

from overrides.flame.hotloop import LOOP_THREADS, HotLoop, frame_name, step_name

# One step a turn: a step is ~0.1-10 ms, so the loop's own cost per turn (~50 ns) is nothing,
# and a 50-step turn of a slow step would overrun --seconds by seconds.
STEP_UNROLL = 1
# Torch's CPU threads while the step is recorded: bench.py --step times it on one (its --threads
# default), with or without --record (hotloop.LOOP_THREADS says why --record needs it).
STEP_THREADS = LOOP_THREADS


def prepare(spec: str, plain: bool, nreps: int | None, seconds: float) -> HotLoop:
    """The hot loop of `spec`'s step (its plain twin's with `plain`); a UsageError, in one line,
    where the factory is missing, takes no `plain`, or either step raises (`build_steps` runs
    both once)."""
    import torch

    from overrides.clock.loops import compile_hot_loop
    from overrides.step.factory import build_steps

    torch.set_num_threads(STEP_THREADS)  # before the factory's first step: see STEP_THREADS
    pair = build_steps(spec)
    step = pair.plain if plain else pair.subclass
    loop = compile_hot_loop("x()", frame_name(step_name(spec, plain)), unroll=STEP_UNROLL)
    return HotLoop(loop, (step, None), contextlib.nullcontext, nreps, seconds, unroll=STEP_UNROLL)
