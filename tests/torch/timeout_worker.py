"""The group's timeout is honoured: rank 0 all_reduces while rank 1 stays away; rank 0 must
get snccl's timeout exception after about PG_TIMEOUT seconds (the library's own timeout is
much longer)."""
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import snccl_torch  # noqa: F401

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
TIMEOUT = float(os.environ.get("PG_TIMEOUT", "3"))

dist.init_process_group("snccl", rank=RANK, world_size=WORLD, timeout=timedelta(seconds=TIMEOUT))
t = torch.ones(1024)
dist.all_reduce(t)
result = {"error": None, "seconds": 0.0}
if RANK == 0:
    start = time.monotonic()
    try:
        work = dist.all_reduce(t, async_op=True)
        work.get_future().wait()  # the future (what DDP waits on) fails too
    except RuntimeError as e:
        result["error"] = str(e)
    result["seconds"] = time.monotonic() - start
    try:  # later operations fail at once: the communicator was aborted
        dist.all_reduce(t)
    except RuntimeError as e:
        result["after"] = str(e)
else:  # stays away (alive) until rank 0 has written its result
    done = os.path.join(os.path.dirname(OUT), "rank0.json")
    end = time.monotonic() + TIMEOUT * 5
    while not os.path.exists(done) and time.monotonic() < end:
        time.sleep(0.1)
with open(OUT, "w") as f:
    json.dump(result, f)
os._exit(0)
