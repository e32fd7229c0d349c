"""Starts the local ranks of a torch.distributed benchmark (perf/torch_allreduce.py,
perf/torch_ddp.py): `world` processes of `cmd` with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set, `pythonpath` prepended to PYTHONPATH and `extra_env` added; waits for all
of them and exits with a message when one fails or they run past `timeout` seconds."""
import argparse
import os
import socket
import subprocess
import sys


def add_launch_args(ap):
    """The options every such benchmark takes: --pythonpath and --python, and the hidden
    --worker and --out its ranks are started with."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--pythonpath", default=os.path.join(repo, "build", "python"),
                    help="where snccl_torch is built (prepended to PYTHONPATH; default %(default)s)")
    ap.add_argument("--python", default="/usr/bin/python3" if os.path.exists("/usr/bin/python3")
                    else sys.executable, help="interpreter of the ranks (default %(default)s)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cmd, world, pythonpath, timeout, name, extra_env=None, bind=False):
    """bind: pin rank r to CPU r when there are at least `world` CPUs (taskset)."""
    port = free_port()
    path = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH")) if p)
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONPATH=path, **(extra_env or {}))
        pre = ["taskset", "-c", str(r)] if bind and world <= os.cpu_count() else []
        procs.append(subprocess.Popen(pre + cmd, env=env))
    rc = 0
    for p in procs:
        try:
            rc |= p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"{name}: timed out after {timeout} s")
    if rc:
        raise SystemExit(f"{name}: a rank failed")
