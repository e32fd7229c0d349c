"""One rank of the all_to_all route check: all_to_all_single with even splits (the library's
ncclAlltoAll), in and out of place, and with uneven splits (grouped sends and receives),
each compared with the values every rank can compute. Writes {"checks": {name: "ok" | error}};
the library's INFO log (TUNING) goes to NCCL_DEBUG_FILE."""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import snccl_torch  # noqa: F401  registers "snccl"
from checks import checker

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])

dist.init_process_group("snccl", timeout=timedelta(seconds=60))
checks = {}
check = checker(checks)


def block(src, dst, rows):
    """What rank src sends rank dst: `rows` rows of 3 float64 values naming both."""
    return (torch.arange(rows * 3, dtype=torch.float64).view(rows, 3) + src * 1000 + dst * 100000)


def even():
    rows = 5
    inp = torch.cat([block(RANK, d, rows) for d in range(WORLD)])
    out = torch.full_like(inp, -1.0)
    dist.all_to_all_single(out, inp)
    assert torch.equal(out, torch.cat([block(s, RANK, rows) for s in range(WORLD)])), out
    dist.all_to_all_single(inp, inp.clone())  # the output tensor also fed the call before
    assert torch.equal(inp, out)


def uneven():
    send = [d + 1 for d in range(WORLD)]     # rank RANK sends d+1 rows to rank d
    recv = [RANK + 1] * WORLD                # and receives RANK+1 rows from every rank
    inp = torch.cat([block(RANK, d, send[d]) for d in range(WORLD)])
    out = torch.full((sum(recv), 3), -1.0, dtype=torch.float64)
    dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)
    assert torch.equal(out, torch.cat([block(s, RANK, RANK + 1) for s in range(WORLD)])), out


check("even")(even)
check("uneven")(uneven)
dist.barrier()
with open(OUT, "w") as f:
    json.dump({"checks": checks}, f)
dist.barrier()
dist.destroy_process_group()
