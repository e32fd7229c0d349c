// Connection: the executor's end of a ring (ring.h), plus what the transport can do
// beyond the plain ring (capabilities below) and who is at the other end.
//
// What a transport gives a Connection (transport.h has the whole list):
// - the ring: a ConnCtrl (initConnCtrl) and nsteps x slotBytes of slots, and a RingConfig
//   (plain data: inline messages, light publishing);
// - a ConnMemory that owns that memory (its destructor frees it) and, optionally, says
//   why the transport failed the ring (failureDetail);
// - optionally, through ConnMemory::caps(), the capabilities below. A transport with
//   none (local, shm) gets the plain ring: every message through a slot or its entry,
//   nobody but the two ends to drive, nothing to quiesce.
//
// Sleeping (sleep()): an end stays announced as a sleeper from its first sleep of a wait
// until it gets what it waited for (a message or a credit), so a long wait pays for one
// barrier, not one per sleep slice.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "transport/ring.h"

namespace snccl {

// A message of the current operation that a net ring should receive straight into the
// operation's memory instead of a slot (Connection::planRecvs): the index-th message the
// operation receives on the ring, its exact size, and where it goes.
struct RecvTarget {
  uint32_t index;
  uint32_t bytes;
  char* at;
};

// Capability: the ring's other end is a helper thread that moves bytes elsewhere (the net
// proxy), and the executor may drive it itself while it waits (net/proxy.h says why):
// claimDrive() claims the ring for the calling thread, drive() then moves what can move
// now (true when something did), releaseDrive() hands it back to the helper; `waiting`
// says the caller is about to sleep until the helper moves something on this ring. Only
// the thread that claimed calls drive() or gives the claim up.
class Drivable {
 public:
  virtual void claimDrive() = 0;
  virtual void releaseDrive(bool waiting) = 0;
  virtual bool drive() = 0;

 protected:
  ~Drivable() = default;
};

// Capability of a send ring: the other end can send a message straight from memory of
// this process (Connection::postAt), so that an operation's input need not be copied into
// a slot. The net send rings, whose other end is the proxy thread of this process; with a
// plugin that needs registration it sends from registered memory and copies the rest into
// the message's slot (net/reg_cache.h).
class ZeroCopySend {
 public:
  // Returns once the other end will not touch memory named by postAt any more: after the
  // ring was poisoned, it lets the other end see the poison (net: under its drive lock),
  // which drops whatever it still had to send. Called on failure, before the operation
  // returns to the user, who may then free that memory.
  virtual void quiesce() = 0;

 protected:
  ~ZeroCopySend() = default;
};

// Capability of a receive ring: the other end posts receives for it, and can post them
// straight into memory of this process that the receiving end names beforehand
// (Connection::planRecvs): the net receive rings (with a plugin that needs registration,
// only into registered memory: net/reg_cache.h).
class ZeroCopyRecv {
 public:
  // Message first + t.index of the operation that starts lands at t.at if it has exactly
  // t.bytes, also when its receive was posted before this call, as long as the transport
  // has not begun to receive it (then, or with another size, it lands in its slot). The
  // list is sorted by index and replaces the previous plan.
  virtual void planRecvs(uint64_t first, std::span<const RecvTarget> targets) = 0;
  // As ZeroCopySend::quiesce, for memory named by planRecvs.
  virtual void quiesce() = 0;

 protected:
  ~ZeroCopyRecv() = default;
};

// What a transport can do beyond the plain ring; null: it cannot. The objects belong to
// the ConnMemory that returns them and live as long as it does.
struct ConnCaps {
  Drivable* drivable = nullptr;
  ZeroCopySend* zeroCopySend = nullptr;
  ZeroCopyRecv* zeroCopyRecv = nullptr;
  // Polling the ring's far side costs no system call (net::Net::pollsInUserSpace): a
  // waiter keeps polling it through a transfer instead of sleeping (SNCCL_NET_POLL_US).
  bool pollsInUserSpace = false;
};

// What owns the ring's memory (a shared-memory mapping, a heap block, ...).
class ConnMemory {
 public:
  virtual ~ConnMemory() = default;
  // Why the transport poisoned the ring, in a line ("" when it did not or cannot say):
  // the poison word only holds a code and a rank, while a network transport knows the
  // cause on the wire (peer lost, own link down, ...) that the user's error should name.
  // Safe to call from the executor's thread at any time.
  virtual std::string failureDetail() const { return {}; }
  // The ring's capabilities; asked once, when the Connection is built, which keeps the
  // pointers (no virtual call to learn them per message).
  virtual ConnCaps caps() { return {}; }
};

class Connection {
 public:
  // `memory` may be null (nothing to free, no capability); `transport` names it in messages.
  Connection(ConnCtrl* ctrl, char* slots, std::unique_ptr<ConnMemory> memory, int peer, pid_t peerPid,
             const char* transport, RingConfig config = {});

  int peer() const { return peer_; }
  pid_t peerPid() const { return peerPid_; }  // 0 when the peer is in this process
  const char* transport() const { return transport_; }
  // The link the connection runs over, for the traffic counters: the transport's name, or
  // what a transport says more precisely (a net's: plugin and device, "IB/mlx5_0").
  const std::string& link() const { return link_; }
  void setLink(std::string link) { link_ = std::move(link); }
  uint32_t slotBytes() const { return ring_.slotBytes(); }
  uint64_t step() const { return step_; }

