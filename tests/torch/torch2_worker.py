"""One rank of the torch 2.x API checks: what 2.x users call (tensor collectives, batched
point-to-point, the coalescing manager, subgroups, device meshes and DTensor, functional
collectives eager and compiled, monitored_barrier), each on the snccl group and compared
with Gloo or with the exact result. argv: OUT [init backend string]. Writes {check: "ok" |
error}. DEVICE_ID (e.g. cpu:0): init_process_group(device_id=...), which makes new_group
split the default group's communicator."""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import snccl_torch  # noqa: F401  registers "snccl"
from checks import checker, same

OUT = sys.argv[1]
INIT = sys.argv[2] if len(sys.argv) > 2 else "snccl"
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])

DEVICE_ID = os.environ.get("DEVICE_ID")
dist.init_process_group(INIT, timeout=timedelta(seconds=60),  # env://, as torchrun sets it
                        **({"device_id": torch.device(DEVICE_ID)} if DEVICE_ID else {}))
SN = dist.group.WORLD
GL = dist.new_group(backend="gloo")
CPU = torch.device("cpu")


def splits():
    """Communicator splits the default group's backend took part in."""
    return SN._get_backend(CPU).comm_split_count()

results = {}
check = checker(results)


def data(n, rank=RANK, dtype=torch.float32):
    return ((torch.arange(n, dtype=torch.int64) * 7 + rank * 3) % 23).to(dtype)


@check("backend_name")
def _():
    assert dist.get_backend() == INIT, dist.get_backend()
    assert SN._get_backend(torch.device("cpu")).name() == "snccl"
    assert isinstance(SN._get_backend(torch.device("cpu")), snccl_torch.ProcessGroupSnccl)


@check("all_gather_into_tensor")
def _():
    for n in (0, 1, 1001):  # zero, one, odd
        x = data(n)
        outs = []
        for g in (SN, GL):
            o = torch.full((WORLD * n,), -1.0)
            dist.all_gather_into_tensor(o, x, group=g)
            outs.append(o)
        same(outs[0], torch.cat([data(n, r) for r in range(WORLD)]), f"n={n}")
        same(outs[0], outs[1], f"n={n} vs gloo")


@check("reduce_scatter_tensor")
def _():
    for n in (1, 333):
        x = data(WORLD * n)
        o = torch.full((n,), -1.0)
        dist.reduce_scatter_tensor(o, x, group=SN)
        full = sum(data(WORLD * n, r) for r in range(WORLD))
        same(o, full[RANK * n:(RANK + 1) * n])
        o2 = torch.full((n,), -1.0)
        dist.reduce_scatter_tensor(o2, x, op=dist.ReduceOp.MAX, group=SN)
        mx = torch.stack([data(WORLD * n, r) for r in range(WORLD)]).amax(0)
        same(o2, mx[RANK * n:(RANK + 1) * n])


@check("batch_isend_irecv")
def _():
    # every rank sends to both neighbours and receives from both: posted one by one, the
    # sends would wait for receives queued behind them
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    n = 100003
    from_prv, from_nxt = torch.zeros(n), torch.zeros(n)
    ops = [dist.P2POp(dist.isend, data(n) + 1, nxt), dist.P2POp(dist.isend, data(n) + 2, prv),
           dist.P2POp(dist.irecv, from_prv, prv), dist.P2POp(dist.irecv, from_nxt, nxt)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(from_prv, data(n, prv) + 1, "from previous")
    same(from_nxt, data(n, nxt) + 2, "from next")


@check("coalescing_manager")
def _():
    ts = [data(n) for n in (5, 1000, 77)]
    with dist._coalescing_manager(group=SN, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, group=SN)
    cm.wait()
    for n, t in zip((5, 1000, 77), ts):
        same(t, sum(data(n, r) for r in range(WORLD)), f"all_reduce n={n}")
    ins = [data(n) for n in (3, 64)]
    outs = [torch.zeros(WORLD * n) for n in (3, 64)]
    with dist._coalescing_manager(group=SN):
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i, group=SN)
    for n, o in zip((3, 64), outs):
        same(o, torch.cat([data(n, r) for r in range(WORLD)]), f"all_gather n={n}")
    ins = [data(WORLD * n) for n in (2, 50)]
    outs = [torch.zeros(n) for n in (2, 50)]
    with dist._coalescing_manager(group=SN):
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i, group=SN)
    for n, o in zip((2, 50), outs):
        full = sum(data(WORLD * n, r) for r in range(WORLD))
        same(o, full[RANK * n:(RANK + 1) * n], f"reduce_scatter n={n}")


