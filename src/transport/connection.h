// Connection: one direction of data between two ranks, as a ring of slots with credits.
//
// The credit scheme (docs/design.md §5): the ring has `nsteps` slots of `slotBytes`. Two 64-bit
// monotonic counters live in a control block both ends can see: `tail` (written only by
// the sender: messages posted) and `head` (written only by the receiver: messages
// consumed). The sender may fill message s only while s < head + nsteps, writes slot
// s % nsteps and its fifo entry, then publishes tail = s + 1. The receiver reads message s
// once tail > s and frees it with head = s + 1. Memory per connection is therefore fixed
// and a receiver can never be overrun. Counters never wrap in practice (2^64 messages).
//
// A sleeping end announces itself in {recv,send}Sleeping before re-checking the counter,
// and the other end, after publishing the counter, checks the flag to know whether to
// bump the futex word and wake it: no system call when nobody sleeps. No wake-up is lost
// as long as each side's store is visible before its load. Two ways to guarantee that:
// - full fences on both sides (sequentially consistent store and load);
// - "light publishing", on rings whose both ends are executors of processes registered
//   for processBarrier() (common/process_barrier.h; ConnMemory::lightPublish): the
//   publisher only keeps its compiler from reordering, and the sleeper, after its store,
//   calls processBarrier(), which makes every publisher's earlier stores visible and any
//   later load see the flag. A full fence on the publishing side stalls each message for
//   the transfer of the cache lines it just wrote, most of the difference between 8-byte
//   AllReduce and Open MPI here; a sleep happens only after the spin and yield budgets.
// An end stays announced from its first sleep of a wait until it gets what it waited for
// (a message or a credit), so a long wait pays for one barrier, not one per sleep slice.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace snccl {

constexpr uint32_t kMaxSteps = 64;

// Messages up to this size travel inside their fifo entry on rings whose both ends poll
// memory (shm, local): the receiver then watches the cache line that carries the flag,
// the header and the first 40 bytes, instead of the tail's, the entry's and the slot's.
// That is most of a small message's latency between cores. An entry is two lines: a
// message of 41-104 bytes also fills the second, which the sender writes before the
// flag (release), so it is complete once the flag shows.
constexpr uint32_t kInlineBytes = 104;

// Where a message's bytes are (ConnFifoEntry::where).
enum : uint32_t {
  kInSlot = 0,    // the slot of its step
  kInline = 1,    // ConnFifoEntry::data (inline rings)
  // ConnFifoEntry::at: memory of the sending process (postAt), or, on a receive ring,
  // where the net put the message (planRecvs)
  kAtPointer = 2
};

// A message of the current operation that a net ring should receive straight into the
// operation's memory instead of a slot (Connection::planRecvs): the index-th message the
// operation receives on the ring, its exact size, and where it goes.
struct RecvTarget {
  uint32_t index;
  uint32_t bytes;
  char* at;
};

struct alignas(128) ConnFifoEntry {
  // Inline rings only: message number + 1 once the entry (and its slot) is complete;
  // written last, with release order, by the sender.
  std::atomic<uint64_t> seq;
  uint32_t bytes;
  uint32_t where;  // kInSlot, kInline or kAtPointer
  uint64_t sig;    // signature of the operation that sent the message (0: unchecked)
  union {
    char data[kInlineBytes];
    const char* at;  // kAtPointer: the sender's memory (send rings) or a RecvTarget's (receive rings)
  };
};
static_assert(sizeof(ConnFifoEntry) == 128, "one fifo entry per two cache lines");

