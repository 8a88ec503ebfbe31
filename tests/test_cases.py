"""Each case's op gives the plain-tensor answer, in the case's own type."""

import dataclasses

import pytest
import torch

from overrides.cases import ops, registry, seedcases
from overrides.errors import UsageError


@pytest.mark.parametrize("case", seedcases.SEED_CASES, ids=lambda c: c.name)
def test_seed_case_adds_correctly_and_keeps_its_type(case):
    x, y = case.make_operands()
    result = ops.DEFAULT_OP.run(x, y)
    assert type(result) is type(x)
    assert torch.equal(seedcases.unwrap(result), torch.tensor([3.0]))


def test_operand_types_are_what_the_names_say():
    by_name = {c.name: c.make_operands()[0] for c in seedcases.SEED_CASES}
    assert type(by_name["Tensor"]) is torch.Tensor
    assert type(by_name["SubTensor"]) is seedcases.SubTensor
    assert not isinstance(by_name["WithTorchFunction"], torch.Tensor)
    assert isinstance(by_name["SubWithTorchFunction"], torch.Tensor)
    assert "__torch_function__" in vars(seedcases.SubWithTorchFunction)
    assert "__torch_function__" not in vars(seedcases.SubTensor)


def test_unknown_case_lists_the_valid_names():
    with pytest.raises(UsageError, match="valid cases: Tensor, SubTensor"):
        registry.get_case("Tensr")


def test_default_selection_is_the_seed_cases():
    assert registry.resolve_cases(None) == seedcases.SEED_CASES
    assert [c.stem for c in seedcases.SEED_CASES] == ["tensor", "subtensor", "overridden", "suboverridden"]


def test_every_name_checked_without_torch_is_a_case_with_operands():
    # casenames.py says what each case is (no torch), seedcases.py and catalog.py build it: the two
    # lists must name the same cases, in the same order, with the same descriptions.
    from overrides.cases import casenames

    built = registry.all_cases()
    assert [c.name for c in built] == casenames.case_names()
    assert all(c.make_operands is not None for c in built)
    for case in built:
        assert dataclasses.replace(case, make_operands=None, context=None) == casenames.described(case.name)
    assert casenames.resolve(None) == tuple(casenames.described(c.name) for c in seedcases.SEED_CASES)
    assert [c.name for c in casenames.resolve(["all", "m:f"])] == casenames.case_names() + ["m:f"]
    with pytest.raises(UsageError, match="'SubTensor' is named twice"):
        casenames.resolve(["all", "SubTensor"])
