"""Op by op: each op your step sends through your subclass's hooks, timed on the step's own
operands as your subclass and as plain tensors, times its calls a step, sorted by cost.

Each replay (hooks.Replay) becomes two targets of the Timer core, `op(*your operands)` and
`op(*plain operands)`, timed round-robin with every other op's, under the grad mode the step
ran it in. An op whose output the step's backward runs through (grad on, a floating output with
a grad_fn) is timed with that backward, seeded with ones: the nodes your hook adds to the graph
(`as_subclass` on an output that requires grad: an `AliasBackward0`) cost in backward, and are
your op's cost. Without it, steps:mlp's ops explained ~60% of its overhead and six alias nodes
most of the rest (benchmarks/README.md). An op's overhead a call is the difference of the two headlines; its interval is the
widest the two headlines' intervals allow (yours' low less plain's high, and the reverse), so
it is never narrower than what each side knows. A wrapper subclass's op runs on a copy of it
against the plain twin a case gets (hooks.py). Ops that cannot be replayed (a wrapper nothing can
copy, a replay that raises) are n/a, with the reason, and left out of the sum.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Sequence

import torch

from overrides.clock import stats
from overrides.clock.timer import Target, TimerConfig, time_targets
from overrides.step.hooks import Captured, Replay, short_op

# Of timing per target: twenty ops, forty targets, about 25 s with warm-up. An op timed with its
# backward through 256x256 weights (~100 us a call) read its overhead to within +-50 us at 0.3 s
# on a loaded host, the cheap ones to within +-1 us.
DEFAULT_OP_TIME_S = 0.5


@dataclasses.dataclass(frozen=True)
class OpRow:
    """One op, on one set of operands, as the step called it."""

    kind: str  # __torch_function__ or __torch_dispatch__
    op: str
    signature: str
    calls: int  # a step
    nested: bool  # reached inside another hook's call: its cost is in that call's row
    sites: tuple[str, ...]  # where in your code, most calls first
    subclass_ns: float = math.nan  # a call, on your operands
    plain_ns: float = math.nan  # a call, on the same operands as plain tensors
    overhead_ci_ns: tuple[float, float] = (math.nan, math.nan)
    not_applicable: str = ""  # why it was not timed
    subclass_ci_ns: tuple[float, float] = (math.nan, math.nan)  # subclass_ns's 95% interval
    twin: str = ""  # how a wrapper operand's plain twin was made (hooks.Replay.twin), "" without one

    @property
    def overhead_ns(self) -> float:
        return self.subclass_ns - self.plain_ns

    @property
    def cost_ns(self) -> float:
        """What it costs a step beyond plain tensors: calls x overhead (nan where not timed)."""
        return self.calls * self.overhead_ns if not self.not_applicable and not self.nested else math.nan


def _call(func: Callable, args: tuple, kwargs: dict, grad: torch.Tensor | None) -> Callable[[], object]:
    """The op on these operands; with `grad`, its backward too (from its output, seeded with it)."""
    if grad is None:
        return functools.partial(func, *args, **kwargs)

    def forward_backward() -> None:
        out = func(*args, **kwargs)
        with torch._C.DisableTorchFunctionSubclass():  # the engine's nodes, not your hook, as in the step
            torch.autograd.backward(out, grad)

    return forward_backward


def backward_seed(replay: Replay) -> torch.Tensor | None:
    """A plain grad for the op's output where the step's backward runs through it (grad mode on,
    one floating output with a grad_fn), else None: the op is timed forward alone."""
    if not replay.grad_enabled:
        return None
    try:
        out = replay.func(*replay.plain_args, **replay.plain_kwargs)
    except Exception:  # the timing says how it fails
        return None
    if not isinstance(out, torch.Tensor) or out.grad_fn is None or not out.is_floating_point():
        return None
    return torch.ones(out.shape, dtype=out.dtype, device=out.device)


def on_cuda(values) -> torch.Tensor | None:
    """The first CUDA tensor among `values` (nested lists and tuples too), else None. Given to
    the Timer core beside the op (as its unused `y`), it times the op as it times a CUDA op:
    the host's cost a call, the queue emptied outside the clock (overrides/clock/cuda.py)."""
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_cuda:
            return value
        if isinstance(value, (list, tuple)):
            found = on_cuda(value)
            if found is not None:
                return found
    return None


def _target(replay: Replay, name: str, plain: bool) -> Target:
    """The op on your operands or (`plain`) on their plain twins, as a Timer core target."""
    context = None if replay.grad_enabled else torch.no_grad
    grad = backward_seed(replay)
    device = on_cuda((*replay.plain_args, *replay.plain_kwargs.values()))
    args, kwargs = (replay.plain_args, replay.plain_kwargs) if plain else (replay.subclass_args, replay.subclass_kwargs)
    return Target(f"{name} {'plain' if plain else 'yours'}", "x()",
                  lambda: (_call(replay.func, args, kwargs, grad), device), context)


