// The one table of data engines, in the order engineFor() asks them.
#include "core/engine/registry.h"

#include <string>

#include "core/engine/cpu_engine.h"

namespace snccl::engine {

namespace {

std::string describe(const OpBuffer& b) {
  return b.peer >= 0 ? format("%s (peer %d) %p", b.name, b.peer, b.ptr) : format("%s %p", b.name, b.ptr);
}
}  // namespace

const char* memoryKindName(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::kHost:
      return "host";
    case MemoryKind::kDevice:
      return "device";
  }
  return "unknown";
}

std::span<const DataEngine* const> engines() { return kEngines; }

const DataEngine& hostEngine() { return kCpuEngine; }

const DataEngine* engineFor(const void* p, std::span<const DataEngine* const> table) {
  for (const DataEngine* e : table)
    if (e->owns(p)) return e;
  return nullptr;
}

Result<const DataEngine*> engineForBuffers(std::span<const OpBuffer> bufs, std::span<const DataEngine* const> table) {
  const DataEngine* chosen = nullptr;
  const OpBuffer* first = nullptr;  // the buffer `chosen` was chosen for
  for (const OpBuffer& b : bufs) {
    if (b.ptr == nullptr) continue;
    const DataEngine* e = engineFor(b.ptr, table);
    if (e == nullptr) {
      std::string names;
      for (const DataEngine* t : table) names += std::string(names.empty() ? "" : ", ") + t->name();
      return InvalidArgument("%s is memory that no data engine of this build owns (engines: %s)",
                             describe(b).c_str(), names.empty() ? "none" : names.c_str());
    }
    if (chosen == nullptr) {
      chosen = e;
      first = &b;
    } else if (e != chosen) {
      return InvalidArgument("%s is %s memory (engine %s) but %s is %s memory (engine %s): one operation "
                             "(a collective, or a group's sends and receives on one communicator and stream) "
                             "runs on buffers of one memory kind",
                             describe(*first).c_str(), memoryKindName(chosen->kind()), chosen->name(),
                             describe(b).c_str(), memoryKindName(e->kind()), e->name());
    }
  }
  return chosen;
}

}  // namespace snccl::engine
