"""Started by torchrun: init_process_group("snccl") from torchrun's environment, an
all_reduce over all ranks. argv: OUT directory. Writes OUT/rank<N>.json."""
import json
import os
import sys

import torch
import torch.distributed as dist

import snccl_torch  # registers "snccl"

dist.init_process_group("snccl")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
ok = dist.get_backend() == "snccl" and torch.equal(t, torch.full((1000,), world * (world + 1) / 2))
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump({"ok": bool(ok), "world": world, "local_rank": int(os.environ["LOCAL_RANK"]),
               "backend": dist.get_backend(), "sum": t[0].item(),
               "package": os.path.dirname(os.path.abspath(snccl_torch.__file__)),
               "library": snccl_torch.library_path()}, f)
dist.destroy_process_group()
