// The registration cache of the net transport (transport/net/reg_cache.h) against a
// fake plugin that records its regMr/deregMr calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "transport/net/reg_cache.h"

namespace snccl::net {
namespace {

class RecordingNet : public Net {
 public:
  struct Mr : MemHandle {
    Mr(const void* p, size_t n) : at(p), bytes(n) {}
    const void* at;
    size_t bytes;
  };
  const char* name() const override { return "Recording"; }
  Status init() override { return OkStatus(); }
  int devices() const override { return 1; }
  Status getProperties(int, Properties*) const override { return OkStatus(); }
  Status listen(int, Handle*, ListenComm**) override { return OkStatus(); }
  Status connect(int, Handle*, SendComm**) override { return OkStatus(); }
  Status accept(ListenComm*, RecvComm**) override { return OkStatus(); }
  void cancelConnect(Handle*) override {}
  Status regMr(Comm*, void* data, size_t size, int, MemHandle** mh) override {
    if (refuse) return InvalidArgument("refused");
    auto* m = new Mr(data, size);
    live.push_back(m);
    ++regs;
    *mh = m;
    return OkStatus();
  }
  Status deregMr(Comm*, MemHandle* mh) override {
    auto it = std::find(live.begin(), live.end(), mh);
    if (it == live.end()) return InvalidArgument("not registered");
    delete *it;
    live.erase(it);
    return OkStatus();
  }
  Status isend(SendComm*, void*, size_t, int, uint32_t, MemHandle*, Request**) override { return OkStatus(); }
  Status irecv(RecvComm*, int, void**, size_t*, int*, MemHandle**, Request**) override { return OkStatus(); }
  Status iflush(RecvComm*, int, void**, int*, MemHandle**, Request**) override { return OkStatus(); }
  Status test(Request*, bool*, size_t*, uint32_t*) override { return OkStatus(); }
  bool pollFds(const Comm*, std::vector<pollfd>*) const override { return false; }
  Status closeSend(SendComm*, uint32_t) override { return OkStatus(); }
  Status closeRecv(RecvComm*, uint32_t) override { return OkStatus(); }
  uint32_t peerAbortCode(const Comm*) const override { return 0; }
  Status closeListen(ListenComm*) override { return OkStatus(); }
  void forgetRange(const void* data, size_t size) override { forgotten.emplace_back(data, size); }

