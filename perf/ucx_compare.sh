#!/usr/bin/env bash
# ucx_compare.sh: the UCX net (SNCCL_NET=UCX) against UCX's own ucx_perftest on the same
# path: two emulated nodes (perf/netns_pair.sh) joined by a veth, UCX_TLS=tcp on the veth.
# For each size, rounds interleave:
#   - ucx_perftest tag_bw (busy polling, and -E sleep: waiting on UCX's event descriptor,
#     as snccl's proxy does);
#   - sn_broadcast_perf on 2 ranks over the UCX net: data goes one way, as in tag_bw;
#   - sn_sendrecv_perf over the UCX net: both ranks send at once, each direction's rate;
#   - sn_sendrecv_perf over the Socket net.
# The table gives median GB/s over the rounds, and the one-way UCX figure's share of
# ucx_perftest's (the like-for-like comparison; sendrecv moves twice the data).
# Latency: ucx_perftest tag_lat against sn_sendrecv_perf at 8 bytes (its time is one
# send/receive each way, a round trip, like tag_lat's ping-pong; tag_lat reports half).
#
#   perf/ucx_compare.sh [-R ROUNDS] [-s "1M 4M 16M"] [-b BUILD_DIR]
#
# Needs root, iproute2 and ucx-utils (ucx_perftest).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=3 sizes="1M 4M 16M" build=build
while getopts "R:s:b:h" o; do
  case $o in
    R) rounds=$OPTARG ;;
    s) sizes=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
tools="$ROOT/$build/perf"
for t in sn_sendrecv_perf sn_broadcast_perf; do
  [ -x "$tools/$t" ] || { echo "ucx_compare.sh: $tools/$t not built" >&2; exit 2; }
done
command -v ucx_perftest >/dev/null || { echo "ucx_compare.sh: ucx_perftest missing (apt-get install ucx-utils)" >&2; exit 2; }
pair="$ROOT/perf/netns_pair.sh"
ucxenv='UCX_TLS=tcp UCX_NET_DEVICES=$NETNS_IFNAME'
out=$(mktemp)
trap 'rm -f "$out" /tmp/ucx_compare.$$' EXIT

bytes() { numfmt --from=iec "$1"; }

# ucx_perftest TEST SIZE MODE: prints MB/s (tag_bw) or usec (tag_lat), from the client.
perftest() {
  "$pair" -t 120 "$ucxenv ucx_perftest -t $1 -s $2 -n 200 -w 20 -E $3 >/dev/null 2>&1" \
    "sleep 0.5; $ucxenv ucx_perftest \$NETNS_A_ADDR -t $1 -s $2 -n 200 -w 20 -E $3 >/tmp/ucx_compare.$$ 2>&1" >/dev/null
  awk -v t="$1" '/^Final:/ {print (t == "tag_lat") ? $4 : $6}' /tmp/ucx_compare.$$
}

# snccl TOOL NET SIZE: prints rank 0's out-of-place algbw (GB/s) and time (us).
snccl() {
  local env="SNCCL_NET=$2 $ucxenv" cmd="$tools/$1 -b $3 -e $3 -n 50 -w 5"
  "$pair" -t 120 "$env $cmd" "$env $cmd >/dev/null" | awk '!/^#/ && NF > 8 {print $7, $6}'
}

for round in $(seq "$rounds"); do
  for s in $sizes; do
    b=$(bytes "$s")
    echo "$s perftest_poll $(perftest tag_bw "$b" poll)" >>"$out"
    echo "$s perftest_sleep $(perftest tag_bw "$b" sleep)" >>"$out"
    echo "$s ucx_oneway $(snccl sn_broadcast_perf UCX "$b")" >>"$out"
    echo "$s ucx $(snccl sn_sendrecv_perf UCX "$b")" >>"$out"
    echo "$s socket $(snccl sn_sendrecv_perf Socket "$b")" >>"$out"
  done
  echo "lat perftest_lat $(perftest tag_lat 8 poll)" >>"$out"
  echo "lat ucx_lat $(snccl sn_sendrecv_perf UCX 8)" >>"$out"
done

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
col() { awk -v s="$1" -v k="$2" -v c="$3" '$1 == s && $2 == k {print $c}' "$out" | median; }

echo "# UCX_TLS=tcp between two network namespaces; median of $rounds rounds"
printf "%-6s %14s %15s %14s %16s %16s %18s\n" size perftest_poll perftest_sleep ucx_one_way ucx_sendrecv \
  socket_sendrecv "one-way/perftest"
for s in $sizes; do
  pp=$(col "$s" perftest_poll 3) ps=$(col "$s" perftest_sleep 3) o=$(col "$s" ucx_oneway 3)
  u=$(col "$s" ucx 3) k=$(col "$s" socket 3)
  printf "%-6s %11.2f GB/s %10.2f GB/s %9.2f GB/s %11.2f GB/s %11.2f GB/s %9.0f%% / %3.0f%%\n" "$s" \
    "$(echo "$pp / 1000" | bc -l)" "$(echo "$ps / 1000" | bc -l)" "$o" "$u" "$k" \
    "$(echo "100 * $o * 1000 / $pp" | bc -l)" "$(echo "100 * $o * 1000 / $ps" | bc -l)"
done
printf "latency, 8 B: ucx_perftest tag_lat %.1f us one way; snccl UCX send+recv round trip %.1f us\n" \
  "$(col lat perftest_lat 3)" "$(col lat ucx_lat 4)"