struct ConnCtrl {
  alignas(64) std::atomic<uint64_t> tail;
  std::atomic<uint32_t> tailSeq;
  std::atomic<uint32_t> recvSleeping;
  alignas(64) std::atomic<uint64_t> head;
  std::atomic<uint32_t> headSeq;
  std::atomic<uint32_t> sendSleeping;
  // Non-zero (an ncclResult_t) once either end failed or aborted; set by either side.
  alignas(64) std::atomic<uint32_t> poison;
  uint32_t nsteps;
  uint32_t slotBytes;
  alignas(128) ConnFifoEntry fifo[kMaxSteps];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters must be lock-free");

// What owns the ring's memory (a shared-memory mapping, a heap block, ...).
class ConnMemory {
 public:
  virtual ~ConnMemory() = default;
  // Why the transport poisoned the ring, in a line ("" when it did not or cannot say):
  // the poison word only holds a code and a rank, while a network transport knows the
  // cause on the wire (peer lost, own link down, ...) that the user's error should name.
  // Safe to call from the executor's thread at any time.
  virtual std::string failureDetail() const { return {}; }
  // Whether both ends of the ring are Connections polling shared memory, so that small
  // messages may travel inline in the fifo entry and the receiver may poll the entry
  // (ConnFifoEntry::seq). Both ends are built by the same transport, so they agree.
  // A ring whose other end is a proxy thread (net) says no: the proxy reads slots.
  virtual bool inlineMessages() const { return false; }
  // Whether both ends publish without a full fence and pay a processBarrier() before
  // sleeping instead (header comment). Both ends must agree: transport.h lightPublish().
  virtual bool lightPublish() const { return false; }
  // Whether the ring's other end can send a message straight from memory of this process
  // (Connection::postAt), so that an operation's input need not be copied into a slot.
  // Only the net rings, whose other end is the proxy thread of this process; with a
  // plugin that needs registration it sends from registered memory and copies the rest
  // into the message's slot (net/reg_cache.h).
  virtual bool sendsAtPointers() const { return false; }
  // Returns once the other end will not touch memory named by postAt any more: after the
  // ring was poisoned, it lets the other end see the poison (net: under its drive lock),
  // which drops whatever it still had to send. Called on failure, before the operation
  // returns to the user, who may then free that memory.
  virtual void quiesce() {}
  // Whether the ring's other end posts receives for it, and can post them straight into
  // memory of this process that the receiving end names beforehand (Connection::planRecvs):
  // the net receive rings (with a plugin that needs registration, only into registered
  // memory: net/reg_cache.h).
  virtual bool receivesAtPointers() const { return false; }
  // Message first + t.index of the operation that starts lands at t.at if it has exactly
  // t.bytes, also when its receive was posted before this call, as long as the transport
  // has not begun to receive it (then, or with another size, it lands in its slot). The
  // list is sorted by index and replaces the previous plan.
  virtual void planRecvs(uint64_t /*first*/, std::span<const RecvTarget> /*targets*/) {}
  // Rings whose other end is a helper thread that moves bytes elsewhere (the net proxy)
  // may instead be driven by the executor while it waits (net/proxy.h says why):
  // claimDrive() claims the ring for the calling thread, drive() then moves what can move
  // now (true when something did), releaseDrive() hands it back to the helper; `waiting`
  // says the caller is about to sleep until the helper moves something on this ring.
  // Only the thread that claimed calls drive() or gives the claim up.
  virtual bool drivable() const { return false; }
  virtual void claimDrive() {}
  virtual void releaseDrive(bool /*waiting*/) {}
  virtual bool drive() { return false; }
};

class Connection {
 public:
  Connection(ConnCtrl* ctrl, char* slots, std::unique_ptr<ConnMemory> memory, int peer, pid_t peerPid,
             const char* transport);

  int peer() const { return peer_; }
  pid_t peerPid() const { return peerPid_; }  // 0 when the peer is in this process
  const char* transport() const { return transport_; }
  uint32_t slotBytes() const { return slotBytes_; }
  uint64_t step() const { return step_; }

  // Sender: where to write the next message of `bytes` (its slot, or its fifo entry on
  // an inline ring), or nullptr when no credit is available.
  char* trySendSlot(uint32_t bytes) {
    if (step_ >= cachedPeer_ + nsteps_) {
      cachedPeer_ = ctrl_->head.load(std::memory_order_acquire);
      if (step_ >= cachedPeer_ + nsteps_) return nullptr;
    }
    if (announced_) [[unlikely]]
      wakeUp();
    if (inline_ && bytes <= kInlineBytes) return ctrl_->fifo[step_ % nsteps_].data;
    return slots_ + (step_ % nsteps_) * slotBytes_;
  }
  // Sender: publishes the message written where trySendSlot(bytes) said.
  void post(uint32_t bytes, uint64_t sig);
  // Sender, on a sendsAtPointers() ring, after trySendSlot(bytes) returned a slot (the
  // credit; the slot stays unused): publishes a message whose bytes stay at `src` until
  // sendsDone(). The caller keeps them unchanged until then.
  void postAt(const char* src, uint32_t bytes, uint64_t sig);
  bool sendsAtPointers() const { return atPointers_; }
  // Whether the other end has finished with every message posted with postAt (their
  // slots are free again: head has passed them). While false, a sender that sleeps waits
  // for that (ready(true) includes it).
  bool sendsDone() {
    if (ctrl_->head.load(std::memory_order_acquire) < lastAtPointer_) return false;
    lastAtPointer_ = 0;
    return true;
  }
  void quiesce() {
    if (memory_) memory_->quiesce();
  }
  // Receiver, on a receivesAtPointers() ring, when an operation starts: the operation
  // would like message t.index of those it receives here (counted from the next one this
  // end receives) to land at t.at. Each one that does is returned by tryRecvSlot at that
  // address; the others come in their slot as usual (one whose data had begun to arrive
  // when the operation started, or of another size than planned). Until every one was
  // received, nothing else may write the target memory, and on failure quiesce() must
  // run before it is given back to the user.
  bool receivesAtPointers() const { return recvAtPointers_; }
  void planRecvs(std::span<const RecvTarget> targets) { memory_->planRecvs(step_, targets); }

