"""One rank of quantized all_reduce checks: the backend call on a tensor (bound against the
exact sum, same bits on every rank, the residual updated), then the same small classifier
trained with DDP over snccl's plain all_reduce and over snccl_torch.quantized_allreduce_hook
(int8 and int4, with error feedback, and int4 without it). Writes per variant the loss
curve, a checksum of each final parameter and the final model's loss on held-out data."""
import json
import os
import struct
import sys
import zlib
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import snccl_torch

OUT = sys.argv[1]
STEPS = int(os.environ.get("QUANT_STEPS", "300"))
BATCH = int(os.environ.get("QUANT_BATCH", "64"))
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
torch.set_num_threads(1)

dist.init_process_group("snccl", rank=RANK, world_size=WORLD, timeout=timedelta(seconds=60))
res = {}


def crc(t):
    return zlib.crc32(t.detach().contiguous().numpy().tobytes())


def check_direct_call():
    backend = snccl_torch._snccl_backend(dist.group.WORLD)
    n = 10007
    gens = [torch.Generator().manual_seed(7 + r) for r in range(WORLD)]
    inputs = [torch.randn(n, generator=g) for g in gens]
    exact = torch.stack(inputs).double().sum(0) / WORLD
    t = inputs[RANK].clone()
    residual = torch.zeros(n)
    backend.allreduce_quantized(t, residual, 8, 256, True).wait()
    # n quantizations per element, each within half a step of a block of magnitude <= max
    # partial sum (bounded by WORLD * max |input|)
    bound = WORLD * WORLD * float(torch.stack(inputs).abs().max()) * 1.1 / (2 * 127) / WORLD
    err = float((t.double() - exact).abs().max())
    sums = [None] * WORLD
    dist.all_gather_object(sums, crc(t))
    ok = err <= bound and len(set(sums)) == 1 and float(residual.abs().max()) > 0
    res["direct"] = "ok" if ok else f"err {err} bound {bound} crcs {sums}"


def train(hook_state):
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                torch.nn.ReLU(), torch.nn.Linear(64, 4))
    ddp = DDP(model, bucket_cap_mb=0.01)  # several buckets
    if hook_state is not None:
        ddp.register_comm_hook(hook_state, snccl_torch.quantized_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    # Decayed to 0: the final loss settles, so variants compare by where they converge, not
    # by where the last noisy steps left them.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / STEPS)
    # A fixed teacher labels the data: the loss can go well down, so a lossy gradient shows.
    teacher = torch.nn.Linear(32, 4)
    with torch.no_grad():
        teacher.weight.copy_(torch.randn(4, 32, generator=torch.Generator().manual_seed(5)))
    gen = torch.Generator().manual_seed(99 + RANK)  # each rank its own data
    losses = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, 32, generator=gen)
        with torch.no_grad():
            y = teacher(x).argmax(1)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    # The final model on held-out data (the same on every rank, as the parameters are).
    gen = torch.Generator().manual_seed(4321)
    x = torch.randn(2048, 32, generator=gen)
    with torch.no_grad():
        held_out = torch.nn.functional.cross_entropy(model(x), teacher(x).argmax(1)).item()
    return losses, [crc(p) for p in model.parameters()], held_out


check_direct_call()
variants = {
    "plain": None,
    "int8": snccl_torch.QuantizedState(bits=8),
    "int4": snccl_torch.QuantizedState(bits=4),
    "int4_no_feedback": snccl_torch.QuantizedState(bits=4, error_feedback=False),
}
for name, state in variants.items():
    res[name] = train(state)
with open(OUT, "w") as f:
    json.dump(res, f)
dist.barrier()
dist.destroy_process_group()
