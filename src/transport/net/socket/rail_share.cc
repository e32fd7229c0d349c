// A rail's backlog and delivery rate, shared by every connection's path over it.
#include "transport/net/socket/rail_share.h"

#include <algorithm>

namespace snccl::net::socknet {

namespace {

constexpr double kSampleSec = 0.001;  // busy time per rate sample
// A wait for an acknowledgement counts toward the rate's busy time up to this: a standing
// queue delays a loaded rail's acknowledgements by tens of milliseconds, and what is
// longer is a stall that the path's late flag may not have caught (a segment waiting for
// TCP's retransmission timer). Counted in full, one stall would hold the estimate down
// long after the path recovered, and a path thought slow gets no chunk to be measured.
constexpr double kMaxWaitSec = 0.05;
// An estimate with no sample for this long is stale: the next sample replaces it rather
// than being smoothed into it (a path left idle for it is probed about once a second).
constexpr auto kStale = std::chrono::milliseconds(500);
constexpr auto kLagPeriod = std::chrono::seconds(5);
// At most this much of the data ahead is taken for acknowledgements on their way back: a
// peer whose clock jumps must not make a rail look empty for good.
constexpr double kMaxLagSec = 0.05;
// floorNs() follows a queue that another flow starts or ends within a few of these; it is
// long enough to hold a sample that saw the rail's shortest queue.
constexpr auto kFloorPeriod = std::chrono::milliseconds(100);

}  // namespace

double seconds(RailShare::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t steadyNs(RailShare::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void RailShare::sent(size_t len, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (unacked_ == 0) lastProgress_ = now;
  unacked_ += len;
}

bool RailShare::acked(size_t bytes, Clock::time_point now, int64_t stampNs, Clock::time_point sent, double expectSec,
                      bool stalled) {
  std::lock_guard<std::mutex> lock(mu_);
  unacked_ -= std::min(unacked_, bytes);
  // Unsigned: the two clocks are unrelated, and the peer's stamp is not trusted.
  const int64_t oneWay = int64_t(uint64_t(steadyNs(now)) - uint64_t(stampNs));
  if (sent != Clock::time_point{}) {
    const int64_t excess = int64_t(uint64_t(stampNs) - uint64_t(steadyNs(sent)) - uint64_t(int64_t(1e9 * expectSec)));
    floor_.add(excess, now, kFloorPeriod);
  }
  oneWay_.add(oneWay, now, kLagPeriod);
  lag_ = std::min(kMaxLagSec, 1e-9 * (double(oneWay) - double(oneWay_.get())));
  // Rate: bytes acknowledged per second of time with chunks outstanding. Bytes and time
  // are smoothed apart and divided, so that a sample weighs by its time: acknowledgements
  // that come in a burst (the receiver caught up after a wait, a rail behind a queue that
  // other flows keep full) make a short sample at many times the rail's rate, and
  // averaging the samples' rates would keep a loaded rail's estimate near its idle rate.
  if (stalled) {
    sampleBytes_ = 0;
    sampleSec_ = 0;
    lastProgress_ = now;
    return false;
  }
  sampleBytes_ += bytes;
  sampleSec_ += std::min(kMaxWaitSec, seconds(now - lastProgress_));
  lastProgress_ = now;
  if (sampleSec_ < kSampleSec) return false;
  if (rate_ == 0 || now - lastSample_ > kStale) {
    bytes_ = double(sampleBytes_);
    busySec_ = sampleSec_;
  } else {
    bytes_ = 0.75 * bytes_ + 0.25 * double(sampleBytes_);
    busySec_ = 0.75 * busySec_ + 0.25 * sampleSec_;
  }
  rate_ = bytes_ / busySec_;
  lastSample_ = now;
  sampleBytes_ = 0;
  sampleSec_ = 0;
  return true;
}

void RailShare::forget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  unacked_ -= std::min(unacked_, bytes);
}

double RailShare::rate() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rate_;
}

size_t RailShare::unacked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unacked_;
}

double RailShare::ahead() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (rate_ <= 0) return 0;
  return std::max(0.0, double(unacked_) / rate_ - lag_);
}

bool RailShare::floorNs(int64_t* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  *out = floor_.get();
  return *out != INT64_MAX;
}

void RailShare::Least::add(int64_t sample, Clock::time_point at, Clock::duration period) {
  if (at - start >= period) {
    before = now;
    now = INT64_MAX;
    start = at;
  }
  now = std::min(now, sample);
}

std::shared_ptr<RailShare> RailBook::get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<RailShare> r = rails_[key].lock();
  if (r == nullptr) {
    // Connections come and go for the process's lifetime: forget the rails none holds.
    std::erase_if(rails_, [](const auto& kv) { return kv.second.expired(); });
    r = std::make_shared<RailShare>();
    rails_[key] = r;
  }
  return r;
}

size_t RailBook::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rails_.size();
}

}  // namespace snccl::net::socknet
