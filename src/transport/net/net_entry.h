// Proxy entries of the net transport: the link between a Connection's local ring and a
// net comm, one per direction.
//
// The executor sees an ordinary ring in local memory. On the sending rank the proxy plays
// the ring's receiver: it isends every slot the executor posted (tail), or the executor's
// own memory that the fifo entry names instead (Connection::postAt), and frees the slot
// (head) when the send completed. On the receiving rank it plays the ring's sender: it
// posts an irecv for every free slot (up to nsteps ahead of head) into the slot, moves it
// to the executor's memory when the operation's RecvPlan names some for that message
// (Connection::planRecvs; also for receives posted before the plan, while the net still
// can: Net::retargetRecv; the fifo entry then says where it landed), and publishes tail
// when data has arrived, re-posting after the executor releases the slot. The irecvs are the
// credits of the net layer, so the two rings and the network form one credit loop: the
// sending executor can run at most nsteps messages ahead of what the receiving executor
// has consumed plus what the network holds.
//
// Memory: a plugin that needs registration (Net::usesUnregisteredHostMemory() false) gets
// a MemHandle with every isend, irecv and retargetRecv: the ring's slots, registered once
// the comm exists, or a range of the communicator's RegCache (reg_cache.h) that covers
// the executor's memory the message names; memory that no range covers goes through the
// slot (the sender copies it there; the receiver does not move the receive). Everything
// is deregistered before the comm is closed.
//
// The operation signature travels as its 32-bit digest (common/signature_digest.h) in the
// message's imm, or, on a plugin without imm (Properties::imm), in a kImmPrefixBytes
// prefix of the message. Then each entry has its own "wire slots" of slotBytes + the
// prefix, registered in place of the ring's slots: the sender copies each message behind
// the prefix there, and the receiver receives there and hands the executor the payload
// by pointer (kAtPointer), so the ring's geometry, which both ends agree on, is unchanged
// and nothing is received straight into the user's memory.
//
// Failures: a net error poisons the ring (the executor then reports the peer instead of
// waiting for its timeout) and leaves its cause in the ring's FailureNote, which the
// executor appends to the user's error. The poison word names where the failure started:
// the peer, unless the net layer says the fault is this node's own (ncclSystemError: its
// link is down), so a rank whose cable was pulled does not blame its peers. A ring
// poisoned by the executor (communicator error or abort) closes the comm with an ABORT
// frame so the peer fails fast too.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "transport/connection.h"
#include "transport/rail_tally.h"
#include "transport/net/net.h"
#include "transport/net/proxy.h"
#include "transport/net/reg_cache.h"

namespace snccl::net {

// Who the entry connects, for messages and for the poison word's origin rank.
struct EntryInfo {
  std::string what;  // "rank 0 -> rank 3 (comm 1a2b...)"
  int rank;
  int peer;
  int timeoutSec;  // SNCCL_TIMEOUT (0: none)
  int dev = 0;     // the plugin's device the comm uses
  // The communicator's registered ranges (reg_cache.h); null: none. Read only by a plugin
  // that needs registration.
  std::shared_ptr<RegCache> regs = nullptr;
  // The peer's rail counters (rail_tally.h), and which way this entry moves data.
  RailTally rails{};
  bool send = false;
};

// Why a connection failed, as the net layer said it: written once by the proxy thread
// before it poisons the ring, read by the executor once it sees the poison. Lives with
// the ring's memory.
class FailureNote {
 public:
  void set(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    if (text_.empty()) text_ = text;  // the first cause is the root cause
  }
  std::string get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return text_;
  }

 private:
  mutable std::mutex mu_;
  std::string text_;
};

