// Net proxy entries: ring <-> net comm, both directions.
#include "transport/net/net_entry.h"

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/signature_digest.h"

namespace snccl::net {

using Clock = std::chrono::steady_clock;

NetEntry::NetEntry(Net* net, RingView ring, EntryInfo info)
    : net_(net),
      ring_(ring),
      protocol_(ring.ctrl, ring.slots, RingConfig{}),
      info_(std::move(info)),
      needsReg_(!net->usesUnregisteredHostMemory()),
      prefixImm_([&] {
        Properties p;
        return net->getProperties(info_.dev, &p).ok() && !p.imm;
      }()),
      mrs_(net, info_.regs),
      railsCounted_(info_.rails.slots != nullptr) {
  if (prefixImm_) wire_.resize(ring_.nsteps * wireSlotBytes());
}

void NetEntry::countRails() {
  Comm* c = comm();
  if (!railsCounted_ || c == nullptr) return;
  if (!net_->railBytes(c, &railNow_)) {
    railsCounted_ = false;  // the plugin cannot tell: it never will
    return;
  }
  for (const RailBytes& now : railNow_) {
    auto it = std::find_if(railSeen_.begin(), railSeen_.end(), [&](const RailSeen& r) { return r.name == now.name; });
    if (it == railSeen_.end()) {
      RailCounters* counters = now.name[0] != '\0' ? info_.rails.find(now.name) : nullptr;
      it = railSeen_.insert(railSeen_.end(), RailSeen{now.name, 0, counters});
    }
    if (now.bytes > it->bytes && it->counters != nullptr)
      (info_.send ? it->counters->sendBytes : it->counters->recvBytes).fetch_add(now.bytes - it->bytes,
                                                                               std::memory_order_relaxed);
    it->bytes = now.bytes;
  }
}

bool NetEntry::pollFds(std::vector<pollfd>* fds) {
  if (state_ == State::kFailed) return true;
  // A closing sender has a deadline to keep: wake on a timer too.
  if (closing_) return false;
  Comm* c = state_ == State::kActive ? comm() : setupComm();
  if (c == nullptr) return false;
  return net_->pollFds(c, fds);
}

void NetEntry::closeNet() { closeComm(abortCode_); }

bool NetEntry::handleLocalPoison() {
  if (state_ == State::kFailed) return false;
  uint32_t word = protocol_.poisoned(std::memory_order_acquire);
  if (word == 0) return false;
  SN_INFO(log::kNet, "NET : %s: the communicator failed or was aborted (%s); telling the peer",
          info_.what.c_str(), resultName(poisonCode(word)));
  state_ = State::kFailed;
  abortCode_ = word;  // the peer poisons its end with the same word: same root cause
  inflight_.clear();
  closeComm(abortCode_);
  return true;
}

NetEntry::Oldest NetEntry::testOldest(size_t* size, uint32_t* imm) {
  bool done = false;
  Status s = net_->test(inflight_.front().req, &done, size, imm);
  if (!s.ok()) {
    inflight_.pop_front();  // a failed request is gone (Net::test)
    fail(s);
    return Oldest::kFailed;
  }
  if (!done) return Oldest::kPending;
  inflight_.pop_front();
  countRails();
  return Oldest::kDone;
}

void NetEntry::fail(const Status& s) {
  // A peer that aborted sent its poison word (naming where the failure started); a lost
  // peer is itself the origin.
  Comm* c = comm();
  uint32_t word = c != nullptr ? net_->peerAbortCode(c) : 0;
  // The net layer knows what happened on the wire (peer lost, link down, timeout); this is
  // where it gets the ranks' names, so a survivor's log says which peer and why. A peer's
  // ABORT is a cascade of a failure reported where it started: not news.
  if (word == 0) {
    // After the peer's goodbye the failure is the consequence of its clean close (its rank
    // destroyed the communicator while receives for a next operation were posted here): no
    // warning. The ring is still poisoned, so an operation that waits on it fails and says so.
    if (peerClosedInOrder(c))
      SN_INFO(log::kNet, "NET : %s: the peer closed the connection: %s", info_.what.c_str(), s.message().c_str());
    else
      SN_WARN("NET : %s: connection %s: %s", info_.what.c_str(), state_ == State::kSetup ? "setup failed" : "failed",
              s.message().c_str());
    // A system error is this end's own (its link is down, a local call failed): this rank
    // is where the failure started. Anything else on the wire is blamed on the peer.
    int origin = s.code() == ncclSystemError ? info_.rank : info_.peer;
    word = encodePoison(s.code() == ncclSuccess ? ncclInternalError : s.code(), origin);
    if (ring_.note != nullptr) ring_.note->set(s.message());
  } else {
    SN_INFO(log::kNet, "NET : %s: the peer aborted: %s", info_.what.c_str(), s.message().c_str());
  }
  state_ = State::kFailed;
  inflight_.clear();
  abortCode_ = word;
  closeComm(abortCode_);
  if (ringDrained()) {
    poisonRing(word);
  } else {
    deferredPoison_ = word;
  }
}

bool NetEntry::settleDeferredPoison() {
  if (deferredPoison_ == 0 || !ringDrained()) return false;
  poisonRing(deferredPoison_);
  deferredPoison_ = 0;
  return true;
}

void NetEntry::poisonRing(uint32_t code) { protocol_.poison(code); }

bool NetEntry::setActive() {
  Status s = prefixImm_ ? mrs_.registerRing(comm(), wire_.data(), wire_.size())
                        : mrs_.registerRing(comm(), ring_.slots, size_t(ring_.nsteps) * ring_.slotBytes);
  if (!s.ok()) {
    fail(s.addContext("registering the ring's slots"));
    return false;
  }
  state_ = State::kActive;
  Properties p;
  std::string dev = net_->getProperties(info_.dev, &p).ok() ? p.name : "?";
  SN_INFO(log::kNet, "NET : %s: connected via NET/%s/%d (%s)", info_.what.c_str(), net_->name(), info_.dev,
          dev.c_str());
  return true;
}

MemHandle* NetEntry::userMr(const char* at, size_t bytes, bool* registered) {
  if (!needsReg_) {
    *registered = true;
    return nullptr;
  }
  MemHandle* mh = mrs_.lookup(comm(), at, bytes, posted_);
  *registered = mh != nullptr;
  return mh;
}

// ---- Sender ------------------------------------------------------------------------

SendEntry::SendEntry(Net* net, RingView ring, const Handle& handle, EntryInfo info)
    : NetEntry(net, ring, std::move(info)), handle_(handle) {}

bool SendEntry::progress() {
  if (state_ == State::kFailed) return false;
  if (handleLocalPoison()) return true;
  if (state_ == State::kSetup) {
    Status s = net_->connect(info_.dev, &handle_, &comm_);
    if (!s.ok()) {
      fail(s);
      return true;
    }
    if (comm_ == nullptr) return false;
    if (!setActive()) return true;
  }
  if (needsReg_) mrs_.reclaim(comm_, posted_, done_);
  // New messages go out first (they are on the peer's critical path), then completions
  // free their slots (a send just handed over often completes in the same pass).
  bool moved = false;
  uint64_t tail = protocol_.tail(std::memory_order_acquire);
  seen_ = tail;
  while (posted_ < tail) {
    const ConnFifoEntry& e = protocol_.entry(posted_);
    void* data = nullptr;
    size_t bytes = 0;
    MemHandle* mh = nullptr;
    if (!wireMessage(e, &data, &bytes, &mh)) return true;
    Request* r = nullptr;
    Status s = net_->isend(comm_, data, bytes, 0, signatureDigest(e.sig), mh, &r);
    if (!s.ok()) {
      fail(s);
      return true;
    }
    if (r == nullptr) break;  // no credit from the receiver yet: its CTS wakes us
    inflight_.push_back({r, nullptr, 0});
    ++posted_;
    moved = true;
  }
  while (!inflight_.empty()) {
    size_t size = 0;
    Oldest t = testOldest(&size, nullptr);
    if (t == Oldest::kFailed) return true;
    if (t == Oldest::kPending) break;
    protocol_.release(++done_);
    moved = true;
  }
  return moved;
}

bool SendEntry::wireMessage(const ConnFifoEntry& e, void** data, size_t* bytes, MemHandle** mh) {
  // A message posted with Connection::postAt is sent from the executor's memory, which
  // stays unchanged until head passes it (the operation waits for that), when the plugin
  // can send from it (registered, or no registration needed); else it is copied into its
  // slot, the credit the executor took for it and left unused. Without imm, every message
  // is copied behind its prefix into its wire slot. A copy is made once per message, not
  // again while the send waits for credit.
  *data = ring_.slot(posted_);
  *bytes = e.bytes;
  *mh = mrs_.ring();
  bool copy = prefixImm_;
  if (!prefixImm_ && e.where == kAtPointer) {
    bool registered = false;
    MemHandle* at = userMr(e.at, e.bytes, &registered);
    if (registered) {
      *data = const_cast<char*>(e.at);
      *mh = at;
    } else {
      copy = true;
    }
  }
  if (!copy) return true;
  const char* from = e.where == kAtPointer ? e.at : ring_.slot(posted_);
  char* to = ring_.slot(posted_);
  if (prefixImm_) {
    to = wireSlot(posted_);
    *data = to;
    *bytes += kImmPrefixBytes;
  }
  if (copied_ == posted_ + 1) return true;
  if (e.bytes > ring_.slotBytes) {
    fail(InternalError("a %u-byte message does not fit a %u-byte slot", e.bytes, ring_.slotBytes));
    return false;
  }
  if (prefixImm_) {
    const uint32_t prefix[2] = {signatureDigest(e.sig), 0};
    static_assert(sizeof prefix == kImmPrefixBytes);
    std::memcpy(to, prefix, sizeof prefix);
    to += kImmPrefixBytes;
  }
  if (to != from) std::memcpy(to, from, e.bytes);
  copied_ = posted_ + 1;
  return true;
}

void SendEntry::settle() {
  // Nothing posted is still to send or to complete: the comm owes the peer nothing (the
  // receiver's credits wait in the socket until a send needs them). A poisoned ring still
  // gets its passes: they send the ABORT from this thread (runRunners relies on it).
  if (state_ == State::kActive && inflight_.empty() && posted_ == protocol_.tail(std::memory_order_acquire) &&
      protocol_.poisoned(std::memory_order_acquire) == 0)
    return;
  NetEntry::settle();
}

bool SendEntry::arm() {
  (void)protocol_.announce(RingSide::kReceiver);  // full fences (protocol_): cannot fail
  if (protocol_.poisoned(std::memory_order_seq_cst) != 0 && state_ != State::kFailed) return false;
  // Only news since progress() looked counts: posted-but-uncredited messages wait on the
  // socket, not on the executor.
  return state_ != State::kActive || protocol_.tail(std::memory_order_seq_cst) == seen_;
}

bool SendEntry::needsProxy() {
  // Sends the net took and owes nothing more for (quiescent: every byte is written, or
  // the NIC moves them) only wait for a test() that retires them and frees their slots:
  // the next operation's claimant or the proxy's next pass does that, and a proxy woken
  // for it after every operation costs more than the operation (eventfd, completion
  // channel re-arm, scheduler trip).
  return state_ != State::kActive || posted_ < protocol_.tail(std::memory_order_acquire) ||
         !net_->quiescent(comm_);
}

bool SendEntry::detachReady() {
  if (!closing_) {
    closing_ = true;
    closeDeadline_ = info_.timeoutSec > 0 ? Clock::now() + std::chrono::seconds(info_.timeoutSec) : Clock::time_point::max();
  }
  if (state_ == State::kFailed) return true;
  // Messages the executor posted must leave before the ring is freed: a destroyed
  // communicator still owes its peers the data of its last operation.
  uint64_t tail = protocol_.tail(std::memory_order_acquire);
  bool delivered = posted_ == tail && inflight_.empty();
  if (delivered && goodbyeDone()) return true;
  if (Clock::now() < closeDeadline_) return false;
  if (delivered) return true;  // only the goodbye is left: the peer will see a loss instead
  SN_WARN("NET : %s: closing with %llu message(s) undelivered after %d s (SNCCL_TIMEOUT)", info_.what.c_str(),
          (unsigned long long)(tail - done_), info_.timeoutSec);
  abortCode_ = encodePoison(ncclRemoteError, info_.rank);
  return true;
}

bool SendEntry::goodbyeDone() {
  if (!prefixImm_ || state_ != State::kActive || abortCode_ != 0) return true;
  if (!goodbyePosted_) {
    // It needs a receive posted at the peer, which comes once the peer consumed our last
    // messages: a live peer does that at once, so the wait is short, and bounded in case
    // the peer is stuck (then it sees a loss instead).
    if (goodbyeGiveUp_ == Clock::time_point{}) goodbyeGiveUp_ = std::min(closeDeadline_, Clock::now() + kGoodbyeWait);
    // Every message before it completed, so its wire slot is free.
    char* w = wireSlot(posted_);
    const uint32_t prefix[2] = {0, kPrefixGoodbye};
    std::memcpy(w, prefix, sizeof prefix);
    Status s = net_->isend(comm_, w, kImmPrefixBytes, 0, 0, mrs_.ring(), &goodbye_);
    if (!s.ok()) return true;
    if (goodbye_ == nullptr) return Clock::now() >= goodbyeGiveUp_;
    goodbyePosted_ = true;
  }
  if (goodbye_ == nullptr) return true;
  bool done = false;
  size_t size = 0;
  uint32_t imm = 0;
  Status s = net_->test(goodbye_, &done, &size, &imm);
  if (!s.ok() || done) goodbye_ = nullptr;  // either way the request is gone (Net::test)
  // A goodbye that does not leave in time is left to the close, which frees it.
  return goodbye_ == nullptr || Clock::now() >= goodbyeGiveUp_ + kGoodbyeWait;
}

void SendEntry::closeComm(uint32_t abortCode) {
  if (comm_ != nullptr) {
    mrs_.releaseAll(comm_);
    Status s = net_->closeSend(comm_, abortCode);
    if (!s.ok()) SN_INFO(log::kNet, "NET : %s: close: %s", info_.what.c_str(), s.message().c_str());
    comm_ = nullptr;
  } else {
    net_->cancelConnect(&handle_);
  }
}

// ---- Receiver ----------------------------------------------------------------------

RecvEntry::RecvEntry(Net* net, RingView ring, ListenComm* listen, EntryInfo info)
    : NetEntry(net, ring, std::move(info)), listen_(listen) {}

bool RecvEntry::progress() {
  if (state_ == State::kFailed) return settleDeferredPoison();
  if (handleLocalPoison()) return true;
  if (state_ == State::kSetup) {
    Status s = net_->accept(listen_, &comm_);
    if (!s.ok()) {
      fail(s);
      return true;
    }
    if (comm_ == nullptr) return false;
    (void)net_->closeListen(listen_);
    listen_ = nullptr;
    if (!setActive()) return true;
  }
  bool moved = retarget();
  while (!inflight_.empty()) {
    size_t size = 0;
    uint32_t imm = 0;
    const InFlight f = inflight_.front();  // gone from inflight_ once done
    Oldest t = testOldest(&size, &imm);
    if (t == Oldest::kFailed) return true;
    if (t == Oldest::kPending) break;
    // A moved receive lands at its target only with exactly the planned size (retargetRecv).
    const char* at = f.at != nullptr && size == f.atBytes ? f.at : nullptr;
    bool goodbye = false;
    if (prefixImm_ && !unwrapPrefix(&size, &imm, &at, &goodbye)) return true;
    if (goodbye) {
      // All of the peer's data came before it, and nothing follows. The receives still
      // posted here might never complete on some plugins (a verbs queue pair whose peer
      // is gone), so the connection ends now, as a clean close: no warning, and the ring
      // is poisoned only once the executor has taken what arrived (fail()).
      peerSaidGoodbye_ = true;
      fail(RemoteError("the peer closed the connection (its goodbye arrived)"));
      return true;
    }
    protocol_.post(done_, uint32_t(size), signatureFromDigest(imm), at != nullptr ? kAtPointer : kInSlot, at);
    ++done_;
    moved = true;
  }
  return postReceives() || moved;
}

bool RecvEntry::postReceives() {
  bool moved = false;
  uint64_t head = protocol_.head(std::memory_order_acquire);
  seen_ = head;
  if (needsReg_) mrs_.reclaim(comm_, posted_, done_);
  while (protocol_.creditFor(posted_, head)) {
    void* data = prefixImm_ ? wireSlot(posted_) : ring_.slot(posted_);
    size_t size = prefixImm_ ? wireSlotBytes() : ring_.slotBytes;
    int tag = 0;
    MemHandle* mh = mrs_.ring();
    Request* r = nullptr;
    // The executor's memory for this message, if it named some (RecvPlan). Posted into the
    // slot and offered the target, so that a message of another size (ranks that disagree
    // on a count) still lands in the slot, where the executor reports the mismatch.
    uint32_t targetBytes = 0;
    const char* target = ring_.plan != nullptr ? ring_.plan->find(posted_, &targetBytes) : nullptr;
    MemHandle* targetMh = nullptr;
    if (target != nullptr && !retargetable(target, targetBytes, &targetMh)) target = nullptr;
    bool offered = false;
    Status s = target != nullptr ? net_->irecvWithOffer(comm_, data, size, tag, mh, const_cast<char*>(target),
                                                        targetBytes, targetMh, &r, &offered)
                                 : net_->irecv(comm_, 1, &data, &size, &tag, &mh, &r);
    if (!s.ok()) {
      fail(s);
      return true;
    }
    if (r == nullptr) break;
    if (!offered) target = nullptr;
    inflight_.push_back({r, target, targetBytes});
    ++posted_;
    moved = true;
  }
  return moved;
}

void RecvEntry::settle() {
  // The executor just freed slots: re-post their receives (the peer's credits). Testing
  // the oldest receive here would only ask the socket again for the next operation's
  // first message, which that operation (or the proxy) asks for anyway.
  if (state_ != State::kActive || handleLocalPoison()) {
    NetEntry::settle();
    return;
  }
  retarget();  // a plan set since the last pass applies to what is posted now
  postReceives();
}

bool RecvEntry::retarget() {
  // A new plan may name messages whose receives were posted into slots before it (a ring
  // keeps nsteps posted between operations). Those whose data has not started to arrive
  // move to their target; the others stay in their slot and are copied.
  if (ring_.plan == nullptr || ring_.plan->version() == planSeen_) return false;
  planSeen_ = ring_.plan->version();
  bool moved = false;
  for (size_t i = 0; i < inflight_.size(); ++i) {
    InFlight& f = inflight_[i];
    uint32_t bytes = 0;
    const char* target = ring_.plan->find(done_ + i, &bytes);
    if (f.at != nullptr || target == nullptr) continue;
    if (retargetTo(f.req, target, bytes)) {
      f.at = target;
      f.atBytes = bytes;
      moved = true;
    }
  }
  return moved;
}

bool RecvEntry::unwrapPrefix(size_t* size, uint32_t* imm, const char** at, bool* goodbye) {
  if (*size < kImmPrefixBytes) {
    fail(InternalError("a %zu-byte message is shorter than its %zu-byte imm prefix (the peer uses another net "
                       "plugin?)",
                       *size, kImmPrefixBytes));
    return false;
  }
  const char* w = wireSlot(done_);
  uint32_t prefix[2];
  std::memcpy(prefix, w, sizeof prefix);
  *imm = prefix[0];
  *goodbye = prefix[1] == kPrefixGoodbye && *size == kImmPrefixBytes;
  *at = w + kImmPrefixBytes;
  *size -= kImmPrefixBytes;
  return true;
}

bool RecvEntry::retargetable(const char* target, uint32_t bytes, MemHandle** mh) {
  // Only into memory the plugin can receive into (registered, or no registration needed),
  // and not behind a prefix (it would land in front of the target).
  if (prefixImm_) return false;
  bool registered = false;
  *mh = userMr(target, bytes, &registered);
  return registered;
}

bool RecvEntry::retargetTo(Request* r, const char* target, uint32_t bytes) {
  MemHandle* mh = nullptr;
  return retargetable(target, bytes, &mh) && net_->retargetRecv(r, const_cast<char*>(target), bytes, mh);
}

bool RecvEntry::arm() {
  (void)protocol_.announce(RingSide::kSender);  // full fences (protocol_): cannot fail
  if (protocol_.poisoned(std::memory_order_seq_cst) != 0 && state_ != State::kFailed) return false;
  return state_ != State::kActive || protocol_.head(std::memory_order_seq_cst) == seen_;
}

bool RecvEntry::needsProxy() {
  return state_ != State::kActive || deferredPoison_ != 0 ||
         protocol_.creditFor(posted_, protocol_.head(std::memory_order_acquire)) || !net_->quiescent(comm_);
}

void RecvEntry::closeComm(uint32_t abortCode) {
  if (listen_ != nullptr) {
    (void)net_->closeListen(listen_);
    listen_ = nullptr;
  }
  if (comm_ != nullptr) {
    mrs_.releaseAll(comm_);
    Status s = net_->closeRecv(comm_, abortCode);
    if (!s.ok()) SN_INFO(log::kNet, "NET : %s: close: %s", info_.what.c_str(), s.message().c_str());
    comm_ = nullptr;
  }
}

}  // namespace snccl::net
