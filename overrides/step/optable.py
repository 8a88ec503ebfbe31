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
from overrides.step import kernels
from overrides.step.hooks import ON_A_LEAF, Captured, Replay, first_wrapper, short_op
from overrides.step.kernels import Kernels
from overrides.step.sequence import TOTAL, Call, time_sequences

# Of timing per target, where an op is timed alone (on a CUDA device; an op's own kernels): an op
# timed with its backward through 256x256 weights (~100 us a call) read its overhead to within
# +-50 us at 0.3 s on a loaded host, the cheap ones to within +-1 us.
DEFAULT_OP_TIME_S = 0.5
# Of timing per sequence (sequence.py): each version's calls and their plain twins, in turn. A
# DTensor MLP step's 57 calls take ~1.7 ms a round both ways: ~1,800 rounds, each op's headline
# to within a few hundred ns.
DEFAULT_SEQUENCE_S = 3.0
KERNELS, TWIN_FORWARD = "kernels", "twin forward"  # the two more targets of an op whose kernels are its own
PLAIN = "plain"  # (op, PLAIN, version): the plain twins of a version's op


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
    # The aten work your op runs inside its dispatch beyond its twin's (kernels.py): what ran,
    # "" where it ran the twin's own ops (then own_kernels_ns is exactly 0) or was not looked at
    kernels: str = ""
    own_kernels_ns: float = math.nan  # a call: your op's kernels less the twin's op, forward, grad off
    own_kernels_ci_ns: tuple[float, float] = (math.nan, math.nan)
    redistributes: tuple[str, ...] = ()  # the collectives its dispatch ran (a DTensor redistributing)
    # No plain twin (not_applicable says why): yours timed alone, and the aten work its dispatch
    # runs (kernels_ns, a call), so dispatch_ns is yours less that work; its overhead is unknown
    mine_only: bool = False
    kernels_ns: float = math.nan
    kernels_ci_ns: tuple[float, float] = (math.nan, math.nan)

    @property
    def overhead_ns(self) -> float:
        return self.subclass_ns - self.plain_ns

    @property
    def dispatch_ns(self) -> float:
        """The overhead less your op's own kernels: Python, the library's logic, the wrapping
        (without a twin: your op less the aten work it runs)."""
        if self.mine_only:
            return self.subclass_ns - self.kernels_ns
        return self.overhead_ns - self.own_kernels_ns

    @property
    def dispatch_ci_ns(self) -> tuple[float, float]:
        """The widest the overhead's and the own kernels' intervals allow (yours' and the kernels')."""
        if self.mine_only:
            return (self.subclass_ci_ns[0] - self.kernels_ci_ns[1], self.subclass_ci_ns[1] - self.kernels_ci_ns[0])
        return (self.overhead_ci_ns[0] - self.own_kernels_ci_ns[1], self.overhead_ci_ns[1] - self.own_kernels_ci_ns[0])

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
    seed = torch.ones(out.shape, dtype=out.dtype, device=out.device)
    return None if _backward_dispatches(replay, seed) else seed


def _backward_dispatches(replay: Replay, seed: torch.Tensor) -> bool:
    """Whether the op's backward, on your copies, sends ops through a subclass's dispatch: those
    ops are rows of their own (hooks.py records them in the step's backward), so the op is timed
    forward alone, never twice (MaskedTensor's sum: its backward's expand and unsqueeze)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if first_wrapper(args, kwargs or {}) is not None:
                seen.append(func)
            return func(*args, **(kwargs or {}))

    try:
        out = replay.func(*replay.subclass_args, **replay.subclass_kwargs)
        with Watch(), torch._C.DisableTorchFunctionSubclass():
            torch.autograd.backward(out, seed)
    except Exception:  # the timing says how it fails
        return False
    return bool(seen)


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


@dataclasses.dataclass(frozen=True)
class PricedStep:
    """One step's op rows, and what its calls cost run back to back in its order, whole."""

    rows: tuple[OpRow, ...]
    # your calls' rounds less the plain twins' (each the headline of its round totals), a step;
    # nan where the ops were timed alone (on a CUDA device) or none was timed
    in_order_ns: float = math.nan
    in_order_ci_ns: tuple[float, float] = (math.nan, math.nan)


def price_step(captured: Captured, time_s: float | None = None, threads: int = 1,
               progress: Callable[[str], None] | None = None) -> PricedStep:
    """Every op of `captured`, its calls a step and, where it can be replayed, its overhead a
    call on the step's own operands, in the step's order (sequence.py), split into dispatch and
    your op's own kernels where it runs other aten work than its twin (kernels.py); sorted by
    cost a step, the largest first (n/a last); and the calls' cost in order, whole."""
    versions, results = _price((captured,), time_s, threads, progress, split_kernels=True)
    mine, plain = results.get((TOTAL, 0)), results.get((TOTAL, 1))
    priced = [r for r in versions[0] if not math.isnan(r.cost_ns)]
    if mine is None or plain is None or not mine.samples_ns or not priced:
        return PricedStep(versions[0])
    mine_low, mine_high = stats.quantile_ci95(mine.samples_ns)
    plain_low, plain_high = stats.quantile_ci95(plain.samples_ns)
    return PricedStep(versions[0], stats.headline(mine.samples_ns) - stats.headline(plain.samples_ns),
                      (mine_low - plain_high, mine_high - plain_low))


