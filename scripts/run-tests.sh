#!/usr/bin/env bash
# All the tests: the release build in build/ runs every ctest; then an ASan+UBSan build in
# build-asan/ runs the unit, mr, mp and net tests (net: the socket transport, the proxy and
# ranks over TCP, namespaces included; about 1.5 minutes more than without). Tests fork
# processes and spin: at most -j2.
# A failed build or test does not stop the rest; the exit status reports any failure.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
install_deps
fail=0

echo "== release build and all tests"
configure build
build build || fail=1
ctest --test-dir "$ROOT/build" --output-on-failure -j "$JOBS" || fail=1

echo "== ASan+UBSan build: unit, mr, mp and net tests"
labels='^(unit|mr|mp|net)$'
configure build-asan -DSNCCL_SANITIZE=ON -DSNCCL_BUILD_BENCHMARKS=OFF
mapfile -t targets < <(test_targets build-asan "$labels")
build build-asan "${targets[@]}" || fail=1
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$ROOT/build-asan" --output-on-failure -j "$JOBS" -L "$labels" || fail=1

echo "== run-tests.sh: $( ((fail)) && echo FAILED || echo all passed)"
exit "$fail"
