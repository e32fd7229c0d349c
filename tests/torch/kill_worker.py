"""A rank dies (SIGKILL) between two all_reduces: the survivors must get an exception from
snccl (not hang). Writes the survivor's exception text and how long it took."""
import json
import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import snccl_torch  # noqa: F401

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
VICTIM = WORLD - 1

dist.init_process_group("snccl", rank=RANK, world_size=WORLD,
                        timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "20"))))
t = torch.ones(1 << 16)
dist.all_reduce(t)
assert t[0] == WORLD
if RANK == VICTIM:
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(0.5)
start = time.monotonic()
result = {"error": None}
try:
    for _ in range(3):
        dist.all_reduce(t)
except RuntimeError as e:
    result["error"] = str(e)
result["seconds"] = time.monotonic() - start
with open(OUT, "w") as f:
    json.dump(result, f)
os._exit(0)  # the store host may be gone: skip the orderly shutdown
