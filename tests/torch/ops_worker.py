"""One rank of the operation checks: every operation runs on the snccl group and on a Gloo
group with the same inputs (or against an exact expected value where Gloo lacks the
operation) and the outputs are compared element-wise. Writes {check: "ok" | error}."""
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import snccl_torch  # noqa: F401  registers "snccl"
from checks import checker, same

OUT = sys.argv[1]
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])

dist.init_process_group("snccl", rank=RANK, world_size=WORLD, timeout=timedelta(seconds=60))
SN = dist.group.WORLD
GL = dist.new_group(backend="gloo")
assert dist.get_backend(SN) == "snccl"

results = {}
check = checker(results)
R = dist.ReduceOp


def data(n, dtype, rank=RANK, small=False):
    """Exact small values (sums of a few ranks stay exact in every dtype)."""
    base = torch.arange(n, dtype=torch.int64)
    v = (base % 3) + 1 + (rank % 2) if small else (base * 7 + rank * 3) % 23
    if dtype == torch.bool:
        return ((base + rank) % 3 == 0)
    return v.to(dtype)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64, torch.int8,
          torch.uint8]
OPS = {"sum": R.SUM, "product": R.PRODUCT, "min": R.MIN, "max": R.MAX}


def both(fn):
    """fn(group) -> tensor(s); returns (snccl, gloo)."""
    return fn(SN), fn(GL)


for dt in DTYPES:
    for opname, op in OPS.items():
        @check(f"allreduce_{opname}_{str(dt).split('.')[-1]}")
        def _(dt=dt, op=op, opname=opname):
            def run(g):
                t = data(37, dt, small=(opname == "product"))
                dist.all_reduce(t, op=op, group=g)
                return t
            a, b = both(run)
            same(a, b)


@check("allreduce_bfloat16_and_bool")
def _():
    t = data(37, torch.bfloat16)
    dist.all_reduce(t, group=SN)
    exp = sum(data(37, torch.float32, rank=r) for r in range(WORLD)).to(torch.bfloat16)
    same(t, exp, "bf16 sum")
    t = data(37, torch.bool)
    dist.all_reduce(t, op=R.MAX, group=SN)
    exp = data(37, torch.bool, rank=0)
    for r in range(1, WORLD):
        exp = exp | data(37, torch.bool, rank=r)
    same(t, exp, "bool max")


@check("allreduce_avg")
def _():
    t = data(64, torch.float32) * WORLD
    dist.all_reduce(t, op=R.AVG, group=SN)
    ref = data(64, torch.float32) * WORLD
    dist.all_reduce(ref, group=GL)
    same(t, ref / WORLD)


@check("allreduce_premul_sum")
def _():
    make = getattr(dist, "_make_nccl_premul_sum", None)
    if make is None:
        return  # this torch has no PREMUL_SUM
    t = data(64, torch.float32)
    dist.all_reduce(t, op=make(2.0), group=SN)
    ref = data(64, torch.float32)
    dist.all_reduce(ref, group=GL)
    same(t, ref * 2)
    t = data(64, torch.float64)  # the factor as a tensor
    factor = torch.tensor([0.5], dtype=torch.float64)
    if int(torch.__version__.split(".")[0]) < 2:
        factor = [factor]  # 1.13: one factor per device
    dist.all_reduce(t, op=make(factor), group=SN)
    same(t, (ref * 0.5).double())


@check("allreduce_complex")
def _():
    def run(g):
        t = torch.complex(data(16, torch.float32), data(16, torch.float32, rank=RANK + 1))
        dist.all_reduce(t, group=g)
        return t
    a, b = both(run)
    same(a, b)


@check("allreduce_noncontiguous")
def _():
    # Gloo (1.13) reduces the whole storage of a strided view: compare with the exact result
    base = data(12 * 10, torch.float32).view(12, 10)
    view = base.t()[::2]  # strided view: columns 0, 2, .., 8
    dist.all_reduce(view, group=SN)
    exp = data(12 * 10, torch.float32).view(12, 10)
    exp.t()[::2] = sum(data(120, torch.float32, rank=r).view(12, 10) for r in range(WORLD)).t()[::2]
    same(base, exp)


