#!/usr/bin/env bash
# Starts N local processes of an sn_*_perf tool in launch mode (c), the environment torchrun
# sets: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (plus LOCAL_RANK, LOCAL_WORLD_SIZE).
#
#   perf/launch_local.sh N <tool> [tool arguments...]
#   e.g. perf/launch_local.sh 2 build/perf/sn_allreduce_perf -b 8 -e 64M -f 2
#
# Rank 0 prints the table. The exit status is the first non-zero status of any rank (0 when
# all succeed). When one rank fails the others get a grace period, then are stopped, so a
# crashed peer never leaves the rest waiting forever. MASTER_PORT may be preset; otherwise
# a free port is picked.
set -u

if [ $# -lt 2 ] || ! [[ "$1" =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ]; then
  echo "usage: $0 N <tool> [args...]" >&2
  exit 6
fi
n=$1
tool=$2
shift 2
grace=${SN_PERF_LAUNCH_GRACE:-30}

pick_port() {
  # A free port below the kernel's ephemeral range (32768+), so that the listeners other
  # processes open on ephemeral ports meanwhile cannot take it before rank 0 binds it.
  python3 -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()' 2>/dev/null || echo $((20000 + RANDOM % 12000))
}

export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-$(pick_port)}
export WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n

# SN_PERF_BIND=1: pin rank r to CPU r mod ncpu (as mpirun --bind-to core does).
# SN_PERF_HOSTID_PER_RANK=1: every rank claims its own node (SNCCL_HOSTID=node<r>), so
# ranks talk over the network transport instead of shared memory.
ncpu=$(nproc)
pids=()
for ((r = 0; r < n; r++)); do
  wrap=()
  [ "${SN_PERF_BIND:-0}" = 1 ] && wrap=(taskset -c $((r % ncpu)))
  if [ "${SN_PERF_HOSTID_PER_RANK:-0}" = 1 ]; then
    RANK=$r LOCAL_RANK=$r SNCCL_HOSTID=node$r "${wrap[@]}" "$tool" "$@" &
  else
    RANK=$r LOCAL_RANK=$r "${wrap[@]}" "$tool" "$@" &
  fi
  pids+=($!)
done

# Stop our own ranks (by pid) when this script is interrupted.
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
}
trap 'stop_all; exit 130' INT TERM

status=0
finished=0
declare -A reaped=()
deadline=
while [ "$finished" -lt "$n" ]; do
  for p in "${pids[@]}"; do
    [ -n "${reaped[$p]:-}" ] && continue
    kill -0 "$p" 2>/dev/null && continue
    wait "$p"
    rc=$?
    reaped[$p]=1
    finished=$((finished + 1))
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$rc
      deadline=$((SECONDS + grace))  # the others notice and report, or are stopped
    fi
  done
  if [ -n "$deadline" ] && [ "$SECONDS" -ge "$deadline" ]; then
    stop_all
    deadline=
  fi
  sleep 0.1
done
exit "$status"
