// The device engine: CUDA device memory, moved by the driver's copy engines and combined
// by the device reduction kernel (device/kernels/reduce_kernel.h), through the driver
// loaded at run time (device/cuda_driver.h).
//
// Each operation runs on the engine stream of the device its device operands live on
// and waits for it (DataEngine's operations are synchronous). Kernels read and write
// device memory only, so an operand that is host memory (a connection slot, scratch) is
// copied through the device's scratch first and a host dst is copied back after. A
// device's operations are serialised by its DeviceContext::mutex.
//
// owns(p) asks the driver for p's memory type (cuPointerGetAttribute); without a driver
// it owns nothing and costs a load of one pointer.
#pragma once

#include "core/engine/engine.h"

namespace snccl::engine {

class DeviceEngine final : public DataEngine {
 public:
  constexpr DeviceEngine() : DataEngine("cuda", MemoryKind::kDevice) {}

  bool owns(const void* p) const override;
  Status copyBytes(void* dst, const void* src, size_t bytes) const override;
  Status copy(void* dst, const void* src, size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op, bool scale,
              bool finalize) const override;
  Status reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op,
                bool scaleB, bool finalize) const override;
  Status reduceStream(void* const* out, int nout, int nstream, const void* a, const void* b, size_t count,
                      ncclDataType_t dt, const kernels::RedOpSpec& op, bool scaleB, bool finalize) const override;
  Status streamFence() const override { return OkStatus(); }  // every operation has completed
};

// The one device engine (immutable; its address identifies it).
inline constexpr DeviceEngine kDeviceEngine;

}  // namespace snccl::engine
