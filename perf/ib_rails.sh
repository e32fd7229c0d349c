#!/usr/bin/env bash
# ib_rails.sh: one IB net connection over two NICs per node (SNCCL_IB_RAILS=2), adaptive
# against static striping and against one NIC alone, between two QEMU guests of
# tests/rdma/rxe_vm.sh (pair mode, -d 2: rxe0 on eth0, rxe1 on eth1, one link each).
#
#   perf/ib_rails.sh [-r ROUNDS] [-m MBIT] [-d MS] [-c CASES] [-s SIZE] [-b BUILD_DIR] [-a BUILD_DIR]
#       ROUNDS interleaved rounds (default 3); MBIT: rail 1's rate in the "unequal" case,
#       tbf on eth1 in both guests (default 40); MS: rail 1's added one-way delay in the
#       "delay" case (default 10); CASES: which to run (default "equal unequal delay");
#       SIZE: bytes per rank (default 4M); -a: also run "adaptive" with that build (the
#       setting "adaptive-a"), for an A/B in the same rounds. Build directories must lie
#       outside /tmp, which is the guests' own.
#
# Cases: "equal" (links as the emulator gives them), "unequal" (rail 1 shaped to MBIT) and
# "delay" (rail 1 at full rate, every packet held MS by netem on eth1 in both guests: what
# a queue that other flows keep standing in a switch, or a longer route, costs a rail).
# Settings: "rail0" (NCCL_IB_HCA==rxe0: one NIC), "static" (both rails, equal parts),
# "adaptive" (both rails, parts by each queue pair's measured rate). Tools:
# sn_sendrecv_perf and sn_allreduce_perf on 2 ranks, one per guest; each row is the
# busbw (MB/s) of the slowest rank, median over the rounds. The guests' CPUs are emulated
# (TCG) and Soft-RoCE is CPU-bound there: rates are tens of MB/s and the two rails share
# one emulated CPU per guest, so only the ratios between settings mean something.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=3 mbit=40 delay=10 other= cases="equal unequal delay" size=4M build=build guest=
if [ "${1:-}" = --guest ]; then
  guest=1
  shift
fi
while getopts "r:m:d:c:s:b:a:h" o; do
  case $o in
    r) rounds=$OPTARG ;;
    m) mbit=$OPTARG ;;
    d) delay=$OPTARG ;;
    c) cases=$OPTARG ;;
    s) size=$OPTARG ;;
    b) build=$OPTARG ;;
    a) other=$OPTARG ;;
    *) sed -n '2,24p' "$0"; exit 2 ;;
  esac
done

if [ -z "$guest" ]; then
  cd "$ROOT"
  args="--guest -r $rounds -m $mbit -d $delay -c '$cases' -s $size -b $build${other:+ -a $other}"
  tests/rdma/rxe_vm.sh pair -d 2 -t 3000 -- "perf/ib_rails.sh $args" "perf/ib_rails.sh $args" |
    sed -n 's/^\[A\] ROW //p' >/tmp/ib_rails.rows
  echo "# busbw MB/s, median of $rounds interleaved rounds; rail 1 at $mbit Mbit/s when unequal, $delay ms late when delay"
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
  local c=$1 tool=$2 setting=$3 out bin=$build
  shift 3
  [ "$setting" = adaptive-a ] && bin=$other
  out=$(env "$@" SNCCL_NET=IB SNCCL_TIMEOUT=120 MASTER_PORT=$port \
    "$bin/perf/sn_${tool}_perf" -b "$size" -e "$size" -n 6 -w 2 2>&1) || true
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
  for c in $cases; do
    tc qdisc del dev eth1 root 2>/dev/null || true
    # Deep queues, so that the qdiscs delay rather than drop (a drop costs RC a timeout).
    case $c in
      unequal) tc qdisc add dev eth1 root tbf rate "${mbit}mbit" burst 16kb limit 16mb ;;
      delay) tc qdisc add dev eth1 root netem delay "${delay}ms" limit 100000 ;;
    esac
    for tool in sendrecv allreduce; do
      run $c $tool rail0 NCCL_IB_HCA==rxe0
      run $c $tool static SNCCL_IB_RAILS=2 SNCCL_ROUTING=static
      run $c $tool adaptive SNCCL_IB_RAILS=2 SNCCL_ROUTING=adaptive
      [ -z "$other" ] || run $c $tool adaptive-a SNCCL_IB_RAILS=2 SNCCL_ROUTING=adaptive
    done
  done
  if [ "$RANK" = 0 ]; then echo "round $r/$rounds done" >&2; fi
done
