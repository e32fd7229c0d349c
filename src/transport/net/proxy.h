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

// One ring <-> comm link, driven only by the proxy thread (after add()).
class ProxyEntry {
 public:
  virtual ~ProxyEntry() = default;
  // Moves whatever can move now; true when something did. Failures poison the ring.
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
};

class Proxy {
 public:
  // The process's proxy (a fresh one in a forked child).
  static Proxy& instance();

  // Hands the entry to the proxy thread, starting it if needed.
  void add(std::unique_ptr<ProxyEntry> entry);
  // Blocks until the proxy no longer touches the entry's ring; the proxy then closes and
  // deletes the entry on its own.
  void release(ProxyEntry* entry);

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
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<ProxyEntry>> adds_;  // guarded by mu_
  std::vector<Closing> releases_;                  // guarded by mu_
  bool running_ = false;                           // guarded by mu_
  std::thread thread_;                             // guarded by mu_
};

}  // namespace snccl::net
