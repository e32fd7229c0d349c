"""Starts N ranks of a worker script as separate processes with a hard deadline: a hang
becomes a test failure (every process is killed), never a stuck test run."""
import json
import random
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

PYTHON = sys.executable  # the interpreter running pytest: its torch is the one under test
HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    """A free port below Linux's ephemeral range (32768-60999): a port the kernel handed
    out for bind(0) could be handed to another test's socket before rank 0's TCPStore
    binds it (seen in CI: 'Address already in use' under ctest -j2)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32000")


def run_ranks(script, world, timeout, args=(), env=None):
    """Runs `script` as ranks 0..world-1; returns (returncodes, results, logs), where results
    holds each rank's JSON output (None if it wrote none). Raises AssertionError on timeout."""
    port = free_port()
    outdir = tempfile.mkdtemp(prefix="snccl-torch-")
    procs = []
    logs = []
    base_env = dict(os.environ)
    base_env.update(env or {})
    base_env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world))
    for r in range(world):
        e = dict(base_env, RANK=str(r))
        log = open(os.path.join(outdir, f"rank{r}.log"), "w+")
        logs.append(log)
        procs.append(subprocess.Popen(
            [PYTHON, os.path.join(HERE, script), os.path.join(outdir, f"rank{r}.json"), *args],
            env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    deadline = time.monotonic() + timeout
    timed_out = False
    for p in procs:
        left = deadline - time.monotonic()
        try:
            p.wait(timeout=max(left, 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()
    texts = []
    for log in logs:
        log.seek(0)
        texts.append(log.read())
        log.close()
    results = []
    for r in range(world):
        path = os.path.join(outdir, f"rank{r}.json")
        try:
            with open(path) as f:
                results.append(json.load(f))
        except (OSError, ValueError):
            results.append(None)
    shutil.rmtree(outdir, ignore_errors=True)  # the logs are in `texts`, the results read
    if timed_out:
        raise AssertionError(f"{script} np={world} did not finish in {timeout} s (hang); logs:\n"
                             + "\n".join(f"--- rank {i}\n{t[-3000:]}" for i, t in enumerate(texts)))
    return [p.returncode for p in procs], results, texts