@check("allreduce_async_future")
def _():
    t = data(1 << 16, torch.float32)
    work = dist.all_reduce(t, group=SN, async_op=True)
    busy = torch.ones(256, 256) @ torch.ones(256, 256)  # overlaps the communication
    fut = work.get_future()
    out = fut.wait()
    assert work.is_completed() and busy[0, 0] == 256
    ref = data(1 << 16, torch.float32)
    dist.all_reduce(ref, group=GL)
    same(t, ref)
    same(out[0], ref)
    # chained futures, as DDP comm hooks use them
    t2 = data(100, torch.float32)
    f2 = dist.all_reduce(t2, group=SN, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    doubled = f2.wait()
    ref2 = data(100, torch.float32)
    dist.all_reduce(ref2, group=GL)
    same(t2, ref2)
    same(doubled, ref2 * 2)


@check("allreduce_coalesced")
def _():
    def run(g):
        ts = [data(10, torch.float32), data(7, torch.float32, rank=RANK + 5)]
        dist.all_reduce_coalesced(ts, group=g)
        return torch.cat(ts)
    a, b = both(run)
    same(a, b)


@check("broadcast")
def _():
    root = WORLD - 1
    for dt in DTYPES:
        def run(g):
            t = data(33, dt)
            dist.broadcast(t, src=root, group=g)
            return t
        a, b = both(run)
        same(a, b, str(dt))
    # dtypes Gloo (1.13) lacks: the root's exact data
    for dt in (torch.bfloat16, torch.bool):
        t = data(33, dt)
        dist.broadcast(t, src=root, group=SN)
        same(t, data(33, dt, rank=root), str(dt))
    t = torch.complex(data(33, torch.float32), data(33, torch.float32, rank=RANK + 1))
    dist.broadcast(t, src=root, group=SN)
    same(t, torch.complex(data(33, torch.float32, rank=root),
                          data(33, torch.float32, rank=root + 1)), "complex64")


@check("broadcast_noncontiguous")
def _():
    base = data(64, torch.int64).view(8, 8)
    dist.broadcast(base.t()[1:5], src=1, group=SN)
    exp = data(64, torch.int64).view(8, 8)
    exp.t()[1:5] = data(64, torch.int64, rank=1).view(8, 8).t()[1:5]
    same(base, exp)


@check("reduce")
def _():
    root = 1 % WORLD
    for op in (R.SUM, R.MAX):
        def run(g):
            t = data(50, torch.float32)
            dist.reduce(t, dst=root, op=op, group=g)
            return t
        a, b = both(run)
        if RANK == root:
            same(a, b)


@check("allgather")
def _():
    for dt in (torch.float32, torch.int8, torch.float16):
        def run(g):
            outs = [torch.zeros(5, 3, dtype=dt) for _ in range(WORLD)]
            dist.all_gather(outs, data(15, dt).view(5, 3), group=g)
            return torch.stack(outs)
        a, b = both(run)
        same(a, b, str(dt))


@check("allgather_noncontiguous")
def _():
    outs = [torch.zeros(6, 4).t() for _ in range(WORLD)]  # non-contiguous outputs
    dist.all_gather(outs, data(24, torch.float32).view(6, 4).t(), group=SN)
    for j in range(WORLD):
        same(outs[j], data(24, torch.float32, rank=j).view(6, 4).t(), f"from {j}")


@check("allgather_base")
def _():
    fn = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    out = torch.zeros(WORLD * 9, dtype=torch.int32)
    fn(out, data(9, torch.int32), group=SN)
    refs = [torch.zeros(9, dtype=torch.int32) for _ in range(WORLD)]
    dist.all_gather(refs, data(9, torch.int32), group=GL)
    same(out, torch.cat(refs))


def reduce_scatter_reference(chunks):
    full = torch.cat([c.flatten() for c in chunks])
    dist.all_reduce(full, group=GL)
    return full.view(WORLD, -1)[RANK]


@check("reduce_scatter")
def _():
    for op in (R.SUM, R.MAX):
        chunks = [data(11, torch.float32, rank=RANK + 2 * j) for j in range(WORLD)]
        out = torch.zeros(11)
        dist.reduce_scatter(out, [c.clone() for c in chunks], op=op, group=SN)
        full = torch.cat(chunks)
        dist.all_reduce(full, op=op, group=GL)
        same(out, full.view(WORLD, -1)[RANK], str(op))


@check("reduce_scatter_base")
def _():
    fn = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    inp = data(WORLD * 13, torch.int64)
    out = torch.zeros(13, dtype=torch.int64)
    fn(out, inp.clone(), group=SN)
    full = inp.clone()
    dist.all_reduce(full, group=GL)
    same(out, full.view(WORLD, -1)[RANK])


@check("alltoall_base_even")
def _():
    def run(g):
        out = torch.zeros(WORLD * 3, 2)
        dist.all_to_all_single(out, data(WORLD * 6, torch.float32).view(WORLD * 3, 2), group=g)
        return out
    a, b = both(run)
    same(a, b)


@check("alltoall_base_uneven")
def _():
    # rank r sends (r + j) % 3 rows to rank j (zero-row splits included)
    send = [(RANK + j) % 3 for j in range(WORLD)]
    recv = [(j + RANK) % 3 for j in range(WORLD)]

    def run(g):
        inp = data(sum(send) * 4, torch.int64).view(-1, 4)
        out = torch.full((sum(recv), 4), -1, dtype=torch.int64)
        dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send, group=g)
        return out
    a, b = both(run)
    same(a, b)


