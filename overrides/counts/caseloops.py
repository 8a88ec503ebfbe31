"""A job of cases counted in a forked child (entry.py's `count` role, run by forkserver.py): each
(case, op)'s hot loop between Callgrind's toggles, one profile a repeat; and those profiles read
back into CaseCounts.

How many calls a repeat counts. CALLS_PER_REPEAT (1,000) where a call is cheap, as it always
was: the seed cases and their counts are those of every earlier version at that size. An
expensive op (a quantized F.linear: ~100 us a call natively, far more under valgrind) would
take minutes a repeat, so the warm-up times each target's first turn, uninstrumented, and a
target slower than SLOW_CALL_S a call under valgrind counts fewer calls (CALL_STEPS: 1,000,
200, 50), so that a repeat takes about REPEAT_TARGET_S whatever the op; its warm-up shrinks
alike (WARMUP_TARGET_S). The steps are a factor of 5 apart, and the seed cases lie far below
the first threshold even on a loaded host, so they never change step; an op near a threshold
may count at either of two steps in two runs, which moves its figure by the toggles' cost over
the calls (a few instructions a call, against a count in the hundreds of thousands). Each
repeat's calls are in its dump's entry, and an empty loop of as many calls is counted for each
size used.
"""

from __future__ import annotations

import gc
import json
import math
import os
import time

from overrides.counts.dumps import read_dump, read_total
from overrides.counts.records import CaseCounts

# Repeats per case; the first is dropped, the figure is the minimum of the rest (callgrind.py).
# Each repeat of the four seed cases costs ~2.2 s under valgrind: 7 repeats kept the run above
# the 45 s aim on a busy machine.
DEFAULT_REPEATS = 5
CALLS_PER_REPEAT = 1000  # ~10M instructions for plain tensors: the toggles' cost is lost in it
# Uninstrumented calls before counting. The interpreter re-tries failed specialisations with
# exponential back-off; after 500 calls the second and third repeats still paid ~15
# instructions a call in _Py_Specialize_* that later repeats did not.
WARMUP_CALLS = 5000
# Calls a repeat may count, largest first; each a multiple of the hot loop's unroll (50).
CALL_STEPS = (CALLS_PER_REPEAT, 200, 50)
TIMED_TURNS = 2  # of the warm-up, each timed: the fastest says what a call costs
# A call slower than this under valgrind, uninstrumented, counts fewer calls a repeat: the
# fastest of two timed turns of the warm-up (a turn is UNROLL calls), so that a turn stretched
# by the scheduler on a loaded host (load 10 on 2 CPUs made a 1-ms turn of Tensor read as slow:
# a 1-ms threshold counted some seed cases at 200 calls, and two runs apart) is not taken for a
# slow op. The seed cases take ~20-60 us a call there, ~40-100x below it.
SLOW_CALL_S = 2e-3
REPEAT_TARGET_S = 4.0  # instrumented seconds a repeat aims at, for a slow call
WARMUP_TARGET_S = 10.0  # uninstrumented seconds of warm-up a slow target may take
INSTRUMENTED_FACTOR = 4.0  # instrumented against uninstrumented time a call, under valgrind
FUNCTIONS_KEPT = 400  # per case, by self cost: enough to diff, small enough for a JSON file
STACK_MIN_PER_CALL = 0.05  # call paths below this many instructions a call are not kept


