"""DTensor as FSDP2 and tensor parallel users meet it, on a fake process group of 4 ranks in one
process (no network, no other processes): a 3-layer MLP whose parameters and inputs are
Replicate DTensors, trained with SGD (`mlp`), and operand pairs for `bench.py --cases`
(`pair`: Replicate; `sharded`: a Shard(0) operand beside a Replicate one).

In torch 2.13 DTensor's dispatch runs in C++, so its Python `__torch_dispatch__` never runs."""
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor
from torch.testing._internal.distributed.fake_pg import FakeStore

WORLD = 4
WIDTH = 256
_mesh = []


def mesh():
    """The 4-rank CPU mesh of a fake process group, made once (this process is rank 0)."""
    if not _mesh:
        if not dist.is_initialized():
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
        _mesh.append(init_device_mesh("cpu", (WORLD,)))
    return _mesh[0]


def mlp(plain=False, batch=32):
    """3-layer MLP (256 wide), parameters and data as Replicate DTensors, SGD"""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                          nn.Linear(WIDTH, 10))
    x, target = torch.randn(batch, WIDTH), torch.randn(batch, 10)
    if not plain:
        model = distribute_module(model, mesh())  # every parameter Replicate
        x, target = (distribute_tensor(t, mesh(), [Replicate()]) for t in (x, target))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        loss = (model(x) - target).square().mean()
        loss.backward()
        opt.step()

    return step


def pair():
    torch.manual_seed(0)
    return tuple(distribute_tensor(torch.randn(64, 64), mesh(), [Replicate()]) for _ in range(2))


def sharded():
    torch.manual_seed(0)
    return (distribute_tensor(torch.randn(64, 64), mesh(), [Shard(0)]),
            distribute_tensor(torch.randn(64, 64), mesh(), [Replicate()]))
