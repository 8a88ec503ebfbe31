"""Factories for the wrapper subclasses PyTorch ships, to run as your own cases.

Issue 45 asked whether every `_make_wrapper_subclass` tensor that comes with torch gets a plain
twin (`CASE@plain`, the baseline its overhead is quoted against) or a said reason, with the
run's exit status 0. Each factory here builds two operands of one class the way its tests
build them; run them from this folder:

    cd benchmarks && python ../bench.py --cases shipped_wrappers:two_tensor shipped_wrappers:fake ...

`FACTORIES` lists those that run as cases (tests/test_twins.py runs each through the twin),
`NOT_CASES` the others and why, and benchmarks/README.md ("A twin like the tensor the subclass
presents") lists what each one's twin is. Modules under `torch.testing._internal` are torch's own test helpers: present in the
wheels, but not an API, so a factory whose class is missing raises, and the run says so.
"""

from __future__ import annotations

import torch

# Operands of the seed's size: one element, so the kernel is negligible beside the dispatch.
# A diagonal's outer shape is (n, n) and a jagged tensor needs rows of different lengths: their
# factories say their own.
X_VALUE, Y_VALUE = 1.0, 2.0


def _plain() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([X_VALUE]), torch.tensor([Y_VALUE])


def two_tensor():
    """TwoTensor: two inner tensors of the outer shape and dtype (torch.testing._internal.two_tensor)."""
    from torch.testing._internal.two_tensor import TwoTensor

    x, y = _plain()
    return TwoTensor(x, x.clone()), TwoTensor(y, y.clone())


def logging_tensor():
    """LoggingTensor: one inner tensor, no __tensor_flatten__, logs every aten op."""
    from torch.testing._internal.logging_tensor import LoggingTensor

    x, y = _plain()
    return LoggingTensor(x), LoggingTensor(y)


def wrapper_subclass():
    """WrapperSubclass (torch.testing._internal.subclasses): one inner tensor, aliasing corrected."""
    from torch.testing._internal.subclasses import WrapperSubclass

    x, y = _plain()
    return WrapperSubclass(x), WrapperSubclass(y)


def constant_metadata():
    """ConstantExtraMetadataTensor (torch.testing._internal.custom_tensor): one inner tensor and a constant."""
    from torch.testing._internal.custom_tensor import ConstantExtraMetadataTensor

    x, y = _plain()
    return ConstantExtraMetadataTensor(x), ConstantExtraMetadataTensor(y)


def plain_out():
    """CustomTensorPlainOut (torch.testing._internal.custom_tensor): two inner tensors, plain results."""
    from torch.testing._internal.custom_tensor import CustomTensorPlainOut

    x, y = _plain()
    return CustomTensorPlainOut(x, x.clone()), CustomTensorPlainOut(y, y.clone())


def custom_sizes():
    """WrapperTensorWithCustomSizes (torch.testing._internal.common_subclass): sizes answered by __torch_dispatch__."""
    from torch.testing._internal.common_subclass import WrapperTensorWithCustomSizes

    x, y = _plain()
    return WrapperTensorWithCustomSizes(x), WrapperTensorWithCustomSizes(y)


def diag_below():
    """DiagTensorBelow (torch.testing._internal.common_subclass): a 1-element diagonal, outer shape (1, 1)."""
    from torch.testing._internal.common_subclass import DiagTensorBelow

    x, y = _plain()
    return DiagTensorBelow(x), DiagTensorBelow(y)


def sparse():
    """SparseTensor (torch.testing._internal.common_subclass): values and indices, dense outside."""
    from torch.testing._internal.common_subclass import SparseTensor

    x, y = _plain()
    return SparseTensor.from_dense(x), SparseTensor.from_dense(y)


def nested_jagged():
    """torch.nested's jagged NestedTensor: rows of 1 and 2 elements, outer shape (2, j1)."""
    rows = [torch.tensor([X_VALUE]), torch.tensor([X_VALUE, Y_VALUE])]
    x = torch.nested.nested_tensor(rows, layout=torch.jagged)
    return x, x.clone()


def fake():
    """FakeTensor: made under a FakeTensorMode (no data; each op runs its meta function)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        return torch.tensor([X_VALUE]), torch.tensor([Y_VALUE])


def functional():
    """FunctionalTensor: wrapped under a FunctionalTensorMode, used after it is left."""
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    x, y = _plain()
    with FunctionalTensorMode():
        return FunctionalTensor.to_functional(x), FunctionalTensor.to_functional(y)


def dtensor():
    """DTensor, replicated on a one-process gloo group (made once, on first use)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    x, y = _plain()
    return distribute_tensor(x, mesh, [Replicate()]), distribute_tensor(y, mesh, [Replicate()])


FACTORIES = ("two_tensor", "logging_tensor", "wrapper_subclass", "constant_metadata", "plain_out",
             "custom_sizes", "diag_below", "sparse", "nested_jagged", "fake", "dtensor")
# Built, twin and all, but no case: what a case times runs outside any mode its factory entered.
NOT_CASES = {"functional": "every op on a FunctionalTensor outside a FunctionalTensorMode raises "
                           "'Attempting to use FunctionalTensor on its own'"}
