#!/usr/bin/env bash
# Installs a build into a temporary prefix and uses it the way a downstream project would.
# usage: install_test.sh BUILD_DIR CONSUMER_SRC_DIR C_COMPILER CXX_COMPILER
set -euo pipefail
build=$1 src=$2 cc=$3 cxx=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(dirname "$(find "$prefix" -name snccl.pc)")/..
for f in include/snccl/nccl.h include/snccl/snccl.h bin/sn_info bin/sn_allreduce_perf; do
  [[ -e $prefix/$f ]] || { echo "not installed: $f"; exit 1; }
done
for f in libsnccl.so libsnccl.so.0 snccl/libnccl.so snccl/libnccl.so.2; do
  [[ -e $libdir/$f ]] || { echo "not installed: <libdir>/$f"; exit 1; }
done
echo "== installed into $prefix"

echo "== CMake consumer (find_package(snccl))"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$src" -B "$tmp/cmake-build" "${gen[@]}" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
"$tmp/cmake-build/consumer"

echo "== C consumer (pkg-config)"
export PKG_CONFIG_PATH=$libdir/pkgconfig
"$cc" -std=c99 -Wall -Werror "$src/consumer.c" -o "$tmp/c-consumer" $(pkg-config --cflags --libs snccl) -pthread
LD_LIBRARY_PATH=$libdir "$tmp/c-consumer"

echo "== the same C program linked with -lnccl, run on the installed drop-in"
"$cc" -std=c99 "$src/consumer.c" -o "$tmp/c-dropin" $(pkg-config --cflags snccl) -L"$libdir/snccl" -lnccl -pthread
LD_LIBRARY_PATH=$libdir/snccl "$tmp/c-dropin"

echo "== installed tools"
"$prefix/bin/sn_info" --transports | grep -w shm
"$prefix/bin/sn_allreduce_perf" -b 8 -e 1K -f 4 -g 2 -n 2 | tail -3