  // Sender: where to write the next message of `bytes` (its slot, or its fifo entry on
  // an inline ring), or nullptr when no credit is available.
  char* trySendSlot(uint32_t bytes) {
    if (!ring_.hasCredit(step_, cachedPeer_)) return nullptr;
    if (announced_) [[unlikely]]
      wakeUp();
    return ring_.sendBuffer(step_, bytes);
  }
  // Sender: publishes the message written where trySendSlot(bytes) said.
  void post(uint32_t bytes, uint64_t sig);
  // Sender, on a sendsAtPointers() ring (ZeroCopySend), after trySendSlot(bytes) returned
  // a slot (the credit; the slot stays unused): publishes a message whose bytes stay at
  // `src` until sendsDone(). The caller keeps them unchanged until then.
  void postAt(const char* src, uint32_t bytes, uint64_t sig);
  bool sendsAtPointers() const { return zeroCopySend_ != nullptr; }
  // Whether the other end has finished with every message posted with postAt (their
  // slots are free again: head has passed them). While false, a sender that sleeps waits
  // for that (ready(true) includes it).
  bool sendsDone() {
    if (ring_.head(std::memory_order_acquire) < lastAtPointer_) return false;
    lastAtPointer_ = 0;
    return true;
  }
  // After a failure: returns once the other end no longer touches memory named by postAt
  // or planRecvs (ZeroCopySend::quiesce). Rings without those have nothing to wait for.
  void quiesce() {
    if (zeroCopySend_ != nullptr) zeroCopySend_->quiesce();
    if (zeroCopyRecv_ != nullptr) zeroCopyRecv_->quiesce();
  }
  // Receiver, on a receivesAtPointers() ring (ZeroCopyRecv), when an operation starts:
  // the operation would like message t.index of those it receives here (counted from the
  // next one this end receives) to land at t.at. Each one that does is returned by tryRecvSlot at that
  // address; the others come in their slot as usual (one whose data had begun to arrive
  // when the operation started, or of another size than planned). Until every one was
  // received, nothing else may write the target memory, and on failure quiesce() must
  // run before it is given back to the user.
  bool receivesAtPointers() const { return zeroCopyRecv_ != nullptr; }
  void planRecvs(std::span<const RecvTarget> targets) { zeroCopyRecv_->planRecvs(step_, targets); }

  // Receiver: the next message, or nullptr when none has arrived.
  const char* tryRecvSlot(uint32_t* bytes, uint64_t* sig) {
    if (ring_.inlineMessages()) {
      if (!ring_.inlineArrived(step_)) return nullptr;
      if (announced_) [[unlikely]]
        wakeUp();
      return ring_.readInline(step_, bytes, sig);
    }
    if (!ring_.hasMessage(step_, cachedPeer_)) return nullptr;
    if (announced_) [[unlikely]]
      wakeUp();
    return ring_.read(step_, bytes, sig);
  }
  // Receiver: frees the slot returned by tryRecvSlot.
  void release();

  // Whether what this end waits for is there: a message (receiver) or a free slot
  // (sender). A peer that finished, then exited or aborted, may have posted its last
  // messages before it went: they are still to be consumed, so its death only matters
  // while this is false.
  bool ready(bool sender) const {
    return sender ? senderReady(ring_.head(std::memory_order_acquire))
                  : ring_.tail(std::memory_order_acquire) > step_;
  }

  // Sleeps until the counter this end waits for moves, the connection is poisoned, or
  // timeoutUs passes. `sender` says which end we are. The end stays announced as a
  // sleeper until trySendSlot/tryRecvSlot next succeed.
  void sleep(bool sender, int64_t timeoutUs);

  // Marks the connection failed for both ends and wakes any sleeper.
  void poison(uint32_t code);
  uint32_t poisoned() const { return ring_.poisoned(std::memory_order_relaxed); }
  // The transport's account of a failure on this end (ConnMemory::failureDetail).
  std::string failureDetail() const { return memory_ ? memory_->failureDetail() : std::string(); }

  // Executor-driven rings (Drivable); the other three only where drivable().
  bool drivable() const { return drivable_ != nullptr; }
  void claimDrive() { drivable_->claimDrive(); }
  void releaseDrive(bool waiting) { drivable_->releaseDrive(waiting); }
  bool drive() { return drivable_->drive(); }
  // ConnCaps::pollsInUserSpace.
  bool pollsInUserSpace() const { return pollsInUserSpace_; }

 private:
  // A free slot, and every message sent from a pointer done (0 when none is pending).
  bool senderReady(uint64_t head) const { return ring_.creditFor(step_, head) && head >= lastAtPointer_; }
  void wakeUp();  // withdraws this end's sleep announcement

  Ring ring_;
  std::unique_ptr<ConnMemory> memory_;
  uint64_t step_ = 0;
  uint64_t cachedPeer_ = 0;  // last seen head (sender) or tail (receiver)
  // ConnMemory::caps(), kept: null when the transport lacks the capability.
  Drivable* drivable_ = nullptr;
  ZeroCopySend* zeroCopySend_ = nullptr;
  ZeroCopyRecv* zeroCopyRecv_ = nullptr;
  bool pollsInUserSpace_ = false;
  uint64_t lastAtPointer_ = 0;  // step after the last postAt message not yet known done
  bool announced_ = false;   // this end's sleeping flag is set (sleep() until wakeUp())
  bool sender_ = false;      // which flag: the end sleep() was called as
  int peer_;
  pid_t peerPid_;
  const char* transport_;
  std::string link_;
};

}  // namespace snccl
