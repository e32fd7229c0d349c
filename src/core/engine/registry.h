// The table of data engines, and the choice of an operation's engine from its buffers.
#pragma once

#include <span>

#include "common/status.h"
#include "core/engine/engine.h"

namespace snccl::engine {

// The engines in the order engineFor() asks them (registry.cc); the CPU engine last.
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

}  // namespace snccl::engine
