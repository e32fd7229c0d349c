#!/usr/bin/env bash
# ib_rails.sh: one IB net connection over two NICs per node (SNCCL_IB_RAILS=2), adaptive
# against static striping and against one NIC alone, between two QEMU guests of
# tests/rdma/rxe_vm.sh (pair mode, -d 2: rxe0 on eth0, rxe1 on eth1, one link each).
#
#   perf/ib_rails.sh [-r ROUNDS] [-m MBIT] [-s SIZE] [-b BUILD_DIR]
#       ROUNDS interleaved rounds (default 3); MBIT: rail 1's rate in the "unequal" case,
#       tbf on eth1 in both guests (default 40); SIZE: bytes per rank (default 4M).
#
# Cases: "equal" (links as the emulator gives them) and "unequal" (rail 1 shaped to MBIT).
# Settings: "rail0" (NCCL_IB_HCA==rxe0: one NIC), "static" (both rails, equal parts),
# "adaptive" (both rails, parts by each queue pair's measured rate). Tools:
# sn_sendrecv_perf and sn_allreduce_perf on 2 ranks, one per guest; each row is the
# busbw (MB/s) of the slowest rank, median over the rounds. The guests' CPUs are emulated
# (TCG) and Soft-RoCE is CPU-bound there: rates are tens of MB/s and the two rails share
# one emulated CPU per guest, so only the ratios between settings mean something.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=3 mbit=40 size=4M build=build guest=
if [ "${1:-}" = --guest ]; then
  guest=1
  shift
fi
while getopts "r:m:s:b:h" o; do
  case $o in
    r) rounds=$OPTARG ;;
    m) mbit=$OPTARG ;;
    s) size=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done

if [ -z "$guest" ]; then
  cd "$ROOT"
  args="--guest -r $rounds -m $mbit -s $size -b $build"
  tests/rdma/rxe_vm.sh pair -d 2 -t 3000 -- "perf/ib_rails.sh $args" "perf/ib_rails.sh $args" |
    sed -n 's/^\[A\] ROW //p' >/tmp/ib_rails.rows
  echo "# busbw MB/s, median of $rounds interleaved rounds; rail 1 at $mbit Mbit/s when unequal"
  awk -f perf/median.awk -f /dev/stdin /tmp/ib_rails.rows <<'AWK'
{ k = $1 " " $2 " " $3; v[k] = v[k] " " $4; if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
END {
  printf "%-8s %-9s %-9s %8s  %s\n", "case", "tool", "setting", "busbw", "rounds"
  for (i = 1; i <= n; ++i) { split(order[i], f, " "); printf "%-8s %-9s %-9s %8.1f  %s\n", f[1], f[2], f[3], median(v[order[i]]), v[order[i]] }
}
AWK
  exit 0
fi

# ---- in a guest (A is rank 0, B rank 1; both walk the same steps, one port per step) ----
port=29700
run() {  # CASE TOOL SETTING ENV...
  local c=$1 tool=$2 setting=$3 out
  shift 3
  out=$(env "$@" SNCCL_NET=IB SNCCL_TIMEOUT=120 MASTER_PORT=$port \
    "$build/perf/sn_${tool}_perf" -b "$size" -e "$size" -n 6 -w 2 2>&1) || true
  port=$((port + 1))
  # bytes / time (us) = MB/s of busbw for sendrecv and for allreduce on 2 ranks
  if [ "$RANK" = 0 ]; then
    awk -v c="$c" -v t="$tool" -v s="$setting" \
      '$1 ~ /^[0-9]+$/ && NF >= 9 && $6 > 0 {printf "ROW %s %s %s %.1f\n", c, t, s, $1 / $6}' <<<"$out"
    [ -n "${IB_RAILS_VERBOSE:-}" ] && echo "$out" >&2
  fi
  return 0
}

for ((r = 1; r <= rounds; r++)); do
  for c in equal unequal; do
    tc qdisc del dev eth1 root 2>/dev/null || true
    # A deep queue, so that tbf delays rather than drops (a drop costs RC a timeout).
    [ $c = equal ] || tc qdisc add dev eth1 root tbf rate "${mbit}mbit" burst 16kb limit 16mb
    for tool in sendrecv allreduce; do
      run $c $tool rail0 NCCL_IB_HCA==rxe0
      run $c $tool static SNCCL_IB_RAILS=2 SNCCL_ROUTING=static
      run $c $tool adaptive SNCCL_IB_RAILS=2 SNCCL_ROUTING=adaptive
    done
  done
  if [ "$RANK" = 0 ]; then echo "round $r/$rounds done" >&2; fi
done
