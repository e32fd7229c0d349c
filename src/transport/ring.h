// The ring protocol: one direction of data between two ends, as a ring of slots with
// credits. Everything that reads or writes a ConnCtrl goes through Ring, whichever end
// it plays: the executor's Connection (connection.h) plays one end, and the other end is
// either another executor's Connection (local, shm) or a helper thread of a transport
// (the net proxy, net/net_entry.h). Ring holds no cursor of its own: each end keeps its
// own (a Connection has one; the net proxy reads or posts ahead of what it publishes).
//
// The credit scheme (docs/design.md §5): the ring has `nsteps` slots of `slotBytes`. Two
// 64-bit monotonic counters live in a control block both ends can see: `tail` (written
// only by the sender: messages posted) and `head` (written only by the receiver: messages
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
//   for processBarrier() (common/process_barrier.h; RingConfig::lightPublish): the
//   publisher only keeps its compiler from reordering, and the sleeper, after its store,
//   calls processBarrier(), which makes every publisher's earlier stores visible and any
//   later load see the flag. A full fence on the publishing side stalls each message for
//   the transfer of the cache lines it just wrote, most of the difference between 8-byte
//   AllReduce and Open MPI here; a sleep happens only after the spin and yield budgets.
// Both halves of that pairing live here (publish(), announce()), so every end of every
// transport keeps it the same way.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/wait.h"

// ThreadSanitizer cannot pair a release and an acquire made through two mappings of one
// ring (the local transport maps it once per end, at two addresses). Under it, each
// publish also releases, and each load that sees the other end's progress also acquires,
// a key both ends read from the control block: the creator's address of it.
#if defined(__SANITIZE_THREAD__)
#define SNCCL_RING_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SNCCL_RING_TSAN 1
#endif
#endif
#ifdef SNCCL_RING_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

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
  // ConnFifoEntry::at: memory of the sending process (Connection::postAt), or, on a
  // receive ring, where the net put the message (Connection::planRecvs)
  kAtPointer = 2
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
  uint64_t syncKey;  // the creator's address of this block (ThreadSanitizer's key, above)
  alignas(128) ConnFifoEntry fifo[kMaxSteps];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters must be lock-free");

// The poison word: the error code in the low 8 bits, 1 + the rank where the failure
// started above them, so a failure cascades with its root cause.
inline uint32_t encodePoison(int code, int originRank) {
  return uint32_t(code & 0xff) | (uint32_t(originRank + 1) << 8);
}
inline int poisonCode(uint32_t word) { return int(word & 0xff); }
inline int poisonOrigin(uint32_t word) { return int(word >> 8) - 1; }

// Bytes of the control block rounded up to a page, so slots start page-aligned.
size_t connCtrlBytes();

// Initialises a freshly allocated control block (creator side, before the peer sees it).
void initConnCtrl(ConnCtrl* ctrl, uint32_t nsteps, uint32_t slotBytes);

// How a ring's two ends use it, decided when the ring is created. Both ends are built by
// the same transport from the same request, so they agree.
struct RingConfig {
  // Both ends are executors polling shared memory: messages up to kInlineBytes travel in
  // their fifo entry and the receiver polls the entry (ConnFifoEntry::seq) instead of
  // tail. A ring with a helper thread at one end (net) leaves it off: the helper reads
  // slots and tail.
  bool inlineMessages = false;
  // Both ends publish without a full fence and pay a processBarrier() before sleeping
  // instead (header comment). Only for two executors: transport.h lightPublish().
  bool lightPublish = false;
};

// Which end of the ring: the one that posts (tail) or the one that consumes (head).
enum class RingSide { kSender, kReceiver };

class Ring {
 public:
  Ring(ConnCtrl* ctrl, char* slots, RingConfig config)
      : ctrl_(ctrl),
        slots_(slots),
        nsteps_(ctrl->nsteps),
        slotBytes_(ctrl->slotBytes),
        inline_(config.inlineMessages),
        light_(config.lightPublish) {}

  uint32_t nsteps() const { return nsteps_; }
  uint32_t slotBytes() const { return slotBytes_; }
  bool inlineMessages() const { return inline_; }
  bool lightPublish() const { return light_; }
  char* slot(uint64_t step) const { return slots_ + (step % nsteps_) * slotBytes_; }
  ConnFifoEntry& entry(uint64_t step) const { return ctrl_->fifo[step % nsteps_]; }
  uint64_t head(std::memory_order order = std::memory_order_acquire) const {
    const uint64_t h = ctrl_->head.load(order);
    if (order != std::memory_order_relaxed) syncAcquire();
    return h;
  }
  uint64_t tail(std::memory_order order = std::memory_order_acquire) const {
    const uint64_t t = ctrl_->tail.load(order);
    if (order != std::memory_order_relaxed) syncAcquire();
    return t;
  }