// Where the executor's current operation wants some of its messages on a ring to land
// (Connection::planRecvs). Set by the executor when an operation starts, read by whoever
// posts the ring's receives (proxy or executor, under the entry's drive lock). A receive
// posted before the plan was set (a ring keeps nsteps receives posted, also between
// operations) moves to its target if the net can still move it (Net::retargetRecv:
// nothing of the message has arrived). Otherwise, for steps without a target, and for a
// message of another size than planned, the message goes to its slot: a target is an
// offer, and missing it only costs a copy.
class RecvPlan {
 public:
  void set(uint64_t first, std::span<const RecvTarget> targets) {
    std::lock_guard<std::mutex> lock(mu_);
    first_ = first;
    list_.assign(targets.begin(), targets.end());  // keeps its capacity: no allocation per op
    end_.store(targets.empty() ? 0 : first + targets.back().index + 1, std::memory_order_release);
    version_.fetch_add(1, std::memory_order_release);
  }
  // Changes with every set(): whoever posts the receives compares it with the value it saw
  // last to learn of a new plan for receives it already posted (RecvEntry::retarget).
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // Where message `step` is to land (nullptr: its slot) and its exact size. Any order:
  // the receives posted before a plan are looked up after later ones were posted.
  const char* find(uint64_t step, uint32_t* bytes) {
    // Between operations the list only names steps already received: no lock.
    if (step >= end_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    if (step < first_) return nullptr;
    auto it = std::lower_bound(list_.begin(), list_.end(), step - first_,
                               [](const RecvTarget& t, uint64_t index) { return t.index < index; });
    if (it == list_.end() || it->index != step - first_) return nullptr;
    *bytes = it->bytes;
    return it->at;
  }

 private:
  std::mutex mu_;
  uint64_t first_ = 0;
  std::vector<RecvTarget> list_;
  std::atomic<uint64_t> end_{0};   // the step after the last one listed
  std::atomic<uint64_t> version_{0};
};

struct RingView {
  ConnCtrl* ctrl;
  char* slots;
  uint32_t nsteps;
  uint32_t slotBytes;
  FailureNote* note;
  RecvPlan* plan;  // receive rings that take plans (Connection::planRecvs); null otherwise
  char* slot(uint64_t step) const { return slots + (step % nsteps) * size_t(slotBytes); }
};

class NetEntry : public ProxyEntry {
 public:
  bool pollFds(std::vector<pollfd>* fds) override;
  void closeNet() override;

 protected:
  enum class State { kSetup, kActive, kFailed };
  NetEntry(Net* net, RingView ring, EntryInfo info);

  // The comm the entry talks through (null while setting up or after failing).
  virtual Comm* comm() const = 0;
  virtual Comm* setupComm() const = 0;  // what to poll during setup (null: a timer)
  virtual void closeComm(uint32_t abortCode) = 0;

  // True when the executor poisoned the ring; closes the comm with an ABORT.
  bool handleLocalPoison();
  // Drops the comm and poisons the ring for the executor, but only once the executor has
  // consumed what was already delivered: it checks for poison before it retries a ring,
  // so an early poison would hide the last messages of a peer that closed right after.
  void fail(const Status& s);
  void poisonRing(uint32_t code);
  // Tests the oldest in-flight request (requests complete in posting order). kDone: it
  // completed and left inflight_ (*size, *imm: what it moved); kFailed: it failed, left
  // inflight_ and the entry failed (fail()); kPending: neither.
  enum class Oldest { kPending, kDone, kFailed };
  Oldest testOldest(size_t* size, uint32_t* imm);
  // After a message completed: adds what each rail carried since the last call to the
  // peer's rail counters (Net::railBytes; nothing on a plugin that cannot tell).
  void countRails();
  // True when no delivered message waits for the executor (always, on the send side).
  virtual bool ringDrained() const { return true; }
  // True once the peer closed in order (Net::peerClosed, or its goodbye on a net without imm).
  virtual bool peerClosedInOrder(Comm* c) const { return c != nullptr && net_->peerClosed(c); }
  // Applies a deferred poison once the ring drained; true when it did.
  bool settleDeferredPoison();
  // Once the comm exists: registers the ring's slots with it (false: that failed, and
  // fail() reported it).
  bool setActive();
  // The MemHandle of executor memory a message uses instead of a slot (null when the
  // plugin needs none, or when the memory is not registered: the caller uses the slot).
  MemHandle* userMr(const char* at, size_t bytes, bool* registered);

