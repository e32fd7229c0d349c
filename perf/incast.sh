#!/usr/bin/env bash
# incast.sh: AlltoAll (or Gather) on N emulated nodes whose links meet in one switch, with
# and without incast control (SNCCL_INCAST_SENDERS), the settings interleaved over rounds.
#
#   perf/incast.sh [-n NODES] [-r MBIT] [-q QUEUE_KB] [-k "0 1 2"] [-R ROUNDS] [-s SIZE]
#                  [-i ITERS] [-c alltoall|gather] [-b BUILD_DIR]
#
# The fabric: a namespace "switch" holding a bridge, and one namespace per node (one rank
# each, SNCCL_HOSTID per node, so ranks talk over the socket net) joined to it by a veth
# pair. Every link is shaped to MBIT Mbit/s both ways with tbf; the switch's port toward
# each node queues at most QUEUE_KB KiB, a shallow switch buffer, where the traffic of
# several senders into one node meets and overflows. Defaults: 8 nodes, 200 Mbit/s, 64 KiB,
# settings "0 2" (0: no incast control), 3 rounds, SIZE 4M (bytes per rank, as the sn_*_perf
# -b), 100 calls per setting and round.
#
# Each (setting, round) runs build/perf/sn_<coll>_perf -I 1 (every call timed on its own,
# after a barrier; a call lasts until its slowest rank returns) and the table gives, per
# setting, the medians over rounds of the per-call median, 99th percentile and largest time
# (out of place), and the bus bandwidth at the median call (SIZE x (n-1)/n over its time).
# Needs root.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nodes=8 rate=200 queue=64 settings="0 2" rounds=3 size=4M iters=100 coll=alltoall build=build
while getopts "n:r:q:k:R:s:i:c:b:h" o; do
  case $o in
    n) nodes=$OPTARG ;;
    r) rate=$OPTARG ;;
    q) queue=$OPTARG ;;
    k) settings=$OPTARG ;;
    R) rounds=$OPTARG ;;
    s) size=$OPTARG ;;
    i) iters=$OPTARG ;;
    c) coll=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,20p' "$0"; exit 2 ;;
  esac
done
tool="$ROOT/$build/perf/sn_${coll}_perf"
[ -x "$tool" ] || { echo "incast.sh: $tool not built" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "incast.sh: needs root (network namespaces); not run" >&2; exit 3; }
[ "$nodes" -ge 2 ] && [ "$nodes" -le 16 ] || { echo "incast.sh: -n takes 2..16 nodes" >&2; exit 2; }

SW="sninc$$s"
node_ns() { echo "sninc$$n$1"; }
cleanup() {
  for i in $(seq 0 $((nodes - 1))) sw; do
    ns=$([ "$i" = sw ] && echo "$SW" || node_ns "$i")
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$SW"
ip -n "$SW" link add br0 type bridge
ip -n "$SW" link set br0 up
for i in $(seq 0 $((nodes - 1))); do
  ns=$(node_ns "$i")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add eth0 netns "$ns" type veth peer name "port$i" netns "$SW"
  ip -n "$ns" addr add "10.79.0.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$SW" link set "port$i" master br0 up
  # The node's own NIC: the kernel's TCP backs off into this queue, so it may be deep.
  tc -n "$ns" qdisc add dev eth0 root tbf rate "${rate}mbit" burst 32kb limit 4mb
  # The switch's port toward the node: a shallow buffer that drops what overflows it.
  tc -n "$SW" qdisc add dev "port$i" root tbf rate "${rate}mbit" burst 32kb limit "${queue}kb"
done
for i in $(seq 100); do  # carriers come up asynchronously
  up=0
  for n in $(seq 0 $((nodes - 1))); do ip -n "$(node_ns "$n")" -br link show dev eth0 | grep -q ' UP ' && up=$((up + 1)); done
  [ "$up" = "$nodes" ] && break
  sleep 0.05
done

# One run: every rank in its namespace, rank 0 in the foreground; prints rank 0's output.
run() {  # run SETTING PORT
  local pids=() rc=0
  for i in $(seq 1 $((nodes - 1))); do
    RANK=$i WORLD_SIZE=$nodes MASTER_ADDR=10.79.0.1 MASTER_PORT=$2 SNCCL_SOCKET_IFNAME="=eth0" \
      SNCCL_HOSTID="node$i" SNCCL_INCAST_SENDERS=$1 timeout -k 5 600 \
      ip netns exec "$(node_ns "$i")" "$tool" -b "$size" -e "$size" -n "$iters" -w 3 -I 1 >/dev/null &
    pids+=($!)
  done
  RANK=0 WORLD_SIZE=$nodes MASTER_ADDR=10.79.0.1 MASTER_PORT=$2 SNCCL_SOCKET_IFNAME="=eth0" \
    SNCCL_HOSTID=node0 SNCCL_INCAST_SENDERS=$1 timeout -k 5 600 \
    ip netns exec "$(node_ns 0)" "$tool" -b "$size" -e "$size" -n "$iters" -w 3 -I 1 || rc=$?
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}

echo "# incast.sh: $coll, $nodes nodes, ${rate} Mbit/s links, ${queue} KiB switch queues, $size per rank, $iters calls"
out=$(mktemp)
trap 'rm -f "$out"; cleanup' EXIT
port=$((20000 + RANDOM % 10000))
for round in $(seq "$rounds"); do
  for k in $settings; do
    port=$((port + 1))
    # busbw in MB/s at the median call: the size (column 1 of the row, B) over the slowest
    # rank's median time per call (us).
    run "$k" "$port" | awk -v k="$k" -v n="$nodes" '
      /^ +[0-9]+ +[0-9]+ / { size = $1 }
      /^#  per call \(us\)/ { print k, size * (n - 1) / n / $9, $9, $11, $13 + 0 }' >> "$out"
  done
done
awk -v settings="$settings" -f "$ROOT/perf/median.awk" -f /dev/stdin "$out" <<'AWK'
  { bw[$1] = bw[$1] " " $2; p50[$1] = p50[$1] " " $3; p99[$1] = p99[$1] " " $4; mx[$1] = mx[$1] " " $5 }
  END {
    printf "| SNCCL_INCAST_SENDERS | busbw at p50 (MB/s) | per call p50 (ms) | p99 (ms) | max (ms) |\n|---|---|---|---|---|\n"
    n = split(settings, s, " ")
    for (i = 1; i <= n; ++i)
      printf "| %s | %.1f | %.1f | %.1f | %.1f |\n", s[i], median(bw[s[i]]), median(p50[s[i]]) / 1000,
             median(p99[s[i]]) / 1000, median(mx[s[i]]) / 1000
  }
AWK