def _rows_unpriced(captured: Captured) -> dict[tuple[str, str, str], OpRow]:
    rows: dict[tuple[str, str, str], OpRow] = {}
    sites: dict[tuple[str, str, str], dict[str, int]] = {}
    for call in captured.calls:
        key = (call.kind, call.op, call.signature)
        counted = sites.setdefault(key, {})
        counted[call.site] = counted.get(call.site, 0) + 1
        old = rows.get(key)
        rows[key] = OpRow(call.kind, call.op, call.signature, (old.calls if old else 0) + 1,
                          call.nested and (old.nested if old else True), ())
    return {key: dataclasses.replace(row, sites=tuple(sorted(sites[key], key=lambda s: -sites[key][s])))
            for key, row in rows.items()}


def price_ops(captured: Captured, time_s: float = DEFAULT_OP_TIME_S, threads: int = 1,
              progress: Callable[[str], None] | None = None) -> tuple[OpRow, ...]:
    """Every op of `captured`, its calls a step and, where it can be replayed, its overhead a
    call on the step's own operands; sorted by cost a step, the largest first (n/a last)."""
    return price_versions((captured,), time_s, threads, progress)[0]


def price_versions(captures: Sequence[Captured], time_s: float = DEFAULT_OP_TIME_S, threads: int = 1,
                   progress: Callable[[str], None] | None = None) -> tuple[tuple[OpRow, ...], ...]:
    """price_ops for each of several versions of a step (`--compare A B --step`), in one
    round-robin of the Timer core: an op called on the same operands (dtype and shape) by
    several versions is timed on plain tensors once, beside each version's, so what the versions
    differ by a call is what their own targets differ by, timed side by side."""
    rows = [_rows_unpriced(captured) for captured in captures]
    replays = [{(r.kind, r.op, r.signature): r for r in captured.replays} for captured in captures]
    timed: dict[tuple[str, str, str], list[int]] = {}  # op -> the versions that time it
    for version, (found, ops) in enumerate(zip(replays, rows)):
        for key, replay in found.items():
            if not replay.not_applicable and key in ops:
                timed.setdefault(key, []).append(version)
    targets: dict[tuple, Target] = {}  # (op, version or None for plain) -> its target
    for index, (key, versions) in enumerate(timed.items()):
        named = f"{index}:{short_op(key[1])} [{key[2]}]"
        targets[key, None] = _target(replays[versions[0]][key], named, plain=True)
        for version in versions:
            targets[key, version] = _target(replays[version][key], f"{named} v{version}", plain=False)
    results = {}
    if targets:
        # On CUDA the host's cost alone: the closure sets it against the step's host overhead.
        run = time_targets(list(targets.values()), TimerConfig(min_time_s=time_s, threads=threads,
                                                               device_figures=False), progress)
        results = {t.name: t for t in run.targets}
    return tuple(_priced(ops, found, version, {k: results[t.name] for k, t in targets.items()})
                 for version, (ops, found) in enumerate(zip(rows, replays)))


def _priced(rows: dict, replays: dict, version: int, results: dict) -> tuple[OpRow, ...]:
    """One version's rows with their timings (`results`: (op, version or None) -> the Timer's)."""
    priced = {}
    for key, row in rows.items():
        replay = replays.get(key)
        if replay is None:  # nested: the outer call's row holds its cost
            priced[key] = row
            continue
        if replay.not_applicable:
            priced[key] = dataclasses.replace(row, not_applicable=replay.not_applicable)
            continue
        mine, plain = results[key, version], results[key, None]
        if mine.error or plain.error:
            priced[key] = dataclasses.replace(row, not_applicable=f"its replay raised: {mine.error or plain.error}")
            continue
        mine_low, mine_high = stats.quantile_ci95(mine.samples_ns)
        plain_low, plain_high = stats.quantile_ci95(plain.samples_ns)
        priced[key] = dataclasses.replace(row, twin=replay.twin, subclass_ns=stats.headline(mine.samples_ns),
                                          plain_ns=stats.headline(plain.samples_ns),
                                          overhead_ci_ns=(mine_low - plain_high, mine_high - plain_low),
                                          subclass_ci_ns=(mine_low, mine_high))
    return tuple(sorted(priced.values(), key=lambda r: (math.isnan(r.cost_ns), -(0 if math.isnan(r.cost_ns)
                                                                                  else r.cost_ns), -r.calls)))


def table_sum_ns(rows: tuple[OpRow, ...]) -> float:
    """What the priced ops cost a step beyond plain tensors, all together."""
    return sum(r.cost_ns for r in rows if not math.isnan(r.cost_ns))


def table_ci_ns(rows: tuple[OpRow, ...]) -> tuple[float, float]:
    """The sum's interval: each priced row's calls x its interval's ends, added (no row's error
    offsets another's, so it is never narrower than the rows say)."""
    priced = [r for r in rows if not math.isnan(r.cost_ns)]
    return (sum(r.calls * r.overhead_ci_ns[0] for r in priced), sum(r.calls * r.overhead_ci_ns[1] for r in priced))


def by_site(rows: tuple[OpRow, ...], captured: Captured) -> list[tuple[str, int, str]]:
    """(call site in your code, hook calls a step there, the ops called there), most calls first."""
    calls: dict[str, dict[str, int]] = {}
    for call in captured.calls:
        ops = calls.setdefault(call.site, {})
        short = short_op(call.op)
        ops[short] = ops.get(short, 0) + 1
    return sorted(((site, sum(ops.values()), ", ".join(f"{op} x{n}" if n > 1 else op for op, n in ops.items()))
                   for site, ops in calls.items()), key=lambda item: -item[1])
