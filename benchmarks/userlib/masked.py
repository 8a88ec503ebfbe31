"""torch.masked's MaskedTensor: values with a mask (`pair` for --cases), and a step that
multiplies masked values by a trained weight (`step`; its grad arrives masked, so no optimizer).
A wrapper subclass with both hooks and no `__tensor_flatten__`: copied by its own clone()."""
import warnings

import torch

warnings.filterwarnings("ignore", message=".*MaskedTensors.*")


def pair():
    torch.manual_seed(0)
    data, mask = torch.randn(64, 64), torch.rand(64, 64) > 0.3
    from torch.masked import masked_tensor
    return masked_tensor(data, mask), masked_tensor(data * 2, mask)


def step(plain=False):
    """masked values times a trained weight, summed, backward (its grad arrives masked: no optimizer)"""
    from torch.masked import masked_tensor
    torch.manual_seed(0)
    data, mask = torch.randn(64, 64), torch.rand(64, 64) > 0.3
    w = torch.randn(64, 64, requires_grad=True)
    x = data * mask if plain else masked_tensor(data, mask)

    def run():
        total = (x * w).sum()
        (total if plain else total.get_data()).backward()
        w.grad = None

    return run
