// External NCCL net plugins (transport/net/ext/): the loader's naming rules; snccl's socket
// net exported as every table version (tests/net/plugins) loads and moves data through the
// adapter, within the version's in-flight request limit; libraries that fail init, have no
// device, export no table or only an older one are skipped with their reason, and the
// ranks fall back to snccl's own nets; a killed peer behind a plugin ends in errors, not
// hangs; a communicator destroyed at exit, after the library's statics, still closes.
// The multi-rank suite itself runs over the plugins as test_net_ranks_plugin_v*.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "net/net_log.h"
#include "net_pair.h"
#include "transport/net/ext/ext_loader.h"
#include "transport/net/ext/nccl_net_abi.h"

namespace snccl::net {
namespace {

using ext::LoadedPlugin;

std::string pluginPath(const std::string& name) {
  return std::string(SNCCL_NET_PLUGIN_DIR) + "/libnccl-net-" + name + ".so";
}

// Each test loads its own copy: dlopen hands back the same library, but every adapter
// (and its init) is the test's own. The socket net inside reads its parameters on init.
LoadedPlugin loadSocketExport(int version) {
  setenv("SNCCL_SOCKET_IFNAME", "=lo", 1);
  setenv("SNCCL_TIMEOUT", "20", 1);
  return ext::loadPlugin(pluginPath("snsock-v" + std::to_string(version)));
}

TEST(ExtPluginNames, EntriesAndCandidates) {
  EXPECT_EQ(ext::pluginEntries(""), std::vector<std::string>{""});
  EXPECT_TRUE(ext::pluginEntries("none").empty());
  EXPECT_TRUE(ext::pluginEntries("NONE").empty());
  EXPECT_EQ(ext::pluginEntries("a,b,,c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ext::candidateNames(""), std::vector<std::string>{"libnccl-net.so"});
  EXPECT_EQ(ext::candidateNames("aws-ofi"), (std::vector<std::string>{"aws-ofi", "libnccl-net-aws-ofi.so"}));
  EXPECT_EQ(ext::candidateNames("libnccl-net-x.so"), std::vector<std::string>{"libnccl-net-x.so"});
  EXPECT_EQ(ext::candidateNames("/opt/p/libnccl-net-x.so"), std::vector<std::string>{"/opt/p/libnccl-net-x.so"});
  EXPECT_EQ(ext::candidateNames("./p.so"), std::vector<std::string>{"./p.so"});
}

TEST(ExtPluginLoad, EveryVersionOfTheSocketExportLoads) {
  for (int v = abi::kOldestVersion; v <= abi::kNewestVersion; ++v) {
    SCOPED_TRACE("v" + std::to_string(v));
    LoadedPlugin p = loadSocketExport(v);
    ASSERT_NE(p.net, nullptr) << p.problem;
    EXPECT_EQ(p.version, v);
    EXPECT_STREQ(p.net->name(), "SnSocket");
    EXPECT_NE(p.path.find("snsock-v" + std::to_string(v)), std::string::npos) << p.path;
    Status s = p.net->init();
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_GE(p.net->devices(), 1);
    Properties props;
    ASSERT_TRUE(p.net->getProperties(0, &props).ok());
    EXPECT_EQ(props.name, "lo");
    EXPECT_FALSE(props.imm);  // ncclNet carries none: the transport prefixes it
    EXPECT_EQ(props.ptrSupport & kPtrHost, kPtrHost);
    EXPECT_FALSE(p.net->usesUnregisteredHostMemory());  // NCCL's rule: register before use
    EXPECT_GT(props.maxP2pBytes, size_t(0));
    if (v < 9) {
      EXPECT_EQ(props.maxP2pBytes, abi::kMaxNetSizeBeforeV9);
    }
  }
}

TEST(ExtPluginLoad, BadLibrariesSayWhy) {
  LoadedPlugin nosym = ext::loadPlugin(pluginPath("nosym"));
  EXPECT_EQ(nosym.net, nullptr);
  EXPECT_EQ(nosym.problem, "exports no ncclNetPlugin_vN symbol");

  LoadedPlugin old = ext::loadPlugin(pluginPath("old"));
  EXPECT_EQ(old.net, nullptr);
  EXPECT_NE(old.problem.find("ncclNetPlugin_v5"), std::string::npos) << old.problem;
  EXPECT_NE(old.problem.find("v6 to v12"), std::string::npos) << old.problem;

  LoadedPlugin missing = ext::loadPlugin("no-such-plugin");
  EXPECT_EQ(missing.net, nullptr);
  EXPECT_NE(missing.problem.find("could not find no-such-plugin, libnccl-net-no-such-plugin.so"), std::string::npos)
      << missing.problem;

  // These two load; whether they are usable is init's answer.
  LoadedPlugin failing = ext::loadPlugin(pluginPath("failinit"));
  ASSERT_NE(failing.net, nullptr) << failing.problem;
  EXPECT_EQ(failing.version, 8);
  Status s = failing.net->init();
  EXPECT_EQ(s.code(), ncclSystemError);
  // The plugin's own WARN explains the code it returned.
  EXPECT_NE(s.message().find("init fails on purpose"), std::string::npos) << s.message();

  // A GPU-only device is left out; the host device keeps its place behind index 0.
  LoadedPlugin mixed = ext::loadPlugin(pluginPath("gpuonly"));
  ASSERT_NE(mixed.net, nullptr) << mixed.problem;
  ASSERT_TRUE(mixed.net->init().ok());
  ASSERT_EQ(mixed.net->devices(), 1);
  Properties props;
  ASSERT_TRUE(mixed.net->getProperties(0, &props).ok());
  EXPECT_EQ(props.name, "hostdev");
  EXPECT_FALSE(mixed.net->getProperties(1, &props).ok());

  LoadedPlugin nodev = ext::loadPlugin(pluginPath("nodev"));
  ASSERT_NE(nodev.net, nullptr) << nodev.problem;
  EXPECT_TRUE(nodev.net->init().ok());
  EXPECT_EQ(nodev.net->devices(), 0);
}

// Data through the adapter and the exported socket net, both ends here: registered
// memory, a large and an unaligned message, and the version's in-flight limit.
void moveData(int version) {
  SCOPED_TRACE("v" + std::to_string(version));
  LoadedPlugin p = loadSocketExport(version);
  ASSERT_NE(p.net, nullptr) << p.problem;
  Net* net = p.net.get();
  ASSERT_TRUE(net->init().ok());
  Pair pair;
  ASSERT_TRUE(connectPair(net, net, &pair).ok());
  ASSERT_NE(pair.send, nullptr);
  ASSERT_NE(pair.recv, nullptr);

  for (size_t bytes : {size_t(3 << 20), size_t(1), size_t(4097)}) {
    std::vector<char> src(bytes), dst(bytes + 64, 0);
    for (size_t i = 0; i < bytes; ++i) src[i] = char(i * 131 + bytes);
    MemHandle *smh = nullptr, *rmh = nullptr;
    ASSERT_TRUE(net->regMr(pair.send, src.data(), src.size(), kPtrHost, &smh).ok());
    ASSERT_TRUE(net->regMr(pair.recv, dst.data(), dst.size(), kPtrHost, &rmh).ok());
    void* rdata = dst.data();
    size_t rsize = dst.size();
    int tag = 0;
    Request* rr = nullptr;
    ASSERT_TRUE(net->irecv(pair.recv, 1, &rdata, &rsize, &tag, &rmh, &rr).ok());
    ASSERT_NE(rr, nullptr);
    Request* sr = nullptr;
    // No credit may be known yet: retry, progressing the receive meanwhile.
    for (int tries = 0; sr == nullptr && tries < 100000; ++tries) {
      ASSERT_TRUE(net->isend(pair.send, src.data(), bytes, 0, 0, smh, &sr).ok());
      if (sr == nullptr) {
        bool done = false;
        ASSERT_TRUE(net->test(rr, &done, nullptr, nullptr).ok());
        ASSERT_FALSE(done);
      }
    }
    ASSERT_NE(sr, nullptr);
    size_t got = 0;
    uint32_t imm = 1;
    // The receiver is driven while the send completes: 3 MiB need not fit in the kernel's
    // socket buffers.
    bool rdone = false;
    Status rs;
    ASSERT_TRUE(wait(net, sr, nullptr, nullptr, [&] {
                  if (!rdone && rs.ok()) rs = net->test(rr, &rdone, &got, &imm);
                }).ok());
    ASSERT_TRUE(rs.ok()) << rs.message();
    if (!rdone) {
      ASSERT_TRUE(wait(net, rr, &got, &imm).ok());
    }
    EXPECT_EQ(got, bytes);
    EXPECT_EQ(imm, 0u);
    EXPECT_EQ(std::memcmp(src.data(), dst.data(), bytes), 0);
    EXPECT_TRUE(net->deregMr(pair.send, smh).ok());
    EXPECT_TRUE(net->deregMr(pair.recv, rmh).ok());
  }

  // Past the limit irecv answers "retry later" without asking the plugin.
  const int limit = version == 6 ? abi::kMaxRequestsV6 : abi::kMaxRequests;
  std::vector<char> buf(64);
  MemHandle* mh = nullptr;
  ASSERT_TRUE(net->regMr(pair.recv, buf.data(), buf.size(), kPtrHost, &mh).ok());
  int posted = 0;
  for (int i = 0; i < limit + 4; ++i) {
    void* d = buf.data();
    size_t sz = buf.size();
    int tag = 0;
    Request* r = nullptr;
    ASSERT_TRUE(net->irecv(pair.recv, 1, &d, &sz, &tag, &mh, &r).ok());
    if (r == nullptr) break;
    ++posted;
  }
  EXPECT_EQ(posted, limit);
  // Receives still posted end with the comm.
  EXPECT_TRUE(net->deregMr(pair.recv, mh).ok());
  closePair(net, net, pair);
}

TEST(ExtPluginData, MessagesArriveThroughEveryVersion) {
  for (int v = abi::kOldestVersion; v <= abi::kNewestVersion; ++v) moveData(v);
}

// ---- multi-rank: the loader's choice and its fallbacks --------------------------------

nettest::Cluster loopback(int nranks) {
  nettest::Cluster c;
  c.nranks = nranks;
  c.ranksPerNode = 1;
  c.env = {{"SNCCL_SOCKET_IFNAME", "=lo"}, {"SNCCL_TIMEOUT", "60"}};
  return c;
}

nettest::Body checkAll(std::vector<size_t> counts) {
  return [counts](ncclComm_t comm, int rank, int n, nettest::Shared* sh, bool*) {
    nettest::Checker c(comm, rank, n);
    bool ok = c.all(counts);
    nettest::report(sh, rank, ok ? 0 : 1, c.error());
    return ok;
  };
}

// Every unusable plugin is skipped with its reason and the ranks use snccl's own socket
// net: a plugin's failure is never the communicator's.
TEST(ExtPluginRanks, UnusablePluginsFallBackToOwnNets) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {pluginPath("failinit"), "init fails on purpose"},
      {pluginPath("nodev"), "(\"NoDevice\"): no device; skipped"},
      {pluginPath("nosym"), "exports no ncclNetPlugin_vN symbol; skipped"},
      {pluginPath("old"), "exports only ncclNetPlugin_v5"},
      {"no-such-plugin", "could not find no-such-plugin"},
  };
  for (const auto& [entry, why] : cases) {
    SCOPED_TRACE(entry);
    nettest::Cluster c = loopback(2);
    c.env.push_back({"NCCL_NET_PLUGIN", entry});
    c.env.push_back({"SNCCL_IB_DISABLE", "1"});
    std::string all = nettest::runLogged(c, "INIT,NET", checkAll({1, 1031, 100000}));
    EXPECT_NE(all.find(why), std::string::npos) << all;
    EXPECT_NE(all.find("Using network Socket\n"), std::string::npos) << all;
    // The only warning is the failing plugin's own.
    if (entry != pluginPath("failinit")) {
      EXPECT_EQ(all.find(" WARN "), std::string::npos) << all;
    }
  }
}

// Several entries: the first usable one is taken, in list order, after the ones skipped.
TEST(ExtPluginRanks, FirstUsableEntryOfAListIsUsed) {
  nettest::Cluster c = loopback(3);
  c.env.push_back(
      {"NCCL_NET_PLUGIN", pluginPath("nosym") + "," + pluginPath("snsock-v9") + "," + pluginPath("snsock-v12")});
  std::string all = nettest::runLogged(c, "INIT,NET", checkAll({1, 7, 200003}));
  EXPECT_NE(all.find("exports no ncclNetPlugin_vN symbol; skipped"), std::string::npos) << all;
  EXPECT_NE(all.find("Using network SnSocket from the external plugin " + pluginPath("snsock-v9")), std::string::npos)
      << all;
  // The peers' goodbyes travel in band: a clean close is no warning.
  EXPECT_EQ(all.find(" WARN "), std::string::npos) << all;
}

// NCCL_NET_PLUGIN=none loads nothing, even where a default library would be found.
TEST(ExtPluginRanks, NoneLoadsNothing) {
  nettest::Cluster c = loopback(2);
  c.env.push_back({"NCCL_NET_PLUGIN", "none"});
  std::string all = nettest::runLogged(c, "INIT,NET", checkAll({1031}));
  EXPECT_EQ(all.find("NET/Plugin"), std::string::npos) << all;
  EXPECT_NE(all.find("Using network "), std::string::npos) << all;
}

// A rank killed behind a plugin: the survivors fail with ncclRemoteError well before the
// timeout. ncclNet carries no abort code, so only a survivor whose own connection to the
// dead rank failed can name it (through the plugin); the other learns that its neighbour
// stopped.
TEST(ExtPluginRanks, KilledPeerGivesErrorsNotHangs) {
  nettest::Cluster c = loopback(3);
  c.env[1] = {"SNCCL_TIMEOUT", "30"};
  c.env.push_back({"NCCL_NET_PLUGIN", pluginPath("snsock-v12")});
  c.env.push_back({"SNCCL_NET", "SnSocket"});
  c.timeoutSec = 120;
  nettest::Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int, nettest::Shared* sh, bool* abort) {
    std::vector<float> in(1 << 18, 1.0f), out(1 << 18);
    for (int it = 0; it < 100000; ++it) {
      if (rank == 2 && it == 10) {
        sh->r[rank].tEnd = nettest::nowSec();
        raise(SIGKILL);
      }
      ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclSum, comm, nullptr);
      if (res != ncclSuccess) {
        nettest::report(sh, rank, res, ncclGetLastError(nullptr));
        *abort = true;
        return true;
      }
    }
    nettest::report(sh, rank, 0, "no error after the peer died");
    return false;
  });
  ASSERT_TRUE(WIFSIGNALED(o.status[2])) << o.describe();
  int naming = 0, throughPlugin = 0;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(WIFEXITED(o.status[r]) && WEXITSTATUS(o.status[r]) == 0) << o.describe();
    EXPECT_EQ(o.reports[r].code, ncclRemoteError) << o.describe();
    EXPECT_LT(o.reports[r].tEnd - o.reports[2].tEnd, 15.0) << o.describe();
    throughPlugin += std::string(o.reports[r].msg).find("NET/SnSocket") != std::string::npos;
    naming += std::string(o.reports[r].msg).find("rank 2") != std::string::npos;
  }
  EXPECT_GE(throughPlugin, 1) << o.describe();
  EXPECT_GE(naming, 1) << o.describe();
}