  std::vector<std::pair<const void*, size_t>> forgotten;
  std::vector<Mr*> live;
  int regs = 0;
  bool refuse = false;
};

class RegCacheTest : public ::testing::Test {
 protected:
  RecordingNet net;
  SendComm comm;
  std::shared_ptr<RegCache> regs = std::make_shared<RegCache>();
  std::vector<char> a = std::vector<char>(4096), b = std::vector<char>(8192), ring = std::vector<char>(1024);
};

// A range added or removed is forgotten (Net::forgetRange) by every net that registers
// the communicator's ranges, at once, on the caller's thread (a comm still holding a
// registration of the old pages notices later), and once per net however many of its
// comms watch.
TEST_F(RegCacheTest, RangesAddedOrRemovedAreForgottenByTheNetsAtOnce) {
  CommMrs one(&net, regs), two(&net, regs);
  const uint64_t ida = regs->add(a.data(), a.size());
  const std::pair<const void*, size_t> range{a.data(), a.size()};
  ASSERT_EQ(net.forgotten.size(), 1u);
  EXPECT_EQ(net.forgotten[0], range);
  ASSERT_NE(one.lookup(&comm, a.data(), a.size(), 0), nullptr);
  ASSERT_TRUE(regs->remove(ida));
  ASSERT_EQ(net.forgotten.size(), 2u);
  EXPECT_EQ(net.forgotten[1], range);
  EXPECT_FALSE(regs->remove(ida));
  EXPECT_EQ(net.forgotten.size(), 2u);
  one.releaseAll(&comm);
  two.releaseAll(&comm);
}

TEST_F(RegCacheTest, FindsCoveringRangesAndRegistersEachOncePerComm) {
  CommMrs mrs(&net, regs);
  ASSERT_TRUE(mrs.registerRing(&comm, ring.data(), ring.size()).ok());
  ASSERT_TRUE(mrs.registerRing(&comm, ring.data(), ring.size()).ok());
  EXPECT_EQ(net.regs, 1) << "the ring is registered once";
  EXPECT_EQ(mrs.lookup(&comm, a.data(), 16, 0), nullptr) << "nothing registered by the user yet";
  uint64_t ida = regs->add(a.data(), a.size());
  regs->add(b.data(), b.size());
  MemHandle* mh = mrs.lookup(&comm, a.data() + 100, 200, 0);
  ASSERT_NE(mh, nullptr);
  auto* m = static_cast<RecordingNet::Mr*>(mh);
  EXPECT_EQ(m->at, a.data()) << "the whole registered range";
  EXPECT_EQ(m->bytes, a.size());
  EXPECT_EQ(mrs.lookup(&comm, a.data(), a.size(), 1), mh);
  EXPECT_EQ(net.regs, 2) << "registered on first use only";
  EXPECT_EQ(mrs.lookup(&comm, a.data() + 4000, 200, 1), nullptr) << "not covered: crosses the range's end";
  EXPECT_NE(mrs.lookup(&comm, b.data(), 10, 1), nullptr);
  EXPECT_EQ(net.regs, 3);
  EXPECT_EQ(mrs.live(), 3u);
  EXPECT_TRUE(regs->remove(ida));
  EXPECT_FALSE(regs->remove(ida));
  mrs.releaseAll(&comm);
  EXPECT_TRUE(net.live.empty()) << "releaseAll deregisters everything, removed ranges too";
  EXPECT_EQ(mrs.live(), 0u);
}

TEST_F(RegCacheTest, RemovedRangesStayRegisteredUntilTheirRequestsCompleted) {
  CommMrs mrs(&net, regs);
  uint64_t id = regs->add(a.data(), a.size());
  ASSERT_NE(mrs.lookup(&comm, a.data(), 64, 0), nullptr);  // used by request 0
  EXPECT_TRUE(regs->remove(id));
  // Requests 0..4 were posted when the removal is noticed: only once all five completed
  // may the handle go.
  mrs.reclaim(&comm, 5, 3);
  EXPECT_EQ(net.live.size(), 1u);
  EXPECT_EQ(mrs.lookup(&comm, a.data(), 64, 5), nullptr) << "a removed range is not found any more";
  mrs.reclaim(&comm, 6, 5);
  EXPECT_TRUE(net.live.empty());
  // The same memory registered again is a new range: registered anew.
  regs->add(a.data(), a.size());
  EXPECT_NE(mrs.lookup(&comm, a.data(), 64, 6), nullptr);
  EXPECT_EQ(net.regs, 2);
  mrs.releaseAll(&comm);
  EXPECT_TRUE(net.live.empty());
}

TEST_F(RegCacheTest, RefusedRangesAndCommsWithoutACache) {
  CommMrs none(&net, nullptr);
  EXPECT_EQ(none.lookup(&comm, a.data(), 1, 0), nullptr);
  CommMrs mrs(&net, regs);
  regs->add(a.data(), a.size());
  EXPECT_EQ(regs->add(nullptr, 10), 0u) << "an empty range is not entered";
  net.refuse = true;
  EXPECT_EQ(mrs.lookup(&comm, a.data(), 1, 0), nullptr);
  net.refuse = false;
  EXPECT_EQ(mrs.lookup(&comm, a.data(), 1, 0), nullptr) << "a refused range is not tried again";
  EXPECT_EQ(net.regs, 0);
  mrs.releaseAll(&comm);
}

}  // namespace
}  // namespace snccl::net