def calls_for(seconds_a_call: float, unroll: int) -> int:
    """The calls a repeat counts for a target whose uninstrumented call took `seconds_a_call`:
    the largest of CALL_STEPS whose instrumented repeat fits REPEAT_TARGET_S, never above
    CALLS_PER_REPEAT while the call is cheaper than SLOW_CALL_S."""
    if seconds_a_call < SLOW_CALL_S:
        return CALLS_PER_REPEAT
    for calls in CALL_STEPS:
        if calls * seconds_a_call * INSTRUMENTED_FACTOR <= REPEAT_TARGET_S:
            return calls
    return max(unroll, CALL_STEPS[-1] // unroll * unroll)


def _a_call(loop, operands, unroll: int, turns: int) -> float:
    """Seconds a call: the fastest of the warm-up's first `turns` turns, each timed (the scheduler
    only ever adds; the first turn also pays valgrind's translation of what it runs first). As
    many turns are timed whatever they read: a warm-up that ran another sequence of calls when a
    turn read slow (under load) laid the cases out otherwise, and two runs counted apart."""
    fastest = math.inf
    for _ in range(turns):
        started = time.perf_counter()
        loop(operands, 1)
        fastest = min(fastest, (time.perf_counter() - started) / unroll)
    return fastest


def serve(channel, spec_json: str) -> None:
    """Build every target, warm up, say ready, wait for instrumentation, count, leave
    (`channel`: entry.Channel; a forked child of forkserver.py)."""
    from overrides.counts.forkserver import JobSpec

    spec = JobSpec.from_dict(json.loads(spec_json))
    import torch

    from overrides.cases import ops, registry
    from overrides.clock.timer import UNROLL, compile_hot_loop

    torch.set_num_threads(1)
    targets = []
    for case_name, op_name in spec.targets:
        case = registry.get_case(case_name)
        op = ops.get_op(op_name)
        loop = compile_hot_loop(case.stmt_for(op), "counted_loop")
        targets.append((case, tuple(case.make_operands()), loop))
    empty = compile_hot_loop("pass", "counted_loop", unroll=1)  # the loop and toggles alone
    sizes = []
    for case, operands, loop in targets:
        with case.active():
            turns = max(1, spec.warmup_calls // UNROLL)
            timed = min(turns, TIMED_TURNS)
            a_call = _a_call(loop, operands, UNROLL, timed)
            calls = calls_for(a_call, UNROLL) if spec.calls == CALLS_PER_REPEAT else spec.calls
            if calls != spec.calls:  # a slow op: as much warm-up as WARMUP_TARGET_S allows
                turns = min(turns, max(timed, int(WARMUP_TARGET_S / a_call) // UNROLL))
            if turns > timed:
                loop(operands, turns - timed)
        sizes.append(calls)
    toggle, toggle_and_dump = torch._C._valgrind_toggle, torch._C._valgrind_toggle_and_dump_stats
    gc.collect()
    gc.disable()  # as when timing: a collection every ~700 allocations moved repeats by 0.3%
    channel.say({"ready": os.getpid(), "calls": sizes})
    channel.wait()  # the parent has switched instrumentation on
    order = []
    for repeat in range(spec.repeats):
        for index, (case, operands, loop) in enumerate(targets):
            with case.active():
                toggle()
                loop(operands, sizes[index] // UNROLL)
                toggle_and_dump()
            order.append(["target", index, repeat, sizes[index]])
        for calls in sorted(set(sizes), reverse=True):
            toggle()
            empty((None, None), calls // UNROLL)
            toggle_and_dump()
            order.append(["empty", -1, repeat, calls])
    channel.say({"dumps": order})  # forkserver's child says what it loaded, and leaves


def read_counts(targets, order: list, dumps: list[str], tree: bool) -> tuple[CaseCounts, ...]:
    """Each target's counts from a child's profiles (`order`: what each dump holds, as the
    child said): per repeat, the loop's total less the empty loop's of as many calls, per call;
    the figure the minimum of repeats 2..n; with `tree`, the call paths of the repeat that gave
    it."""
    per_target: dict[int, list[tuple[int, str, int]]] = {}  # index -> (total, dump, calls) per repeat
    empty: dict[tuple[int, int], int] = {}  # (repeat, calls) -> the empty loop's total
    for entry_, path in zip(order, dumps):
        kind, index, repeat = entry_[:3]
        calls = entry_[3] if len(entry_) > 3 else CALLS_PER_REPEAT
        if kind == "empty":
            empty[(repeat, calls)] = read_total(path)
        else:
            per_target.setdefault(index, []).append((read_total(path), path, calls))
    results = []
    for index, (case, op) in enumerate(targets):
        rows = per_target.get(index, [])
        calls = rows[0][2] if rows else CALLS_PER_REPEAT
        repeats_per_call = tuple((total - empty.get((r, calls), 0)) / calls for r, (total, _, _) in enumerate(rows))
        figure = min(repeats_per_call[1:] or repeats_per_call) if rows else math.nan
        # The functions of the last repeat; the call paths of the repeat that gave the
        # figure, so that they add up to it. Only those dumps are read whole.
        chosen = repeats_per_call.index(figure) if rows else 0
        stacks: dict = {}
        functions: dict = {}
        if rows:
            last = len(rows) - 1
            functions = read_dump(rows[last][1], stacks if tree and chosen == last else None)[1]
            if tree and chosen != last:
                read_dump(rows[chosen][1], stacks)
        top = sorted(functions.items(), key=lambda kv: -kv[1])[:FUNCTIONS_KEPT]
        figure_stacks = {path: value / calls for path, value in stacks.items()
                         if value / calls >= STACK_MIN_PER_CALL}
        results.append(CaseCounts(case, op, figure, repeats_per_call,
                                  {name: value / calls for name, value in top},
                                  None if rows else "no profile", figure_stacks))
    return tuple(results)
