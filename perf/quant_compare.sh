#!/usr/bin/env bash
# quant_compare.sh: the quantized AllReduce (int8, int4) against ncclAllReduce between two
# emulated nodes (network namespaces joined by a veth pair, perf/netns_pair.sh), the link
# shaped to RATE Mbit/s, side by side in one run (sn_quant_perf interleaves the three kinds
# over rounds and prints medians, bytes sent per call and the largest error).
#
#   perf/quant_compare.sh [-r MBIT] [-R ROUNDS] [-b BUILD_DIR] [-z CODEC] [-- sn_quant_perf options]
#
# Defaults: 1000 Mbit/s, 5 rounds, build/, 64 MiB. -r 0 leaves the link unshaped (the veth's
# own speed: where compression does not pay). -z CODEC (zstd, lz4) also runs int8 and int4
# with SNCCL_NET_COMPRESS=CODEC: the network layer is chosen once per process, so ROUNDS
# processes of each setting alternate (each one its own sn_quant_perf rounds, -r 3 unless
# given), and the summary gives per setting and kind the median over the processes, with
# "fewer" counted against the uncompressed ncclAllReduce. Needs root. Targets
# (docs/compression.md): at 1 Gbit/s, 64 MiB at least 3x faster than ncclAllReduce; at
# least 75% (int8) and 85% (int4) fewer bytes sent.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rate=1000 rounds=5 build=build codec=""
while getopts "r:R:b:z:h" o; do
  case $o in
    r) rate=$OPTARG ;;
    R) rounds=$OPTARG ;;
    b) build=$OPTARG ;;
    z) codec=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
tool="$ROOT/$build/perf/sn_quant_perf"
[ -x "$tool" ] || { echo "quant_compare.sh: $tool not built (ninja -C $build sn_quant_perf)" >&2; exit 2; }
shape=()
[ "$rate" != 0 ] && shape=(-r "$rate")
echo "# link: ${rate/#0/unshaped} Mbit/s"
if [ -z "$codec" ]; then
  args="-r $rounds -n 2 ${*:--b 64M -e 64M}"
  exec "$ROOT/perf/netns_pair.sh" "${shape[@]}" -t 900 "$tool $args" "$tool $args >/dev/null"
fi

# -z: alternate processes without and with the codec inside one pair of namespaces; rank 0
# tags each result line with its setting, and the summary takes medians over processes.
args="-r 3 -n 2 ${*:--b 64M -e 64M}"
run() {  # run RANK_REDIRECT: the loop both ranks execute
  echo "for i in \$(seq $rounds); do
    SNCCL_NET_COMPRESS=none $tool $args | sed 's/^ /none /' $1
    MASTER_PORT=\$((MASTER_PORT + 1)); sleep 0.5
    SNCCL_NET_COMPRESS=$codec $tool $args -k int8,int4 | sed 's/^ /$codec /' $1
    MASTER_PORT=\$((MASTER_PORT + 1)); sleep 0.5
  done"
}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$ROOT/perf/netns_pair.sh" "${shape[@]}" -t 1800 "$(run "")" "$(run ">/dev/null")" | tee "$out"
# Columns of a tagged line: setting, size, kind, time(us), speedup, sent/call(B), fewer, max err.
awk -v codec="$codec" -f "$ROOT/perf/median.awk" -f /dev/stdin "$out" <<'AWK'
  $1 == "none" || $1 == codec { key = $1 " " $2 " " $3; if (!(key in t)) order[++nk] = key
                                t[key] = t[key] " " $4; b[key] = b[key] " " $6 }
  END {
    print "# medians over processes"
    printf "# %7s %12s %10s %12s %8s %14s %9s\n", "setting", "size(B)", "kind", "time(us)", "speedup", "sent/call(B)", "fewer"
    for (k = 1; k <= nk; ++k) {
      split(order[k], f, " ")
      ref = "none " f[2] " allreduce"
      tm = median(t[order[k]]); bm = median(b[order[k]]); tr = median(t[ref]); br = median(b[ref])
      printf "  %7s %12s %10s %12.0f %7.2fx %14.0f %8.1f%%\n", f[1], f[2], f[3], tm, tr / tm, bm, 100 * (1 - bm / br)
    }
  }
AWK