def price_ops(captured: Captured, time_s: float | None = None, threads: int = 1,
              progress: Callable[[str], None] | None = None) -> tuple[OpRow, ...]:
    """price_step's rows."""
    return price_step(captured, time_s, threads, progress).rows


def _kernel_targets(key: tuple, replay: Replay, named: str) -> tuple[Kernels | None, dict]:
    """(what the op runs inside, the two targets that price it apart: its kernels in sequence and
    the twin's op forward, both grad off), or no targets where it runs the twin's own ops."""
    found = kernels.record(replay)
    if found is None or found.same or found.why_not or not found.ops:
        return found, {}
    device = on_cuda((*replay.plain_args, *replay.plain_kwargs.values()))
    made = {(key, KERNELS): Target(f"{named} its kernels", "x()", lambda: (kernels.in_sequence(found), device),
                                   torch.no_grad)}
    if not replay.mine_only:
        forward = functools.partial(replay.func, *replay.plain_args, **replay.plain_kwargs)
        made[key, TWIN_FORWARD] = Target(f"{named} twin forward", "x()", lambda: (forward, device), torch.no_grad)
    return found, made


def _sequences(captures: Sequence[Captured], replays: list[dict], timed: dict) -> list[list[Call]]:
    """Each version's calls in its step's order (the outermost, replayed ones): yours, then plain."""
    out = []
    for version, captured in enumerate(captures):
        mine, plain = [], []
        for call in captured.calls:
            key = (call.kind, call.op, call.signature)
            if call.nested or version not in timed.get(key, ()):
                continue
            replay = replays[version][key]
            grad = backward_seed(replay)
            mine.append(Call((key, version), _call(replay.func, replay.subclass_args, replay.subclass_kwargs, grad),
                             replay.grad_enabled, in_total=not replay.mine_only))
            if replay.mine_only:  # no twin: yours alone, against its kernels, and in neither round's total
                continue
            plain.append(Call((key, PLAIN, version), _call(replay.func, replay.plain_args, replay.plain_kwargs, grad),
                              replay.grad_enabled))
        out += [mine, plain]
    return out


def price_versions(captures: Sequence[Captured], time_s: float | None = None, threads: int = 1,
                   progress: Callable[[str], None] | None = None,
                   split_kernels: bool = False) -> tuple[tuple[OpRow, ...], ...]:
    """price_ops for each of several versions of a step (`--compare A B --step`): each version's
    calls and their plain twins timed in its step's order, all sequences in turn (sequence.py),
    `time_s` each (DEFAULT_SEQUENCE_S). On a CUDA device each op alone, by the Timer core, `time_s`
    a target (DEFAULT_OP_TIME_S), an op called on the same operands by several versions timed on
    plain tensors once beside each version's. With `split_kernels` (one version), each op's own
    kernels are priced apart from its dispatch, by the Timer core."""
    return _price(captures, time_s, threads, progress, split_kernels)[0]


def _price(captures: Sequence[Captured], time_s: float | None, threads: int, progress: Callable[[str], None] | None,
           split_kernels: bool) -> tuple[tuple[tuple[OpRow, ...], ...], dict]:
    """price_versions's rows, and every timing they came from (sequence.py's totals among them)."""
    rows = [_rows_unpriced(captured) for captured in captures]
    replays = [{(r.kind, r.op, r.signature): r for r in captured.replays} for captured in captures]
    timed: dict[tuple[str, str, str], list[int]] = {}  # op -> the versions that time it
    for version, (found, ops) in enumerate(zip(replays, rows)):
        for key, replay in found.items():
            if (not replay.not_applicable or replay.mine_only) and key in ops:
                timed.setdefault(key, []).append(version)
    on_gpu = any(on_cuda((*replays[v][key].plain_args, *replays[v][key].plain_kwargs.values())) is not None
                 for key, versions in timed.items() for v in versions)
    targets: dict[tuple, Target] = {}  # (op, version, or PLAIN and a version, or a kernels' part) -> its target
    found: dict[tuple, Kernels | None] = {}  # op -> what it runs inside (split_kernels)
    for index, (key, versions) in enumerate(timed.items()):
        named = f"{index}:{short_op(key[1])} [{key[2]}]"
        if on_gpu and replays[versions[0]][key].mine_only:
            for version in versions:
                targets[key, version] = _target(replays[version][key], f"{named} v{version}", plain=False)
        elif on_gpu:
            plain = _target(replays[versions[0]][key], named, plain=True)
            for version in versions:
                targets[key, PLAIN, version] = plain
                targets[key, version] = _target(replays[version][key], f"{named} v{version}", plain=False)
        if split_kernels and len(captures) == 1 and key[1] not in ON_A_LEAF:
            found[key], parts = _kernel_targets(key, replays[0][key], named)
            targets.update(parts)
    results: dict[tuple, object] = {}
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if timed and not on_gpu:
            results.update(time_sequences(_sequences(captures, replays, timed), time_s or DEFAULT_SEQUENCE_S,
                                          progress, f"{len(timed)} ops"))
    finally:
        torch.set_num_threads(previous_threads)
    if targets:
        # On CUDA the host's cost alone: the closure sets it against the step's host overhead.
        run = time_targets(list(dict.fromkeys(targets.values())),
                           TimerConfig(min_time_s=time_s if on_gpu and time_s else DEFAULT_OP_TIME_S,
                                       threads=threads, device_figures=False), progress)
        by_name = {t.name: t for t in run.targets}
        results.update({key: by_name[target.name] for key, target in targets.items()})
    return tuple(_priced(ops, made, version, results, found)
                 for version, (ops, made) in enumerate(zip(rows, replays))), results


