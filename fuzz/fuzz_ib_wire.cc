// The IB net's checks of what a peer writes (transport/net/ib/ib_wire.h): the connection
// metadata sent over the control socket and the records RDMA-written into the receiver's
// memory. For any bytes: accepted metadata has usable queue pair and rail counts and
// terminated device names; a record is accepted only if the sender's split could have
// made it and it is the part its immediate announced. And the other way round: every
// record the sender writes for a message (splitParts, partQp) is accepted in its order,
// its parts tile the message, and none is accepted twice; the adaptive cut (splitByRate,
// any rates and backlogs) makes the same number of parts, aligned, covering the message.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "fuzz_check.h"
#include "transport/net/ib/ib_split.h"
#include "transport/net/ib/ib_wire.h"

namespace ib = snccl::net::ib;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(ib::Meta) + 24) return 0;
  ib::Meta m;
  std::memcpy(&m, data, sizeof m);
  data += sizeof m;
  size -= sizeof m;
  if (ib::metaProblem(&m).empty()) {
    FUZZ_CHECK(m.nqps >= 1 && m.nqps <= ib::kMaxQps, "accepted %u queue pairs", unsigned(m.nqps));
    FUZZ_CHECK(m.nrails >= 1 && m.nrails <= ib::kMaxRails, "accepted %u rails", unsigned(m.nrails));
  }
  for (const ib::RailMeta& r : m.rails)
    FUZZ_CHECK(std::memchr(r.dev, 0, sizeof r.dev) != nullptr, "device name not terminated");

  // One message the sender splits: seq, size, queue pairs, split threshold.
  uint64_t seq = 0, msgSize = 0;
  std::memcpy(&seq, data, 8);
  std::memcpy(&msgSize, data + 8, 8);
  msgSize &= (uint64_t(1) << 40) - 1;
  const int nqps = 1 + data[16] % ib::kMaxQps;
  const size_t splitBytes = size_t(data[17]) << (data[18] % 24);
  const size_t posted = size_t(msgSize) + data[19];
  data += 24;
  size -= 24;
  size_t chunk = 0;
  const int nparts = ib::splitParts(size_t(msgSize), nqps, splitBytes, &chunk);
  FUZZ_CHECK(nparts >= 1 && nparts <= nqps, "%d parts over %d queue pairs", nparts, nqps);
  size_t covered = 0;
  ib::DoneRecord first{};
  uint32_t seen = 0;
  for (int part = 0; part < nparts; ++part) {
    const size_t off = size_t(part) * chunk;
    const size_t len = std::min(chunk, size_t(msgSize) - std::min(size_t(msgSize), off));
    FUZZ_CHECK(off == covered || len == 0, "part %d at %zu, expected %zu", part, off, covered);
    if (part + 1 < nparts) FUZZ_CHECK(len > 0 && len % ib::kPartAlign == 0, "part %d of %zu bytes", part, len);
    covered += len;
    const ib::DoneRecord rec{seq, msgSize, 7, uint16_t(nparts), uint16_t(part), 0, 0};
    const int qp = ib::partQp(seq, part, nparts, nqps);
    FUZZ_CHECK(qp >= 0 && qp < nqps, "part %d on queue pair %d of %d", part, qp, nqps);
    const std::string problem =
        ib::recordProblem(rec, seq, part, nqps, posted, ib::kNoOffer, part > 0 ? &first : nullptr, seen);
    FUZZ_CHECK(problem.empty(), "the sender's own part %d refused: %s", part, problem.c_str());
    FUZZ_CHECK(!ib::recordProblem(rec, seq, part, nqps, posted, ib::kNoOffer, &rec, seen | 1u << part).empty(),
               "part %d twice", part);
    if (part == 0) first = rec;
    seen |= 1u << part;
  }
  FUZZ_CHECK(covered == msgSize, "the parts cover %zu of %llu bytes", covered, (unsigned long long)msgSize);

  // The adaptive cut of the same message, with rates and backlogs from the input bytes
  // (rates up to 2^32 bytes/s, 0 = unknown; backlogs up to 2^31 bytes).
  if (size >= size_t(nqps) * 8) {
    double rates[ib::kMaxQps];
    size_t backlog[ib::kMaxQps], lens[ib::kMaxQps];
    for (int q = 0; q < nqps; ++q) {
      uint32_t r = 0, b = 0;
      std::memcpy(&r, data + 8 * q, 4);
      std::memcpy(&b, data + 8 * q + 4, 4);
      rates[q] = double(r);
      backlog[q] = b >> 1;
    }
    const int n = ib::splitByRate(size_t(msgSize), nqps, splitBytes, std::span<const double>(rates, size_t(nqps)),
                                  std::span<const size_t>(backlog, size_t(nqps)), lens);
    FUZZ_CHECK(n == nparts || n == nqps, "the adaptive cut made %d parts (equal: %d, queue pairs %d)", n, nparts, nqps);
    size_t sum = 0;
    for (int i = 0; i < n; ++i) {
      FUZZ_CHECK(lens[i] <= msgSize, "adaptive part %d of %zu bytes", i, lens[i]);
      if (n > 1 && i + 1 < n)
        FUZZ_CHECK(lens[i] > 0 && lens[i] % ib::kPartAlign == 0, "adaptive part %d of %zu bytes", i, lens[i]);
      sum += lens[i];
    }
    FUZZ_CHECK(sum == msgSize, "the adaptive parts cover %zu of %llu bytes", sum, (unsigned long long)msgSize);
  }

  // Records as a hostile peer writes them, after the first of a message.
  for (; size >= sizeof(ib::DoneRecord) + 1; data += sizeof(ib::DoneRecord) + 1, size -= sizeof(ib::DoneRecord) + 1) {
    ib::DoneRecord rec;
    std::memcpy(&rec, data, sizeof rec);
    const int announced = data[sizeof rec] % ib::kMaxQps;  // the part the immediate names
    // A quarter of the time each, this end offered a place of the record's size or of the
    // message's; otherwise none.
    const uint8_t how = data[sizeof rec] >> 6;
    const size_t offered = how == 3 ? size_t(rec.size) : how == 2 ? size_t(msgSize) : ib::kNoOffer;
    if (!ib::recordProblem(rec, seq, announced, nqps, posted, offered, nullptr, 0).empty()) continue;
    FUZZ_CHECK(rec.seq == seq, "accepted a record of message %llu", (unsigned long long)rec.seq);
    FUZZ_CHECK(rec.flags == 0 || rec.flags == ib::kRecordRetargeted, "accepted flags 0x%x", unsigned(rec.flags));
    if (rec.flags == 0)
      FUZZ_CHECK(rec.size <= posted, "accepted a record of %llu bytes for a receive of %zu",
                 (unsigned long long)rec.size, posted);
    else
      FUZZ_CHECK(offered != ib::kNoOffer && rec.size == offered, "accepted a retargeted record of %llu bytes",
                 (unsigned long long)rec.size);
    FUZZ_CHECK(rec.nparts >= 1 && rec.nparts <= nqps && rec.part < rec.nparts, "accepted part %u of %u",
               unsigned(rec.part), unsigned(rec.nparts));
    FUZZ_CHECK(rec.part == announced, "accepted part %u announced as part %d", unsigned(rec.part), announced);
  }
  return 0;
}
