#!/usr/bin/env bash
# The device-memory checks for a machine with a GPU, as one script (docs/gpu.md): the
# device-memory tests on the real driver, then sn_allreduce_perf -A device with snccl and
# with NVIDIA's libnccl.so.2 (the same binary, NVIDIA's library preloaded), 2 processes
# sharing the GPU. Everything it prints is also in $OUT/gpu_check.log when OUT is set.
#
#   scripts/gpu_check.sh             # build with nvcc into build-gpu/, then check (libcuda.so.1)
#   scripts/gpu_check.sh --bundle    # here: build, and copy what the checks run, with the
#                                    # shared libraries it needs, into build-gpu-bundle/
#   scripts/gpu_check.sh --prebuilt  # on a GPU machine without compilers: check with the bundle
#   scripts/gpu_check.sh --standin   # anywhere: the same checks on the CPU stand-in (a dry run)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${GPU_CHECK_BUILD:-$ROOT/build-gpu}
BUNDLE=$ROOT/build-gpu-bundle
mode=${1:-}
LOG=${OUT:+$OUT/gpu_check.log}
exec > >(tee ${LOG:-/dev/null}) 2>&1
fail=0
step() { echo "== $*"; }

# The binaries, relative to BIN: BIN=$BUILD after a build, BIN=$BUNDLE with --prebuilt.
bins=(tests/unit/test_device_engine tests/mr/test_collectives tests/mr/test_device_streams
      perf/sn_allreduce_perf tests/libsnccl_cuda_standin.so)

build() {
  step "build ($BUILD)"
  command -v nvcc || ls /usr/local/cuda/bin/nvcc || echo "no nvcc: the library gets no device kernel"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSNCCL_WITH_TORCH=OFF >/dev/null || exit 1
  ninja -C "$BUILD" snccl snccl_cuda_standin test_device_engine test_collectives test_device_streams \
    sn_allreduce_perf >/dev/null || exit 1
}

if [[ $mode == --bundle ]]; then
  build
  rm -rf "$BUNDLE" && mkdir -p "$BUNDLE/lib"
  for b in "${bins[@]}"; do install -D "$BUILD/$b" "$BUNDLE/$b"; done
  cp -a "$BUILD"/src/libsnccl.so* "$BUNDLE/lib/"
  # Every shared library they load but glibc and the C++ runtime.
  ldd "$BUILD"/src/libsnccl.so "$BUILD"/tests/mr/test_collectives | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | xargs -r -I{} cp -L {} "$BUNDLE/lib/"
  du -sh "$BUNDLE"
  echo "carry build-gpu-bundle to the GPU machine and run: scripts/gpu_check.sh --prebuilt"
  exit 0
fi

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -5 || true
if [[ $mode == --prebuilt ]]; then
  BIN=$BUNDLE
  export LD_LIBRARY_PATH=$BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  build
  BIN=$BUILD
fi
if [[ $mode == --standin ]]; then
  export SNCCL_CUDA_DRIVER=$BIN/tests/libsnccl_cuda_standin.so
  echo "dry run on the CPU stand-in: $SNCCL_CUDA_DRIVER"
fi
echo "driver: ${SNCCL_CUDA_DRIVER:-libcuda.so.1}"

step "device engine and kernel against the CPU kernels"
"$BIN/tests/unit/test_device_engine" --gtest_filter=-CudaDriverOff.* || fail=1
step "every collective on device memory: ranks as threads, then as processes sharing the GPU"
SNTEST_DEVICE_BUFFERS=1 "$BIN/tests/mr/test_collectives" --gtest_filter='*Grid/*_threads_*' | tail -n 3 || fail=1
SNTEST_DEVICE_BUFFERS=1 "$BIN/tests/mr/test_collectives" --gtest_filter='*Grid/*_processes_*' | tail -n 3 || fail=1
step "stream order, send/recv, abort, registration, mixed kinds"
"$BIN/tests/mr/test_device_streams" --gtest_filter=-*Processes* || fail=1
"$BIN/tests/mr/test_device_streams" --gtest_filter=*Processes* || fail=1

step "sn_allreduce_perf -A device, 2 processes on the GPU: snccl, then NVIDIA's libnccl.so.2"
perf_args=(-A device -b 8 -e 256M -f 4 -c 1 -n 20 -w 5)
"$ROOT/perf/launch_local.sh" 2 "$BIN/perf/sn_allreduce_perf" "${perf_args[@]}" 2>&1 |
  grep -E "^ +[0-9]|Avg bus|wrong|failure" || fail=1
nccl=""
for d in /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  [[ -e $d/libnccl.so.2 ]] && nccl=$d/libnccl.so.2 && break
done
if [[ -n $nccl && $mode != --standin ]]; then
  echo "NVIDIA NCCL: $nccl"
  LD_PRELOAD=$nccl NCCL_DEBUG=WARN "$ROOT/perf/launch_local.sh" 2 "$BIN/perf/sn_allreduce_perf" \
    "${perf_args[@]}" 2>&1 | grep -E "NCCL|^ +[0-9]|Avg bus|wrong|failure" || echo "NVIDIA NCCL run failed"
else
  echo "NVIDIA NCCL: skipped (${nccl:-no libnccl.so.2 found}${mode:+, $mode})"
fi
echo "== gpu_check.sh: $( ((fail)) && echo FAILED || echo all passed)"
exit "$fail"
