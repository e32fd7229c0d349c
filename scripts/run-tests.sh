#!/usr/bin/env bash
# All the tests: the release build in build/ runs every ctest (its torch backend against
# Debian's torch 1.13); build-torch2/ is pip's build of the backend (pyproject.toml) for
# torch 2.x from PyPI (scripts/deps.sh: torch2_venv), whose torch tests run there and whose
# wheel is installed and run from outside the tree (with ccache, it compiles only the
# extension: the library's objects are the release build's); the rdma-labelled ones (verbs
# over Soft-RoCE in QEMU guests, tests/rdma/rxe_vm.sh; about 4 minutes) as a tier of their own
# with their own count; then an ASan+UBSan build in build-asan/ runs the unit, mr, mp and net
# tests (net: the socket transport, the proxy and ranks over TCP, namespaces included; about
# 1.5 minutes more than without); then a ThreadSanitizer build in build-tsan/ runs the tests
# whose ranks are threads (label tsan, tests/CMakeLists.txt says what it leaves out; about 4
# minutes, half of it the build); then the libFuzzer harnesses of fuzz/ in build-fuzz/ (clang),
# each over its seeds and 10 s of fuzzing, two at a time (scripts/fuzz.sh; about 2 minutes;
# SKIP without clang). Tests fork processes and spin: at most -j2.
# A failed build or test does not stop the rest; the exit status reports any failure. The
# end lists how long each stage took.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
stage_times=()
stage_name="" stage_start=$SECONDS
# Starts the next stage: prints its header and records how long the previous one took.
stage() {
  [[ -n $stage_name ]] && stage_times+=("$stage_name $((SECONDS - stage_start)) s")
  stage_name=$1 stage_start=$SECONDS
  echo "== $2"
}
stage deps "dependencies"
install_deps
fail=0

# ccache, where installed, for the two builds of the same library with the same flags: the
# torch2 stage's pip build then takes the library's objects from the release build's.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

stage release "release build and all tests but the rdma-labelled ones"
configure build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}"
build build || fail=1
ctest --test-dir "$ROOT/build" --output-on-failure -j "$JOBS" -LE rdma || fail=1

stage torch2 "the PyTorch backend against torch 2.x from PyPI: pip wheel in build-torch2/, its tests, the wheel installed"
if venv=$(torch2_venv); then
  # the pip build (pyproject.toml) in a build directory of ours, with the tests configured;
  # with the release build's compiler, whose name is part of ccache's key
  defines=(-DSNCCL_BUILD_TESTS=ON)
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$ROOT/build/CMakeCache.txt" 2>/dev/null || true)
  ((${#launcher[@]})) && [[ -n $cxx ]] && defines+=("${launcher[@]}" "-DCMAKE_CXX_COMPILER=$cxx")
  "$venv/bin/python" -m pip wheel -q --no-build-isolation --no-deps "$ROOT" -w "$ROOT/build-torch2/dist" \
    --config-settings=build-dir="$ROOT/build-torch2" \
    "${defines[@]/#-D/--config-settings=cmake.define.}" || fail=1
  ctest --test-dir "$ROOT/build-torch2" --output-on-failure -L torch || fail=1
  # the installed wheel, outside the tree: torchrun, the package's own libsnccl
  wheel=$(ls -t "$ROOT"/build-torch2/dist/snccl_torch-*.whl 2>/dev/null | head -n 1)
  if [[ -n $wheel ]] && "$venv/bin/python" -m pip install -q --no-deps --force-reinstall "$wheel"; then
    (cd / && env -u PYTHONPATH -u SNCCL_TORCH_LIB SNCCL_TORCH_EXPECT_INSTALLED=1 \
       "$venv/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/torch/test_torch2.py" -k torchrun) ||
      fail=1
  else
    echo "the wheel was not built or could not be installed"
    fail=1
  fi
else
  echo "torch 2.x could not be installed from PyPI"
  fail=1
fi

stage rdma "verbs over Soft-RoCE (QEMU): the rdma-labelled tests, one VM test at a time"
rdma_log=$(mktemp)
trap 'rm -f "$rdma_log"' EXIT
ctest --test-dir "$ROOT/build" --output-on-failure -L rdma -LE known_failure | tee "$rdma_log" || fail=1
# Tests of a known, documented failure that is not fixed yet: named here, not run.
ctest --test-dir "$ROOT/build" -N -L known_failure | awk '$1 == "Test" && $2 ~ /^#/ {print "NOT RUN (label known_failure): " $3}' || true
# ctest hides a skipped test's output: show why (rxe_vm.sh's "RXE-VM SKIP:" lines)
grep -h '^RXE-VM SKIP' "$ROOT/build/Testing/Temporary/LastTest.log" 2>/dev/null | sort -u || true

stage asan "ASan+UBSan build: unit, mr, mp and net tests"
labels='^(unit|mr|mp|net)$'
configure build-asan -DSNCCL_SANITIZE=ON -DSNCCL_BUILD_BENCHMARKS=OFF
mapfile -t targets < <(test_targets build-asan "$labels")
build build-asan "${targets[@]}" || fail=1
# intercept_tls_get_addr=0: GCC 12's sanitizer runtime takes some dynamic TLS blocks (those
# of dlopened libraries, such as UCX's transports) for glibc 2.19's layout and reads a bogus
# range from before them, and LeakSanitizer's tracer then dies at exit (SIGSEGV) after the
# tests passed: 2 of 65 runs of test_ucx_net in sockaddr mode, none of 65 with it off.
ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$ROOT/build-asan" --output-on-failure -j "$JOBS" -L "$labels" || fail=1

stage tsan "ThreadSanitizer build: the tests whose ranks are threads (label tsan)"
configure build-tsan -DSNCCL_TSAN=ON -DSNCCL_BUILD_BENCHMARKS=OFF -DSNCCL_WITH_TORCH=OFF
build build-tsan test_smoke test_p2p test_group_timeout test_flight_recorder test_api test_collectives \
  test_device_streams || fail=1
ctest --test-dir "$ROOT/build-tsan" --output-on-failure -j "$JOBS" -L '^tsan$' || fail=1

stage fuzz "fuzz harnesses (clang, libFuzzer, ASan+UBSan): seeds, then 10 s each"
bash "$ROOT/scripts/fuzz.sh" || fail=1

stage end "stage times: every stage's build and tests"
printf '  %s\n' "${stage_times[@]}"
echo "== verbs over Soft-RoCE (QEMU): $(grep -E 'tests passed|No tests were found' "$rdma_log" |
  tail -n 1), skipped: $(grep -c '(Skipped)' "$rdma_log" || true)"
echo "== run-tests.sh: $( ((fail)) && echo FAILED || echo all passed)"
exit "$fail"
