"""The closure: does the op table account for what the step measured? The table's sum beside
the step's overhead, and the part the ops do not explain sized and, where it can be, named.

What the subclass adds is named beside the sum: the autograd nodes backward runs (`as_subclass`
on a tensor that requires grad records an `aten::alias`, and backward an `AliasBackward0`; both
in the row of the op that made them, as optable.py times each op with its backward), aten ops
the plain step does not run, and ops that could not be replayed (a wrapper without `__tensor_flatten__`). torch.profiler counts, for one step of each, the autograd nodes backward ran and
the outermost aten ops; their difference a step is named here. The profiler counts, it is not
timed, so its own slowness does not matter (it inflates dispatch-bound steps, pytorch#82793).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import os
from typing import Callable, Iterator

from overrides.step.optable import OpRow, table_ci_ns, table_sum_ns

AUTOGRAD_PREFIX = "autograd::engine::evaluate_function: "
# The table plus what is named explains the step's overhead when it is within this fraction of it
# (issue 48's "Done when"); beyond, the output says how much is unexplained.
CLOSED_WITHIN = 0.20


@dataclasses.dataclass(frozen=True)
class Closure:
    """The op table's sum against the measured step overhead, and what else the subclass adds."""

    step_overhead_ns: float
    step_overhead_ci_ns: tuple[float, float]
    table_ns: float  # calls x overhead over the priced ops
    table_ci_ns: tuple[float, float]  # its interval (optable.table_ci_ns)
    not_priced: tuple[tuple[str, int, str], ...]  # (op, calls a step, why) of the ops not timed
    extra_nodes: tuple[tuple[str, int], ...]  # autograd node -> how many more a step than plain
    extra_ops: tuple[tuple[str, int], ...]  # outermost aten op -> how many more a step than plain
    # the same calls run back to back in the step's order, whole (optable.PricedStep): nan where not
    in_order_ns: float = math.nan
    in_order_ci_ns: tuple[float, float] = (math.nan, math.nan)
    # ops with no plain twin (NestedTensor's ragged ones): their dispatch alone a step, not in the
    # sum (their overhead over plain tensors is unknown); nan where there are none
    dispatch_alone_ns: float = math.nan

    @property
    def unexplained_ns(self) -> float:
        return self.step_overhead_ns - self.table_ns

    @property
    def explained(self) -> float:
        """The table's share of the step's overhead (nan where the step measured none)."""
        return self.table_ns / self.step_overhead_ns if self.step_overhead_ns > 0 else math.nan

    @property
    def closed(self) -> bool:
        return abs(self.unexplained_ns) <= CLOSED_WITHIN * abs(self.step_overhead_ns)


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ side prints start and stop lines on stderr's descriptor: hidden."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def profiled_counts(step: Callable[[], object]) -> tuple[collections.Counter, collections.Counter]:
    """(autograd nodes backward ran, outermost aten ops) in one step under torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as recorded:
        step()
    nodes, ops = collections.Counter(), collections.Counter()
    for event in recorded.events():
        if event.name.startswith(AUTOGRAD_PREFIX):
            nodes[event.name[len(AUTOGRAD_PREFIX):]] += 1
        elif event.name.startswith("aten::") and event.cpu_parent is None:
            ops[event.name] += 1
    return nodes, ops


def _more(mine: collections.Counter, plain: collections.Counter) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(((name, mine[name] - plain[name]) for name in set(mine) | set(plain)
                         if mine[name] != plain[name]), key=lambda item: -abs(item[1])))


def close(step_overhead_ns: float, step_overhead_ci_ns: tuple[float, float], rows: tuple[OpRow, ...],
          plain_step: Callable[[], object], subclass_step: Callable[[], object],
          in_order: tuple[float, tuple[float, float]] = (math.nan, (math.nan, math.nan))) -> Closure:
    """The closure of one step pair: the table's sum, the ops not priced, the autograd nodes
    and outermost aten ops your step runs more (or fewer) of than its plain twin, and (`in_order`)
    what the calls cost back to back in the step's order, whole."""
    plain_nodes, plain_ops = profiled_counts(plain_step)
    mine_nodes, mine_ops = profiled_counts(subclass_step)
    not_priced = tuple((r.op, r.calls, r.not_applicable) for r in rows if r.not_applicable and not r.nested)
    alone = [r.calls * r.dispatch_ns for r in rows if r.mine_only and not r.nested and math.isfinite(r.dispatch_ns)]
    return Closure(step_overhead_ns, step_overhead_ci_ns, table_sum_ns(rows), table_ci_ns(rows), not_priced,
                   _more(mine_nodes, plain_nodes), _more(mine_ops, plain_ops), in_order[0], in_order[1],
                   sum(alone) if alone else math.nan)