@check("split_group")
def _():
    before = splits()
    halves = [list(range(0, WORLD, 2)), list(range(1, WORLD, 2))]
    g = dist.split_group(split_ranks=halves)  # every rank, one ncclCommSplit
    mine = halves[RANK % 2]
    assert isinstance(g._get_backend(CPU), snccl_torch.ProcessGroupSnccl)
    assert g.size() == len(mine) and g.rank() == mine.index(RANK)
    t = data(11)
    dist.all_reduce(t, group=g)
    same(t, sum(data(11, r) for r in mine))
    assert splits() == before + 1, (before, splits())
    if WORLD >= 3:  # a split that leaves rank 1 out: it takes part without a group
        g2 = dist.split_group(split_ranks=[[r for r in range(WORLD) if r != 1]])
        outside = g2 == dist.GroupMember.NON_GROUP_MEMBER
        assert outside == (RANK == 1), g2
        if not outside:
            t = data(5)
            dist.all_reduce(t, group=g2)
            same(t, sum(data(5, r) for r in range(WORLD) if r != 1))
        assert splits() == before + 2


@check("new_subgroups")
def _():
    before = splits()
    size = 2 if WORLD % 2 == 0 else 1
    cur, groups = dist.new_subgroups(group_size=size, backend="snccl")
    t = data(10)
    dist.all_reduce(t, group=cur)
    first = RANK - RANK % size
    same(t, sum(data(10, r) for r in range(first, first + size)))
    odd = [r for r in range(WORLD) if r % 2 == 1] or [0]
    g = dist.new_group(ranks=odd, backend="snccl")  # every rank calls new_group
    if RANK in odd:
        t = data(7)
        dist.all_reduce(t, group=g)
        same(t, sum(data(7, r) for r in odd))
    dist.barrier(group=SN)
    # bound to a device, new_group splits the default group's communicator (every rank takes
    # part, members or not); unbound, each subgroup gets a communicator of its own
    expected = WORLD // size + 1 if DEVICE_ID else 0
    assert splits() - before == expected, (splits() - before, expected)


@check("device_mesh_dtensor")
def _():
    mesh = init_device_mesh("cpu", (WORLD,))
    assert mesh.get_group().name() == SN.name() or dist.get_backend(mesh.get_group()) == INIT
    full = torch.arange(WORLD * 6, dtype=torch.float32).reshape(WORLD * 2, 3)
    d = distribute_tensor(full, mesh, [Shard(0)])  # scatter from rank 0
    same(d.to_local(), full[RANK * 2:(RANK + 1) * 2])
    same(d.full_tensor(), full, "all_gather")
    p = DTensor.from_local(data(12).reshape(4, 3), mesh, [Partial()])
    same(p.redistribute(mesh, [Replicate()]).to_local(),
         sum(data(12, r) for r in range(WORLD)).reshape(4, 3), "partial -> replicate")
    s = p.redistribute(mesh, [Shard(0)]) if WORLD in (1, 2, 4) else None
    if s is not None:
        rows = 4 // WORLD
        same(s.to_local(), sum(data(12, r) for r in range(WORLD)).reshape(4, 3)[
            RANK * rows:(RANK + 1) * rows], "partial -> shard (reduce_scatter)")
    if WORLD == 4:  # a 2-D mesh: groups of rows and columns
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        t = data(6)
        dist.all_reduce(t, group=mesh2.get_group("tp"))
        row = RANK - RANK % 2
        same(t, data(6, row) + data(6, row + 1), "2-D mesh, tp")
        t = data(6)
        dist.all_reduce(t, group=mesh2.get_group("dp"))
        same(t, data(6, RANK % 2) + data(6, RANK % 2 + 2), "2-D mesh, dp")


@check("functional_collectives")
def _():
    x = data(1000)
    same(funcol.wait_tensor(funcol.all_reduce(x, "sum", SN)),
         sum(data(1000, r) for r in range(WORLD)))
    g = getattr(funcol, "all_gather_single", funcol.all_gather_tensor)(data(9), 0, SN)
    same(funcol.wait_tensor(g), torch.cat([data(9, r) for r in range(WORLD)]))
    rs = getattr(funcol, "reduce_scatter_single", funcol.reduce_scatter_tensor)(
        data(WORLD * 4), "sum", 0, SN)
    same(funcol.wait_tensor(rs), sum(data(WORLD * 4, r) for r in range(WORLD))[
        RANK * 4:(RANK + 1) * 4])


@check("functional_collectives_compiled")
def _():
    def step(a, b):
        s = funcol.all_reduce(a * 2, "sum", SN)
        return getattr(funcol, "all_gather_single", funcol.all_gather_tensor)(s + b, 0, SN)

    compiled = torch.compile(step, fullgraph=True)
    a, b = data(16), data(16) + 1
    out = compiled(a, b)
    same(out, step(a, b), "compiled vs eager")
    ref = sum(data(16, r) * 2 for r in range(WORLD))
    same(out, torch.cat([ref + data(16, r) + 1 for r in range(WORLD)]), "exact")


@check("monitored_barrier")
def _():
    dist.monitored_barrier(group=SN, timeout=timedelta(seconds=30))
    dist.monitored_barrier(group=SN, timeout=timedelta(seconds=30), wait_all_ranks=True)


dist.barrier(group=GL)
with open(OUT, "w") as f:
    json.dump(results, f)
dist.barrier(group=GL)  # rank 0 hosts the store: nobody leaves before everyone is done
dist.destroy_process_group()
