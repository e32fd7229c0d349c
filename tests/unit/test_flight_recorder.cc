// The flight recorder's ring (core/flight_recorder.h) and sn_doctor's reader and reasoning
// (tools/flight_doctor.h) on dumps written here; the fault suite with real ranks is
// tests/mp/test_flight.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/flight_recorder.h"
#include "flight_doctor.h"
#include "support/harness.h"

namespace {

using snccl::flight::OpRecord;
using snccl::flight::OpState;
using snccl::flight::Recorder;

OpRecord opWithSeq(uint64_t seq) {
  OpRecord r;
  r.seq = seq;
  r.count = seq * 3 + 1;
  r.root = int32_t(seq % 5);
  r.algo = "ring";
  return r;
}

TEST(FlightRecorder, KeepsTheLastEntriesOldestFirst) {
  Recorder fr(8);
  for (uint64_t s = 0; s < 20; ++s) {
    fr.begin(opWithSeq(s));
    fr.end(s == 19 ? OpState::kFailed : OpState::kDone, 1000 + int64_t(s));
  }
  std::vector<OpRecord> ops = fr.snapshot();
  ASSERT_EQ(ops.size(), 8u);
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(ops[i].seq, 12 + i);
    EXPECT_EQ(ops[i].id, 13 + i);
    EXPECT_EQ(ops[i].count, ops[i].seq * 3 + 1);
    EXPECT_EQ(ops[i].endNs, 1000 + int64_t(ops[i].seq));
  }
  EXPECT_EQ(ops.back().state, OpState::kFailed);
  EXPECT_EQ(ops.front().state, OpState::kDone);
  EXPECT_EQ(fr.recorded(), 20u);
}

TEST(FlightRecorder, UpdatesShowTheRunningOperation) {
  Recorder fr(4);
  fr.begin(opWithSeq(7));
  fr.current().stepsTotal = 10;
  fr.current().stepsDone = 4;
  fr.current().waitPeer = 2;
  fr.current().waitSend = 1;
  fr.update();
  std::vector<OpRecord> ops = fr.snapshot();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].state, OpState::kStarted);
  EXPECT_EQ(ops[0].stepsDone, 4u);
  EXPECT_EQ(ops[0].waitPeer, 2);
  fr.end(OpState::kDone, 5);
  ops = fr.snapshot();
  EXPECT_EQ(ops[0].stepsDone, 10u) << "a completed op did all its steps";
  EXPECT_FALSE(fr.active());
}

TEST(FlightRecorder, ZeroEntriesRecordsNothing) {
  Recorder fr(0);
  EXPECT_FALSE(fr.enabled());
  fr.begin(opWithSeq(1));
  fr.update();
  fr.end(OpState::kDone, 1);
  EXPECT_TRUE(fr.snapshot().empty());
}

// A reader never sees a record half written: every field of a snapshot's record comes
// from the same begin().
TEST(FlightRecorder, SnapshotsWhileWritingAreConsistent) {
  sntest::Watchdog dog(60, "recorder snapshot race");
  Recorder fr(4);
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t s = 0; !stop.load(std::memory_order_relaxed); ++s) {
      fr.begin(opWithSeq(s));
      fr.end(OpState::kDone, int64_t(s));
    }
  });
  // Until enough records were seen while the writer ran (it may start late).
  size_t seen = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; (i < 20000 || seen < 1000) && std::chrono::steady_clock::now() < deadline; ++i)
    for (const OpRecord& r : fr.snapshot()) {
      ++seen;
      if (r.count != r.seq * 3 + 1 || r.root != int32_t(r.seq % 5) || r.id != r.seq + 1) {
        stop = true;
        writer.join();
        FAIL() << "torn record: id " << r.id << " seq " << r.seq << " count " << r.count << " root " << r.root;
      }
    }
  stop = true;
  writer.join();
  EXPECT_GE(seen, 1000u);
}

// ---- sn_doctor on hand-written dumps ----

using snccl::doctor::Diagnosis;
using snccl::doctor::Dump;
using snccl::doctor::Verdict;

