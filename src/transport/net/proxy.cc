// The proxy thread: progress, sleeping in poll(), detaching released entries.
#include "transport/net/proxy.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/net/doorbell.h"

namespace snccl::net {

namespace {
constexpr int kTickMs = 1;  // poll timeout while some entry can only be polled on a timer
// Poll timeout while an executor claims some entry. A claim given back between operations
// wakes nobody when the entry owes nothing then (ProxyEntry::needsProxy), yet a sender may
// need it read later: the socket net grants some posted receives' credits only once it
// reads the sender's messages (socket_conn.h). Within this time the proxy watches entries
// given back that way, so such a sender waits at most this long for a rank that makes no
// call. One pass every 5 ms while operations run costs well under 1% of a CPU.
constexpr int kClaimedTickMs = 5;
}  // namespace

Proxy& Proxy::instance() {
  // One per process, deliberately never destroyed: the thread may outlive static
  // destruction at exit. A forked child gets a fresh one (it has no proxy thread).
  static std::mutex mu;
  static Proxy* proxy = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (owner != getpid()) {
    proxy = new Proxy();
    owner = getpid();
  }
  return *proxy;
}

Proxy::Proxy() { eventFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

Proxy::~Proxy() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (thread_.joinable()) thread_.join();
  }
  if (eventFd_ >= 0) close(eventFd_);
}

void Proxy::ring() {
  uint64_t one = 1;
  ssize_t k = write(eventFd_, &one, sizeof one);
  (void)k;  // a full counter still wakes the reader
}

void Proxy::add(std::unique_ptr<ProxyEntry> entry) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    adds_.push_back(std::move(entry));
    if (!running_) {
      // The previous thread (if any) set running_ = false under mu_ and no longer needs
      // it: joining here cannot deadlock.
      if (thread_.joinable()) thread_.join();
      running_ = true;
      thread_ = std::thread([this] { run(); });
    }
  }
  ring();
}

void Proxy::release(ProxyEntry* entry) {
  bool detached = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // No thread means no live entry (a forked child releasing its parent's): nothing to
    // wait for.
    if (!running_) return;
    releases_.push_back(Closing{entry, &detached});
  }
  ring();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return detached; });
}

bool Proxy::takeRequests(std::vector<Live>* live) {
  std::lock_guard<std::mutex> lock(mu_);
  bool changed = !adds_.empty();
  for (auto& e : adds_) live->push_back(Live{std::move(e), nullptr});
  adds_.clear();
  bool anyDetached = false;
  for (const Closing& c : releases_) {
    auto it = std::find_if(live->begin(), live->end(), [&](const Live& l) { return l.entry.get() == c.entry; });
    if (it != live->end()) {
      it->detached = c.detached;
      it->entry->unclaim();  // its ring is going: nobody claims it again
    } else {
      *c.detached = true;  // not ours (cannot happen): never leave the releaser waiting
      anyDetached = true;
    }
  }
  releases_.clear();
  if (anyDetached) cv_.notify_all();
  return changed;
}

namespace {
void watch(const std::vector<Proxy::Live>& live, Doorbell& bell) {
  std::vector<std::atomic<uint32_t>*> words;
  for (const Proxy::Live& l : live) words.push_back(l.entry->wakeWord());
  bell.setWords(std::move(words));
}
}  // namespace

bool Proxy::detachReleased(std::vector<Live>* live, Doorbell& bell) {
  std::vector<std::unique_ptr<ProxyEntry>> gone;
  std::vector<bool*> flags;
  for (Live& l : *live) {
    if (l.detached == nullptr) continue;
    bool ready = false;
    {
      std::lock_guard<std::mutex> lock(l.entry->driveMutex());
      ready = l.entry->detachReady();
    }
    if (ready) {
      gone.push_back(std::move(l.entry));
      flags.push_back(l.detached);
    }
  }
  if (gone.empty()) return false;
  live->erase(std::remove_if(live->begin(), live->end(), [](const Live& l) { return l.entry == nullptr; }),
              live->end());
  // Stop watching their words, and close the net side (a clean close waits briefly for
  // the peer's goodbye) before the releasing threads learn they may free the rings: a
  // releaser is a communicator being destroyed, and a process that exits right after it
  // would otherwise cut connections whose goodbye is still under way, which the kernel
  // turns into resets the peers report as failures.
  watch(*live, bell);
  for (auto& e : gone) e->closeNet();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (bool* f : flags) *f = true;
  }
  cv_.notify_all();
  return true;
}

