// How the IB net cuts a large message over a connection's queue pairs: into equal parts
// (static routing), or in proportion to what each queue pair is delivering now (adaptive
// routing), so that a slow or congested rail gets less and a recovered one more.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <vector>

#include "transport/net/ib/ib_wire.h"

namespace snccl::net::ib {

// Each queue pair's delivery rate, estimated from the sender's own completions. A queue
// pair carries its parts in order, so a part's service starts when it was posted or when
// the part before it on the same pair completed, whichever is later; the rate is the
// recent parts' bytes over their service time (each smoothed over the last few). Times
// are seconds on any monotonic clock.
class QpRates {
 public:
  explicit QpRates(int nqps);

  // A signaled part of `bytes` posted on `q`; at most kSlots may be outstanding per pair
  // (each of the kSlots messages in flight has at most one part per pair).
  void posted(int q, size_t bytes, double now);
  // The completion of the oldest outstanding part of `q`.
  void completed(int q, double now);
  // Bytes per second to plan with, 0 while unknown: the smoothed rate, or less when the
  // part in service on `q` has already taken longer than that rate allows (a pair that
  // stalls is seen before its next completion).
  double rate(int q, double now) const;
  // Bytes of the parts posted on `q` and not completed.
  size_t outstanding(int q) const;

  // Parts smaller than this give no sample: their time is mostly latency.
  static constexpr size_t kMinSampleBytes = 16384;

 private:
  struct Part {
    size_t bytes = 0;
    double posted = 0;
  };
  struct Pair {
    std::array<Part, kSlots> fifo{};
    int head = 0, count = 0;
    double lastDone = 0;
    double bytes = 0, time = 0;  // smoothed bytes and service time of the recent parts
    double rate = 0;             // bytes / time, 0 until the first sample
  };
  std::vector<Pair> pairs_;
};

// Cuts `size` bytes (at least splitBytes) into one part per queue pair so that every
// pair would finish its backlog (`outstanding` bytes) and its new part at the same time,
// going at its rate (`rates`, bytes/s; an unknown rate, 0, counts as the mean of the known
// ones): a fast pair gets more, a pair with a queue gets less until it drains. Each part
// gets at least an eighth of an equal share, so that a slow pair keeps being measured and
// can win traffic back, and every part but the last is a multiple of kPartAlign. Writes
// the parts' lengths to `len` (nqps entries) and returns nqps; a message too small for
// that is cut as splitParts cuts it (equal parts), and so is any message while no rate
// is known.
int splitByRate(size_t size, int nqps, size_t splitBytes, std::span<const double> rates,
                std::span<const size_t> outstanding, size_t* len);

// splitParts' equal cut, as lengths: returns the parts.
int splitEqual(size_t size, int nqps, size_t splitBytes, size_t* len);

}  // namespace snccl::net::ib
