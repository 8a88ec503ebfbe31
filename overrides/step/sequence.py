"""The step's ops timed where they run: one after another, in the step's own order, each call
read between two clock reads, your copies and the plain twins' in alternation.

Why not each op alone: the Timer core times an op by repeating it, its code and data hot, and
an op of the step runs after other ops, colder. On a DTensor MLP step the ops timed alone summed
to 70% of the step's overhead, the same ops run back to back in the step's order to 91%; on a
torchao int8 step 54% against 83% (benchmarks/README.md, "Real libraries, priced"). So each
sample here is the whole sequence of the step's calls, on their replays' copies (hooks.py), and
each call's time is its own clock reads' difference, less one clock read's undisturbed cost. An
op called several times a step is several entries; its sample is their mean. The sequences of
each version's copies and of its plain twins take turns, in the orders timing.balanced_orders
gives, and each op's figure is the project's headline (the low quantile) of its samples.

The grad mode each call ran in is entered outside its clock reads; the collector is off, as in
the Timer core. A call that raises while warming up is dropped from its sequence, said as its
error. On a CUDA device the ops are timed by the Timer core instead (optable.py): there the
host's cost a call is read with the queue emptied outside the clock, which a sequence would fill.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Hashable, Sequence

import torch

from overrides.clock.timer import clock_ns, paused_gc
from overrides.step.timing import MIN_PAIRS, PROGRESS_EVERY_NS, balanced_orders

WARM_ROUNDS = 5  # each sequence run untimed first: its replays' first calls build caches
TOTAL = "total"  # (TOTAL, index): a sequence's rounds whole
CLOCK_PROBES = 2_000  # back-to-back clock reads, whose low quantile is one read's undisturbed cost


@dataclasses.dataclass(frozen=True)
class Call:
    """One entry of a sequence: the call, the key its time is kept under, its grad mode."""

    key: Hashable
    run: Callable[[], object]
    grad: bool
    in_total: bool = True  # counted in its sequence's round totals (False: a call the other side has none of)


@dataclasses.dataclass(frozen=True)
class Timed:
    """One key's samples (ns a call), or why it was not timed: as a Timer core result reads."""

    samples_ns: tuple[float, ...] = ()
    error: str = ""


def clock_read_ns() -> float:
    """One clock read's undisturbed cost: the low quantile of back-to-back reads' differences."""
    gaps = []
    for _ in range(CLOCK_PROBES):
        start = clock_ns()
        gaps.append(clock_ns() - start)
    gaps.sort()
    return float(gaps[len(gaps) // 50])


def _checked(calls: Sequence[Call], errors: dict) -> list[Call]:
    """`calls` less those that raise (their error kept), each run once."""
    kept = []
    for call in calls:
        if call.key in errors:
            continue
        try:
            with torch.set_grad_enabled(call.grad):
                call.run()
        except Exception as exc:
            errors[call.key] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            continue
        kept.append(call)
    return kept


def _once(calls: list[Call], read_ns: float, totals: dict, counts: dict) -> float:
    for key in counts:
        totals[key], counts[key] = 0.0, 0
    for call in calls:
        with torch.set_grad_enabled(call.grad):
            started = clock_ns()
            call.run()
            elapsed = clock_ns() - started
        totals[call.key] += elapsed - read_ns
        counts[call.key] += 1
    return sum(totals[key] for key in dict.fromkeys(call.key for call in calls if call.in_total))


def time_sequences(sequences: Sequence[Sequence[Call]], time_s: float,
                   progress: Callable[[str], None] | None = None, label: str = "") -> dict:
    """{key: Timed} of every call of `sequences`, each sequence run `time_s` in all, in turns,
    and {(TOTAL, index): Timed} of each sequence's rounds whole (its calls' times added); see
    the module docstring."""
    say = progress or (lambda message: None)
    errors: dict = {}
    checked = [_checked(calls, errors) for calls in sequences]
    checked = [_checked(calls, errors) for calls in checked]  # a key dropped in one sequence is in none
    keys = [dict.fromkeys(call.key for call in calls) for calls in checked]
    samples: dict = {key: [] for found in keys for key in found}
    samples.update({(TOTAL, index): [] for index in range(len(checked))})
    read_ns = clock_read_ns()
    with paused_gc():
        for _ in range(WARM_ROUNDS):
            for calls in checked:
                for call in calls:
                    with torch.set_grad_enabled(call.grad):
                        call.run()
        orders = balanced_orders(len(checked))
        budget_ns = int(time_s * len(checked) * 1e9)
        rounds = 0
        started = next_report = clock_ns()
        while True:
            for index in orders[rounds % len(orders)]:
                totals: dict = {}
                counts = dict.fromkeys(keys[index], 0)
                whole = _once(checked[index], read_ns, totals, counts)
                for key, total in totals.items():
                    samples[key].append(total / counts[key])
                samples[TOTAL, index].append(whole)
            rounds += 1
            now = clock_ns()
            done = now - started >= budget_ns and rounds >= MIN_PAIRS
            if done or now >= next_report:
                say(f"{label}: timing the step's calls in its order, {len(checked)} sequences in turn: {rounds} rounds")
                next_report = now + PROGRESS_EVERY_NS
            if done:
                break
    timed = {key: Timed(tuple(values)) for key, values in samples.items()}
    timed.update({key: Timed(error=why) for key, why in errors.items()})
    return timed
