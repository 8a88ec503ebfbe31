"""Training steps as a subclass author would write them, for `bench.py --step`: a 2-layer MLP
(batch 32, width 256), forward, backward and an SGD update, with its weights as `units.py`'s
metadata subclass (`mlp`, `mlp_fast` with units_fast.py) or as `scaled.py`'s int8 wrapper
subclass (`mlp_int8`); a small CNN whose inputs are fastai-style `images.py` subclasses (`cnn`,
on any device); and each one's plain twin (`plain=True`: the same step on plain tensors)."""
import torch
import torch.nn.functional as F

import images
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


class SmallCNN(torch.nn.Module):
    """Two convolutions and a linear layer: ~40 kernels a step, small enough to be host-bound."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.fc = torch.nn.Linear(32, CLASSES)

    def forward(self, x):
        x = F.relu(self.c1(x))
        x = F.relu(self.c2(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def cnn(plain=False, batch=16, device="cpu"):
    """small CNN (32x32 RGB), inputs as fastai-style TensorImage/TensorCategory (images.py), cross-entropy, SGD"""
    torch.manual_seed(0)
    model = SmallCNN().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, CLASSES, (batch,), device=device)
    if not plain:
        x, y = images.image(x, (32, 32)), images.category(y)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step


def cnn_plain(plain=False, batch=16, device="cpu"):
    """small CNN on plain inputs on both sides (an A/A), cross-entropy, SGD"""
    return cnn(True, batch, device)


DEEP_WIDTHS = (64, 72, 80, 88, 96, 104, 112, 120, 128, 136, CLASSES)


def deep(plain=False, batch=32):
    """10-layer MLP, each layer its own width (20 distinct ops: linear and relu x10), weights as UnitTensor, SGD"""
    torch.manual_seed(0)
    weights = [torch.randn(out, into) * 0.05 for into, out in zip(DEEP_WIDTHS, DEEP_WIDTHS[1:])]
    if not plain:
        weights = [units.UnitTensor(w, "m") for w in weights]
    for w in weights:
        w.requires_grad_()
    x, target = torch.randn(batch, DEEP_WIDTHS[0]), torch.randn(batch, CLASSES)
    opt = torch.optim.SGD(weights, lr=0.01)

    def step():
        opt.zero_grad()
        hidden = x
        for w in weights:
            hidden = F.linear(hidden, w).relu()
        (hidden - target).square().mean().backward()
        opt.step()

    return step
