"""One rank of the monitored_barrier failure check: ranks listed in ABSENT do not enter the
barrier; the others do, with a 2 s timeout. Writes {"error": message or None, "seconds": t}."""
import json
import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

import snccl_torch  # noqa: F401  registers "snccl"

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
ABSENT = [int(r) for r in os.environ["ABSENT"].split(",")]

dist.init_process_group("snccl", timeout=timedelta(seconds=60))
gloo = dist.new_group(backend="gloo")
error, t0 = None, time.monotonic()
if RANK not in ABSENT:
    try:
        dist.monitored_barrier(timeout=timedelta(seconds=2), wait_all_ranks=True)
    except RuntimeError as e:
        error = str(e)
seconds = time.monotonic() - t0
dist.barrier(group=gloo)  # the absent ranks wait here, and nobody leaves early
with open(OUT, "w") as f:
    json.dump({"error": error, "seconds": seconds}, f)
dist.barrier(group=gloo)
dist.destroy_process_group()
