#!/usr/bin/env bash
# The device-memory checks for a machine with a GPU, as one script (docs/gpu.md): builds
# what they need with nvcc, runs the device-memory tests on the real driver, then
# sn_allreduce_perf -A device with snccl and with NVIDIA's libnccl.so.2 (the same binary,
# NVIDIA's library preloaded), several processes sharing the GPU. Everything it prints is
# also in $OUT/gpu_check.log when OUT is set.
#
#   scripts/gpu_check.sh            # on the GPU machine (libcuda.so.1)
#   scripts/gpu_check.sh --standin  # anywhere: the same steps on the CPU stand-in (a dry run)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${GPU_CHECK_BUILD:-$ROOT/build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG=${OUT:+$OUT/gpu_check.log}
exec > >(tee ${LOG:-/dev/null}) 2>&1
fail=0
step() { echo "== $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -5 || true
command -v nvcc || ls /usr/local/cuda/bin/nvcc || echo "no nvcc: the library gets no device kernel"

step "build ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSNCCL_WITH_TORCH=OFF >/dev/null || exit 1
ninja -C "$BUILD" snccl snccl_cuda_standin test_device_engine test_collectives test_device_streams \
  sn_allreduce_perf >/dev/null || exit 1
if [[ ${1:-} == --standin ]]; then
  export SNCCL_CUDA_DRIVER=$BUILD/tests/libsnccl_cuda_standin.so
  echo "dry run on the CPU stand-in: $SNCCL_CUDA_DRIVER"
else
  unset SNCCL_CUDA_DRIVER  # libcuda.so.1
fi

step "device engine and kernel against the CPU kernels"
"$BUILD/tests/unit/test_device_engine" --gtest_filter=-CudaDriverOff.* || fail=1
step "every collective on device memory: ranks as threads, then as processes sharing the GPU"
SNTEST_DEVICE_BUFFERS=1 "$BUILD/tests/mr/test_collectives" --gtest_filter='*Grid/*_threads_*' | tail -n 3 || fail=1
SNTEST_DEVICE_BUFFERS=1 "$BUILD/tests/mr/test_collectives" --gtest_filter='*Grid/*_processes_*' | tail -n 3 ||
  fail=1
step "stream order, send/recv, registration"
"$BUILD/tests/mr/test_device_streams" --gtest_filter=-*Processes* || fail=1
"$BUILD/tests/mr/test_device_streams" --gtest_filter=*Processes* || fail=1

step "sn_allreduce_perf -A device, 2 processes on the GPU: snccl, then NVIDIA's libnccl.so.2"
perf_args=(-A device -b 8 -e 256M -f 4 -c 1 -n 20 -w 5)
SNCCL_DEBUG=INFO SNCCL_DEBUG_SUBSYS=INIT "$ROOT/perf/launch_local.sh" 2 "$BUILD/perf/sn_allreduce_perf" \
  "${perf_args[@]}" 2>&1 | grep -E "GPU support|^ +[0-9]|Avg bus|wrong" || fail=1
nccl=""
for d in /usr/local/cuda/lib /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  [[ -e $d/libnccl.so.2 ]] && nccl=$d/libnccl.so.2 && break
done
if [[ -n $nccl && ${1:-} != --standin ]]; then
  echo "NVIDIA NCCL: $nccl"
  LD_PRELOAD=$nccl NCCL_DEBUG=WARN "$ROOT/perf/launch_local.sh" 2 "$BUILD/perf/sn_allreduce_perf" \
    "${perf_args[@]}" 2>&1 | grep -E "NCCL|^ +[0-9]|Avg bus|wrong|failure" || echo "NVIDIA NCCL run failed"
else
  echo "NVIDIA NCCL: skipped (${nccl:-no libnccl.so.2 found}${1:+, dry run})"
fi
echo "== gpu_check.sh: $( ((fail)) && echo FAILED || echo all passed)"
exit "$fail"
