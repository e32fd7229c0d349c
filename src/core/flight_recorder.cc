// The flight recorder's ring of seqlocked slots.
#include "core/flight_recorder.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace snccl::flight {

static_assert(std::is_trivially_copyable_v<OpRecord>);
static_assert(sizeof(OpRecord) % 8 == 0, "OpRecord is copied as whole words");

Recorder::Recorder(size_t entries) : n_(entries), slots_(entries ? std::make_unique<Slot[]>(entries) : nullptr) {}

int64_t Recorder::nowNs() {
  // The coarse clock is a read of the vDSO page, a few ns: the precise one costs tens of
  // ns on a virtual machine, which an 8-byte operation of a few hundred ns would feel.
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void Recorder::publish(const OpRecord& r) {
  Slot& s = slots_[r.id % n_];
  uint64_t w[kWords];
  std::memcpy(w, &r, sizeof r);
  // No fences (ThreadSanitizer does not model them): each word is stored with release, so
  // a reader that sees any new word also sees the odd version stored before it.
  const uint64_t v = s.version.load(std::memory_order_relaxed);
  s.version.store(v + 1, std::memory_order_relaxed);
  for (size_t i = 0; i < kWords; ++i) s.words[i].store(w[i], std::memory_order_release);
  s.version.store(v + 2, std::memory_order_release);
}

void Recorder::begin(const OpRecord& r) {
  if (n_ == 0) return;
  current_ = r;
  current_.id = nextId_.fetch_add(1, std::memory_order_relaxed);
  active_ = true;
  publish(current_);
}

void Recorder::update() {
  if (active_) publish(current_);
}

void Recorder::end(OpState state, int64_t nowNs) {
  if (!active_) return;
  current_.state = state;
  current_.endNs = nowNs;
  if (state == OpState::kDone) current_.stepsDone = current_.stepsTotal;
  publish(current_);
  active_ = false;
}

std::vector<OpRecord> Recorder::snapshot() const {
  std::vector<OpRecord> out;
  for (size_t i = 0; i < n_; ++i) {
    const Slot& s = slots_[i];
    uint64_t w[kWords];
    // A slot the writer keeps rewriting (it cannot, more than a few times: one operation's
    // updates come at most once per sleep) is given up after a while rather than spun on.
    for (int attempt = 0; attempt < 1000; ++attempt) {
      const uint64_t v1 = s.version.load(std::memory_order_acquire);
      if (v1 == 0) break;  // never written
      if (v1 & 1) continue;
      // Acquire loads keep the version's second read after them.
      for (size_t k = 0; k < kWords; ++k) w[k] = s.words[k].load(std::memory_order_acquire);
      if (s.version.load(std::memory_order_relaxed) != v1) continue;
      OpRecord r;
      std::memcpy(&r, w, sizeof r);
      out.push_back(r);
      break;
    }
  }
  std::sort(out.begin(), out.end(), [](const OpRecord& a, const OpRecord& b) { return a.id < b.id; });
  return out;
}

}  // namespace snccl::flight