@check("alltoall_list")
def _():
    ins = [torch.full((j + 1,), RANK * 10 + j, dtype=torch.float32) for j in range(WORLD)]
    outs = [torch.zeros(RANK + 1) for _ in range(WORLD)]
    dist.all_to_all(outs, ins, group=SN)
    for j in range(WORLD):
        same(outs[j], torch.full((RANK + 1,), j * 10 + RANK, dtype=torch.float32), f"from {j}")


@check("send_recv")
def _():
    nxt, prv = (RANK + 1) % WORLD, (RANK - 1) % WORLD
    t = data(100, torch.float64)
    r = torch.zeros(100, dtype=torch.float64)
    if RANK % 2 == 0:
        dist.send(t, nxt, group=SN)
        dist.recv(r, prv, group=SN)
    else:
        dist.recv(r, prv, group=SN)
        dist.send(t, nxt, group=SN)
    same(r, data(100, torch.float64, rank=prv))
    # isend/irecv with a non-contiguous receive buffer
    base = torch.zeros(10, 10, dtype=torch.float64)
    reqs = []
    if RANK % 2 == 0:
        reqs.append(dist.isend(t.view(10, 10), nxt, group=SN))
        reqs.append(dist.irecv(base.t(), prv, group=SN))
    else:
        reqs.append(dist.irecv(base.t(), prv, group=SN))
        reqs.append(dist.isend(t.view(10, 10), nxt, group=SN))
    for q in reqs:
        q.wait()
    same(base.t().contiguous().flatten(), data(100, torch.float64, rank=prv))


@check("barrier")
def _():
    for _ in range(3):
        dist.barrier(group=SN)


@check("gather")
def _():
    def run(g):
        outs = [torch.zeros(7) for _ in range(WORLD)] if RANK == 0 else None
        dist.gather(data(7, torch.float32), gather_list=outs, dst=0, group=g)
        return torch.stack(outs) if RANK == 0 else torch.zeros(1)
    a, b = both(run)
    same(a, b)


@check("scatter")
def _():
    root = WORLD - 1

    def run(g):
        ins = [data(6, torch.int32, rank=j) for j in range(WORLD)] if RANK == root else None
        out = torch.zeros(6, dtype=torch.int32)
        dist.scatter(out, scatter_list=ins, src=root, group=g)
        return out
    a, b = both(run)
    same(a, b)


@check("error_is_exception")
def _():
    try:  # refused by the backend
        dist.all_reduce(torch.zeros(4, dtype=torch.int32), op=R.BAND, group=SN)
    except RuntimeError as e:
        assert "snccl" in str(e) and "BAND" in str(e), str(e)
    else:
        raise AssertionError("BAND did not raise")
    try:  # refused by the library: its message (ncclGetLastError) reaches Python
        dist.broadcast(torch.zeros(4), src=WORLD + 3, group=SN)
    except RuntimeError as e:
        assert "snccl" in str(e) and "invalid argument" in str(e).lower(), str(e)
    else:
        raise AssertionError("broadcast from a missing root did not raise")
    dist.barrier(group=SN)  # the group still works
    t = torch.ones(3)
    dist.all_reduce(t, group=SN)
    same(t, torch.full((3,), float(WORLD)))


@check("new_group_subset")
def _():
    sub = dist.new_group(ranks=[0, 1], backend="snccl")  # every rank calls new_group
    t = data(20, torch.float32)
    if RANK < 2:
        dist.all_reduce(t, group=sub)
        same(t, data(20, torch.float32, rank=0) + data(20, torch.float32, rank=1))
    dist.barrier(group=SN)


@check("large_allreduce")
def _():
    def run(g):
        t = data(3 << 20, torch.float32)
        dist.all_reduce(t, group=g)
        return t
    a, b = both(run)
    same(a, b)


dist.barrier(group=GL)
with open(OUT, "w") as f:
    json.dump(results, f)
dist.barrier(group=GL)  # rank 0 hosts the store: nobody leaves before everyone is done
dist.destroy_process_group()
