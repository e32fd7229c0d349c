#!/usr/bin/env python3
"""perf/gloo_rank.py (perf/compare's Gloo column across network namespaces) on loopback:
two separately started ranks of perf/peers/gloo_allreduce.py must meet through the
FileStore, run every size with a correct sum, print one table (rank 0) and exit 0.

Usage: test_gloo_rank.py --script perf/gloo_rank.py
Exit 0 on success, 77 when torch is not importable (ctest: skipped), 1 on failure. No
timing thresholds: a hang limit only (a rank that waits for a partner that never comes,
e.g. when gloo_allreduce.py changes how it spawns, fails here instead of hanging).
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile

HANG_LIMIT = 120
SIZES = [8, 64, 512, 4096]  # -b 8 -e 4K -f 8


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--script", required=True)
    a = ap.parse_args()
    if subprocess.run([sys.executable, "-c", "import torch.distributed"], capture_output=True).returncode != 0:
        print("SKIP: torch is not importable (apt-get install python3-torch)")
        return 77
    with tempfile.TemporaryDirectory(prefix="gloo_rank_test_") as tmp:
        store = os.path.join(tmp, "store")
        args = [sys.executable, a.script, "--store", store, "--", "--world", "2", "-b", "8", "-e", "4K", "-f", "8",
                "-w", "1", "-n", "2", "-N", "2"]
        procs = []
        for rank in (1, 0):
            env = dict(os.environ, RANK=str(rank), GLOO_SOCKET_IFNAME="lo")
            procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, start_new_session=True))
        outs = []
        try:
            for p in procs:
                outs.append(p.communicate(timeout=HANG_LIMIT)[0])
        except subprocess.TimeoutExpired:
            for p in procs:
                os.killpg(p.pid, signal.SIGKILL)  # its own session: any child it spawned too
            print(f"FAIL: the two ranks did not finish within {HANG_LIMIT} s")
            return 1
        rank1, rank0 = outs
        for rank, p, out in ((1, procs[0], rank1), (0, procs[1], rank0)):
            if p.returncode != 0:
                print(f"FAIL: rank {rank} exited with {p.returncode}\n{out}")
                return 1
        rows = {}
        for line in rank0.splitlines():
            f = line.split()
            if line.startswith(" ") and len(f) >= 11 and f[0].isdigit():
                rows[int(f[0])] = f
        if sorted(rows) != SIZES:
            print(f"FAIL: rank 0 printed sizes {sorted(rows)}, expected {SIZES}\n{rank0}")
            return 1
        wrong = {sz: int(f[8]) for sz, f in rows.items() if int(f[8]) != 0}
        if wrong or "Out of bounds values : 0 OK" not in rank0:
            print(f"FAIL: wrong elements {wrong}\n{rank0}")
            return 1
        if "nranks 2" not in rank0:
            print(f"FAIL: rank 0's header does not say nranks 2\n{rank0}")
            return 1
        if any(line.startswith(" ") and line.split()[:1] and line.split()[0].isdigit() for line in rank1.splitlines()):
            print(f"FAIL: rank 1 printed table rows (only rank 0 should)\n{rank1}")
            return 1
    print("PASS: two separately started Gloo ranks ran", len(SIZES), "sizes with correct sums")
    return 0


if __name__ == "__main__":
    sys.exit(main())
