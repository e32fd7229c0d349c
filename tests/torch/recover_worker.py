"""Recovery after a dead rank, the recipe of docs/operations.md: ranks train in a loop
(all_reduce of a gradient-like tensor, checked every step); the last rank kills itself
(SIGKILL) at step KILL_STEP. Each survivor must get snccl's error naming the dead rank,
destroy the process group, join a new one of the survivors (a fresh TCPStore on
RECOVER_PORT, hosted by rank 0), and continue with exact results. Writes the error, the
wall-clock times of the kill (the victim's record), of the error and of the first correct
step after recovery, and the steps done."""
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
KILL_STEP = 5
KILL_FILE = os.path.join(os.path.dirname(OUT), "killed_at")
TIMEOUT = timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "30")))

torch.set_num_threads(1)
dist.init_process_group("snccl", rank=RANK, world_size=WORLD, timeout=TIMEOUT)


def step(k, rank, world):
    """One training step's all_reduce: every rank's gradient is (i % 7) + rank + k."""
    g = torch.arange(1 << 16, dtype=torch.float32) % 7 + rank + k
    dist.all_reduce(g)
    want = (torch.arange(1 << 16, dtype=torch.float32) % 7 + k) * world + world * (world - 1) / 2
    assert torch.equal(g, want), f"step {k}: wrong sum"


result = {"error": None, "steps_before": 0, "steps_after": 0}
k = 0
try:
    for k in range(20):
        if RANK == VICTIM and k == KILL_STEP:
            with open(KILL_FILE, "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        step(k, RANK, WORLD)
        result["steps_before"] += 1
except RuntimeError as e:
    result["error"] = str(e)
    result["error_at"] = time.time()
if result["error"] is not None:
    # The recipe: drop the broken group (its communicator is aborted), then form a new one
    # of the survivors. Ranks below the dead one keep their numbers.
    dist.destroy_process_group()
    world = WORLD - 1
    store = dist.TCPStore("127.0.0.1", int(os.environ["RECOVER_PORT"]), world, RANK == 0,
                          timeout=TIMEOUT)
    dist.init_process_group("snccl", store=store, rank=RANK, world_size=world, timeout=TIMEOUT)
    for j in range(k, k + 5):
        step(j, RANK, world)
        if result["steps_after"] == 0:
            result["resumed_at"] = time.time()
        result["steps_after"] += 1
    dist.barrier()
    dist.destroy_process_group()
    with open(KILL_FILE) as f:
        result["killed_at"] = float(f.read())
with open(OUT, "w") as f:
    json.dump(result, f)
