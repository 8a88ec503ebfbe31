"""The ops: which torch call is timed on a case's operands.

An op is a Python statement over the names `x`, `y` (a case's operands), `torch` and `F`
(`torch.nn.functional`). The Timer core pastes the statement, unrolled, into a generated
function, so what is timed is exactly the statement and not a wrapper call around it.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional

from overrides.errors import UsageError

# Names a statement may use; the Timer core passes them in as fast locals.
STATEMENT_NAMESPACE = {"torch": torch, "F": torch.nn.functional}


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    stmt: str
    description: str

    def run(self, x, y):
        """Run the statement once and return its value (for correctness checks, not timing)."""
        return eval(self.stmt, dict(STATEMENT_NAMESPACE), {"x": x, "y": y})


DEFAULT_OP = Op("torch.add", "torch.add(x, y)", "the function call the seed benchmark times")

_REGISTRY: dict[str, Op] = {op.name: op for op in (DEFAULT_OP,)}


def all_ops() -> tuple[Op, ...]:
    return tuple(_REGISTRY.values())


def get_op(name: str) -> Op:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown op {name!r}; valid ops: {', '.join(_REGISTRY)}, all") from None


def resolve_ops(names: list[str] | None) -> tuple[Op, ...]:
    if not names:
        return (DEFAULT_OP,)
    if names == ["all"]:
        return all_ops()
    return tuple(get_op(name) for name in names)
