"""One rank of FSDP2 (fully_shard) training on CPU: the same model, data and seed trained
20 steps over a snccl mesh and over a Gloo mesh. Writes {backend: [losses, parameter sum,
parameters]}."""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import snccl_torch  # noqa: F401  registers "snccl"

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
STEPS = 20

dist.init_process_group("snccl", timeout=timedelta(seconds=60))
GROUPS = {"snccl": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}


def train(group):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(33, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 17), torch.nn.ReLU(), torch.nn.Linear(17, 5))
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + RANK)  # each rank its own data
    losses = []
    for _ in range(STEPS):
        x = torch.randn(16, 33, generator=gen)
        y = torch.randn(16, 5, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = [p.full_tensor().flatten().tolist() for p in model.parameters()]
    return losses, sum(sum(p) for p in params), params


out = {name: train(g) for name, g in GROUPS.items()}
dist.barrier(group=GROUPS["gloo"])
with open(OUT, "w") as f:
    json.dump(out, f)
dist.barrier(group=GROUPS["gloo"])  # rank 0 hosts the store
dist.destroy_process_group()