std::string header(int rank, int nranks) {
  std::string s = "snccl-flight 1\ncomm hash=0x00000000000000ab rank=" + std::to_string(rank) +
                  " nranks=" + std::to_string(nranks) + " pid=1 host=\"h\" reason=\"error\" time_ns=1 recorded=3\n";
  for (int r = 0; r < nranks; ++r)
    s += "peer rank=" + std::to_string(r) + " pid=" + std::to_string(100 + r) + " host=\"node \\\"" +
         std::to_string(r) + "\\\"\"\n";
  return s;
}

std::string op(int seq, const char* coll, int count, const char* state, int64_t startNs = 1000000000,
               int waitPeer = -1) {
  return "op id=" + std::to_string(seq + 1) + " seq=" + std::to_string(seq) + " coll=" + coll +
         " count=" + std::to_string(count) + " type=float op=sum root=-1 algo=ring state=" + state +
         " start_ns=" + std::to_string(startNs) + " end_ns=0 steps=1/4 wait_peer=" + std::to_string(waitPeer) +
         " wait=data wait_msg=3 send_peer=-1 recv_peer=-1 nsend=0 nrecv=0\n";
}

std::string error(const char* cause, int peer, int culprit) {
  return std::string("error code=6 culprit=") + std::to_string(culprit) + " cause=" + cause +
         " cause_peer=" + std::to_string(peer) + " text=\"it \\\"failed\\\"\"\n";
}

Dump parsed(const std::string& text) {
  Dump d;
  std::string err;
  EXPECT_TRUE(snccl::doctor::parseDump(text, &d, &err)) << err << "\n" << text;
  return d;
}

TEST(FlightDoctor, ParsesQuotedFieldsAndEveryRecord) {
  Dump d = parsed(header(1, 3) + error("timeout", 2, -1) + op(0, "AllReduce", 10, "done") +
                  op(1, "AllGather", 7, "failed", 5, 2) + "end\n");
  EXPECT_EQ(d.hash, 0xabu);
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.nranks, 3);
  ASSERT_EQ(d.peers.size(), 3u);
  EXPECT_EQ(d.peers[2].host, "node \"2\"");
  EXPECT_TRUE(d.hasError);
  EXPECT_EQ(d.errorText, "it \"failed\"");
  EXPECT_EQ(d.cause, "timeout");
  ASSERT_EQ(d.ops.size(), 2u);
  EXPECT_EQ(d.ops[1].coll, "AllGather");
  EXPECT_EQ(d.ops[1].waitPeer, 2);
  EXPECT_EQ(d.ops[1].stepsTotal, 4u);
}

TEST(FlightDoctor, RejectsWhatIsNotADump) {
  Dump d;
  std::string err;
  EXPECT_FALSE(snccl::doctor::parseDump("hello\n", &d, &err));
  EXPECT_FALSE(snccl::doctor::parseDump(header(0, 2) + op(0, "AllReduce", 1, "done"), &d, &err));
  EXPECT_NE(err.find("cut short"), std::string::npos) << err;
  EXPECT_FALSE(snccl::doctor::parseDump(header(0, 2) + "error text=\"open\nend\n", &d, &err));
  EXPECT_FALSE(snccl::doctor::parseDump(header(5, 2) + "end\n", &d, &err)) << "rank out of range";
  EXPECT_FALSE(snccl::doctor::parseDump(header(0, 2) + "bogus x=1\nend\n", &d, &err));
}

Diagnosis diagnoseTexts(const std::vector<std::string>& texts) {
  std::vector<Dump> dumps;
  for (const std::string& t : texts) dumps.push_back(parsed(t));
  return snccl::doctor::diagnose(dumps);
}

TEST(FlightDoctor, NamesTheOddCallOut) {
  Diagnosis d = diagnoseTexts({
      header(0, 3) + op(0, "AllReduce", 10, "done") + op(1, "AllReduce", 10, "failed") + "end\n",
      header(1, 3) + op(0, "AllReduce", 10, "done") + op(1, "AllReduce", 12, "failed") + "end\n",
      header(2, 3) + op(0, "AllReduce", 10, "done") + op(1, "AllReduce", 10, "failed") + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kMismatch) << d.summary;
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.seq, 1);
  EXPECT_NE(d.summary.find("count 12"), std::string::npos) << d.summary;
}

