#include "transport/net/ib/ib_split.h"

#include <algorithm>
#include <cstdint>

namespace snccl::net::ib {

QpRates::QpRates(int nqps) : pairs_(size_t(std::max(nqps, 1))) {}

void QpRates::posted(int q, size_t bytes, double now) {
  Pair& p = pairs_[size_t(q)];
  if (p.count == kSlots) return;  // more than the protocol allows: not measured
  p.fifo[size_t((p.head + p.count) % kSlots)] = Part{bytes, now};
  ++p.count;
}

void QpRates::completed(int q, double now) {
  Pair& p = pairs_[size_t(q)];
  if (p.count == 0) return;
  const Part part = p.fifo[size_t(p.head)];
  p.head = (p.head + 1) % kSlots;
  --p.count;
  const double start = std::max(part.posted, p.lastDone);
  p.lastDone = now;
  const double dt = now - start;
  if (part.bytes < kMinSampleBytes || dt <= 0) return;
  // Bytes and time are smoothed apart and divided: a part that took long weighs more
  // than one that went in a burst (averaging each part's rate would let a link's short
  // bursts, a token bucket refilled while idle, hide its long-run rate).
  if (p.rate == 0) {
    p.bytes = double(part.bytes);
    p.time = dt;
  } else {
    p.bytes = 0.75 * p.bytes + 0.25 * double(part.bytes);
    p.time = 0.75 * p.time + 0.25 * dt;
  }
  p.rate = p.bytes / p.time;
}

size_t QpRates::outstanding(int q) const {
  const Pair& p = pairs_[size_t(q)];
  size_t bytes = 0;
  for (int i = 0; i < p.count; ++i) bytes += p.fifo[size_t((p.head + i) % kSlots)].bytes;
  return bytes;
}

double QpRates::rate(int q, double now) const {
  const Pair& p = pairs_[size_t(q)];
  if (p.count == 0 || p.rate == 0) return p.rate;
  const Part& head = p.fifo[size_t(p.head)];
  const double age = now - std::max(head.posted, p.lastDone);
  if (head.bytes < kMinSampleBytes || age <= double(head.bytes) / p.rate) return p.rate;
  return double(head.bytes) / age;  // in service for longer than the rate allows
}

int splitEqual(size_t size, int nqps, size_t splitBytes, size_t* len) {
  size_t chunk = size;
  const int nparts = splitParts(size, nqps, splitBytes, &chunk);
  for (int i = 0; i < nparts; ++i) {
    const size_t off = size_t(i) * chunk;
    len[i] = std::min(chunk, size - std::min(size, off));
  }
  return nparts;
}

int splitByRate(size_t size, int nqps, size_t splitBytes, std::span<const double> rates,
                std::span<const size_t> outstanding, size_t* len) {
  // An eighth of an equal share, in whole kPartAlign units.
  const size_t floorUnits = size / size_t(8 * nqps) / kPartAlign;
  double known = 0;
  int nknown = 0;
  for (int q = 0; q < nqps; ++q)
    if (rates[size_t(q)] > 0) {
      known += rates[size_t(q)];
      ++nknown;
    }
  if (nqps <= 1 || size < splitBytes || floorUnits == 0 || nknown == 0) return splitEqual(size, nqps, splitBytes, len);
  const double mean = known / nknown;
  double r[kMaxQps];
  for (int q = 0; q < nqps; ++q) r[q] = rates[size_t(q)] > 0 ? rates[size_t(q)] : mean;
  // Every pair should finish at the same time T, its backlog and its new part at its
  // rate: part_q = r_q * T - outstanding_q, with T = (size + sum of backlogs) / sum of
  // rates over the pairs not held at the floor. A pair whose part would fall below the
  // floor gets the floor; T is then found again for the others (whose parts only grow).
  const size_t units = size / kPartAlign;
  bool floored[kMaxQps] = {};
  double share[kMaxQps] = {};
  for (bool changed = true; changed;) {
    changed = false;
    double bytes = double(units * kPartAlign), rate = 0;
    for (int q = 0; q < nqps; ++q) {
      if (floored[q]) {
        bytes -= double(floorUnits * kPartAlign);
      } else {
        bytes += double(outstanding[size_t(q)]);
        rate += r[q];
      }
    }
    const double t = bytes / rate;
    for (int q = 0; q < nqps; ++q) {
      if (floored[q]) continue;
      share[q] = (r[q] * t - double(outstanding[size_t(q)])) / double(kPartAlign);
      if (share[q] < double(floorUnits)) {
        floored[q] = true;
        changed = true;
      }
    }
  }
  // Whole units; the last part takes what rounding leaves.
  size_t used = 0;
  for (int q = 0; q + 1 < nqps; ++q) {
    len[q] = (floored[q] ? floorUnits : size_t(share[q])) * kPartAlign;
    used += len[q];
  }
  len[nqps - 1] = size - used;
  return nqps;
}

}  // namespace snccl::net::ib
