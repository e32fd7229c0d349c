// The IB net's checks of what its peer writes (transport/net/ib/ib_wire.h): each way a
// record can be wrong is refused with a reason, and every record the sender's own split
// makes is accepted.
#include <gtest/gtest.h>

#include <cstring>

#include "transport/net/ib/ib_wire.h"

namespace ib = snccl::net::ib;

namespace {

TEST(IbWire, TheSendersOwnRecordsAreAccepted) {
  for (int nqps : {1, 2, 3, 16})
    for (size_t size : {size_t(0), size_t(1), size_t(4096), size_t(1 << 20) + 129}) {
      size_t chunk = 0;
      const int nparts = ib::splitParts(size, nqps, 65536, &chunk);
      ASSERT_GE(nparts, 1);
      ASSERT_LE(nparts, nqps);
      ib::DoneRecord first{};
      uint32_t seen = 0;
      size_t covered = 0;
      for (int part = 0; part < nparts; ++part) {
        const ib::DoneRecord rec{41, size, 9, uint16_t(nparts), uint16_t(part), 0, 0};
        EXPECT_EQ(ib::recordProblem(rec, 41, part, nqps, size, ib::kNoOffer, part ? &first : nullptr, seen), "")
            << nqps << " queue pairs, " << size << " bytes, part " << part;
        // The same message written to the place the receiver offered, which may be larger
        // than the receive's own buffer.
        ib::DoneRecord moved = rec, movedFirst = first;
        moved.flags = movedFirst.flags = ib::kRecordRetargeted;
        EXPECT_EQ(ib::recordProblem(moved, 41, part, nqps, size / 2, size, part ? &movedFirst : nullptr, seen), "")
            << nqps << " queue pairs, " << size << " bytes, part " << part << ", retargeted";
        const int qp = ib::partQp(41, part, nparts, nqps);
        EXPECT_TRUE(qp >= 0 && qp < nqps);
        if (part == 0) first = rec;
        seen |= 1u << part;
        covered += std::min(chunk, size - std::min(size, size_t(part) * chunk));
      }
      EXPECT_EQ(covered, size);
    }
}

TEST(IbWire, WrongRecordsAreRefused) {
  const int nqps = 4;
  const ib::DoneRecord good{7, 1 << 20, 3, 4, 1, 0, 0};  // part 1 of 4, announced as part 1
  ASSERT_EQ(ib::recordProblem(good, 7, 1, nqps, 1 << 20, ib::kNoOffer, nullptr, 0), "");
  auto refused = [&](ib::DoneRecord rec, int part, size_t posted, const ib::DoneRecord* first, uint32_t seen,
                     const char* why, size_t offered = ib::kNoOffer) {
    const std::string p = ib::recordProblem(rec, 7, part, nqps, posted, offered, first, seen);
    EXPECT_NE(p.find(why), std::string::npos) << "expected \"" << why << "\", got \"" << p << "\"";
  };
  ib::DoneRecord r = good;
  r.seq = 8;
  refused(r, 1, 1 << 20, nullptr, 0, "a record of message 8 arrived for message 7");
  refused(good, 1, (1 << 20) - 1, nullptr, 0, "its receive");
  r = good;
  r.nparts = 0;
  refused(r, 1, 1 << 20, nullptr, 0, "part 1 of 0");
  r.nparts = 5;  // more parts than queue pairs
  refused(r, 1, 1 << 20, nullptr, 0, "part 1 of 5");
  r = good;
  r.part = 4;
  refused(r, 1, 1 << 20, nullptr, 0, "part 4 of 4");
  refused(good, 2, 1 << 20, nullptr, 0, "the record of part 1 was announced as part 2");
  refused(good, 1, 1 << 20, &good, 1u << 1, "part 1 arrived twice");
  ib::DoneRecord other = good;
  other.part = 0;
  other.size = 1000;
  refused(good, 1, 1 << 20, &other, 1u << 0, "its records disagree");
  other.size = good.size;
  other.imm = 4;
  refused(good, 1, 1 << 20, &other, 1u << 0, "its records disagree");
  // Where the message went: only to a place this end offered, of exactly its size, and
  // every part to the same place.
  r = good;
  r.flags = ib::kRecordRetargeted;
  refused(r, 1, 1 << 20, nullptr, 0, "a place this end never offered");
  refused(r, 1, 1 << 20, nullptr, 0, "the offer it was written to 4096", 4096);
  EXPECT_EQ(ib::recordProblem(r, 7, 1, nqps, 4096, 1 << 20, nullptr, 0), "");
  refused(r, 1, 1 << 20, &good, 1u << 0, "its records disagree", 1 << 20);
  refused(good, 1, 1 << 20, &r, 1u << 0, "its records disagree", 1 << 20);
  r.flags = 2;
  refused(r, 1, 1 << 20, nullptr, 0, "unknown record flags 0x2", 1 << 20);
}

TEST(IbWire, MetadataOfAnotherKindIsRefusedAndItsNameTerminated) {
  ib::Meta m{};
  m.magic = ib::kMetaMagic;
  m.version = ib::kMetaVersion;
  m.nqps = 2;
  m.nrails = 2;
  for (ib::RailMeta& r : m.rails) std::memset(r.dev, 'x', sizeof r.dev);
  EXPECT_EQ(ib::metaProblem(&m), "");
  for (const ib::RailMeta& r : m.rails) EXPECT_EQ(std::strlen(r.dev), sizeof r.dev - 1);
  m.nrails = 0;
  EXPECT_NE(ib::metaProblem(&m).find("0 rails"), std::string::npos);
  m.nrails = ib::kMaxRails + 1;
  EXPECT_NE(ib::metaProblem(&m).find("rails"), std::string::npos);
  m.nrails = 1;
  m.nqps = 0;
  EXPECT_NE(ib::metaProblem(&m).find("0 queue pairs"), std::string::npos);
  m.nqps = ib::kMaxQps + 1;
  EXPECT_NE(ib::metaProblem(&m).find("queue pairs"), std::string::npos);
  m.nqps = 1;
  m.version = ib::kMetaVersion + 1;
  EXPECT_NE(ib::metaProblem(&m).find("not an IB net"), std::string::npos);
}

}  // namespace