TEST(FlightDoctor, MissingRankWithAnExitWitnessDied) {
  Diagnosis d = diagnoseTexts({
      header(0, 3) + error("peer-failed", 1, 2) + op(4, "AllReduce", 10, "failed", 1, 1) + "end\n",
      header(1, 3) + error("peer-exited", 2, 2) + op(4, "AllReduce", 10, "failed", 1, 2) + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kRankDied) << d.summary;
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.seq, 4);
  EXPECT_NE(d.summary.find("pid 102"), std::string::npos) << "named from the peers' tables: " << d.summary;
}

TEST(FlightDoctor, MissingRankOthersTimedOutOnIsNamed) {
  Diagnosis d = diagnoseTexts({
      header(0, 4) + error("timeout", 3, -1) + op(2, "Broadcast", 10, "failed", 1, 3) + "end\n",
      header(1, 4) + error("timeout", 0, -1) + op(2, "Broadcast", 10, "failed", 1, 0) + "end\n",
      header(2, 4) + error("timeout", 3, -1) + op(2, "Broadcast", 10, "failed", 1, 3) + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kRankMissing) << d.summary;
  EXPECT_EQ(d.rank, 3);
}

TEST(FlightDoctor, LateStarterIsTheSlowRank) {
  Diagnosis d = diagnoseTexts({
      header(0, 3) + error("timeout", 2, -1) + op(3, "AllReduce", 10, "failed", 1000000000, 2) + "end\n",
      header(1, 3) + error("timeout", 0, -1) + op(3, "AllReduce", 10, "failed", 1001000000, 0) + "end\n",
      header(2, 3) + error("peer-failed", 1, 0) + op(3, "AllReduce", 10, "failed", 4000000000) + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kSlowRank) << d.summary;
  EXPECT_EQ(d.rank, 2);
}

TEST(FlightDoctor, RankThatNeverStartedTheOpIsTheSlowRank) {
  Diagnosis d = diagnoseTexts({
      header(0, 3) + error("timeout", 2, -1) + op(2, "AllReduce", 10, "done") + op(3, "AllReduce", 10, "failed") +
          "end\n",
      header(1, 3) + error("timeout", 0, -1) + op(3, "AllReduce", 10, "failed") + "end\n",
      header(2, 3) + error("peer-aborted", 1, 0) + op(2, "AllReduce", 10, "done") + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kSlowRank) << d.summary;
  EXPECT_EQ(d.rank, 2);
  EXPECT_EQ(d.seq, 3);
}

TEST(FlightDoctor, NetworkFailureBetweenLiveRanksIsALink) {
  Diagnosis d = diagnoseTexts({
      header(0, 2) + error("network", 1, 1) + op(5, "AllReduce", 10, "failed", 1, 1) + "end\n",
      header(1, 2) + error("network", 0, 1) + op(5, "AllReduce", 10, "failed", 1, 0) + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kLinkFailed) << d.summary;
  EXPECT_EQ(d.rank, 1) << "the rank whose own side failed is the better witness";
  EXPECT_EQ(d.peer, 0);
}

// Ranks one collective apart when the link went: the one still in #79 is not slow.
TEST(FlightDoctor, RankStillInThePreviousCollectiveIsNotSlow) {
  Diagnosis d = diagnoseTexts({
      header(0, 2) + error("network", 1, 1) + op(78, "AllReduce", 10, "done") +
          op(79, "AllReduce", 10, "failed", 1, 1) + "end\n",
      header(1, 2) + error("network", 0, 1) + op(79, "AllReduce", 10, "done") +
          op(80, "AllReduce", 10, "failed", 1, 0) + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kLinkFailed) << d.summary;
  EXPECT_EQ(d.rank, 1) << d.summary;
}

TEST(FlightDoctor, HealthyRanksShowNoFault) {
  Diagnosis d = diagnoseTexts({
      header(0, 2) + op(0, "AllReduce", 10, "done") + "end\n",
      header(1, 2) + op(0, "AllReduce", 10, "done") + "end\n",
  });
  EXPECT_EQ(d.verdict, Verdict::kNoFault) << d.summary;
  EXPECT_EQ(d.details.size(), 2u);
}

}  // namespace
