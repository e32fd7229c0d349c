// Bootstrap: TCP rendezvous of the ranks of a communicator and a small out-of-band
// message service between them (used to set up connections, for split and barriers).
//
// Rendezvous: ncclGetUniqueId starts a root listener thread in the calling process and
// writes {magic, random 128-bit secret, root address, commHash} into the 128-byte id.
// Each rank opens its own listener, connects to the root, proves it knows the secret and
// sends {rank, nranks, its listener address, its info blob}. When all nranks have
// registered the root sends everyone the full table and exits. Every later connection
// between ranks starts with the secret too; a connection without it is dropped with a
// warning. With SNCCL_COMM_ID=host:port rank 0 hosts the root inside init.
//
// Invariants: all ranks pass the same nranks and infoSize; rank numbers are unique;
// messages between two ranks with the same tag are delivered in send order.
// Every blocking call honours the deadline (SNCCL_TIMEOUT) and the abort flag.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "snccl/nccl.h"

namespace snccl {

class Bootstrap {
 public:
  using Clock = std::chrono::steady_clock;

  // Tags at or above this value are used internally (allGather, barrier, split);
  // send/recv reject them with ncclInvalidArgument.
  static constexpr uint32_t kReservedTagBase = 0xFFFFFF00u;

  virtual ~Bootstrap() = default;

  // Creates a unique id and starts its root thread in this process (detached; it exits
  // once all ranks have registered, or after SNCCL_TIMEOUT). With SNCCL_COMM_ID set it
  // is createUniqueIdAt(SNCCL_COMM_ID).
  static Status createUniqueId(ncclUniqueId* id);

  // SNCCL_COMM_ID mode: encodes the fixed root address "host:port" (or "[v6]:port");
  // starts nothing. Rank 0's init hosts the root there (SO_REUSEADDR). The id is a pure
  // function of the resolved address, so every rank may compute it itself; its secret is
  // therefore weaker (anyone who knows the address can derive it). The communicator's
  // commHash is still random (chosen by the root).
  static Status createUniqueIdAt(std::string_view hostPort, ncclUniqueId* id);

  // Joins the communicator described by `id`. `info` (infoSize bytes, same size on every
  // rank) is this rank's blob; after init, peerInfo(r) returns rank r's blob.
  // `abortFlag` may be null; when it becomes true blocking calls fail promptly.
  static Result<std::unique_ptr<Bootstrap>> init(const ncclUniqueId& id, int rank, int nranks,
                                                 std::span<const std::byte> info,
                                                 const std::atomic<bool>* abortFlag);

  // Creates the bootstrap of a child communicator. Called by every parent rank listed in
  // `members` (child rank i is parent rank members[i]); `childRank` is this rank's index.
  // All members pass the same members list and childHash. Child infos are given anew.
  virtual Result<std::unique_ptr<Bootstrap>> split(std::span<const int> members, int childRank,
                                                   uint64_t childHash, std::span<const std::byte> info,
                                                   const std::atomic<bool>* abortFlag) = 0;

  // Tells the bootstrap how to notice that a peer died while this rank waits for its
  // message: `gone(peer)` returns a description of the peer's death, or "" while it
  // lives (or cannot be told). Called from recv about every 100 ms, on the waiting
  // thread; it must stay valid for the bootstrap's life. Without it, a peer that dies
  // before it ever connected to us is noticed only at the deadline.
  using PeerWatch = std::function<std::string(int peer)>;
  virtual void setPeerWatch(PeerWatch gone) = 0;

  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // 64-bit id shared by all ranks of this communicator, random per communicator.
  virtual uint64_t commHash() const = 0;
  virtual std::span<const std::byte> peerInfo(int rank) const = 0;

  // Point-to-point messages. recv blocks until a message with that tag from that peer
  // arrives; its size must equal `size` (else ncclInvalidUsage naming both sizes).
  virtual Status send(int peer, uint32_t tag, const void* data, size_t size) = 0;
  virtual Status recv(int peer, uint32_t tag, void* data, size_t size) = 0;

  // data holds nranks blocks of `size` bytes; this rank's block is filled on entry.
  // Collective over all ranks, like barrier: every rank calls them in the same order,
  // one thread per rank at a time (send/recv may run concurrently on other threads).
  virtual Status allGather(void* data, size_t size) = 0;
  virtual Status barrier() = 0;

  // Makes every pending and future blocking call return an error soon; never blocks.
  virtual void abort() = 0;

  // Before abort(): tells `peers` (best effort, at most about `budget` in all) that this
  // rank is aborting, so a peer waiting for a message from us, or trying to connect to
  // us, fails at once instead of at its deadline. Peers already connected to us learn it
  // from the end of stream anyway; this reaches the ones that are not yet. `origin` is
  // the rank where the failure that made this rank abort started (this rank itself when
  // it is the first), so that a peer learning of the abort here names the root cause.
  virtual void notifyAbort(std::span<const int> peers, std::chrono::milliseconds budget, int origin) = 0;

  // True once `peer`'s abort notice has arrived; then *origin (if given) is the rank the
  // notice names as the root cause. Reads what is pending on the streams first (a poll,
  // no blocking), so a rank blocked on a transport connection can call it now and then
  // to learn that the peer it waits for will never come.
  virtual bool peerAborted(int peer, int* origin = nullptr) = 0;
};

}  // namespace snccl
