#!/usr/bin/env bash
# quant_compare.sh: the quantized AllReduce (int8, int4) against ncclAllReduce between two
# emulated nodes (network namespaces joined by a veth pair, perf/netns_pair.sh), the link
# shaped to RATE Mbit/s, side by side in one run (sn_quant_perf interleaves the three kinds
# over rounds and prints medians, bytes sent per call and the largest error).
#
#   perf/quant_compare.sh [-r MBIT] [-R ROUNDS] [-b BUILD_DIR] [-- sn_quant_perf options]
#
# Defaults: 1000 Mbit/s, 5 rounds, build/, 64 MiB. -r 0 leaves the link unshaped (the veth's
# own speed: where compression does not pay). Needs root. Targets (docs/compression.md): at
# 1 Gbit/s, 64 MiB at least 3x faster than ncclAllReduce; at least 75% (int8) and 85%
# (int4) fewer bytes sent.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rate=1000 rounds=5 build=build
while getopts "r:R:b:h" o; do
  case $o in
    r) rate=$OPTARG ;;
    R) rounds=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
tool="$ROOT/$build/perf/sn_quant_perf"
[ -x "$tool" ] || { echo "quant_compare.sh: $tool not built (ninja -C $build sn_quant_perf)" >&2; exit 2; }
args="-r $rounds -n 2 ${*:--b 64M -e 64M}"
shape=()
[ "$rate" != 0 ] && shape=(-r "$rate")
echo "# link: ${rate/#0/unshaped} Mbit/s"
exec "$ROOT/perf/netns_pair.sh" "${shape[@]}" -t 900 "$tool $args" "$tool $args >/dev/null"
