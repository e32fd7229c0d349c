// The table of data engines, and the choice of an operation's engine from its buffers.
#pragma once

#include <iterator>
#include <span>

#include "common/status.h"
#include "core/engine/cpu_engine.h"
#include "core/engine/device_engine.h"
#include "core/engine/engine.h"

namespace snccl::engine {

// The engines of this build in the order engineFor() asks them. An engine of another
// memory kind goes before the CPU engine, which owns every pointer (engine.h: adding a
// memory kind).
inline constexpr const DataEngine* kEngines[] = {
    &kDeviceEngine,
    &kCpuEngine,
};
// Whether the CPU engine is the only one: then it owns every buffer of every call, and
// the per-call paths (opEngine, enqueue's group check) need not ask.
inline constexpr bool kHostOnly = std::size(kEngines) == 1 && kEngines[0] == &kCpuEngine;

// kEngines as a span (the default table of the functions below).
std::span<const DataEngine* const> engines();
// The engine of host memory (the CPU engine).
const DataEngine& hostEngine();

// The first engine of `table` that owns p; nullptr when none does.
const DataEngine* engineFor(const void* p, std::span<const DataEngine* const> table = engines());

// A buffer an operation reads or writes, named for the error messages: "sendbuff", or
// "ncclSend buffer" with the peer it goes to.
struct OpBuffer {
  const char* name;
  const void* ptr;  // nullptr: the operation does not touch this buffer on this rank
  int peer = -1;    // >= 0: printed as "(peer N)" after the name
};

// The one engine of `table` that owns every non-null buffer of bufs; nullptr when every
// buffer is null (the operation touches no memory: any engine will do). InvalidArgument,
// naming the buffer, when no engine owns one, or when two are owned by different
// engines (an operation's buffers are one memory kind: one engine runs all its steps).
Result<const DataEngine*> engineForBuffers(std::span<const OpBuffer> bufs,
                                           std::span<const DataEngine* const> table = engines());

// engineForBuffers over this build's engines, for the path every call takes: with the CPU
// engine alone (kHostOnly) the answer needs neither a loop over engines nor a call.
inline Result<const DataEngine*> opEngine(std::span<const OpBuffer> bufs) {
  if constexpr (kHostOnly) {
    for (const OpBuffer& b : bufs)
      if (b.ptr != nullptr) return &kCpuEngine;
    return nullptr;
  } else {
    return engineForBuffers(bufs);
  }
}

}  // namespace snccl::engine
