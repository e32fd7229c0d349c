// Live discovery on this machine (works without GPU, NVML or hwloc), NVML through a fake
// library, SNCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE in fresh processes (parameters are read
// once per process), and sn_topo on the live machine and on every shared file.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "support/run_tool.h"
#include "topo_test_util.h"
#include "topology/affinity.h"
#include "topology/nccl_xml.h"
#include "topology/nvml.h"
#include "topology/xml.h"

namespace snccl::topo {
namespace {

using testing::topoFiles;
using testing::topoPath;

TEST(Discovery, LiveMachineWithoutGpusOrNvmlStillWorks) {
  DiscoveryReport rep;
  DiscoveryOptions opt;
  opt.nvmlLibrary = "libsnccl-no-such-nvml.so.1";  // as on every CPU-only host
  Result<System> s = discoverLocal(opt, &rep);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_FALSE(s->cpus().empty());
  for (int c : s->cpus()) EXPECT_FALSE(s->cpuList(c).empty()) << s->label(c);
  EXPECT_NE(rep.nvml.find("NVML unavailable"), std::string::npos) << rep.nvml;
  EXPECT_FALSE(rep.hwloc.empty());
  std::printf("live: %s; %s; %zu CPU nodes, %zu GPUs, %zu NICs\n", rep.hwloc.c_str(), rep.nvml.c_str(),
              s->cpus().size(), s->gpus().size(), s->nics().size());
  // The default library name: absent on build machines, present on GPU machines.
  Result<System> dflt = discoverLocal();
  ASSERT_TRUE(dflt.ok()) << dflt.status().message();
  EXPECT_TRUE(*s == *s);
}

TEST(Discovery, NumaPlacementOfHostRanks) {
  Result<System> s = discoverLocal();
  ASSERT_TRUE(s.ok());
  int numa = currentNumaNode();
  ASSERT_GE(numa, 0);
  std::vector<int> cpus = cpusOfNuma(*s, numa);
  ASSERT_FALSE(cpus.empty()) << "NUMA node " << numa << " not in the discovered System";
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  ASSERT_TRUE(bindCurrentThread(cpus).ok());
  EXPECT_EQ(currentNumaNode(), numa);
  EXPECT_FALSE(bindCurrentThread(std::vector<int>{-1}).ok());
  EXPECT_TRUE(bindCurrentThread({}).ok());
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
}

TEST(Discovery, WithoutHwlocCpusComeFromSysfs) {
  DiscoveryOptions opt;
  opt.useHwloc = false;
  opt.useNvml = false;
  DiscoveryReport rep;
  Result<System> s = discoverLocal(opt, &rep);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_FALSE(s->cpus().empty());
  EXPECT_NE(rep.hwloc.find("sysfs"), std::string::npos);
  size_t total = 0;
  for (int c : s->cpus()) total += s->cpuList(c).size();
  EXPECT_GT(total, 0u);
  EXPECT_LE(static_cast<long>(total), sysconf(_SC_NPROCESSORS_CONF));
}

TEST(Nvml, MissingLibraryIsReportedNotFatal) {
  NvmlProbe p = probeNvml("/nonexistent/libnvidia-ml.so.1");
  EXPECT_FALSE(p.available);
  EXPECT_NE(p.message.find("NVML unavailable"), std::string::npos);
  EXPECT_TRUE(p.gpus.empty());
}

TEST(Nvml, FakeLibraryGivesLinksSwitchesAndP2p) {
  NvmlProbe p = probeNvml(SNCCL_FAKE_NVML);
  ASSERT_TRUE(p.available) << p.message;
  EXPECT_NE(p.message.find("999.99-fake"), std::string::npos);
  ASSERT_EQ(p.gpus.size(), 3u);
  EXPECT_EQ(p.gpus[1].busId, "0000:2a:00.0");
  EXPECT_EQ(p.gpus[0].sm, 90);
  ASSERT_EQ(p.gpus[0].nvlinks.size(), 2u);
  int toSwitch = 0, toGpu = 0;
  for (const NvLinkSpec& l : p.gpus[0].nvlinks) {
    if (l.tclass == 0x068000) toSwitch += l.count;
    if (l.tclass == 0x030200 && l.target == "0000:2a:00.0") toGpu += l.count;
  }
  EXPECT_EQ(toSwitch, 16);
  EXPECT_EQ(toGpu, 2);
  // GPU2 lost two links: both are reported, not silently dropped.
  int failed = 0, inactive = 0;
  for (const std::string& n : p.notes) {
    failed += n.find("0000:3b:00.0 NVLink 16: state query failed: fake NVML error") != std::string::npos;
    inactive += n.find("0000:3b:00.0 NVLink 17: inactive") != std::string::npos;
  }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(inactive, 1);
  EXPECT_EQ(p.gpus[0].p2pBlocked, std::vector<std::string>{"0000:3b:00.0"});
  EXPECT_TRUE(p.gpus[1].p2pBlocked.empty());
}

TEST(Nvml, DiscoveryMergesNvmlGpus) {
  DiscoveryOptions opt;
  opt.nvmlLibrary = SNCCL_FAKE_NVML;
  DiscoveryReport rep;
  Result<System> s = discoverLocal(opt, &rep);
  ASSERT_TRUE(s.ok()) << s.status().message();
  int g0 = s->findByBusId("0000:17:00.0"), g1 = s->findByBusId("0000:2a:00.0"), g2 = s->findByBusId("0000:3b:00.0");
  ASSERT_TRUE(g0 >= 0 && g1 >= 0 && g2 >= 0);
  ASSERT_GE(s->nvs(), 0);
  EXPECT_EQ(s->node(g0).gpu.dev, 0);
  // GPU0 <-> GPU1: the switch (16 x 20.6) is wider than their 2-link bridge.
  EXPECT_EQ(s->path(g0, g1).type, PathType::kNvl);
  EXPECT_NEAR(s->path(g0, g1).bw, 16 * 20.6, 1e-9);
  EXPECT_NEAR(s->path(g0, g2).bw, 16 * 20.6, 1e-9);
  EXPECT_EQ(s->node(g2).p2pBlockedPeers, std::vector<std::string>{"0000:17:00.0"});
  bool placed = false;
  for (const std::string& n : s->notes()) placed = placed || n.find("not found by hwloc") != std::string::npos;
  EXPECT_TRUE(placed);
}

// Runs `body` in a fresh process (the parameter registry is read once per process) and
// returns its exit code.
template <class F>
int inChild(F body) {
  pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

TEST(Params, TopoFileAndDumpFile) {
  std::string f = topoPath("nccl/hgx-a100-80g_8gpu_6nvswitch_4xcx6dx-200g-bond_2socket-icelake.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  std::string dump = testing::tempPath("dump.xml");
  std::remove(dump.c_str());
  int rc = inChild([&] {
    setenv("SNCCL_TOPO_FILE", f.c_str(), 1);
    setenv("NCCL_TOPO_DUMP_FILE", dump.c_str(), 1);
    Result<System> s = systemForThisProcess();
    if (!s.ok()) return 1;
    if (s->gpus().size() < 8 || s->nvs() < 0) return 2;
    Result<System> back = loadTopologyFile(dump);
    if (!back.ok()) return 3;
    // NVML-only data (P2P refusals) has no place in the format; the rest must survive.
    return writeNcclXml(back.value()) == writeNcclXml(s.value()) ? 0 : 4;
  });
  EXPECT_EQ(rc, 0);
  std::remove(dump.c_str());
  // A missing file is not silent: systemForThisProcess warns (SnTopo.UnusableTopoFileWarns
  // checks the WARN line) and detects the machine instead, as NCCL does.
  int bad = inChild([] {
    setenv("NCCL_TOPO_FILE", "/nonexistent/topo.xml", 1);
    Result<System> s = systemForThisProcess();
    return s.ok() ? 0 : 1;
  });
  EXPECT_EQ(bad, 0);
}

#ifdef SNCCL_SN_TOPO
int runTool(const std::string& args) { return std::system((std::string(SNCCL_SN_TOPO) + " " + args + " > /dev/null 2>&1").c_str()); }

TEST(SnTopo, LiveMachineAndEveryFile) {
  std::string svg = testing::tempPath("sn_topo.svg");
  EXPECT_EQ(runTool("--svg " + svg), 0);
  std::vector<std::string> files = topoFiles("nccl");
  for (const char* k : {"hwloc", "nvidia-smi"})
    for (const std::string& f : topoFiles(k)) files.push_back(f);
  if (files.empty()) GTEST_SKIP() << "shared topology data missing under " << SNCCL_TOPO_DIR;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    std::remove(svg.c_str());
    EXPECT_EQ(runTool("-i " + f + " -n 4 --nodes 2 --svg " + svg + " --dump " + svg + ".xml"), 0);
    Result<std::string> text = readTextFile(svg);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(text->rfind("<svg", 0), 0u);
    EXPECT_NE(text->find("</svg>"), std::string::npos);
    EXPECT_TRUE(parseXml(text.value(), svg).ok());  // well-formed
    EXPECT_TRUE(loadTopologyFile(svg + ".xml").ok());
  }
  std::remove(svg.c_str());
  std::remove((svg + ".xml").c_str());
  EXPECT_NE(runTool("-i /nonexistent.xml"), 0);
  EXPECT_NE(runTool("--bogus"), 0);
}

// stdout and stderr of sn_topo run with `env` (bounded by timeout(1)).
std::string toolOutput(const std::string& env, const std::string& args) {
  return sntest::runTool("env " + env + " " + SNCCL_SN_TOPO + " " + args).out;
}

// NCCL_TOPO_FILE naming a missing file, a FIFO or a file hwloc would crash on: a WARN
// naming the path and the reason, then the machine's own topology.
TEST(SnTopo, UnusableTopoFileWarnsAndFallsBackToDetection) {
  std::string fifo = testing::tempPath("topo.fifo");
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string crash = testing::tempPath("crash.xml");
  ASSERT_TRUE(writeTextFile(crash, "<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0x1\"><object "
                                   "type=\"PU\" os_index=\"0\" cpuset=\"0x1\"/></object></topology>")
                  .ok());
  for (const std::string& f : {std::string("/nonexistent/topo.xml"), fifo, crash}) {
    SCOPED_TRACE(f);
    std::string out = toolOutput("NCCL_DEBUG=WARN NCCL_TOPO_FILE=" + f, "--pairing");
    EXPECT_NE(out.find("WARN NCCL_TOPO_FILE=" + f + " cannot be used"), std::string::npos) << out;
    EXPECT_NE(out.find("# Source:"), std::string::npos) << "no fallback to detection:\n" << out;
  }
  std::remove(fifo.c_str());
  std::remove(crash.c_str());
}
#endif

}  // namespace
}  // namespace snccl::topo