  Net* net_;
  RingView ring_;
  // The ring protocol (ring.h) for the end the proxy plays: the receiver of a send ring,
  // the sender of a receive ring. Full fences, no inline messages (RingConfig{}): the
  // executor at the other end polls tail and head.
  Ring protocol_;
  EntryInfo info_;
  bool needsReg_;  // !Net::usesUnregisteredHostMemory()
  bool prefixImm_;  // !Properties::imm: the imm travels in front of the payload
  std::vector<char> wire_;  // prefixImm_: the wire slots (nsteps x wireSlotBytes())
  size_t wireSlotBytes() const { return ring_.slotBytes + kImmPrefixBytes; }
  char* wireSlot(uint64_t step) { return wire_.data() + (step % ring_.nsteps) * wireSlotBytes(); }
  CommMrs mrs_;    // the comm's registrations: used by whoever drives the entry
  State state_ = State::kSetup;
  uint32_t abortCode_ = 0;  // a poison word (ring.h), sent to the peer on close
  uint32_t deferredPoison_ = 0;
  struct InFlight {
    Request* req;
    const char* at;     // a receive moved to a RecvTarget (null: its slot; sends: unused)
    uint32_t atBytes;   // the target's size: only a message of exactly that size lands there
  };
  std::deque<InFlight> inflight_;  // oldest first; they complete in this order
  uint64_t posted_ = 0;            // messages handed to the net
  uint64_t done_ = 0;              // messages completed (= head or tail published)
  uint64_t seen_ = 0;              // the executor's counter when progress last looked
  bool closing_ = false;
  std::chrono::steady_clock::time_point closeDeadline_{};
  // countRails(): each rail's bytes when last counted, and its counters (null: not counted).
  struct RailSeen {
    const char* name;
    uint64_t bytes;
    RailCounters* counters;
  };
  std::vector<RailSeen> railSeen_;
  std::vector<RailBytes> railNow_;  // scratch
  bool railsCounted_;               // a tally was given and the plugin can tell
};

class SendEntry : public NetEntry {
 public:
  SendEntry(Net* net, RingView ring, const Handle& handle, EntryInfo info);
  bool progress() override;
  std::atomic<uint32_t>* wakeWord() override { return &protocol_.wakeWord(RingSide::kReceiver); }
  bool arm() override;
  void disarm() override { protocol_.withdraw(RingSide::kReceiver); }
  bool detachReady() override;
  bool needsProxy() override;
  void settle() override;

 protected:
  Comm* comm() const override { return comm_; }
  Comm* setupComm() const override { return nullptr; }
  void closeComm(uint32_t abortCode) override;

 private:
  // Where the plugin sends message e (posted_) from, its size on the wire and its
  // MemHandle; false when it cannot be sent (fail() reported why).
  bool wireMessage(const ConnFifoEntry& e, void** data, size_t* bytes, MemHandle** mh);
  // Without imm, once everything posted was delivered on a clean close: sends the goodbye
  // (kPrefixGoodbye) once the receiver has a receive posted for it (waiting at most
  // kGoodbyeWait), and waits for it to leave. True when there is nothing (more) to do.
  bool goodbyeDone();

  Handle handle_;
  Request* goodbye_ = nullptr;  // the goodbye in flight
  bool goodbyePosted_ = false;
  std::chrono::steady_clock::time_point goodbyeGiveUp_{};  // no credit for it by then: no goodbye
  static constexpr std::chrono::seconds kGoodbyeWait{2};
  SendComm* comm_ = nullptr;
  uint64_t copied_ = 0;  // posted_ + 1 of a postAt message already copied into its slot
};

class RecvEntry : public NetEntry {
 public:
  RecvEntry(Net* net, RingView ring, ListenComm* listen, EntryInfo info);
  bool progress() override;
  std::atomic<uint32_t>* wakeWord() override { return &protocol_.wakeWord(RingSide::kSender); }
  bool arm() override;
  void disarm() override { protocol_.withdraw(RingSide::kSender); }
  bool detachReady() override { return true; }  // nothing of the ring is owed to anyone
  bool needsProxy() override;
  void settle() override;

 protected:
  Comm* comm() const override { return comm_; }
  Comm* setupComm() const override { return listen_; }
  void closeComm(uint32_t abortCode) override;
  bool ringDrained() const override { return protocol_.head(std::memory_order_acquire) >= done_; }
  bool peerClosedInOrder(Comm* c) const override { return peerSaidGoodbye_ || NetEntry::peerClosedInOrder(c); }

 private:
  // Moves receives posted before the current plan to their targets where the net still
  // can (Net::retargetRecv); true when any moved.
  bool retarget();
  // Posts receives for the free slots; true when any was posted (false after a failure,
  // which fail() reports through the ring).
  bool postReceives();
  // Without imm: takes the prefix off the message that just arrived in its wire slot
  // (false: it has none; fail() reported it). *goodbye: it is the peer's goodbye.
  bool unwrapPrefix(size_t* size, uint32_t* imm, const char** at, bool* goodbye);
  // Whether the plugin can receive into [target, target + bytes); *mh: its registration
  // (null where the plugin needs none).
  bool retargetable(const char* target, uint32_t bytes, MemHandle** mh);
  // Net::retargetRecv, for memory the plugin can receive into.
  bool retargetTo(Request* r, const char* target, uint32_t bytes);

  ListenComm* listen_;
  uint64_t planSeen_ = 0;  // the RecvPlan::version() retarget() last looked at
  bool peerSaidGoodbye_ = false;  // without imm: the peer's goodbye arrived (kPrefixGoodbye)
  RecvComm* comm_ = nullptr;
};

}  // namespace snccl::net
