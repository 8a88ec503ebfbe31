"""An int8 weight with a per-tensor scale, presented as float32: a wrapper subclass as
quantization libraries write them (`_make_wrapper_subclass`, `__tensor_flatten__`, a dispatch
table that dequantizes)."""
import torch
from torch.utils._pytree import tree_map


class ScaledInt8Tensor(torch.Tensor):
    """int8 data times a float scale; every op sees float32 of the outer shape."""

    @staticmethod
    def __new__(cls, qdata, scale, dtype=torch.float32):
        return torch.Tensor._make_wrapper_subclass(
            cls, qdata.shape, strides=qdata.stride(), dtype=dtype, device=qdata.device,
            requires_grad=False)

    def __init__(self, qdata, scale, dtype=torch.float32):
        self.qdata = qdata
        self.scale = scale

    @classmethod
    def quantize(cls, t):
        scale = t.abs().amax().clamp(min=1e-8) / 127
        return cls(torch.round(t / scale).to(torch.int8), scale, t.dtype)

    def dequantize(self):
        return self.qdata.to(self.dtype) * self.scale

    def __repr__(self):
        return f"ScaledInt8Tensor(shape={tuple(self.shape)}, scale={float(self.scale):.3g})"

    def __tensor_flatten__(self):
        return ["qdata", "scale"], {"dtype": self.dtype}

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return ScaledInt8Tensor(inner["qdata"], inner["scale"], meta["dtype"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _TABLE.get(func)
        if handler is not None:
            return handler(func, args, kwargs)
        # everything else: compute on the dequantized values, return plain tensors
        def plain(a):
            return a.dequantize() if isinstance(a, ScaledInt8Tensor) else a
        return func(*tree_map(plain, args), **tree_map(plain, kwargs))


def _same_layout(func, args, kwargs):
    x = args[0]
    return ScaledInt8Tensor(func(x.qdata, *args[1:], **kwargs), x.scale, x.dtype)


def _dequantized(func, args, kwargs):
    def plain(a):
        return a.dequantize() if isinstance(a, ScaledInt8Tensor) else a
    return func(*tree_map(plain, args), **tree_map(plain, kwargs))


aten = torch.ops.aten
_TABLE = {aten.t.default: _same_layout, aten.detach.default: _same_layout,
          aten.clone.default: _same_layout, aten.mm.default: _dequantized,
          aten.addmm.default: _dequantized, aten.add.Tensor: _dequantized}


def pair():
    return (ScaledInt8Tensor.quantize(torch.randn(1)), ScaledInt8Tensor.quantize(torch.randn(1)))


def pair256(device="cpu"):
    """256x256 int8 weights, float32 outside, on `device` (bench.py's --device reaches it)."""
    torch.manual_seed(0)
    return (ScaledInt8Tensor.quantize(torch.randn(256, 256, device=device)),
            ScaledInt8Tensor.quantize(torch.randn(256, 256, device=device)))
