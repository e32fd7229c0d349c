"""One rank of the registration check: a tensor all-reduced call after call is registered
(SNCCL_TORCH_REGISTER) and keeps its pointer and values, also across a fork whose child
frees its copy; freeing it ends the registration;
a tensor reduced once, a view and a small tensor are not registered. Writes
{"checks": {name: "ok" | error}, "registered": [...]}; the library's INFO log (COLL) goes to
NCCL_DEBUG_FILE."""
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

torch.set_num_threads(1)  # no OpenMP pool in the process that forks below
dist.init_process_group("snccl", timeout=timedelta(seconds=60))
WORLD_GROUP = dist.group.WORLD  # torch 1.13: the group is the backend itself
backend = (WORLD_GROUP._get_backend(torch.device("cpu")) if hasattr(WORLD_GROUP, "_get_backend")
           else WORLD_GROUP)
checks, seen = {}, []
check = checker(checks)


def ref(n, k):
    """The sum over ranks of (i * 3 + rank) % 17 + k, exactly representable."""
    base = torch.arange(n, dtype=torch.float32)
    return sum((base * 3 + r) % 17 + k for r in range(WORLD))


def loop():
    n = (3 << 20) // 4 + 5  # 3 MiB and a bit: unaligned end
    t = torch.empty(n)
    ptr = t.data_ptr()
    for k in range(6):
        t.copy_((torch.arange(n, dtype=torch.float32) * 3 + RANK) % 17 + k)
        dist.all_reduce(t)
        assert torch.equal(t, ref(n, k)), f"call {k}"
        seen.append(backend.registered_tensors())
    assert t.data_ptr() == ptr
    once = torch.ones(n)  # reduced once: not registered
    dist.all_reduce(once)
    small = torch.ones(1000)  # below SNCCL_TORCH_REGISTER_BYTES (1 MiB in the test)
    for _ in range(3):
        dist.all_reduce(small)
    assert torch.equal(small, torch.full((1000,), float(WORLD ** 3)))
    seen.append(backend.registered_tensors())
    pid = os.fork()
    if pid == 0:  # a child of fork has its own copy of the registered tensor, and frees it
        ok = torch.equal(t, ref(n, 5))
        del t
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child: {status}"
    t.copy_((torch.arange(n, dtype=torch.float32) * 3 + RANK) % 17 + 6)
    dist.all_reduce(t)  # the parent's registration still works after the fork
    assert torch.equal(t, ref(n, 6)), "after fork"
    del t  # frees the storage: its registration ends first
    seen.append(backend.registered_tensors())


check("loop")(loop)
dist.barrier()
with open(OUT, "w") as f:
    json.dump({"checks": checks, "registered": seen}, f)
dist.barrier()
dist.destroy_process_group()
