#!/usr/bin/env bash
# Runs a pair of commands on two emulated nodes: rank 0 in network namespace A
# (10.77.0.1), rank 1 in namespace B (10.77.0.2), joined by one veth pair; everything is
# torn down on any exit (trap). Needs root and iproute2.
#
#   perf/netns_pair.sh [-r MBIT] [-t SECONDS] [-c CC] '<rank 0 command>' '<rank 1 command>'
#
# Each command runs under `bash -c` inside its namespace with, exported:
#   RANK (0|1), WORLD_SIZE=2, MASTER_ADDR=10.77.0.1, MASTER_PORT (free, or as preset),
#   NETNS_A_ADDR=10.77.0.1, NETNS_B_ADDR=10.77.0.2, NETNS_IFNAME, NETNS_SELF,
#   SNCCL_SOCKET_IFNAME==<veth>, SNCCL_HOSTID=netns-a|netns-b (so snccl sees two nodes and
#   uses its net transport, not shm, which would otherwise work across namespaces).
# So sn_*_perf tools in their environment launch mode need no arguments beyond their own:
#   perf/netns_pair.sh 'build/perf/sn_sendrecv_perf -b 1M -e 64M -f 8' \
#                      'build/perf/sn_sendrecv_perf -b 1M -e 64M -f 8'
#   perf/netns_pair.sh 'iperf3 -s -1 >/dev/null' 'sleep 0.5; iperf3 -c $MASTER_ADDR -t 5'
# -r shapes both directions with tbf (MBIT Mbit/s, burst 128 KiB). -t bounds the run
# (default 600 s). -c sets both namespaces' default TCP congestion control (the sysctl is
# per namespace), for programs that cannot choose their own (Open MPI, iperf3 without -C). The exit status is the first non-zero status of the two commands
# (124 on timeout). Rank 1 starts first; rank 0 runs in the foreground.
#
# Open MPI across the two namespaces: run mpirun as rank 0's command with the script itself
# as the rsh agent (exported as NETNS_RSH; it maps 10.77.0.2 to namespace B), rank 1 idle:
#   perf/netns_pair.sh 'mpirun --allow-run-as-root -np 2 --host 10.77.0.1:1,10.77.0.2:1 \
#       --mca plm_rsh_agent "$NETNS_RSH" --mca btl self,tcp --mca btl_tcp_if_include \
#       10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 ./mpi_allreduce -b 1M -e 64M -f 8' 'true'
set -euo pipefail

if [ "${1:-}" = --rsh ]; then  # rsh agent mode: --rsh HOST COMMAND...
  host=$2
  shift 2
  ns=$NETNS_SELF
  [ "$host" = "$NETNS_B_ADDR" ] && ns=${NETNS_SELF%a}b
  exec ip netns exec "$ns" bash -c "$*"
fi

rate="" limit=600 cc=""
while getopts "r:t:c:h" o; do
  case $o in
    r) rate=$OPTARG ;;
    t) limit=$OPTARG ;;
    c) cc=$OPTARG ;;
    *) sed -n '2,26p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ $# -ne 2 ]; then
  sed -n '2,26p' "$0" >&2
  exit 2
fi
if [ "$(id -u)" != 0 ]; then
  echo "netns_pair.sh: needs root (network namespaces); not run" >&2
  exit 3
fi

A="snpair$$a" B="snpair$$b" IFA=snpa0 IFB=snpb0
cleanup() {
  for ns in "$A" "$B"; do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  done
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$A"
ip netns add "$B"
ip link add "$IFA" netns "$A" type veth peer name "$IFB" netns "$B"
ip -n "$A" addr add 10.77.0.1/24 dev "$IFA"
ip -n "$B" addr add 10.77.0.2/24 dev "$IFB"
for ns in "$A" "$B"; do ip -n "$ns" link set lo up; done
ip -n "$A" link set "$IFA" up
ip -n "$B" link set "$IFB" up
# The carrier comes up asynchronously (the kernel's link watch, up to a second): wait for it,
# since some programs (UCX) skip interfaces that are not running yet.
for i in $(seq 100); do
  ip -n "$A" -br link show dev "$IFA" | grep -q ' UP ' && ip -n "$B" -br link show dev "$IFB" | grep -q ' UP ' && break
  sleep 0.05
done
if [ -n "$cc" ]; then
  for ns in "$A" "$B"; do ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc"; done
fi
if [ -n "$rate" ]; then
  tc -n "$A" qdisc add dev "$IFA" root tbf rate "${rate}mbit" burst 128kb latency 20ms
  tc -n "$B" qdisc add dev "$IFB" root tbf rate "${rate}mbit" burst 128kb latency 20ms
fi

export WORLD_SIZE=2 MASTER_ADDR=10.77.0.1 NETNS_A_ADDR=10.77.0.1 NETNS_B_ADDR=10.77.0.2
export MASTER_PORT=${MASTER_PORT:-$((20000 + RANDOM % 12000))}
NETNS_RSH="$(cd "$(dirname "$0")" && pwd)/$(basename "$0") --rsh"
export NETNS_RSH

run_rank() {  # rank ns ifname hostid command
  RANK=$1 NETNS_SELF=$2 NETNS_IFNAME=$3 SNCCL_SOCKET_IFNAME="=$3" SNCCL_HOSTID=$4 \
    timeout -k 5 "$limit" ip netns exec "$2" bash -c "$5"
}

run_rank 1 "$B" "$IFB" netns-b "$2" &
pid1=$!
rc0=0
run_rank 0 "$A" "$IFA" netns-a "$1" || rc0=$?
rc1=0
wait "$pid1" || rc1=$?
if [ "$rc0" != 0 ]; then exit "$rc0"; fi
exit "$rc1"
