#!/usr/bin/python3
"""Runs perf/peers/gloo_allreduce.py as ONE rank of a job whose ranks are started
separately, e.g. one per network namespace (perf/netns_pair.sh, perf/compare's netns
case), instead of all ranks as children of one process.

    perf/gloo_rank.py --store /tmp/gloo_store.X -- --world 2 -b 8 -e 64M -f 2

The rank comes from $RANK (netns_pair.sh exports it). The ranks meet through a
torch FileStore at --store: a file every rank can see (network namespaces share the file
system), absent before the run. Gloo's TCP pairs use the interface named by
$GLOO_SOCKET_IFNAME (torch's own variable); set it to the namespace's veth. Everything
else, the timing and the printed table included, is gloo_allreduce.py's own, so this
column measures what the shared-memory case's Gloo column measures.
"""
import argparse
import os
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", required=True, help="FileStore path shared by the ranks, absent before the run")
    ap.add_argument("--bench", default=os.path.normpath(BENCH), help="directory holding gloo_allreduce.py")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then gloo_allreduce.py's arguments")
    a = ap.parse_args()
    rest = a.bench_args[1:] if a.bench_args[:1] == ["--"] else a.bench_args
    rank = int(os.environ["RANK"])
    script = os.path.join(a.bench, "gloo_allreduce.py")
    if not os.path.isfile(script):
        sys.exit(f"gloo_rank.py: {script} not found (perf/peers; --bench DIR names another place)")
    sys.path.insert(0, os.path.abspath(a.bench))
    import gloo_allreduce
    import torch.multiprocessing as mp

    # gloo_allreduce.main() parses its arguments, makes a store path of its own and spawns
    # every rank with mp.spawn(worker, args=(args, store_path), nprocs=world). Here only
    # this process's rank runs, with the store path all ranks were given.
    def spawn_this_rank(fn, args=(), nprocs=1, join=True, **_):
        bench_args = args[0]
        if not 0 <= rank < nprocs:
            sys.exit(f"gloo_rank.py: RANK={rank} is outside --world {nprocs}")
        fn(rank, bench_args, a.store)

    mp.spawn = spawn_this_rank
    sys.argv = [script, *rest]
    gloo_allreduce.main()


if __name__ == "__main__":
    main()
