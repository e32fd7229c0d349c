#!/usr/bin/python3
"""A DDP training step on CPU, torch.distributed backend snccl (python/snccl_torch) against
gloo: np local processes train the same MLP (--layers Linear(--hidden) layers with ReLU,
float32) on random batches with SGD; DDP all-reduces the gradients in buckets while
backward runs. Prints, per backend, the median step time (the slowest rank's, per step)
over rounds that alternate the backends, the same for a step without communication (np
processes training alone, without DDP: the compute floor, memory bandwidth shared as in
the real run; rank 0's time), and the loss after the last step, which must match across
backends (the same seeds, the same sums).

    perf/torch_ddp.py                                      # snccl_torch from build/python
    perf/torch_ddp.py --pythonpath build-t2/python --python ~/.cache/snccl/venv-torch2/bin/python
    perf/torch_ddp.py --backend snccl,snccl+avg,snccl:SNCCL_TORCH_REGISTER=0,gloo --rounds 5

A backend spec is a name (snccl, gloo), then optionally +avg (DDP communication hook
snccl_torch.allreduce_avg_hook: one all_reduce AVG per bucket instead of DDP's division
followed by a SUM) or +noop (a hook that hands each bucket back unreduced: DDP's own cost
without any communication; the loss then differs), then :VAR=value settings of the ranks'
environment.

Each line also gives the CPU time of a step (every thread of every rank, median over the
steps, summed over the ranks) and the CPUs that time would keep busy for the step's
duration: with as many ranks as CPUs and that figure near the CPU count, the step is
bound by CPU work, and communication shortens it only by costing less of it.
"""
import argparse
import json
import os
import statistics
import time
from datetime import timedelta

from torch_launch import add_launch_args, run_ranks


def worker(args):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    backend, _, hook = args.backend.partition("+")
    ddp = backend != "none"
    if ddp:
        if backend == "snccl":
            import snccl_torch
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=600))
    torch.manual_seed(0)  # the same initial weights on every rank
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.hidden, args.hidden), nn.ReLU()]
    model = nn.Sequential(*layers)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb,
                                                    gradient_as_bucket_view=bool(args.bucket_view))
        if hook == "avg":
            model.register_comm_hook(None, snccl_torch.allreduce_avg_hook)
        elif hook == "noop":
            def noop(state, bucket):
                fut = torch.futures.Future()
                fut.set_result(bucket.buffer())
                return fut
            model.register_comm_hook(None, noop)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1 + rank)  # each rank its own data
    times, cpus, loss = [], [], None
    for step in range(args.warmup + args.steps):
        x = torch.randn(args.batch, args.hidden, generator=gen)
        if ddp:
            dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=False)  # the gradient buffers stay (DDP's buckets alias them)
        out = model(x)
        loss = (out * out).mean()
        loss.backward()
        opt.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if step >= args.warmup:
            times.append(dt)
            cpus.append(dc)
    t = torch.tensor(times, dtype=torch.float64)
    cpu = torch.tensor([statistics.median(cpus)], dtype=torch.float64)
    if ddp:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank per step
        dist.all_reduce(cpu)  # every rank's
        last = torch.tensor([loss.item()], dtype=torch.float64)
        dist.all_reduce(last)
        loss_value = last.item() / world
    else:
        # Ranks train alone: rank 0's CPU time, as if every rank used as much.
        cpu *= world
        loss_value = loss.item()
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"median_ms": statistics.median(t.tolist()) * 1e3, "cpu_ms": cpu.item() * 1e3,
                       "loss": loss_value}, f)
    if ddp:
        dist.barrier()
        dist.destroy_process_group()


def run(spec, world, args):
    """spec: a backend name, optionally +avg, then environment settings (snccl:VAR=1:VAR2=0)."""
    backend, *settings = spec.split(":")
    out = f"/tmp/torch_ddp.{os.getpid()}.json"
    cmd = [args.python, os.path.abspath(__file__), "--worker", "--backend", backend, "--layers", str(args.layers),
           "--hidden", str(args.hidden), "--batch", str(args.batch), "--steps", str(args.steps), "--warmup",
           str(args.warmup), "--bucket-mb", str(args.bucket_mb), "--bucket-view", str(args.bucket_view), "--out", out]
    run_ranks(cmd, world, args.pythonpath, args.timeout, f"{spec} np={world}",
              dict(s.split("=", 1) for s in settings), bool(args.bind))
    with open(out) as f:
        res = json.load(f)
    os.unlink(out)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--backend", default="snccl,gloo",
                    help="comma list of snccl, snccl+avg, gloo, each optionally with :VAR=value settings")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=1024, help="features per layer (16 x 1024: 64 MiB of gradients)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--bucket-mb", type=int, default=25, help="DDP's bucket_cap_mb")
    ap.add_argument("--bucket-view", type=int, default=0,
                    help="DDP's gradient_as_bucket_view: 1 saves a copy of the gradients each way")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="rounds over the backends, interleaved")
    ap.add_argument("--bind", type=int, default=1, help="1: pin rank r to CPU r (when there are enough)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run")
    add_launch_args(ap)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    specs = ["none"] + args.backend.split(",")
    results = {s: [] for s in specs}
    for _ in range(args.rounds):
        for s in specs:
            results[s].append(run(s, args.np, args))
    params = args.layers * (args.hidden * args.hidden + args.hidden)
    print(f"# DDP step, np {args.np}, {args.layers} x Linear({args.hidden}), {params * 4 / 2**20:.1f} MiB of "
          f"gradients, batch {args.batch}, buckets of {args.bucket_mb} MB (as views: {args.bucket_view}); medians of "
          f"{args.rounds} rounds of "
          f"{args.steps} steps")
    print(f"# {'backend':<40} {'step (ms)':>10} {'rounds (ms)':>30} {'CPU (ms)':>9} {'CPUs busy':>9} {'loss':>14}")
    for s in specs:
        ms = [r["median_ms"] for r in results[s]]
        cpu = statistics.median(r["cpu_ms"] for r in results[s])
        name = "no communication" if s == "none" else s
        step = statistics.median(ms)
        print(f"  {name:<40} {step:>10.2f} {' '.join(f'{m:.1f}' for m in ms):>30} {cpu:>9.1f} {cpu / step:>9.2f}"
              f" {results[s][-1]['loss']:>14.8g}")


if __name__ == "__main__":
    main()
