#!/usr/bin/python3
"""torch.distributed all_reduce benchmark: backend snccl (python/snccl_torch) or gloo, np
local processes, sizes -b..-e bytes (x -f), float32 sum. Prints an nccl-tests style table;
time is the median over iterations of the slowest rank's time for one all_reduce.

    perf/torch_allreduce.py --backend snccl,gloo --np 2,4      # snccl_torch from build/python
    perf/torch_allreduce.py --pythonpath build-x/python -e 1M  # another build, up to 1 MiB
"""
import argparse
import json
import os
import statistics
import time
from datetime import timedelta

from torch_launch import add_launch_args, run_ranks


def parse_size(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def sizes(args):
    out, n = [], args.minbytes
    while n <= args.maxbytes:
        out.append(n)
        n *= args.factor
    return out


def iters_for(nbytes, args):
    if args.iters:
        return args.iters
    return max(5, min(100, (64 << 20) // max(nbytes, 1)))


def worker(args):
    import torch
    import torch.distributed as dist
    if args.backend == "snccl":
        import snccl_torch  # noqa: F401
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(args.backend, rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    rows = []
    for nbytes in sizes(args):
        count = max(nbytes // 4, 1)
        t = torch.ones(count, dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        n = iters_for(nbytes, args)
        times = torch.zeros(n, dtype=torch.float64)
        for i in range(n):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)  # the slowest rank per iteration
        rows.append((count * 4, count, statistics.median(times.tolist()) * 1e6))
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(rows, f)
    dist.barrier()
    dist.destroy_process_group()


def run(backend, world, args):
    out = f"/tmp/torch_allreduce.{os.getpid()}.json"
    cmd = [args.python, os.path.abspath(__file__), "--worker", "--backend", backend,
           "-b", str(args.minbytes), "-e", str(args.maxbytes), "-f", str(args.factor),
           "-w", str(args.warmup), "-n", str(args.iters), "--out", out]
    run_ranks(cmd, world, args.pythonpath, args.timeout, f"{backend} np={world}")
    with open(out) as f:
        rows = json.load(f)
    os.unlink(out)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backend", default="snccl,gloo", help="comma list of snccl, gloo")
    ap.add_argument("--np", default="2,4", help="comma list of process counts")
    ap.add_argument("-b", "--minbytes", type=parse_size, default=8)
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=256 << 20)
    ap.add_argument("-f", "--factor", type=int, default=2)
    ap.add_argument("-w", "--warmup", type=int, default=2)
    ap.add_argument("-n", "--iters", type=int, default=0, help="0: by size (5..100)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    add_launch_args(ap)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    for world in [int(x) for x in args.np.split(",")]:
        for backend in args.backend.split(","):
            rows = run(backend, world, args)
            print(f"# torch.distributed all_reduce, backend {backend}, np {world}, float32 sum,"
                  f" median of per-iteration max over ranks")
            print(f"# {'size':>10} {'count':>12} {'type':>6} {'redop':>6} {'time':>10}"
                  f" {'algbw':>8} {'busbw':>8}")
            print(f"# {'(B)':>10} {'(elements)':>12} {'':>6} {'':>6} {'(us)':>10}"
                  f" {'(GB/s)':>8} {'(GB/s)':>8}")
            for nbytes, count, us in rows:
                algbw = nbytes / us / 1e3
                busbw = algbw * 2 * (world - 1) / world
                print(f"  {nbytes:>10} {count:>12} {'float':>6} {'sum':>6} {us:>10.1f}"
                      f" {algbw:>8.2f} {busbw:>8.2f}")
            print(flush=True)


if __name__ == "__main__":
    main()
