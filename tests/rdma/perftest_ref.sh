#!/usr/bin/env bash
# perftest_ref.sh: the reference numbers of the rxe path that snccl's verbs transport is
# measured against: perftest's ib_write_bw (average MB/s) and ib_write_lat (typical usec)
# over rxe0 at 64 KiB, 256 KiB, 1 MiB and 4 MiB, in rxe_vm.sh's single mode (loopback RoCE
# on dummy0, server and client in one guest) and pair mode (two guests over a QEMU socket
# link, server on A, client on B, no shaping). Takes 1.5 to 2 minutes on 2 cores.
#
# Usage: tests/rdma/perftest_ref.sh [single|pair|both]    (default both)
# Prints a table, one row per mode and size, and the guests' boot and run times. Exit
# status: 0, 77 when rxe_vm.sh skips (its "RXE-VM SKIP:" line says why), else non-zero with
# the perftest output.
# The numbers are QEMU TCG's: tens of MB/s, for comparing transports on the same path, not
# for judging RDMA hardware.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly HERE
readonly SELF=$HERE/perftest_ref.sh
readonly SIZES=(65536 262144 1048576 4194304)

# bw_iters SIZE / lat_iters SIZE: about 8 MiB per bandwidth run, fewer round trips for
# larger latency samples: each transfer takes well under a second under TCG, less than
# starting perftest and connecting does.
bw_iters() { local n=$((8388608 / $1)); echo $((n < 5 ? 5 : n)); }  # perftest wants at least 5
lat_iters() {
  case $1 in 65536) echo 30 ;; 262144) echo 20 ;; 1048576) echo 10 ;; *) echo 5 ;; esac
}

# guest ROLE: runs in a guest (ROLE loop, server or client); the client side prints
# "ROW bw SIZE MBPS" and "ROW lat SIZE USEC" lines.
guest() {
  local role=$1 size out try
  for size in "${SIZES[@]}"; do
    out=$("$HERE/perftest_run.sh" "$role" ib_write_bw -s "$size" -n "$(bw_iters "$size")") ||
      { echo "$out"; return 1; }
    [[ $role == server ]] || awk -v s="$size" '$1 == s {print "ROW bw", s, $4}' <<<"$out"
    for try in 1 2; do
      out=$("$HERE/perftest_run.sh" "$role" ib_write_lat -s "$size" -n "$(lat_iters "$size")") ||
        { echo "$out"; return 1; }
      # With two vCPUs (single mode) a TCG guest's TSCs can disagree, and a process that
      # moves between them may get a time of "inf": measure again, once (loop mode only,
      # where no peer has to follow).
      if [[ $role != loop ]] || ((try == 2)) ||
         awk -v s="$size" '$1 == s && $5 ~ /^[0-9.]+$/ {ok = 1} END {exit !ok}' <<<"$out"; then
        break
      fi
    done
    [[ $role == server ]] || awk -v s="$size" '$1 == s {print "ROW lat", s, $5}' <<<"$out"
  done
}

# measure MODE: one rxe_vm.sh run; appends "MODE SIZE MBPS USEC" rows to $rows
measure() {
  local mode=$1 log rc=0
  log=$(mktemp)
  if [[ $mode == single ]]; then
    "$HERE/rxe_vm.sh" single -t 300 -- "$SELF --guest loop" >"$log" 2>&1 || rc=$?
  else
    "$HERE/rxe_vm.sh" pair -t 300 -- "$SELF --guest server" "$SELF --guest client" >"$log" 2>&1 ||
      rc=$?
  fi
  if ((rc != 0)); then
    cat "$log" >&2
    rm -f "$log"
    return "$rc"
  fi
  grep '^RXE-VM: .*boot' "$log" | sed "s/^RXE-VM: /  $mode: /" >>"$times"
  awk -v m="$mode" '{sub(/^\[[AB]\] /, "")} $1 == "ROW" {v[$3 " " $2] = $4; s[$3] = 1}
    END {for (z in s) print m, z, (v[z " bw"] == "" ? "-" : v[z " bw"]), (v[z " lat"] == "" ? "-" : v[z " lat"])}' \
    "$log" | sort -k2,2n >>"$rows"
  rm -f "$log"
}

if [[ ${1:-} == --guest ]]; then
  guest "$2"
  exit
fi
case ${1:-both} in
  single) modes=(single) ;;
  pair) modes=(pair) ;;
  both) modes=(single pair) ;;
  *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$SELF" >&2; exit 2 ;;
esac
rows=$(mktemp)
times=$(mktemp)
trap 'rm -f "$rows" "$times"' EXIT
start=$SECONDS
for mode in "${modes[@]}"; do
  measure "$mode"
done
echo "perftest over rxe0 (Soft-RoCE, QEMU TCG): ib_write_bw average, ib_write_lat typical"
printf '%-8s %10s %10s %12s\n' mode size MB/s usec
while read -r mode size bw lat; do
  printf '%-8s %10s %10s %12s\n' "$mode" "$size" "$bw" "$lat"
done <"$rows"
echo "guests (boot = QEMU start to command start):"
cat "$times"
echo "total $((SECONDS - start)) s"
