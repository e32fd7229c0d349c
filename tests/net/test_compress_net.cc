// The compressing net (transport/net/compress/) over the socket net on loopback: messages of
// every kind (empty, small, sparse, dense random, larger than a stream part) arrive intact
// with their size and imm, with LZ4 and zstd; sparse data is compressed and random data is
// not (the probe); an isend retried for lack of credit sends the message once; a retargeted
// receive lands where it was moved; and ranks that do not compress alike fail with a
// message naming SNCCL_NET_COMPRESS.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "loop_net.h"
#include "net_pair.h"
#include "transport/net/compress/codec.h"
#include "transport/net/compress/compress_net.h"
#include "transport/net/compress/mode_switch.h"

namespace snccl::net {
namespace {

using Clock = std::chrono::steady_clock;
using compress::Codec;
using compress::CodecConfig;

// The compressing net over the loopback socket net, one per codec for the whole binary (a
// compressing net lives as long as the process, like the plugin it wraps).
Net* compressed(Codec c) {
  static Net* nets[3] = {};
  Net*& n = nets[int(c)];
  if (n == nullptr) n = compressNet(loopNet(), CodecConfig{c, 1});
  return n;
}

std::vector<char> randomBytes(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 g(seed);
  for (char& c : v) c = char(g());
  return v;
}

// float32 values, 90% of them zero: sparse gradients.
std::vector<char> sparseFloats(size_t n, uint32_t seed) {
  std::vector<char> v(n, 0);
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  for (size_t i = 0; i + 4 <= n; i += 4)
    if (g() % 10 == 0) {
      const float x = d(g);
      std::memcpy(&v[i], &x, 4);
    }
  return v;
}

// One message from p.send to p.recv: posted receive of `cap` bytes, send, both completed.
void roundTrip(Net* net, Pair& p, const std::vector<char>& msg, size_t cap, uint32_t imm) {
  std::vector<char> dst(cap + 1, 'x');
  void* d = dst.data();
  int tag = 0;
  Request* rr = nullptr;
  ASSERT_TRUE(net->irecv(p.recv, 1, &d, &cap, &tag, nullptr, &rr).ok());
  ASSERT_NE(rr, nullptr);
  Request* sr = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (sr == nullptr && Clock::now() < deadline) {
    Status s = net->isend(p.send, const_cast<char*>(msg.data()), msg.size(), 0, imm, nullptr, &sr);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  ASSERT_NE(sr, nullptr);
  size_t sent = 0, got = 0;
  uint32_t gotImm = 0;
  ASSERT_TRUE(wait(net, sr, &sent).ok());
  Status s = wait(net, rr, &got, &gotImm);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(sent, msg.size());
  EXPECT_EQ(got, msg.size());
  EXPECT_EQ(gotImm, imm);
  if (!msg.empty()) {
    EXPECT_EQ(std::memcmp(dst.data(), msg.data(), msg.size()), 0) << "message of " << msg.size() << " bytes corrupted";
  }
  EXPECT_EQ(dst[cap], 'x') << "wrote past the posted receive";
}

class CompressNetCodec : public ::testing::TestWithParam<Codec> {};

TEST_P(CompressNetCodec, MessagesOfEveryKindArriveIntact) {
  if (!compress::haveCodec(GetParam())) GTEST_SKIP() << "built without " << compress::codecName(GetParam());
  Net* net = compressed(GetParam());
  Pair p;
  ASSERT_TRUE(connectPair(net, net, &p).ok());
  const size_t big = 4u << 20;
  const std::vector<std::vector<char>> msgs = {
      {},
      randomBytes(100, 1),
      sparseFloats(5000, 2),
      std::vector<char>(64 << 10, 0),
      randomBytes(300 << 10, 3),
      sparseFloats(big, 4),
      randomBytes(big, 5),
  };
  uint32_t imm = 7;
  for (const auto& m : msgs) {
    roundTrip(net, p, m, big, imm++);
    // A receive posted exactly at the message's size.
    roundTrip(net, p, m, m.size(), imm++);
  }
  closePair(net, net, p);
}

INSTANTIATE_TEST_SUITE_P(Codecs, CompressNetCodec, ::testing::Values(Codec::kLz4, Codec::kZstd),
                         [](const ::testing::TestParamInfo<Codec>& i) { return compress::codecName(i.param); });

TEST(CompressCodec, ProbeTellsSparseFromRandom) {
  for (Codec c : {Codec::kLz4, Codec::kZstd}) {
    if (!compress::haveCodec(c)) continue;
    compress::Coder coder(CodecConfig{c, 1});
    const std::vector<char> sparse = sparseFloats(1 << 20, 1), dense = randomBytes(1 << 20, 2);
    EXPECT_TRUE(coder.worthCompressing(sparse.data(), sparse.size())) << compress::codecName(c);
    EXPECT_FALSE(coder.worthCompressing(dense.data(), dense.size())) << compress::codecName(c);
    std::vector<char> out(sparse.size()), back(sparse.size());
    const size_t n = coder.compress(sparse.data(), sparse.size(), out.data(), out.size());
    ASSERT_GT(n, 0u);
    EXPECT_LT(n, sparse.size() / 3) << compress::codecName(c) << ": 90% zeros should shrink at least 3x";
    ASSERT_TRUE(coder.decompress(c, out.data(), n, back.data(), back.size()));
    EXPECT_EQ(back, sparse);
    EXPECT_EQ(coder.compress(dense.data(), dense.size(), out.data(), dense.size() - 1), 0u)
        << "random bytes compressed below their size";
    // A corrupt or truncated encoding is refused, never written past the output.
    EXPECT_FALSE(coder.decompress(c, out.data(), n / 2, back.data(), back.size()));
  }
}

// 8-bit codes of normally distributed values, each block of 256 scaled by its largest
// magnitude: what sncclAllReduceQuantized puts on the wire for gradients.
std::vector<char> quantizedInt8(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> block(256);
  for (size_t at = 0; at < n; at += block.size()) {
    float big = 0;
    for (float& x : block) big = std::max(big, std::fabs(x = d(g)));
    for (size_t i = 0; i < block.size() && at + i < n; ++i) v[at + i] = char(std::lround(block[i] / big * 127));
  }
  return v;
}

TEST(CompressCodec, ZstdProbeTakesSkewedBytesLz4CannotShrink) {
  const std::vector<char> q = quantizedInt8(1 << 20, 1);
  if (compress::haveCodec(Codec::kLz4)) {
    compress::Coder lz4(CodecConfig{Codec::kLz4, 1});
    EXPECT_FALSE(lz4.worthCompressing(q.data(), q.size())) << "LZ4 finds no repeats in quantized codes";
  }
  if (!compress::haveCodec(Codec::kZstd)) GTEST_SKIP() << "this build has no zstd";
  compress::Coder zstd(CodecConfig{Codec::kZstd, 1});
  EXPECT_TRUE(zstd.worthCompressing(q.data(), q.size()));
  std::vector<char> out(q.size()), back(q.size());
  const size_t n = zstd.compress(q.data(), q.size(), out.data(), out.size() - 1);
  ASSERT_GT(n, 0u);
  EXPECT_LT(double(n), 0.95 * double(q.size())) << "the probe promised at least 5% fewer bytes";
  ASSERT_TRUE(zstd.decompress(Codec::kZstd, out.data(), n, back.data(), back.size()));
  EXPECT_EQ(back, q);
  // Uniform bytes are not skewed: still refused.
  const std::vector<char> dense = randomBytes(1 << 20, 2);
  EXPECT_FALSE(zstd.worthCompressing(dense.data(), dense.size()));
}

TEST(CompressCodec, ParseNamesAndLevels) {
  EXPECT_EQ(compress::parseCodec("").value().codec, Codec::kRaw);
  EXPECT_EQ(compress::parseCodec("none").value().codec, Codec::kRaw);
  if (compress::haveCodec(Codec::kZstd)) {
    auto z = compress::parseCodec("zstd:3");
    ASSERT_TRUE(z.ok());
    EXPECT_EQ(z.value().codec, Codec::kZstd);
    EXPECT_EQ(z.value().level, 3);
  }
  EXPECT_EQ(compress::parseCodec("gzip").status().code(), ncclInvalidArgument);
  EXPECT_EQ(compress::parseCodec("lz4:0").status().code(), ncclInvalidArgument);
  EXPECT_EQ(compress::parseCodec("lz4:x").status().code(), ncclInvalidArgument);
}

// Streams `bytes` through the switch in 1 MiB messages, one at a time, each taking
// 1 MiB / rate (the mode's rate in bytes per second), then an idle gap of `gapNs`.
void drive(compress::ModeSwitch& sw, int64_t* now, uint64_t bytes, double rawRate, double compressedRate,
           int64_t gapNs = 0) {
  const size_t msg = 1 << 20;
  for (uint64_t sent = 0; sent < bytes; sent += msg) {
    const double rate = sw.compress() ? compressedRate : rawRate;
    sw.pending(*now);
    sw.started(msg);
    *now += int64_t(double(msg) * 1e9 / rate);
    sw.completed(*now, /*idle=*/true);
    *now += gapNs;
  }
}

TEST(CompressModeSwitch, KeepsTheFasterModeAndExploresTheOther) {
  const uint64_t window = 8 << 20;
  for (bool compressWins : {true, false}) {
    compress::ModeSwitch sw(window, /*exploreEvery=*/8);
    int64_t now = 1;
    const double fast = 1e9, slow = 8.5e8;  // close: explored every 8 windows
    const double raw = compressWins ? slow : fast, compressed = compressWins ? fast : slow;
    EXPECT_TRUE(sw.compress()) << "starts compressing";
    drive(sw, &now, 3 * window, raw, compressed);  // warm-up, then one window of each mode
    EXPECT_EQ(sw.windows(), 3);
    EXPECT_NEAR(sw.rate(true), compressed, compressed * 0.01);
    EXPECT_NEAR(sw.rate(false), raw, raw * 0.01);
    EXPECT_EQ(sw.compress(), compressWins);
    // Stays with the winner, except for one window in every 8, and ends back on it.
    int other = 0;
    for (int w = 3; w < 15; ++w) {
      other += sw.compress() != compressWins;
      drive(sw, &now, window, raw, compressed);
    }
    EXPECT_EQ(other, 1) << "explores the other mode once per 8 windows";
    EXPECT_EQ(sw.compress(), compressWins);
  }
  // Four times faster: explored 16 times as rarely.
  compress::ModeSwitch sw(window, 8);
  int64_t now = 1;
  drive(sw, &now, 3 * window, 2.5e8, 1e9);
  int raw = 0;
  for (int w = 3; w < 120; ++w) {
    raw += !sw.compress();
    drive(sw, &now, window, 2.5e8, 1e9);
  }
  EXPECT_EQ(raw, 0) << "explored within 128 windows";
}

TEST(CompressModeSwitch, IdleGapsDoNotCount) {
  const uint64_t window = 8 << 20;
  compress::ModeSwitch sw(window, 0);
  int64_t now = 1;
  // Compressing runs at 1 GB/s but the application pauses 50 ms after every message;
  // raw runs at 0.5 GB/s without pauses. Compressing is the faster while busy.
  drive(sw, &now, 2 * window, 5e8, 1e9, 50'000'000);  // warm-up, then compressing
  drive(sw, &now, window, 5e8, 1e9, 0);
  EXPECT_NEAR(sw.rate(true), 1e9, 1e7);
  EXPECT_TRUE(sw.compress());
}

// Short gaps (the next message waits for data from the peer) are the link's time: they
// count. Compressing sends each 1 MiB message in 0.5 ms but then waits 3 ms for input;
// raw takes 1 ms and waits 1 ms: raw delivers more.
TEST(CompressModeSwitch, ShortGapsCount) {
  const uint64_t window = 8 << 20;
  compress::ModeSwitch sw(window, 0);
  int64_t now = 1;
  drive(sw, &now, 2 * window, 1e9, 2e9, 3'000'000);
  drive(sw, &now, window, 1e9, 2e9, 1'000'000);
  EXPECT_LT(sw.rate(true), sw.rate(false));
  EXPECT_FALSE(sw.compress());
}

// The first isends find no credit; the message, encoded once, goes when the receive is posted.
TEST(CompressNet, IsendRetriedWithoutCreditSendsTheMessageOnce) {
  if (!compress::haveCodec(Codec::kLz4)) GTEST_SKIP() << "built without lz4";
  Net* net = compressed(Codec::kLz4);
  Pair p;
  ASSERT_TRUE(connectPair(net, net, &p).ok());
  const std::vector<char> msg = sparseFloats(256 << 10, 9);
  Request* sr = nullptr;
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(net->isend(p.send, const_cast<char*>(msg.data()), msg.size(), 0, 5, nullptr, &sr).ok());
    ASSERT_EQ(sr, nullptr) << "sent without a posted receive";
  }
  std::vector<char> dst(msg.size());
  void* d = dst.data();
  size_t cap = dst.size();
  int tag = 0;
  Request* rr = nullptr;
  ASSERT_TRUE(net->irecv(p.recv, 1, &d, &cap, &tag, nullptr, &rr).ok());
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (sr == nullptr && Clock::now() < deadline)
    ASSERT_TRUE(net->isend(p.send, const_cast<char*>(msg.data()), msg.size(), 0, 5, nullptr, &sr).ok());
  ASSERT_NE(sr, nullptr);
  ASSERT_TRUE(wait(net, sr).ok());
  size_t got = 0;
  ASSERT_TRUE(wait(net, rr, &got).ok());
  EXPECT_EQ(got, msg.size());
  EXPECT_EQ(dst, msg);
  closePair(net, net, p);
}

TEST(CompressNet, RetargetedReceiveLandsWhereItWasMoved) {
  if (!compress::haveCodec(Codec::kLz4)) GTEST_SKIP() << "built without lz4";
  Net* net = compressed(Codec::kLz4);
  Pair p;
  ASSERT_TRUE(connectPair(net, net, &p).ok());
  for (bool sameSize : {true, false}) {
    const std::vector<char> msg = sparseFloats(100000, 3);
    std::vector<char> slot(200000, 's'), target(sameSize ? msg.size() : msg.size() + 8, 't');
    void* d = slot.data();
    size_t cap = slot.size();
    int tag = 0;
    Request* rr = nullptr;
    ASSERT_TRUE(net->irecv(p.recv, 1, &d, &cap, &tag, nullptr, &rr).ok());
    ASSERT_TRUE(net->retargetRecv(rr, target.data(), target.size(), nullptr));
    Request* sr = nullptr;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (sr == nullptr && Clock::now() < deadline)
      ASSERT_TRUE(net->isend(p.send, const_cast<char*>(msg.data()), msg.size(), 0, 1, nullptr, &sr).ok());
    ASSERT_TRUE(wait(net, sr).ok());
    size_t got = 0;
    ASSERT_TRUE(wait(net, rr, &got).ok());
    EXPECT_EQ(got, msg.size());
    const std::vector<char>& where = sameSize ? target : slot;
    EXPECT_EQ(std::memcmp(where.data(), msg.data(), msg.size()), 0) << "sameSize " << sameSize;
    EXPECT_EQ((sameSize ? slot : target)[0], sameSize ? 's' : 't') << "the other buffer was written";
  }
  closePair(net, net, p);
}

// Ranks that do not compress alike: each way round, the error names SNCCL_NET_COMPRESS.
TEST(CompressNet, MismatchedSettingsAreNamedErrors) {
  Net* plain = loopNet();
  Net* lz4 = compress::haveCodec(Codec::kLz4) ? compressed(Codec::kLz4) : nullptr;
  Net* zstd = compress::haveCodec(Codec::kZstd) ? compressed(Codec::kZstd) : nullptr;
  if (lz4 == nullptr) GTEST_SKIP() << "built without lz4";
  {
    // A compressing sender and a plain receiver: connect refuses the handle.
    Pair p;
    Status st = connectPair(plain, lz4, &p);
    EXPECT_EQ(st.code(), ncclInvalidUsage) << st.message();
    EXPECT_NE(st.message().find("SNCCL_NET_COMPRESS"), std::string::npos) << st.message();
    if (p.recv != nullptr) {
      EXPECT_TRUE(plain->closeRecv(p.recv, 0).ok());
    }
  }
  {
    // A plain sender and a compressing receiver: the socket net refuses the longer handle,
    // and says why it may be longer.
    Pair p;
    Status st = connectPair(lz4, plain, &p);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("SNCCL_NET_COMPRESS"), std::string::npos) << st.message();
    if (p.recv != nullptr) {
      EXPECT_TRUE(lz4->closeRecv(p.recv, 0).ok());
    }
  }
  if (zstd != nullptr) {
    Pair p;
    Status st = connectPair(zstd, lz4, &p);
    EXPECT_EQ(st.code(), ncclInvalidUsage) << st.message();
    EXPECT_NE(st.message().find("differs"), std::string::npos) << st.message();
    if (p.recv != nullptr) {
      EXPECT_TRUE(zstd->closeRecv(p.recv, 0).ok());
    }
  }
  {
    // A plain sender reaching a compressing receiver through a plugin that ignores the
    // handle's trailer (simulated: the trailer stripped): the message has no header.
    Handle h{};
    ListenComm* l = nullptr;
    ASSERT_TRUE(lz4->listen(0, &h, &l).ok());
    Handle ch = h;
    ch.bytes.resize(ch.bytes.size() - 8);
    Pair p;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while ((p.send == nullptr || p.recv == nullptr) && Clock::now() < deadline) {
      if (p.send == nullptr) {
        ASSERT_TRUE(plain->connect(0, &ch, &p.send).ok());
      }
      if (p.recv == nullptr) {
        ASSERT_TRUE(lz4->accept(l, &p.recv).ok());
      }
    }
    ASSERT_TRUE(lz4->closeListen(l).ok());
    ASSERT_TRUE(p.send != nullptr && p.recv != nullptr);
    std::vector<char> msg(1000, 1), dst(2000);
    void* d = dst.data();
    size_t cap = dst.size();
    int tag = 0;
    Request* rr = nullptr;
    ASSERT_TRUE(lz4->irecv(p.recv, 1, &d, &cap, &tag, nullptr, &rr).ok());
    Request* sr = nullptr;
    deadline = Clock::now() + std::chrono::seconds(10);
    while (sr == nullptr && Clock::now() < deadline) {
      ASSERT_TRUE(plain->isend(p.send, msg.data(), msg.size(), 0, 1, nullptr, &sr).ok());
      bool done = false;
      if (sr == nullptr) {
        ASSERT_TRUE(lz4->test(rr, &done, nullptr, nullptr).ok());
      }
    }
    ASSERT_NE(sr, nullptr);
    Status st = wait(lz4, rr, nullptr, nullptr, [&] {
      bool done = false;
      if (sr != nullptr && plain->test(sr, &done, nullptr, nullptr).ok() && done) sr = nullptr;
    });
    EXPECT_EQ(st.code(), ncclInvalidUsage) << st.message();
    EXPECT_NE(st.message().find("SNCCL_NET_COMPRESS"), std::string::npos) << st.message();
    if (sr != nullptr) (void)wait(plain, sr);
    closePair(lz4, plain, p);
  }
}

}  // namespace
}  // namespace snccl::net