// A communicator a program leaves alive until exit, then destroys from a destructor that
// runs after the library's own: it is constructed before main, so C++ destroys it after
// every static constructed later, the loaded plugins among them. Built-in nets live until
// exit; an external plugin's must too, and the plugin's own state (ext_export.h). Run
// over the plugin's net and over snccl's own with the plugin loaded.
ncclComm_t gLeakedComm = nullptr;
struct DestroyAfterStatics {
  ~DestroyAfterStatics() {
    if (gLeakedComm != nullptr && ncclCommDestroy(gLeakedComm) != ncclSuccess) _exit(5);
  }
} gDestroyAfterStatics;

TEST(ExtPluginRanks, CommDestroyedAtExitAfterStatics) {
  for (const char* net : {"SnSocket", "Socket"}) {
    SCOPED_TRACE(net);
    nettest::Cluster c = loopback(2);
    c.env.push_back({"NCCL_NET_PLUGIN", pluginPath("snsock-v12")});
    c.env.push_back({"SNCCL_NET", net});
    nettest::Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int n, nettest::Shared* sh, bool*) {
      nettest::Checker check(comm, rank, n);
      const bool ok = check.all({1031, 100000});
      nettest::report(sh, rank, ok ? 0 : 1, check.error());
      std::fflush(stdout);
      gLeakedComm = comm;
      std::exit(ok ? 0 : 1);  // static destructors run, then ~DestroyAfterStatics
      return false;
    });
    EXPECT_TRUE(o.allExitedZero()) << o.describe();
  }
}

}  // namespace
}  // namespace snccl::net
