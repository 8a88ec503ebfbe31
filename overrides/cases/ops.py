"""The ops: which torch call is timed on a case's operands.

An op is a Python statement over the names `x`, `y` (a case's operands), `torch` and `F`
(`torch.nn.functional`). The Timer core pastes the statement, unrolled, into a generated
function, so what is timed is exactly the statement and not a wrapper call around it. The ops
are plain text: this module imports torch only to run one (`statement_namespace`), so names
are checked and listed without torch (see `overrides/cases/casenames.py` for why that matters).
Whether an op makes sense for a case at all (`not_applicable_reason`) is decided here too, before
anything is timed, counted or recorded.
"""

from __future__ import annotations

import dataclasses

from overrides.cases.casenames import Case
from overrides.errors import UsageError, did_you_mean


def statement_namespace() -> dict:
    """Names a statement may use; the Timer core passes them in as fast locals."""
    import torch
    import torch.nn.functional

    return {"torch": torch, "F": torch.nn.functional}


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    stmt: str
    description: str

    def run(self, x, y):
        """Run the statement once and return its value (for correctness checks, not timing)."""
        return run_statement(self.stmt, x, y)


def run_statement(stmt: str, x, y):
    """Evaluate `stmt` once over `x`, `y` in the namespace the Timer core gives it."""
    return eval(stmt, statement_namespace(), {"x": x, "y": y})


DEFAULT_OP = Op("torch.add", "torch.add(x, y)", "the function call the seed benchmark times")

# The same addition through the other ways a user writes it: each enters the C++ argument
# parser by its own route (method table, number protocol), and each checks for overrides.
METHOD_OP = Op("x.add", "x.add(y)", "the same addition as a Tensor method call")
OPERATOR_OP = Op("x+y", "x + y", "the same addition as the + operator (Tensor.__add__)")
# A function written in Python that checks `has_torch_function` itself and, when an operand
# overrides, goes through `handle_torch_function` in torch/overrides.py: the Python-level
# dispatch path. broadcast_tensors (torch.functional) is chosen because its body is that check
# plus one C call, so the figure is the dispatch path and not the function's own work; it is
# variadic, so every operand is checked (the mixed case sees both) and it also takes 8 operands.
PYTHON_FUNCTION_OP = Op("broadcast_tensors", "torch.broadcast_tensors(x, y)",
                        "torch.functional.broadcast_tensors: Python code that checks "
                        "has_torch_function, then one C call")
# Reading an attribute: on a subclass, Tensor's property getters also go through
# __torch_function__ (func is the getter's __get__).
ATTRIBUTE_OP = Op("x.shape", "x.shape", "attribute access (Tensor.shape getter)")

_REGISTRY: dict[str, Op] = {op.name: op for op in (
    DEFAULT_OP, METHOD_OP, OPERATOR_OP, PYTHON_FUNCTION_OP, ATTRIBUTE_OP)}


def all_ops() -> tuple[Op, ...]:
    return tuple(_REGISTRY.values())


def get_op(name: str) -> Op:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UsageError(f"unknown op {name!r};{did_you_mean(name, list(_REGISTRY) + ['all'])} "
                         f"valid ops: {', '.join(_REGISTRY)}, all") from None


def resolve_ops(names: list[str] | None) -> tuple[Op, ...]:
    """Ops for an `--op` list: None means torch.add, `all` every op."""
    if not names:
        return (DEFAULT_OP,)
    if names == ["all"]:
        return all_ops()
    resolved = []
    for name in names:
        op = get_op(name)
        if op in resolved:
            raise UsageError(f"op {name!r} is named twice in --op; name each op once")
        resolved.append(op)
    return tuple(resolved)


def not_applicable_reason(case: Case, op: Op) -> str | None:
    """Why `op` makes no sense for `case` (shown as n/a, not a failure), or None if it does.

    The case's own declaration first. Otherwise (a user's case) the op is tried once on fresh
    operands: an operand lacking the attribute or operator the statement uses means the op does
    not apply. Any other error is left for the Timer core to record as a failure.
    """
    declared = case.not_applicable_to(op)
    if declared:
        return declared
    try:
        operands = tuple(case.make_operands())
        with case.active():
            run_statement(case.stmt_for(op), *operands)
    except AttributeError as exc:
        owner = getattr(exc, "obj", None)
        if any(owner is operand for operand in operands):
            return f"{type(owner).__name__} has no .{exc.name}" + (
                f"; {case.construction_hint}" if case.construction_hint else "")
    except TypeError as exc:
        if str(exc).startswith("unsupported operand type"):
            return f"no operator: {exc}"
    except Exception:  # a real failure: the Timer core records it with the others
        pass
    return None
