// The device engine (device_engine.h).
#include "core/engine/device_engine.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <mutex>

#include "core/engine/cpu_engine.h"
#include "device/cuda_driver.h"
#include "device/kernels/reduce_kernel.h"

namespace snccl::engine {

namespace {

using device::CudaDriver;
using device::CUdeviceptr;
using device::DeviceContext;

CUdeviceptr dptr(const void* p) { return CUdeviceptr(p); }

// The device of the first device pointer among ps, its context made current on this
// thread; nullptr when every operand is host memory (the executor's copies between a
// connection slot and scratch), which the CPU kernels then serve. Every device operand of
// one operation lives on that device.
Result<DeviceContext*> enter(std::initializer_list<const void*> ps) {
  const CudaDriver& drv = CudaDriver::get();
  int ordinal = -1;
  for (const void* p : ps)
    if (ordinal < 0) ordinal = drv.deviceOf(p);
  if (ordinal < 0) return nullptr;
  SNCCL_ASSIGN_OR_RETURN(DeviceContext * d, drv.device(ordinal));
  SNCCL_TRY(drv.check(drv.api().ctxSetCurrent(d->ctx), "cuCtxSetCurrent"));
  return d;
}

// Device scratch of at least `bytes` (d->mutex held).
Status ensureScratch(DeviceContext* d, size_t bytes) {
  if (d->scratchBytes >= bytes) return OkStatus();
  const CudaDriver& drv = CudaDriver::get();
  if (d->scratch != 0) {
    SNCCL_TRY(drv.check(drv.api().streamSynchronize(d->stream), "cuStreamSynchronize"));
    SNCCL_TRY(drv.check(drv.api().memFree(d->scratch), "cuMemFree"));
    d->scratch = 0;
    d->scratchBytes = 0;
  }
  SNCCL_TRY(drv.check(drv.api().memAlloc(&d->scratch, bytes), "cuMemAlloc (device engine scratch)"));
  d->scratchBytes = bytes;
  return OkStatus();
}

constexpr size_t kAlign = 256;
size_t roundUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// dst[i] = a[i] (op) g(b[i]), or g(a[i]) when b is null (reduce_kernel.h), on d's stream,
// staging host operands through d's scratch; waits for the result.
Status runKernel(DeviceContext* d, void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt,
                 const kernels::RedOpSpec& op, bool scale, bool finalize) {
  const CudaDriver& drv = CudaDriver::get();
  const device::CudaApi& api = drv.api();
  if (d->reduceKernel == nullptr) return SystemError("device %d: %s", d->ordinal, d->noKernelWhy.c_str());
  const size_t bytes = count * kernels::typeSize(dt), part = roundUp(bytes);
  SNCCL_TRY(ensureScratch(d, 3 * part));
  CUdeviceptr stage[3] = {d->scratch, d->scratch + part, d->scratch + 2 * part};
  auto operand = [&](const void* p, int k, CUdeviceptr* out) -> Status {
    *out = dptr(p);
    if (p == nullptr || drv.isDevice(p)) return OkStatus();
    *out = stage[k];
    return drv.check(api.memcpyAsync(stage[k], dptr(p), bytes, d->stream), "cuMemcpyAsync (host operand)");
  };
  // Once anything is queued, an error returns only after the stream has drained: the
  // caller may free or reuse the operands as soon as it sees the error.
  auto drained = [&](Status s) {
    if (!s.ok()) (void)api.streamSynchronize(d->stream);
    return s;
  };
  device::kernels::ReduceKernelArgs args{};
  CUdeviceptr da = 0, db = 0;
  SNCCL_TRY(operand(a, 0, &da));
  SNCCL_TRY(drained(operand(b, 1, &db)));
  const bool hostDst = !drv.isDevice(dst);
  args.dst = reinterpret_cast<void*>(hostDst ? stage[2] : dptr(dst));
  args.a = reinterpret_cast<const void*>(da);
  args.b = reinterpret_cast<const void*>(db);
  args.count = count;
  args.dt = dt;
  args.base = op.base;
  args.divisor = op.divisor;
  args.flags = (scale && op.hasScalar ? device::kernels::kScaleB : 0u) | (finalize ? device::kernels::kFinalize : 0u);
  std::memcpy(&args.scalarBits, op.scalar, sizeof args.scalarBits);
  constexpr unsigned kThreads = 256, kMaxBlocks = 4096;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, kMaxBlocks);
  void* params[] = {&args};
  SNCCL_TRY(drained(drv.check(
      api.launchKernel(d->reduceKernel, unsigned(blocks), 1, 1, kThreads, 1, 1, 0, d->stream, params, nullptr),
      "cuLaunchKernel (reduction)")));
  if (hostDst)
    SNCCL_TRY(
        drained(drv.check(api.memcpyAsync(dptr(dst), stage[2], bytes, d->stream), "cuMemcpyAsync (host result)")));
  return drv.check(api.streamSynchronize(d->stream), "cuStreamSynchronize");
}

bool transforms(const kernels::RedOpSpec& op, bool scale, bool finalize) {
  return (scale && op.hasScalar) || (finalize && op.divisor > 1);
}

}  // namespace

bool DeviceEngine::owns(const void* p) const { return CudaDriver::get().isDevice(p); }

Status DeviceEngine::copyBytes(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0 || dst == src) return OkStatus();
  const CudaDriver& drv = CudaDriver::get();
  SNCCL_ASSIGN_OR_RETURN(DeviceContext * d, enter({dst, src}));
  if (d == nullptr) return kCpuEngine.copyBytes(dst, src, bytes);
  std::lock_guard<std::mutex> lock(d->mutex);
  SNCCL_TRY(drv.check(drv.api().memcpyAsync(dptr(dst), dptr(src), bytes, d->stream), "cuMemcpyAsync"));
  return drv.check(drv.api().streamSynchronize(d->stream), "cuStreamSynchronize");
}

Status DeviceEngine::copy(void* dst, const void* src, size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op,
                          bool scale, bool finalize) const {
  if (count == 0) return OkStatus();
  if (!transforms(op, scale, finalize)) return copyBytes(dst, src, count * kernels::typeSize(dt));
  SNCCL_ASSIGN_OR_RETURN(DeviceContext * d, enter({dst, src}));
  if (d == nullptr) return kCpuEngine.copy(dst, src, count, dt, op, scale, finalize);
  std::lock_guard<std::mutex> lock(d->mutex);
  return runKernel(d, dst, src, nullptr, count, dt, op, scale, finalize);
}

Status DeviceEngine::reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt,
                            const kernels::RedOpSpec& op, bool scaleB, bool finalize) const {
  if (count == 0) return OkStatus();
  SNCCL_ASSIGN_OR_RETURN(DeviceContext * d, enter({dst, a, b}));
  if (d == nullptr) return kCpuEngine.reduce(dst, a, b, count, dt, op, scaleB, finalize);
  std::lock_guard<std::mutex> lock(d->mutex);
  return runKernel(d, dst, a, b, count, dt, op, scaleB, finalize);
}

Status DeviceEngine::reduceStream(void* const* out, int nout, int, const void* a, const void* b, size_t count,
                                  ncclDataType_t dt, const kernels::RedOpSpec& op, bool scaleB, bool finalize) const {
  if (count == 0 || nout <= 0) return OkStatus();
  SNCCL_TRY(reduce(out[0], a, b, count, dt, op, scaleB, finalize));
  for (int k = 1; k < nout; ++k) SNCCL_TRY(copyBytes(out[k], out[0], count * kernels::typeSize(dt)));
  return OkStatus();
}

}  // namespace snccl::engine
