// Data engines: what copies and reduces the bytes of an operation's buffers.
//
// The executor never touches user memory itself: each ExecOp carries the engine that
// owns its buffers (ExecOp::engine), and every copy, reduction and staging copy of the
// op's steps goes through it. An engine serves one memory kind (host memory, a device's
// memory) and says which pointers are its own (owns()). The CPU engine (cpu_engine.h)
// is the engine of host memory and runs the kernels of collectives/kernels/reduce.h.
//
// Every operation is synchronous: when it returns, dst holds the result and the sources
// may be reused (the executor posts or releases a connection slot right after). An
// operation returns an error (a device engine's driver call failed) and the executor
// fails the op with it; the CPU engine never fails. Any
// pointer an operation takes is either the engine's own memory or host memory: the
// connection slots, the scratch blocks (core/scratch_pool.h) and the single-copy
// AllReduce's fold buffer are host memory whatever the op's buffers are.
//
// Adding a memory kind:
// 1. A MemoryKind value below and its name in memoryKindName().
// 2. A final class derived from DataEngine, in its own file here (<kind>_engine.{h,cc}):
//    owns(p) decides from the pointer alone and cheaply (it runs for each buffer of every
//    call, in the caller's thread); the data operations take any mix of the engine's
//    memory and host memory, as above, with the semantics of the same-named functions of
//    collectives/kernels/reduce.h, bit for bit (ranks on different engines must agree).
// 3. The engine listed in kEngines (registry.h) before the CPU engine: engineFor() asks
//    the engines in that order and the CPU engine owns every pointer (it cannot tell host
//    memory from any other), so an engine listed after it is never chosen.
// Then enqueue (core/enqueue.cc) picks, for each call, the engine that owns every buffer
// the call reads or writes on this rank (engineForBuffers), or fails the call with
// ncclInvalidArgument naming the buffer when no engine owns one or two buffers belong
// to different engines; a group's sends and receives on one communicator and stream are
// one operation, so they too must share one engine. The engine goes into the ExecOp once,
// when the op is built; the executor (core/executor.cc) calls it for every step, with no
// lookup. Schedules are unchanged: they name buffers and offsets, never memory kinds.
//
// Paths that read or write user memory without the engine, which assume host memory:
// the net rings that send from and receive into the op's buffers in place
// (CommRunner::sendInPlace, CommRunner::planRecvs: the transport moves those bytes) and
// the single-copy AllReduce (core/mapped_allreduce.cc), which maps peers' buffers into
// this process. Ops of another kind keep off them: the executor checks
// ExecOp::hostMemory() before the in-place paths, and the single copy describes such a
// rank's buffers as unreadable, so that every rank takes the rings.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collectives/kernels/reduce.h"
#include "common/status.h"
#include "snccl/nccl.h"

namespace snccl::engine {

enum class MemoryKind : uint8_t {
  kHost,    // memory the CPU reads and writes (malloc, mmap, ncclMemAlloc of a CPU build)
  kDevice,  // CUDA device memory (cudaMalloc, cuMemAlloc, cuMemCreate), through the driver
};
const char* memoryKindName(MemoryKind kind);  // "host", "device"

// The interface the executor calls. Engines are immutable objects with static storage
// (registry.cc lists them); the executor holds a pointer to one per op.
class DataEngine {
 public:
  constexpr DataEngine(const char* name, MemoryKind kind) : name_(name), kind_(kind) {}
  DataEngine(const DataEngine&) = delete;
  DataEngine& operator=(const DataEngine&) = delete;

  const char* name() const { return name_; }  // "cpu"
  MemoryKind kind() const { return kind_; }

  // Whether p points into memory this engine reads and writes.
  virtual bool owns(const void* p) const = 0;
  // bytes from src to dst, which do not overlap (the executor's staging copies into
  // scratch, receives out of a slot, copies into a slot).
  [[nodiscard]] virtual Status copyBytes(void* dst, const void* src, size_t bytes) const = 0;
  // kernels::copy: dst[i] = g(src[i]); dst may equal src.
  [[nodiscard]] virtual Status copy(void* dst, const void* src, size_t count, ncclDataType_t dt,
                                    const kernels::RedOpSpec& op, bool scale, bool finalize) const = 0;
  // kernels::reduce: dst[i] = a[i] (op) g(b[i]); dst may equal a or b.
  [[nodiscard]] virtual Status reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt,
                                      const kernels::RedOpSpec& op, bool scaleB, bool finalize) const = 0;
  // kernels::reduceStream: the same result into every out[k], with stores that bypass
  // the cache into out[0, nstream) where the engine has them; streamFence() orders them
  // before later stores.
  [[nodiscard]] virtual Status reduceStream(void* const* out, int nout, int nstream, const void* a, const void* b,
                                            size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op, bool scaleB,
                                            bool finalize) const = 0;
  [[nodiscard]] virtual Status streamFence() const = 0;

 protected:
  // Never destroyed through this interface: engines live as long as the process.
  ~DataEngine() = default;

 private:
  const char* name_;
  MemoryKind kind_;
};

}  // namespace snccl::engine
