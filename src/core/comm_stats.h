// Live traffic counters of a communicator, per peer: bytes and messages each way, and the
// time this rank slept waiting on the peer for data or for a credit (a free slot). With
// SNCCL_STATS_DIR they live in a file of that directory, mapped shared, so that sn_top can
// read them while the job runs and draw them after it ended; otherwise in private memory.
//
// The file (snccl-stats-<commhash>-r<rank>.bin) is a StatsHeader followed by nranks
// PeerStats, all little-endian as this host writes them. One thread at a time writes the
// counters (the one running the communicator's operations, which CommOrdering
// serialises): each is a relaxed load and store, no locked instruction. A reader sees each
// counter whole, and counters that lag each other by at most an operation.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "common/status.h"
#include "transport/rail_tally.h"

namespace snccl::stats {

constexpr char kMagic[8] = {'s', 'n', 'c', 'c', 'l', 's', 't', '2'};

struct StatsHeader {
  char magic[8];
  uint32_t headerBytes;  // sizeof(StatsHeader): a reader checks it
  uint32_t peerBytes;    // sizeof(PeerStats)
  int32_t rank, nranks;
  int32_t pid, pad = 0;
  uint64_t commHash;
  int64_t startNs;  // CLOCK_REALTIME when the communicator was created
  char host[64];
};

struct PeerStats {
  char link[32];  // the link of the last connection made to the peer: "shm", "IB/mlx5_0"; "" none
  std::atomic<uint64_t> sendBytes, recvBytes, sendMsgs, recvMsgs;
  std::atomic<uint64_t> sendWaitNs;  // asleep waiting for a credit from the peer
  std::atomic<uint64_t> recvWaitNs;  // asleep waiting for data from the peer
  // Bytes the single-copy AllReduce wrote straight into the peer's output (it reads as
  // many from the peer's input): no ring, no link.
  std::atomic<uint64_t> directBytes;
  // Net connections to the peer, per rail (interface or device) their paths leave through:
  // a connection spread over several rails shows each. Written by the net transport
  // (fetch_add), not by the thread that writes the counters above.
  RailCounters rails[kRailSlots];
};
static_assert(sizeof(PeerStats) == 216 && std::atomic<uint64_t>::is_always_lock_free);

// Adds `v` to a counter only this thread writes (no locked instruction).
inline void bump(std::atomic<uint64_t>& c, uint64_t v) {
  c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
}

class CommStats {
 public:
  CommStats() = default;
  CommStats(const CommStats&) = delete;
  CommStats& operator=(const CommStats&) = delete;
  ~CommStats();

  // Sets the counters up for `nranks` peers: in a file of directory `dir` (a failure to
  // create it is returned), or in private memory when `dir` is empty.
  Status open(uint64_t commHash, int rank, int nranks, const std::string& dir);
  bool ready() const { return peers_ != nullptr; }
  PeerStats& peer(int r) { return peers_[r]; }
  void setLink(int peer, const std::string& link);
  // Where the net transport counts the peer's per-rail bytes (empty before open()).
  RailTally railTally(int peer) { return peers_ == nullptr ? RailTally{} : RailTally{peers_[peer].rails, &railMu_}; }
  const std::string& path() const { return path_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  PeerStats* peers_ = nullptr;
  std::string path_;  // empty: private memory
  std::mutex railMu_;  // RailTally::find
};

}  // namespace snccl::stats
