// The CPU engine: host memory, copied with memcpy and combined by the CPU kernels of
// collectives/kernels/reduce.h (the best kernel table this CPU runs).
#pragma once

#include <cstring>

#include "core/engine/engine.h"

namespace snccl::engine {

// Final, with its functions defined here: in a file that includes this header (the
// executor does, through executor.h), the compiler turns a call through DataEngine into
// a check of the target and a direct call to the kernel or memcpy (speculative
// devirtualisation), so the per-step path costs what the direct calls cost.
class CpuEngine final : public DataEngine {
 public:
  constexpr CpuEngine() : DataEngine("cpu", MemoryKind::kHost) {}

  // Every pointer: nothing tells host memory apart from memory of another kind, so an
  // engine of another kind is listed before this one and claims its pointers first.
  bool owns(const void*) const override { return true; }
  // memcpy needs non-null pointers even for 0 bytes; a zero-count buffer may be null.
  Status copyBytes(void* dst, const void* src, size_t bytes) const override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
    return OkStatus();
  }
  Status copy(void* dst, const void* src, size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op, bool scale,
              bool finalize) const override {
    kernels::copy(dst, src, count, dt, op, scale, finalize);
    return OkStatus();
  }
  Status reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op,
                bool scaleB, bool finalize) const override {
    kernels::reduce(dst, a, b, count, dt, op, scaleB, finalize);
    return OkStatus();
  }
  Status reduceStream(void* const* out, int nout, int nstream, const void* a, const void* b, size_t count,
                      ncclDataType_t dt, const kernels::RedOpSpec& op, bool scaleB, bool finalize) const override {
    kernels::reduceStream(out, nout, nstream, a, b, count, dt, op, scaleB, finalize);
    return OkStatus();
  }
  Status streamFence() const override {
    kernels::streamFence();
    return OkStatus();
  }
};

// The one CPU engine (immutable; its address identifies it).
inline constexpr CpuEngine kCpuEngine;

}  // namespace snccl::engine
