"""The whole catalog under every op: the plain-tensor answer, the declared n/a, and modes that
are really active while (and only while) the statement is timed."""

import pytest
import torch
from torch.overrides import _get_current_function_mode
from torch.utils._python_dispatch import _get_current_dispatch_mode

from overrides import single_run
from overrides.cases import catalog, ops, registry, seedcases
from overrides.clock.timer import Target, TimerConfig, time_targets
from overrides.errors import UsageError

PAIRS = [(case, op) for case in registry.all_cases() for op in ops.all_ops()]


def _equal(a, b) -> bool:
    if isinstance(a, (tuple, list)) and not isinstance(a, torch.Size):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    if isinstance(a, torch.Tensor):
        return type(a) is torch.Tensor and type(b) is torch.Tensor and torch.equal(a, b)
    return a == b


def _run(case, op):
    x, y = case.make_operands()
    with case.active():
        return ops.run_statement(case.stmt_for(op), x, y)


@pytest.mark.parametrize("case,op", PAIRS, ids=[f"{c.name}-{o.name}" for c, o in PAIRS])
def test_every_case_and_op_gives_the_plain_tensor_answer(case, op):
    if case.not_applicable_to(op):
        # The declaration must be honest: the op really cannot run on these operands.
        with pytest.raises((AttributeError, TypeError)):
            _run(case, op)
        return
    baseline = registry.get_case(case.baseline)
    assert baseline.make_operands()[0].__class__ in (torch.Tensor, list)  # baselines are plain
    expected = _run(baseline, op)
    got = seedcases.unwrap(_run(case, op))
    assert _equal(got, expected), (got, expected)


def test_the_catalog_is_all_registered_and_the_seed_default_unchanged():
    names = registry.case_names()
    assert names[:4] == ["Tensor", "SubTensor", "WithTorchFunction", "SubWithTorchFunction"]
    for case in catalog.CATALOG_CASES:
        assert registry.get_case(case.name) is case and case.description
    assert registry.resolve_cases(None) == seedcases.SEED_CASES
    assert registry.resolve_cases(["all"]) == registry.all_cases()
    assert len(registry.all_cases()) == len(seedcases.SEED_CASES) + len(catalog.CATALOG_CASES)


def test_each_case_exercises_what_its_name_says():
    by_name = {c.name: c for c in registry.all_cases()}
    with by_name["TorchFunctionMode"].active():
        assert isinstance(_get_current_function_mode(), catalog.ForwardingFunctionMode)
    with by_name["TorchDispatchMode"].active():
        assert isinstance(_get_current_dispatch_mode(), catalog.ForwardingDispatchMode)
    assert _get_current_function_mode() is None and _get_current_dispatch_mode() is None

    wrapped = _run(by_name["WrapperDispatchTensor"], ops.DEFAULT_OP)
    assert type(wrapped) is catalog.WrapperDispatchTensor  # __torch_dispatch__ rewrapped it
    assert type(wrapped.elem) is torch.Tensor
    # The opt-out subclass gets plain Tensors back: its __torch_function__ never ran.
    assert type(_run(by_name["SubWithDisabledTorchFunction"], ops.DEFAULT_OP)) is torch.Tensor
    x, y = by_name["MixedTensorSub"].make_operands()
    assert type(x) is torch.Tensor and type(y) is seedcases.SubWithTorchFunction
    many, _ = by_name["Cat8SubWithTorchFunction"].make_operands()
    assert len(many) == catalog.MANY_OPERANDS
    assert all(type(t) is seedcases.SubWithTorchFunction for t in many)
    assert by_name["Cat8SubWithTorchFunction"].stmt_for(ops.DEFAULT_OP) == "torch.cat(x)"


def test_the_timer_holds_a_mode_only_while_sampling():
    seen = []
    target = Target("mode", "x.append(torch.overrides._get_current_function_mode())",
                    lambda: (seen, None), context=catalog.ForwardingFunctionMode)
    run = time_targets([target], TimerConfig(calls_per_sample=50, samples=20))
    assert run.targets[0].error is None and len(run.targets[0].samples_ns) == 20
    assert len(seen) > 20 * 50  # warm-up, calibration and every timed call
    assert all(isinstance(mode, catalog.ForwardingFunctionMode) for mode in seen)
    assert _get_current_function_mode() is None  # exited after the run


def test_measure_builds_targets_with_the_case_statement_and_mode():
    case = registry.get_case("Cat8SubWithTorchFunction")
    target = single_run.target_for(case, ops.PYTHON_FUNCTION_OP)
    assert target.stmt == "torch.broadcast_tensors(*x)" and target.context is None
    mode_target = single_run.target_for(registry.get_case("TorchDispatchMode"), ops.DEFAULT_OP)
    assert mode_target.context is catalog.ForwardingDispatchMode
    assert mode_target.stmt == "torch.add(x, y)"


def test_ops_resolve_and_reject_unknown_names():
    assert ops.resolve_ops(None) == (ops.DEFAULT_OP,)
    assert [op.name for op in ops.resolve_ops(["all"])] == [
        "torch.add", "x.add", "x+y", "broadcast_tensors", "x.shape"]
    with pytest.raises(UsageError, match="unknown op 'matmul'; valid ops: torch.add"):
        ops.resolve_ops(["matmul"])
    # a name with a call, index or attribute is your statement, unless it is a named op's typo
    assert ops.resolve_ops(["x.sub(y)"])[0].stmt == "x.sub(y)"
    with pytest.raises(UsageError, match="did you mean x.add"):
        ops.resolve_ops(["x.ad"])
    with pytest.raises(UsageError, match="named twice"):
        ops.resolve_ops(["x.add", "x.add"])


def test_many_targets_share_one_run_budget():
    assert single_run.scaled_min_time_s(4, 3.0) == 3.0  # the seed run keeps its 3 s per case
    assert single_run.scaled_min_time_s(40, 3.0) == pytest.approx(single_run.DEFAULT_RUN_BUDGET_S / 40)
    assert single_run.scaled_min_time_s(10_000, 3.0) == single_run.MIN_SCALED_TIME_S
