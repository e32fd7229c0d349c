// Per-rail traffic counters of one peer: the payload bytes this rank's net connections to
// that peer sent and received over each rail (a local interface or device the connections'
// paths leave through). The communicator keeps them in its traffic counter file
// (core/comm_stats.h), where sn_top reads them; the net transport adds to them
// (net_entry.h) from whichever thread drives a connection, so several channels' connections
// to one peer may add at once: fetch_add.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace snccl {

struct RailCounters {
  char name[16];  // the rail ("eth1", "mlx5_0"); "" while the slot is free
  std::atomic<uint64_t> sendBytes, recvBytes;
};
static_assert(sizeof(RailCounters) == 32 && std::atomic<uint64_t>::is_always_lock_free);
constexpr int kRailSlots = 4;

// One peer's rail counters and the lock that serialises naming a free slot.
struct RailTally {
  RailCounters* slots = nullptr;  // kRailSlots of them; null: nothing is counted
  std::mutex* mu = nullptr;

  // The slot named `rail`, naming a free one if none is; null when every slot has another
  // name (a peer reached over more than kRailSlots rails: the rest are not counted). Names
  // are cut to 15 characters, as Linux cuts interface names.
  RailCounters* find(const char* rail) const {
    if (slots == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(*mu);
    for (int k = 0; k < kRailSlots; ++k) {
      RailCounters& c = slots[k];
      if (c.name[0] == '\0') {
        std::strncpy(c.name, rail, sizeof c.name - 1);
        c.name[sizeof c.name - 1] = '\0';
        return &c;
      }
      if (std::strncmp(c.name, rail, sizeof c.name - 1) == 0) return &c;
    }
    return nullptr;
  }
};

}  // namespace snccl
