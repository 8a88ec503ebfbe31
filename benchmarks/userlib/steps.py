"""Training steps as a subclass author would write them, for `bench.py --step`: a 2-layer MLP
(batch 32, width 256), forward, backward and an SGD update, with its weights as `units.py`'s
metadata subclass (`mlp`, `mlp_fast` with units_fast.py) or as `scaled.py`'s int8 wrapper
subclass (`mlp_int8`), and each one's plain twin (`plain=True`: the same step on plain
tensors)."""
import torch
import torch.nn.functional as F

import scaled
import units
import units_fast

WIDTH = 256
CLASSES = 10


def _data(batch):
    torch.manual_seed(0)
    return torch.randn(batch, WIDTH), torch.randn(batch, CLASSES)


def _weights():
    torch.manual_seed(1)
    return torch.randn(WIDTH, WIDTH) * 0.05, torch.randn(CLASSES, WIDTH) * 0.05


def _mlp(make, plain, batch):
    x, target = _data(batch)
    weights = [w if plain else make(w) for w in _weights()]
    for w in weights:
        w.requires_grad_()
    opt = torch.optim.SGD(weights, lr=0.01)
    w1, w2 = weights

    def step():
        opt.zero_grad()
        hidden = F.linear(x, w1).relu()
        loss = (F.linear(hidden, w2) - target).square().mean()
        loss.backward()
        opt.step()

    return step


def mlp(plain=False, batch=32):
    """2-layer MLP, weights as UnitTensor (units.py), SGD"""
    return _mlp(lambda w: units.UnitTensor(w, "m"), plain, batch)


def mlp_fast(plain=False, batch=32):
    """2-layer MLP, weights as the optimised UnitTensor (units_fast.py), SGD"""
    return _mlp(lambda w: units_fast.UnitTensor(w, "m"), plain, batch)


def mlp_int8(plain=False, batch=32):
    """2-layer MLP, int8 weights as ScaledInt8Tensor (scaled.py, frozen), float biases trained by SGD"""
    x, target = _data(batch)
    w1, w2 = (scaled.ScaledInt8Tensor.quantize(w) for w in _weights())
    if plain:  # the same values the wrapper presents, as plain float32
        w1, w2 = w1.dequantize(), w2.dequantize()
    b1, b2 = torch.zeros(WIDTH, requires_grad=True), torch.zeros(CLASSES, requires_grad=True)
    opt = torch.optim.SGD([b1, b2], lr=0.01)

    def step():
        opt.zero_grad()
        hidden = F.linear(x, w1, b1).relu()
        loss = (F.linear(hidden, w2, b2) - target).square().mean()
        loss.backward()
        opt.step()

    return step


def mlp_plain(plain=False, batch=32):
    """2-layer MLP on plain tensors on both sides (an A/A: its overhead is noise), SGD"""
    return _mlp(lambda w: w, True, batch)
