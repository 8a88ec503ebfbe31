"""The ops: which torch call is timed on a case's operands.

An op is a Python statement over the names `x`, `y` (a case's operands), `torch` and `F`
(`torch.nn.functional`): one of the named ops below, or your own (`--op "torch.matmul(x, y)"`,
`"x.sum()"`, `"x[0]"`, `"F.linear(x, y)"`), checked here without torch and named by its text. The Timer core pastes the statement, unrolled, into a generated
function, so what is timed is exactly the statement and not a wrapper call around it. The ops
are plain text: this module imports torch only to run one (`statement_namespace`), so names
are checked and listed without torch (see `overrides/cases/casenames.py` for why that matters).
Whether an op makes sense for a case at all (`not_applicable_reason`) is decided here too, before
anything is timed, counted or recorded.
"""

from __future__ import annotations

import ast
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


STATEMENT_NAMES = ("x", "y", "torch", "F")  # what a statement may use: statement_namespace's and the operands
OPERANDS = ("x", "y")
# Characters no named op's name needs but every statement has one of: a call, an index, an
# attribute or an operator. A word without them is a mistyped name, and gets a "did you mean".
_STATEMENT_MARKS = set("().[]+-*/@%<>=~&|^ ")


def all_ops() -> tuple[Op, ...]:
    return tuple(_REGISTRY.values())


def get_op(name: str) -> Op:
    """A named op, or your own statement (any name with a call, index, attribute or operator in
    it: see statement_op)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    named = next((op for op in _REGISTRY.values() if op.stmt == name.strip()), None)
    if named is not None:
        return named  # "x + y" is the op x+y: one figure under one name
    # A bare name or attribute close to a named op ("x.ad") is a typo far more often than a
    # statement; a call or an index ("x.sum()", "x[0]") is a statement.
    if _STATEMENT_MARKS & set(name) and ("(" in name or "[" in name
                                          or not did_you_mean(name, list(_REGISTRY))):
        return statement_op(name)
    raise UsageError(f"unknown op {name!r};{did_you_mean(name, list(_REGISTRY) + ['all'])} "
                     f"valid ops: {', '.join(_REGISTRY)}, all, or a statement over x, y, torch "
                     "and F such as \"torch.matmul(x, y)\"")


def statement_op(text: str) -> Op:
    """Your own statement as an op, named by its text: one Python expression over x and y (the
    case's operands), torch and F, checked here, before torch is imported or anything timed."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise UsageError(f"op {text!r} is not one Python expression ({exc.msg}); write one over x, "
                         "y, torch and F, such as \"torch.matmul(x, y)\" or \"x.sum()\"") from None
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    unknown = sorted(used - set(STATEMENT_NAMES))
    if unknown:
        raise UsageError(f"op {text!r} uses {', '.join(unknown)}; a statement may use only x and y "
                         "(the case's operands), torch and F (torch.nn.functional)")
    if not used & set(OPERANDS):
        raise UsageError(f"op {text!r} uses neither x nor y, so it would time no case;"
                         f"{did_you_mean(text, list(_REGISTRY))} write it over the operands, such as "
                         "\"torch.relu(x)\"")
    return Op(text.strip(), text.strip(), "your statement")


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


def _meta_reason(exc: Exception) -> str | None:
    """n/a for an op a meta tensor cannot run (shapes without data: no value to read), else None."""
    if "meta" in str(exc).lower():
        return f"cannot run on meta tensors ({str(exc).splitlines()[0]})"
    return None


# How a process that could not run an op on a case tells its parent it is n/a, not a failure.
NOT_APPLICABLE_MARK = "n/a: "


def tried_by_running(case: Case, op: Op) -> bool:
    """Whether only running `op` on `case` can tell if it applies: your case, your statement,
    or operands of another shape, dtype or device; a named op on a built-in case declares it."""
    from overrides.cases.casenames import SHAPE_MARK, is_user_spec

    return is_user_spec(case.name) or SHAPE_MARK in case.name or op.name not in _REGISTRY


def not_applicable_reason(case: Case, op: Op) -> str | None:
    """Why `op` makes no sense for `case` (shown as n/a, not a failure), or None if it does.

    The case's own declaration first. Otherwise (a user's case) the op is tried once on fresh
    operands: an operand lacking the attribute or operator the statement uses means the op does
    not apply. Any other error is left for the Timer core to record as a failure.
    """
    declared = case.unbuildable or case.not_applicable_to(op)
    if declared:
        return declared
    try:
        operands = tuple(case.make_operands())
        with case.active():
            run_statement(case.stmt_for(op), *operands)
    except AttributeError as exc:
        owner = getattr(exc, "obj", None)
        if any(owner is operand for operand in operands):
            # a name the statement asks for (`x.detah()`) that no tensor has, close to one its
            # class has, is a typo: said so (an attribute your own code reads is not the op's)
            import torch

            asked = exc.name and f".{exc.name}" in case.stmt_for(op) and not hasattr(torch.Tensor, exc.name)
            near = did_you_mean(exc.name, dir(type(owner))) if asked else ""
            return f"{type(owner).__name__} has no .{exc.name}" + (near.replace(" did you mean ", " (did you mean .")
                                                                   .replace("?", "?)") if near else "") + (
                f"; {case.construction_hint}" if case.construction_hint else "")
    except TypeError as exc:
        if str(exc).startswith("unsupported operand type"):
            return f"no operator: {exc}"
        if any(str(exc).endswith(f"object is not {what}") for what in ("subscriptable", "callable", "iterable")):
            return str(exc).replace("'", "")  # "WithTorchFunction object is not subscriptable"
        return _meta_reason(exc)
    except (RuntimeError, NotImplementedError) as exc:
        return _meta_reason(exc) or (f"{case.raises_not_applicable} ({str(exc).splitlines()[0]})"
                                     if case.raises_not_applicable else None)
    except Exception:  # a real failure: the Timer core records it with the others
        pass
    return None
