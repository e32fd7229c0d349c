#!/usr/bin/env bash
# rdma_compare.sh: snccl's IB net against perftest on the same Soft-RoCE path, in one
# QEMU guest of tests/rdma/rxe_vm.sh (loopback RoCE on rxe0), measured in interleaved
# rounds so that both see the same machine load; prints the median of each.
#
#   perf/rdma_compare.sh [-r ROUNDS] [-n ITERS] [-b BUILD_DIR] [-a OTHER_BUILD_DIR] [-e 'VAR=v ...'] [-x] [-s]
#
# (default 3 rounds, 24 iterations of each size, build/). Every tool runs the same ITERS
# timed iterations of a size, so perftest and snccl move the same bytes (a short run
# weighs its pipeline's start and end more). -a: every sn_*_perf row again with another
# build (rows named LABEL@DIR), in the same rounds, for an A/B of two versions on the
# same device and load.
# -e: every sn_*_perf row again with these settings in the ranks' environment (rows named
# LABEL@env), e.g. -e 'SNCCL_NET_STEPS=4 SNCCL_NET_BUFFSIZE=2M'. -x: leave out the UCX rows.
# -s: only the sendrecv rows and their reference (ib_write_bw -b), for more rounds in the
# same time. Under the medians, each snccl row's ratio to its perftest reference is also
# taken round by round, and the median of those printed: on a shared host both tools'
# rates swing from round to round, and the ratio within a round swings less.
#
# Rows:
#   ib_write_bw SIZE       perftest, one direction, average MB/s
#   ib_write_bw -b SIZE    perftest, both directions at once, MB/s per direction
#   sendrecv SIZE          sn_sendrecv_perf on 2 ranks (each sends SIZE to the other at
#                          once, like -b): busbw in MB/s; _unreg: buffers not registered
#                          with the communicator (they go through the ring's registered
#                          slots, a copy each side), _registered: ncclCommRegister (-R 1)
#   allreduce SIZE         sn_allreduce_perf on 2 ranks, busbw MB/s, unregistered
#   broadcast SIZE         sn_broadcast_perf on 2 ranks: rank 0 sends to rank 1 only, so its
#                          reference is ib_write_bw (one direction); _unreg and _registered
#   ib_write_lat 8         perftest, typical us;  sendrecv 8: sn_sendrecv_perf time, us
#   ucx_put_bw SIZE        ucx_perftest put_bw over UCX's rc_verbs transport (UCT, zero
#                          copy), one direction: UCX's own RDMA-write rate on this device
#   ucx_broadcast/_sendrecv the same sn_*_perf runs over the UCX net (SNCCL_NET=UCX,
#                          UCX_TLS=rc_verbs, SNCCL_UCX_CONNECT=sockaddr), unregistered
# The guest's CPUs are emulated (TCG): absolute numbers are tens of MB/s and say nothing
# about hardware; the ratios compare the two software paths on one device.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=3 iters=24 build=build other= noucx= settings= only=
if [ "${1:-}" = --guest ]; then
  guest=1
  shift
fi
while getopts "r:n:b:a:e:xsh" o; do
  case $o in
    r) rounds=$OPTARG ;;
    n) iters=$OPTARG ;;
    b) build=$OPTARG ;;
    a) other=$OPTARG ;;
    e) settings=$OPTARG ;;
    x) noucx=1 ;;
    s) only=sendrecv ;;
    *) sed -n '2,36p' "$0"; exit 2 ;;
  esac
done

if [ -z "${guest:-}" ]; then
  cd "$ROOT"
  exec tests/rdma/rxe_vm.sh single -t 1500 -- \
    "perf/rdma_compare.sh --guest -r $rounds -n $iters -b $build${other:+ -a $other}${settings:+ -e '$settings'}${noucx:+ -x}${only:+ -s}"
fi