void Proxy::sleepIdle(std::vector<Live>* live, const Doorbell& bell, std::vector<pollfd>* fds) {
  // Arm every ring, then re-check: work that arrived in between means no sleep. Asleep,
  // any socket, the doorbell, add/release, or (for entries that need it) the tick wakes us.
  // Entries an executor claims are left out (it drives them); a claim given up after
  // sleeping_ is set rings the eventfd, one given up before is seen by the re-check.
  std::vector<bool>& skipped = skipped_;
  skipped.assign(live->size(), false);
  bool canSleep = true;
  // arm(), pollFds() and disarm() read what progress() writes: under the entry's lock,
  // since a claimant may start driving any entry at any moment.
  for (size_t i = 0; i < live->size(); ++i) {
    Live& l = (*live)[i];
    skipped[i] = l.entry->claimed();
    if (skipped[i]) continue;
    std::lock_guard<std::mutex> lock(l.entry->driveMutex());
    canSleep = l.entry->arm() && canSleep;
  }
  if (canSleep) {
    sleeping_.store(true, std::memory_order_seq_cst);
    for (size_t i = 0; i < live->size(); ++i)
      if (skipped[i] && !(*live)[i].entry->claimed()) canSleep = false;
  }
  if (canSleep) {
    fds->clear();
    fds->push_back(pollfd{eventFd_, POLLIN, 0});
    bool tick = !bell.available() || live->size() > Doorbell::kMaxWords;
    bool anyClaimed = false;
    for (size_t i = 0; i < live->size(); ++i) {
      anyClaimed = anyClaimed || skipped[i];
      if (skipped[i]) continue;
      std::lock_guard<std::mutex> lock((*live)[i].entry->driveMutex());
      tick = !(*live)[i].entry->pollFds(fds) || tick;
    }
    int timeoutMs = tick ? kTickMs : anyClaimed ? kClaimedTickMs : -1;
    if (poll(fds->data(), fds->size(), timeoutMs) < 0 && errno != EINTR)
      SN_WARN("NET : proxy poll failed: %s", strerror(errno));
  }
  sleeping_.store(false, std::memory_order_relaxed);
  for (size_t i = 0; i < live->size(); ++i) {
    if (skipped[i]) continue;
    std::lock_guard<std::mutex> lock((*live)[i].entry->driveMutex());
    (*live)[i].entry->disarm();
  }
  uint64_t drained = 0;
  ssize_t k = read(eventFd_, &drained, sizeof drained);
  (void)k;
}

void Proxy::run() {
  Doorbell bell(eventFd_);
  std::vector<Live> live;
  std::vector<pollfd> fds;
  for (;;) {
    if (takeRequests(&live)) watch(live, bell);
    bool moved = false;
    for (Live& l : live) {
      if (l.entry->claimed()) continue;  // its executor drives it
      std::lock_guard<std::mutex> lock(l.entry->driveMutex());
      moved |= l.entry->progress();
    }
    moved |= detachReleased(&live, bell);
    if (live.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (adds_.empty() && releases_.empty()) {
        running_ = false;  // add() starts a new thread from here on
        return;
      }
      continue;
    }
    // No spinning before sleeping: on 2 oversubscribed cores, even 20 yields per
    // idle pass cost more (stolen time slices) than the wake-ups they save.
    if (!moved) sleepIdle(&live, bell, &fds);
  }
}

}  // namespace snccl::net
