"""NestedTensor (jagged layout) as a variable-length batch: a linear layer over its tokens
(`step`; its plain twin the tokens packed into one tensor) and `pair` for --cases. Its shape has a
ragged dimension, which no plain tensor has: its ops have no plain twin."""
import torch
import torch.nn.functional as F

LENGTHS = (5, 17, 9, 31, 12, 3, 22, 8)
WIDTH = 64


def _tokens():
    torch.manual_seed(0)
    return [torch.randn(n, WIDTH) for n in LENGTHS]


def step(plain=False):
    """a linear layer and relu over a jagged batch of 8 sequences, SGD (plain: the tokens packed)"""
    torch.manual_seed(1)
    w = (torch.randn(WIDTH, WIDTH) * 0.05).requires_grad_()
    tokens = _tokens()
    x = torch.cat(tokens) if plain else torch.nested.nested_tensor(tokens, layout=torch.jagged)
    opt = torch.optim.SGD([w], lr=0.01)

    def run():
        opt.zero_grad()
        out = F.linear(x, w).relu()
        loss = (out if plain else out.values()).square().mean()
        loss.backward()
        opt.step()
        return loss

    return run


def pair():
    t = torch.nested.nested_tensor(_tokens(), layout=torch.jagged)
    return t, t