# ---- in the guest ----------------------------------------------------------------------
PT=tests/rdma/perftest_run.sh
out=/tmp/rdma_compare
mkdir -p "$out"
: >"$out/rows"
row() { echo "$1 $2 $3 $r" >>"$out/rows"; }  # LABEL SIZE VALUE, in round $r

perftest_bw() {  # SIZE [-b]
  local v
  # A failed run (its server not up in time) leaves no row for this round, not the script.
  v=$(PERFTEST_TIMEOUT=120 $PT loop ib_write_bw -s "$1" -n "$iters" ${2:-} |
      awk -v s="$1" '$1 == s {print $4}' | tail -1) || v=
  [ -n "$v" ] && [ "${v%%.*}" != 0 ] && row "ib_write_bw${2:+_bidir}" "$1" "$( [ -n "${2:-}" ] && awk -v v="$v" 'BEGIN{print v/2}' || echo "$v")"
  return 0
}

# The net the sn_*_perf runs use: NET=ucx (below) for the UCX net over UCX's verbs transport.
netenv() {
  if [ "${NET:-ib}" = ucx ]; then
    echo SNCCL_NET=UCX SNCCL_UCX_CONNECT=sockaddr UCX_TLS=rc_verbs UCX_NET_DEVICES="$SNCCL_RXE_DEV:1"
  else
    echo SNCCL_NET=IB
  fi
}

snperf() {  # TOOL LABEL EXTRA_ARGS...: with $build, then with $other as LABEL@$other
  local tool=$1 label=$2
  shift 2
  snperf_with "$build" "$tool" "$label" "$@"
  [ -z "$other" ] || snperf_with "$other" "$tool" "$label@$other" "$@"
  [ -z "$settings" ] || SETTINGS=$settings snperf_with "$build" "$tool" "$label@env" "$@"
}

snperf_with() {  # BUILD TOOL LABEL EXTRA_ARGS...; SETTINGS: more VAR=value words for env
  local build=$1 tool=$2 label=$3
  shift 3
  local common=(-b 1M -e 4M -f 4 -n "$iters" -w 2 "$@")
  # shellcheck disable=SC2046,SC2086  # netenv's and SETTINGS' words are separate assignments
  env $(netenv) ${SETTINGS:-} SNCCL_SOCKET_IFNAME="$SNCCL_RXE_IFNAME" MASTER_ADDR="$SNCCL_RXE_ADDR" MASTER_PORT=29600 \
    WORLD_SIZE=2 RANK=1 SNCCL_HOSTID=b "$build/perf/sn_${tool}_perf" "${common[@]}" >"$out/r1" 2>&1 &
  # shellcheck disable=SC2046,SC2086
  env $(netenv) ${SETTINGS:-} SNCCL_SOCKET_IFNAME="$SNCCL_RXE_IFNAME" MASTER_ADDR="$SNCCL_RXE_ADDR" MASTER_PORT=29600 \
    WORLD_SIZE=2 RANK=0 SNCCL_HOSTID=a "$build/perf/sn_${tool}_perf" "${common[@]}" >"$out/r0" 2>&1 || true
  wait || true
  # bytes / time (column 6, us) = MB/s: busbw for sendrecv and for allreduce on 2 ranks
  # (the table's GB/s has too few digits at these rates); for broadcast on 2 ranks, busbw
  # is bytes / time as well
  awk -v l="$label" -v r="$r" '$1 ~ /^[0-9]+$/ && NF >= 9 && $6 > 0 {printf "%s %s %.1f %d\n", l, $1, $1 / $6, r}' \
    "$out/r0" >>"$out/rows"
}

ucx_put_bw() {  # SIZE
  local n=$iters v
  timeout 120 ucx_perftest -t put_bw -D zcopy -x rc_verbs -d "$SNCCL_RXE_DEV:1" -s "$1" -n "$n" >/dev/null 2>&1 &
  sleep 1
  v=$(timeout 120 ucx_perftest "$SNCCL_RXE_ADDR" -t put_bw -D zcopy -x rc_verbs -d "$SNCCL_RXE_DEV:1" -s "$1" -n "$n" 2>&1 |
      awk '/^Final:/ {print $6}')
  wait || true
  [ -n "$v" ] && row ucx_put_bw "$1" "$v"
}

