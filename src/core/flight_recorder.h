// The flight recorder: a communicator's last operations, kept so that a failure, a hang or
// a mismatched call can be explained after the fact (core/flight_dump.h writes them out,
// sn_doctor merges the files of all ranks).
//
// One thread at a time writes (the one executing the communicator's operations, which
// CommOrdering serialises); any thread may read a snapshot meanwhile (a dump on a signal,
// an abort from another thread). Each slot is a seqlock over atomic words: the
// writer pays a few plain stores per operation, a reader retries a slot it saw change.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace snccl::flight {

enum class OpState : uint8_t { kStarted = 1, kDone = 2, kFailed = 3 };

// One operation as recorded. Plain data: a snapshot returns copies.
struct OpRecord {
  uint64_t id = 0;                         // 1, 2, ... for every operation of the communicator (send/recv groups too)
  uint64_t seq = 0;                        // collective sequence number, the same on every rank for the k-th collective
  int64_t startNs = 0;                     // CLOCK_REALTIME_COARSE when the operation started (a few ms resolution)
  int64_t endNs = 0;                       // when it completed or failed; 0 while running
  uint64_t count = 0;                      // elements (collectives); bytes sent plus received (send/recv groups)
  const char* algo = "";                   // static name from the algorithm registry ("ring", "tree", ...), "p2p"
  uint64_t waitMsg = 0;                    // the message counter of the connection it last waited on
  uint32_t stepsDone = 0, stepsTotal = 0;  // over all lanes; updated when it waits and ends
  int32_t root = -1;
  int32_t waitPeer = -1;  // the peer it last waited on, -1: none
  int32_t sendPeer = -1;  // send/recv groups: the first peer sent to, received from (-1: none)
  int32_t recvPeer = -1;
  uint16_t nsend = 0, nrecv = 0;  // send/recv groups: how many sends and receives
  uint8_t coll = 0;               // CollKind
  uint8_t dt = 0;                 // ncclDataType_t
  uint8_t redop = 0;              // ncclRedOp_t of reductions; ncclNumOps for a user (PreMulSum) operator
  OpState state = OpState::kStarted;
  uint8_t waitSend = 0;  // 1: it waited for a free slot (a credit) from waitPeer; 0: for data
  uint8_t pad[7] = {};
};

class Recorder {
 public:
  // Keeps the last `entries` operations; 0 records nothing.
  explicit Recorder(size_t entries);
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  bool enabled() const { return n_ != 0; }
  // Starts a record for a new operation (its id is assigned here); the writer then edits
  // current() and publishes it with update().
  void begin(const OpRecord& r);
  OpRecord& current() { return current_; }
  bool active() const { return active_; }  // begin() was called and end() not yet
  void update();                           // publishes current()
  void end(OpState state, int64_t nowNs);  // sets state and endNs, publishes, ends
  // The recorded operations, oldest first (consistent copies; any thread).
  std::vector<OpRecord> snapshot() const;
  uint64_t recorded() const { return nextId_.load(std::memory_order_relaxed) - 1; }

  static int64_t nowNs();  // the coarse wall clock the records use

 private:
  static constexpr size_t kWords = (sizeof(OpRecord) + 7) / 8;
  struct Slot {
    std::atomic<uint64_t> version{0};  // odd while being written
    std::atomic<uint64_t> words[kWords] = {};
  };
  void publish(const OpRecord& r);

  size_t n_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> nextId_{1};
  OpRecord current_;  // the writer's copy of the operation in progress
  bool active_ = false;
};

}  // namespace snccl::flight