  // ---- Sender end --------------------------------------------------------------------
  // The credit rule: message `step` may be filled while step < head + nsteps.
  bool creditFor(uint64_t step, uint64_t head) const { return step < head + nsteps_; }
  // The same against `cachedHead`, the last head this end saw, reloaded only when that
  // gives no credit (one shared cache line less per message while credits last).
  bool hasCredit(uint64_t step, uint64_t& cachedHead) const {
    if (step >= cachedHead + nsteps_) {
      cachedHead = ctrl_->head.load(std::memory_order_acquire);
      syncAcquire();
      if (step >= cachedHead + nsteps_) return false;
    }
    return true;
  }
  // Where the sender writes message `step` of `bytes`: its fifo entry on an inline ring
  // when it fits, else its slot.
  char* sendBuffer(uint64_t step, uint32_t bytes) const {
    if (inline_ && bytes <= kInlineBytes) return ctrl_->fifo[step % nsteps_].data;
    return slot(step);
  }
  // Where post() says message `step` of `bytes` written at sendBuffer() is.
  uint32_t placement(uint32_t bytes) const { return inline_ && bytes <= kInlineBytes ? kInline : kInSlot; }
  // Fills message `step`'s fifo entry and publishes tail = step + 1 (wakes a sleeping
  // receiver). `at` is read only for kAtPointer.
  void post(uint64_t step, uint32_t bytes, uint64_t sig, uint32_t where, const char* at) {
    ConnFifoEntry& e = ctrl_->fifo[step % nsteps_];
    e.bytes = bytes;
    e.sig = sig;
    // Set on every message: an entry reused after a kAtPointer one must not keep it.
    e.where = where;
    if (where == kAtPointer) e.at = at;
    syncRelease();
    if (inline_) e.seq.store(step + 1, std::memory_order_release);  // the receiver polls this
    publish(ctrl_->tail, step + 1, ctrl_->recvSleeping, ctrl_->tailSeq);
  }

  // ---- Receiver end ------------------------------------------------------------------
  // Whether message `step` has arrived (tail > step), against `cachedTail` as above.
  // Not for inline rings, where the entry says it (inlineArrived).
  bool hasMessage(uint64_t step, uint64_t& cachedTail) const {
    if (step >= cachedTail) {
      cachedTail = ctrl_->tail.load(std::memory_order_acquire);
      syncAcquire();
      if (step >= cachedTail) return false;
    }
    return true;
  }
  bool inlineArrived(uint64_t step) const {
    const bool arrived = ctrl_->fifo[step % nsteps_].seq.load(std::memory_order_acquire) == step + 1;
    syncAcquire();
    return arrived;
  }
  // Message `step`, once it has arrived: its size, signature and bytes.
  const char* read(uint64_t step, uint32_t* bytes, uint64_t* sig) const {
    const ConnFifoEntry& e = ctrl_->fifo[step % nsteps_];
    *bytes = e.bytes;
    *sig = e.sig;
    return e.where == kAtPointer ? e.at : slot(step);
  }
  // Where message `step`'s bytes are (not inline rings): its slot, or the memory its
  // entry names (kAtPointer).
  const char* messageAt(uint64_t step) const {
    const ConnFifoEntry& e = ctrl_->fifo[step % nsteps_];
    return e.where == kAtPointer ? e.at : slot(step);
  }
  const char* readInline(uint64_t step, uint32_t* bytes, uint64_t* sig) const {
    const ConnFifoEntry& e = ctrl_->fifo[step % nsteps_];
    *bytes = e.bytes;
    *sig = e.sig;
    return e.where == kInline ? e.data : slot(step);
  }
  // Frees every message before `head` (publishes it; wakes a sleeping sender).
  void release(uint64_t head) {
    syncRelease();
    publish(ctrl_->head, head, ctrl_->sendSleeping, ctrl_->headSeq);
  }

  // ---- Sleeping ----------------------------------------------------------------------
  // The futex word that moves when what `side` waits for moves (headSeq for the sender,
  // tailSeq for the receiver), or when the ring is poisoned.
  std::atomic<uint32_t>& wakeWord(RingSide side) const {
    return side == RingSide::kSender ? ctrl_->headSeq : ctrl_->tailSeq;
  }
  // The sleeper's half of the pairing: sets `side`'s sleeping flag so that the other
  // end's next publish wakes it; with light publishing also runs the barrier that makes
  // the flag and the publisher's earlier stores visible. False when that barrier failed:
  // the flag is withdrawn again and nobody will wake this end (it must only nap). After
  // true, the end re-checks its counter before sleeping on wakeWord(side).
  bool announce(RingSide side);
  void withdraw(RingSide side) { flag(side).store(0, std::memory_order_relaxed); }

  // ---- Failure -----------------------------------------------------------------------
  // Marks the ring failed for both ends (the first code stays) and wakes any sleeper.
  void poison(uint32_t code);
  uint32_t poisoned(std::memory_order order = std::memory_order_relaxed) const { return ctrl_->poison.load(order); }

 private:
  // ThreadSanitizer's view of the pairs above (nothing otherwise).
  void syncRelease() const {
#ifdef SNCCL_RING_TSAN
    __tsan_release(reinterpret_cast<void*>(ctrl_->syncKey));
#endif
  }
  void syncAcquire() const {
#ifdef SNCCL_RING_TSAN
    __tsan_acquire(reinterpret_cast<void*>(ctrl_->syncKey));
#endif
  }
  std::atomic<uint32_t>& flag(RingSide side) const {
    return side == RingSide::kSender ? ctrl_->sendSleeping : ctrl_->recvSleeping;
  }
  // The publisher's half: store the counter, then load the other end's sleeping flag; the
  // store must be visible before the load. With light publishing the sleeper's
  // processBarrier() provides that, so only the compiler must keep the order.
  void publish(std::atomic<uint64_t>& counter, uint64_t value, std::atomic<uint32_t>& sleeping,
               std::atomic<uint32_t>& seq) {
    bool asleep;
    if (light_) {
      counter.store(value, std::memory_order_release);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      asleep = sleeping.load(std::memory_order_relaxed) != 0;
    } else {
      counter.store(value, std::memory_order_seq_cst);
      asleep = sleeping.load(std::memory_order_seq_cst) != 0;
    }
    if (asleep) {
      seq.fetch_add(1, std::memory_order_seq_cst);
      futexWakeAll(&seq);
    }
  }

  ConnCtrl* ctrl_;
  char* slots_;
  uint32_t nsteps_;
  uint32_t slotBytes_;
  bool inline_;
  bool light_;
};

}  // namespace snccl