  // Receiver: the next message, or nullptr when none has arrived.
  const char* tryRecvSlot(uint32_t* bytes, uint64_t* sig) {
    const ConnFifoEntry& e = ctrl_->fifo[step_ % nsteps_];
    if (inline_) {
      if (e.seq.load(std::memory_order_acquire) != step_ + 1) return nullptr;
      if (announced_) [[unlikely]]
        wakeUp();
      *bytes = e.bytes;
      *sig = e.sig;
      return e.where == kInline ? e.data : slots_ + (step_ % nsteps_) * slotBytes_;
    }
    if (step_ >= cachedPeer_) {
      cachedPeer_ = ctrl_->tail.load(std::memory_order_acquire);
      if (step_ >= cachedPeer_) return nullptr;
    }
    if (announced_) [[unlikely]]
      wakeUp();
    *bytes = e.bytes;
    *sig = e.sig;
    return e.where == kAtPointer ? e.at : slots_ + (step_ % nsteps_) * slotBytes_;
  }
  // Receiver: frees the slot returned by tryRecvSlot.
  void release();

  // Whether what this end waits for is there: a message (receiver) or a free slot
  // (sender). A peer that finished, then exited or aborted, may have posted its last
  // messages before it went: they are still to be consumed, so its death only matters
  // while this is false.
  bool ready(bool sender) const {
    return sender ? senderReady(ctrl_->head.load(std::memory_order_acquire))
                  : ctrl_->tail.load(std::memory_order_acquire) > step_;
  }

  // Sleeps until the counter this end waits for moves, the connection is poisoned, or
  // timeoutUs passes. `sender` says which end we are. The end stays announced as a
  // sleeper until trySendSlot/tryRecvSlot next succeed.
  void sleep(bool sender, int64_t timeoutUs);

  // Marks the connection failed for both ends and wakes any sleeper.
  void poison(uint32_t code);
  uint32_t poisoned() const { return ctrl_->poison.load(std::memory_order_relaxed); }
  // The transport's account of a failure on this end (ConnMemory::failureDetail).
  std::string failureDetail() const { return memory_ ? memory_->failureDetail() : std::string(); }

  // Executor-driven rings (ConnMemory::drivable).
  bool drivable() const { return drivable_; }
  void claimDrive() { memory_->claimDrive(); }
  void releaseDrive(bool waiting) { memory_->releaseDrive(waiting); }
  bool drive() { return memory_->drive(); }

 private:
  // A free slot, and every message sent from a pointer done (0 when none is pending).
  bool senderReady(uint64_t head) const { return head + nsteps_ > step_ && head >= lastAtPointer_; }
  // Fills the next fifo entry and publishes it (post, postAt).
  void postEntry(uint32_t bytes, uint64_t sig, uint32_t where, const char* at);
  void publish(std::atomic<uint64_t>& counter, std::atomic<uint32_t>& sleeping, std::atomic<uint32_t>& seq);
  void wakeUp();  // withdraws this end's sleep announcement

  ConnCtrl* ctrl_;
  char* slots_;
  std::unique_ptr<ConnMemory> memory_;
  uint32_t nsteps_;
  uint32_t slotBytes_;
  uint64_t step_ = 0;
  uint64_t cachedPeer_ = 0;  // last seen head (sender) or tail (receiver)
  bool inline_;              // ConnMemory::inlineMessages()
  bool drivable_;            // ConnMemory::drivable()
  bool light_;               // ConnMemory::lightPublish()
  bool atPointers_;          // ConnMemory::sendsAtPointers()
  bool recvAtPointers_;      // ConnMemory::receivesAtPointers()
  uint64_t lastAtPointer_ = 0;  // step after the last postAt message not yet known done
  bool announced_ = false;   // this end's sleeping flag is set (sleep() until wakeUp())
  bool sender_ = false;      // which flag: the end sleep() was called as
  int peer_;
  pid_t peerPid_;
  const char* transport_;
};

// The poison word: the error code in the low 8 bits, 1 + the rank where the failure
// started above them, so a failure cascades with its root cause.
inline uint32_t encodePoison(int code, int originRank) { return uint32_t(code & 0xff) | (uint32_t(originRank + 1) << 8); }
inline int poisonCode(uint32_t word) { return int(word & 0xff); }
inline int poisonOrigin(uint32_t word) { return int(word >> 8) - 1; }

// Bytes of the control block rounded up to a page, so slots start page-aligned.
size_t connCtrlBytes();

// Initialises a freshly allocated control block (creator side, before the peer sees it).
void initConnCtrl(ConnCtrl* ctrl, uint32_t nsteps, uint32_t slotBytes);

}  // namespace snccl