def _split(row: OpRow, found: Kernels | None, results: dict, key: tuple) -> OpRow:
    """`row` with its own kernels priced apart (kernels.py), where they were looked at."""
    if found is None or found.why_not:
        return row
    row = dataclasses.replace(row, redistributes=found.redistributes)
    if found.same or not found.ops:  # the twin's own ops: all of the overhead is dispatch
        return dataclasses.replace(row, own_kernels_ns=0.0, own_kernels_ci_ns=(0.0, 0.0))
    ran, twin = results.get((key, KERNELS)), results.get((key, TWIN_FORWARD))
    if ran is None or twin is None or ran.error or twin.error:
        return dataclasses.replace(row, kernels=found.described())
    ran_low, ran_high = stats.quantile_ci95(ran.samples_ns)
    twin_low, twin_high = stats.quantile_ci95(twin.samples_ns)
    return dataclasses.replace(row, kernels=found.described(),
                               own_kernels_ns=stats.headline(ran.samples_ns) - stats.headline(twin.samples_ns),
                               own_kernels_ci_ns=(ran_low - twin_high, ran_high - twin_low))


def _dispatch_alone(row: OpRow, mine, found: Kernels | None, ran) -> OpRow:
    """A row without a plain twin: yours timed, and what its dispatch runs, so its dispatch alone."""
    if mine is None or mine.error or not mine.samples_ns:
        return row
    low, high = stats.quantile_ci95(mine.samples_ns)
    row = dataclasses.replace(row, subclass_ns=stats.headline(mine.samples_ns), subclass_ci_ns=(low, high))
    if found is None or found.why_not:
        return row
    row = dataclasses.replace(row, kernels=found.described(), redistributes=found.redistributes)
    if not found.ops:  # no aten work of its own at all (a metadata query): all of it is dispatch
        return dataclasses.replace(row, kernels_ns=0.0, kernels_ci_ns=(0.0, 0.0))
    if ran is None or ran.error:
        return row
    ran_low, ran_high = stats.quantile_ci95(ran.samples_ns)
    return dataclasses.replace(row, kernels_ns=stats.headline(ran.samples_ns), kernels_ci_ns=(ran_low, ran_high))


def _priced(rows: dict, replays: dict, version: int, results: dict, found: dict) -> tuple[OpRow, ...]:
    """One version's rows with their timings (`results`: (op, version or None, or a kernels'
    part) -> the Timer's), their own kernels apart where `found` has them."""
    priced = {}
    for key, row in rows.items():
        replay = replays.get(key)
        if replay is None:  # nested: the outer call's row holds its cost
            priced[key] = row
            continue
        if replay.mine_only:
            priced[key] = _dispatch_alone(dataclasses.replace(row, not_applicable=replay.not_applicable, mine_only=True),
                                          results.get((key, version)), found.get(key), results.get((key, KERNELS)))
            continue
        if replay.not_applicable:
            priced[key] = dataclasses.replace(row, not_applicable=replay.not_applicable)
            continue
        mine, plain = results[key, version], results[key, PLAIN, version]
        if mine.error or plain.error:
            priced[key] = dataclasses.replace(row, not_applicable=f"its replay raised: {mine.error or plain.error}")
            continue
        mine_low, mine_high = stats.quantile_ci95(mine.samples_ns)
        plain_low, plain_high = stats.quantile_ci95(plain.samples_ns)
        priced[key] = _split(dataclasses.replace(row, twin=replay.twin, subclass_ns=stats.headline(mine.samples_ns),
                                                 plain_ns=stats.headline(plain.samples_ns),
                                                 overhead_ci_ns=(mine_low - plain_high, mine_high - plain_low),
                                                 subclass_ci_ns=(mine_low, mine_high)),
                             found.get(key), results, key)
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