snlat() {
  env SNCCL_NET=IB SNCCL_SOCKET_IFNAME="$SNCCL_RXE_IFNAME" MASTER_ADDR="$SNCCL_RXE_ADDR" MASTER_PORT=29601 \
    WORLD_SIZE=2 RANK=1 SNCCL_HOSTID=b "$build/perf/sn_sendrecv_perf" -b 8 -e 8 -n 200 -w 20 >"$out/r1" 2>&1 &
  env SNCCL_NET=IB SNCCL_SOCKET_IFNAME="$SNCCL_RXE_IFNAME" MASTER_ADDR="$SNCCL_RXE_ADDR" MASTER_PORT=29601 \
    WORLD_SIZE=2 RANK=0 SNCCL_HOSTID=a "$build/perf/sn_sendrecv_perf" -b 8 -e 8 -n 200 -w 20 >"$out/r0" 2>&1 || true
  wait || true
  awk -v r="$r" '$1 == 8 && NF >= 9 {print "sendrecv_lat_us 8", $6, r}' "$out/r0" >>"$out/rows"
}

for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds" >&2
  for s in 1048576 4194304; do
    [ -n "$only" ] || perftest_bw "$s"
    perftest_bw "$s" -b
  done
  snperf sendrecv sendrecv_unreg
  snperf sendrecv sendrecv_registered -R 1
  [ -z "$only" ] || continue
  snperf allreduce allreduce_unreg
  snperf broadcast broadcast_unreg
  snperf broadcast broadcast_registered -R 1
  if [ -z "$noucx" ] && command -v ucx_perftest >/dev/null; then
    for s in 1048576 4194304; do ucx_put_bw "$s"; done
    NET=ucx snperf broadcast ucx_broadcast_unreg
    NET=ucx snperf sendrecv ucx_sendrecv_unreg
  fi
  v=$(PERFTEST_TIMEOUT=60 $PT loop ib_write_lat -s 8 -n 500 | awk '$1 == 8 {print $5}' | tail -1) || v=
  [ -n "$v" ] && row ib_write_lat_us 8 "$v"
  snlat
done

echo "# median of $rounds interleaved rounds (MB/s per direction; latency in us)"
python3 - "$out/rows" <<'PY'
import statistics, sys
rows, by_round = {}, {}
for line in open(sys.argv[1]):
    k, size, v, r = line.split()
    rows.setdefault((k, int(size)), []).append(float(v))
    by_round[(k, int(size), int(r))] = float(v)
print(f"{'what':<22} {'bytes':>10} {'median':>10}  samples")
for (k, size), vs in sorted(rows.items()):
    print(f"{k:<22} {size:>10} {statistics.median(vs):>10.1f}  {' '.join(f'{v:g}' for v in vs)}")
# Each snccl row against perftest in the same round: both directions at once (sendrecv,
# allreduce) against ib_write_bw -b, one direction (broadcast) against ib_write_bw.
print("# ratio to perftest in the same round (median, then each round)")
for (k, size), vs in sorted(rows.items()):
    base = k.split("@")[0]
    ref = "ib_write_bw_bidir" if base.startswith(("sendrecv_", "allreduce_")) else "ib_write_bw" if base.startswith("broadcast_") else None
    if ref is None or "lat" in base:
        continue
    ratios = [v / by_round[(ref, size, r)] for (kk, s, r), v in sorted(by_round.items(), key=lambda x: x[0][2])
              if kk == k and s == size and by_round.get((ref, size, r), 0) > 0]
    if ratios:
        print(f"{k:<22} {size:>10} {statistics.median(ratios):>10.2f}  {' '.join(f'{x:.2f}' for x in ratios)}")
PY
