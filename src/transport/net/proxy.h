// The proxy: one thread per process that moves data between the executor-visible rings of
// net Connections and their net comms.
//
// Why a thread: a net message only moves when somebody calls isend/irecv/test, and the
// executor cannot be relied on for that (it waits on other peers, or the user computes
// between collectives), while the peer needs our credits and data now. The thread starts
// with the first net connection and ends when the last one has closed. It never spins
// without bound: when no entry can move it arms every ring's sleeping flag and sleeps in
// poll() on the sockets plus an eventfd that the Doorbell rings when an executor posts or
// frees a slot (or that add/release write).
#pragma once

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace snccl::net {

class Doorbell;

// One ring <-> comm link, driven by the proxy thread (after add()) or, while the
// executor claims it, by the executor.
//
// Why the executor drives: when the proxy moved every message, one message cost about 14
// context switches across the two ranks (executor -> doorbell -> proxy -> socket on one
// side, proxy -> executor -> doorbell -> proxy for the credit on the other), measured with
// `perf stat` over TCP between two namespaces on 2 CPUs; that, not the wire, bounded
// busbw. An executor that waits on a net ring anyway calls the socket itself, as an MPI
// process does. The proxy remains for when nobody waits: between operations, while the
// executor sleeps, and for setup and close.
//
// Invariants: progress() runs under driveMutex() whoever calls it. While claimed() the
// proxy neither progresses the entry nor polls its sockets nor arms its ring; the
// claimant (one executor thread: a communicator is driven by one thread at a time) must
// call Proxy::unclaimed() after it gives the claim up, so a sleeping proxy takes over.
class ProxyEntry {
 public:
  virtual ~ProxyEntry() = default;
  // Moves whatever can move now; true when something did. Failures poison the ring.
  // Callers hold driveMutex().
  virtual bool progress() = 0;
  // Appends what to wait for; false when the entry can only be polled on a timer
  // (connection setup, plugins without descriptors).
  virtual bool pollFds(std::vector<pollfd>* fds) = 0;
  // The word the executor bumps when it gives this entry work while it is armed.
  virtual std::atomic<uint32_t>* wakeWord() = 0;
  // Sets the ring's sleeping flag, then re-checks: false when work is already there
  // (the caller must not sleep).
  virtual bool arm() = 0;
  virtual void disarm() = 0;
  // After release(): true once the entry no longer needs the ring (everything posted was
  // sent, or the entry failed, or its deadline passed).
  virtual bool detachReady() = 0;
  // Closes the net side (may linger briefly for the peer's goodbye); the ring is gone.
  virtual void closeNet() = 0;
  // Whether the entry has work nobody else will do if the proxy does not watch it: bytes
  // to write, sends the net is still moving (not quiescent), credits to post, setup to
  // finish. Sends that only wait to be retired by a test() are not owed. The claimant asks
  // (holding driveMutex) when it gives the claim up between operations: an entry that
  // owes nothing needs no proxy wake-up, which can cost more than a small
  // operation. A receive that has its credits posted owes nothing: the data waits in the
  // socket for the next operation's claimant or the proxy's next pass. Credits the socket
  // net holds back are not owed either: the sender has more than those, and a proxy that
  // slept while the entry was claimed looks at it again within kClaimedTickMs (proxy.cc).
  virtual bool needsProxy() { return true; }
  // What the claimant does (holding driveMutex) as it gives the claim up between
  // operations: by default a few progress passes, since an operation's final send is
  // usually posted but not yet written. Entries override it to skip what only costs
  // system calls there (polling a socket that the next operation polls anyway).
  virtual void settle() {
    for (int i = 0; i < 3 && progress(); ++i) {
    }
  }

  std::mutex& driveMutex() { return driveMu_; }
  void claim() { claimed_.store(true, std::memory_order_seq_cst); }
  void unclaim() { claimed_.store(false, std::memory_order_seq_cst); }
  bool claimed() const { return claimed_.load(std::memory_order_seq_cst); }
  // The claimant's progress: false without moving anything when the proxy holds the
  // entry at this moment (it is finishing a pass; the claimant simply tries again).
  bool tryDrive() {
    std::unique_lock<std::mutex> lock(driveMu_, std::try_to_lock);
    return lock.owns_lock() && progress();
  }
  // Waits for whoever drives the entry (the proxy may be mid-pass) and runs one pass
  // itself: after the ring was poisoned, that pass sees the poison and drops every
  // request, so the entry no longer reads memory the executor named (postAt).
  void quiesce() {
    std::lock_guard<std::mutex> lock(driveMu_);
    progress();
  }
  // Gives the claim up after settle(). Returns whether the proxy must be woken to take over:
  // always when `waiting` (the claimant is about to sleep on this ring), otherwise only
  // when needsProxy().
  bool unclaimAfterDriving(bool waiting) {
    bool wake = true;
    {
      std::unique_lock<std::mutex> lock(driveMu_, std::try_to_lock);
      if (lock.owns_lock()) {
        settle();
        wake = waiting || needsProxy();
      }
    }
    unclaim();
    return wake;
  }

 private:
  std::mutex driveMu_;
  std::atomic<bool> claimed_{false};
};

class Proxy {
 public:
  // The process's proxy (a fresh one in a forked child).
  static Proxy& instance();

  // Hands the entry to the proxy thread, starting it if needed.
  void add(std::unique_ptr<ProxyEntry> entry);
  // Blocks until the proxy no longer touches the entry's ring and has closed its net side
  // (a clean close lingers briefly for the peer's goodbye), so the caller may free the ring
  // and the process may exit; the proxy then deletes the entry. A claim on the entry ends
  // here.
  void release(ProxyEntry* entry);
  // After ProxyEntry::unclaim() when the entry needs the proxy: wakes the proxy if it
  // sleeps, so that it polls the entry's sockets again (one eventfd write; nothing when
  // the proxy is awake, since it looks at the claims on every pass). An entry unclaimed
  // without this call is picked up at the proxy's next wake-up for any reason.
  void unclaimed() {
    if (sleeping_.load(std::memory_order_seq_cst)) ring();
  }

  Proxy();
  ~Proxy();

  // An entry as the proxy thread holds it (public for the helpers in proxy.cc).
  struct Live {
    std::unique_ptr<ProxyEntry> entry;
    bool* detached = nullptr;  // non-null once release() asked for it
  };

 private:
  struct Closing {
    ProxyEntry* entry;
    bool* detached;  // the releasing thread's flag, set under mu_
  };

  void run();
  bool takeRequests(std::vector<Live>* live);
  // Closes released entries that no longer need their ring; true when any went.
  bool detachReleased(std::vector<Live>* live, Doorbell& bell);
  void sleepIdle(std::vector<Live>* live, const Doorbell& bell, std::vector<pollfd>* fds);
  void ring();

  int eventFd_ = -1;
  // Set while the proxy sleeps in poll() or is about to; with the claims, a Dekker pair
  // (both seq_cst): either unclaimed() sees it and rings, or sleepIdle sees the claim gone.
  std::atomic<bool> sleeping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<ProxyEntry>> adds_;  // guarded by mu_
  std::vector<Closing> releases_;                  // guarded by mu_
  std::vector<bool> skipped_;                      // sleepIdle's scratch (proxy thread only)
  bool running_ = false;                           // guarded by mu_
  std::thread thread_;                             // guarded by mu_
};

}  // namespace snccl::net
