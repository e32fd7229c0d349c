#!/usr/bin/env bash
# compress_compare.sh: the compressing net (SNCCL_NET_COMPRESS) against plain messages
# between two emulated nodes (perf/netns_pair.sh), for sparse gradients (90% zeros) and for
# floats of random bits that do not compress, on a link shaped to each RATE in turn.
# The settings alternate run by run within each round (the setting is per process), and
# the table gives medians over the rounds.
#
#   perf/compress_compare.sh [-r "1000 0"] [-R ROUNDS] [-s SIZE] [-b BUILD_DIR]
#
# RATE in Mbit/s; 0 leaves the veth unshaped (as fast as memory: where compression does not
# pay). Per (rate, data, setting), after 4 calls that let each connection settle on whether
# to compress: the time of one ncclAllReduce of SIZE (default 64M) per rank at 2 ranks, the
# effective bandwidth (SIZE / time), the bytes rank 0's interface sent per call, and the
# speed relative to no compression. Needs root.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rates="1000 0" rounds=3 size=64M build=build
while getopts "r:R:s:b:h" o; do
  case $o in
    r) rates=$OPTARG ;;
    R) rounds=$OPTARG ;;
    s) size=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,15p' "$0"; exit 2 ;;
  esac
done
tool="$ROOT/$build/perf/sn_quant_perf"
[ -x "$tool" ] || { echo "compress_compare.sh: $tool not built" >&2; exit 2; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for rate in $rates; do
  shape=()
  [ "$rate" != 0 ] && shape=(-r "$rate")
  for round in $(seq "$rounds"); do
    for data in sparse random; do
      for codec in none lz4 zstd; do
        cmd="SNCCL_NET_COMPRESS=$codec $tool -k allreduce -P $data -b $size -e $size -r 1 -n 4"
        line=$("$ROOT/perf/netns_pair.sh" "${shape[@]}" -t 600 "$cmd" "$cmd >/dev/null" | awk '$2 == "allreduce"')
        echo "$rate $data $codec $line" >>"$out"
      done
    done
  done
done
# rate data codec size kind time speedup sent fewer err
python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 8:
        continue
    rows.setdefault((f[0], f[1], f[2]), []).append((float(f[5]), float(f[7]), int(f[3])))
print("| link | data | SNCCL_NET_COMPRESS | time per call | effective GB/s | sent per call | vs none |")
print("|---|---|---|---|---|---|---|")
for (rate, data, codec), v in rows.items():
    t = statistics.median(x[0] for x in v)
    sent = statistics.median(x[1] for x in v)
    base = statistics.median(x[0] for x in rows[(rate, data, "none")])
    link = "unshaped" if rate == "0" else f"{int(rate) / 1000:g} Gbit/s"
    print(f"| {link} | {data} | {codec} | {t / 1000:.1f} ms | {v[0][2] / t / 1e3:.2f} | "
          f"{sent / 1e6:.1f} MB | {base / t:.2f}x |")
PY
