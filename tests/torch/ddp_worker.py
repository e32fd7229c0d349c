"""One rank of DDP training: the same small model trained 20 steps over snccl, over snccl
with snccl_torch.allreduce_avg_hook, and over Gloo (same seeds, same data); writes the loss
sequences and final parameters' checksums."""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import snccl_torch

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)

dist.init_process_group("snccl", rank=RANK, world_size=WORLD, timeout=timedelta(seconds=60))
groups = {"snccl": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}


def train(pg, hook=None):
    torch.manual_seed(1234)  # same initial model on every rank and backend
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    if RANK:  # different start: DDP's initial broadcast must fix it
        with torch.no_grad():
            for p in model.parameters():
                p.add_(RANK)
    ddp = DDP(model, process_group=pg, bucket_cap_mb=0.001)  # several buckets
    if hook is not None:
        ddp.register_comm_hook(pg, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(99 + RANK)  # each rank its own data
    losses = []
    for _ in range(20):
        x = torch.randn(8, 16, generator=gen)
        y = torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = [p.detach().clone() for p in model.parameters()]
    return losses, sum(float(p.double().sum()) for p in params)


res = {}
for name, pg in groups.items():
    res[name] = train(pg)
res["snccl_avg_hook"] = train(groups["snccl"], snccl_torch.allreduce_avg_hook)
dist.barrier(group=groups["gloo"])
with open(OUT, "w") as f:
    json.dump(res, f)
dist.barrier(group=groups["gloo"])
dist.destroy_process_group()
