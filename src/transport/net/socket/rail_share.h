// What the paths of different connections between the same two addresses share: they
// queue at the same links (the same NICs, the same shaper), so one connection's backlog
// delays another's chunks, and a rate that one connection measures alone is not what it
// gets while others send. MultipathConn schedules against a RailShare's backlog and rate,
// which count every connection's chunks on the rail.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace snccl::net::socknet {

class RailShare {
 public:
  using Clock = std::chrono::steady_clock;
  // A chunk of `len` bytes was given to a path on this rail.
  void sent(size_t len, Clock::time_point now);
  // `bytes` were acknowledged on a path of this rail by an acknowledgement that the
  // receiver wrote at `stampNs` on its own steady clock; true when the rate was updated.
  // The last chunk it covers was given to the path at `sent`, when the sender expected it
  // to arrive `expectSec` later (the data ahead of it and its own bytes at the rate); a
  // default `sent`: it covers no new chunk, and floorNs() takes no sample from it.
  // `stalled`: the path had been late (no acknowledgement for several times what its
  // chunks should take); the time since the rail's last acknowledgement was a stall, not
  // delivery, and neither it nor these bytes count toward the rate, which would otherwise
  // keep the path from the chunks it needs to be measured again once it recovers.
  bool acked(size_t bytes, Clock::time_point now, int64_t stampNs, Clock::time_point sent, double expectSec,
             bool stalled = false);
  // `bytes` given to a path of this rail will never be acknowledged there (it failed, or
  // its connection ended).
  void forget(size_t bytes);
  // Bytes per second the rail delivers (0 until the first sample).
  double rate() const;
  // Bytes given to the rail's paths and not yet acknowledged, over every connection.
  size_t unacked() const;
  // Seconds of data ahead of a new chunk (0 while the rate is unknown): the
  // unacknowledged bytes at the rail's rate, less what arrived and is only waiting for
  // its acknowledgement: how much longer than its quickest the last acknowledgement took
  // to come back (it waits behind the other direction's data on the same links).
  double ahead() const;
  // The least, over the last kFloorPeriod or two, of how much later than expected a chunk
  // reached the receiver, in ns, plus the offset between the receiver's clock and this one
  // (unknown, so only the difference between two rails to the same peer means anything:
  // take it modulo 2^64, as the offset may wrap); false before the first sample. What it
  // measures is the rail's delay that the sender's own data does not explain: a queue that
  // other flows keep standing in a switch, a longer route.
  bool floorNs(int64_t* out) const;

 private:
  // The least of the samples of this period and of the last; a period starts with a
  // sample, so the last is the last that had any. INT64_MAX before the first sample.
  struct Least {
    int64_t now = INT64_MAX;
    int64_t before = INT64_MAX;
    Clock::time_point start{};
    void add(int64_t sample, Clock::time_point at, Clock::duration period);
    int64_t get() const { return std::min(now, before); }
  };

  mutable std::mutex mu_;
  double rate_ = 0;
  size_t unacked_ = 0;
  Clock::time_point lastProgress_{};  // last acknowledgement, or when unacked_ became non-zero
  uint64_t sampleBytes_ = 0;          // acknowledged since the last rate sample
  double sampleSec_ = 0;              // busy time since the last rate sample
  double bytes_ = 0, busySec_ = 0;    // the recent samples' bytes and busy time, smoothed
  Clock::time_point lastSample_{};    // of the rate
  // Acknowledgements' one-way delay plus the two clocks' offset, in ns, over periods of
  // kLagPeriod (so that clocks that drift apart are followed), and the last one's excess
  // over that least, in seconds.
  Least oneWay_;
  double lag_ = 0;
  Least floor_;  // floorNs(): chunks' excess over their expected arrival, periods of kFloorPeriod
};

// The rails of one Net instance, by the path's addresses ("local -> peer").
class RailBook {
 public:
  std::shared_ptr<RailShare> get(const std::string& key);
  // Rails in the book: each is dropped when a new one is made after its last path ended.
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::weak_ptr<RailShare>> rails_;
};

// The steady clock in ns, as acknowledgements carry it.
int64_t steadyNs(RailShare::Clock::time_point t);
// A span of the steady clock in seconds.
double seconds(RailShare::Clock::duration d);

}  // namespace snccl::net::socknet
