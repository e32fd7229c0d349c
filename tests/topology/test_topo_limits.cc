// Hostile and oversized topology files: each is refused with an error naming the file and
// the limit (or loads within a bounded memory), never crashes, blocks or exhausts the
// process that reads it (rank 0 at every communicator creation).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

#include "topo_test_util.h"
#include "topology/limits.h"
#include "topology/xml.h"

namespace snccl::topo {
namespace {

using testing::tempPath;

std::string writeTemp(const std::string& name, const std::string& text) {
  std::string p = tempPath(name);
  EXPECT_TRUE(writeTextFile(p, text).ok());
  return p;
}

// The address space this process uses now (VmSize), in bytes.
size_t currentVm() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  size_t kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

// Loads `path` in a child process whose address space is capped at `maxBytes` (or, with
// `headroom`, at what it already uses plus maxBytes), so a
// reader that grows without bound fails here instead of taking the machine. Returns the
// child's verdict: "ok", the error message, or how the child died.
std::string loadBounded(const std::string& path, size_t maxBytes, bool headroom = false) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    if (headroom) maxBytes += currentVm();
    struct rlimit rl {maxBytes, maxBytes};
    setrlimit(RLIMIT_AS, &rl);
#else
    (void)maxBytes;  // sanitizers reserve terabytes of shadow memory up front
#endif
    alarm(60);
    Result<System> r = loadTopologyFile(path);
    std::string msg = r.ok() ? "ok" : r.status().message();
    ssize_t n = write(fds[1], msg.data(), msg.size());
    (void)n;
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "child killed by signal " + std::to_string(WTERMSIG(status)) + " " + out;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child exited abnormally " + out;
  return out;
}

constexpr size_t kMemCap = size_t(1) << 30;

std::string cpuOpen() {
  return "<system version=\"1\"><cpu numaid=\"0\" affinity=\"ffffffff\" arch=\"x86_64\" vendor=\"GenuineIntel\" "
         "familyid=\"6\" modelid=\"85\">\n";
}

std::string switches(int n) {
  std::string s = cpuOpen();
  char line[96];
  for (int i = 0; i < n; ++i) {
    std::snprintf(line, sizeof line, "<pci busid=\"%04x:%02x:%02x.0\" class=\"0x060400\"/>\n", i >> 13,
                  (i >> 5) & 0xff, i & 0x1f);
    s += line;
  }
  return s + "</cpu></system>\n";
}

std::string nvlinkRing(int n) {
  auto bus = [](int i) {
    char b[32];
    std::snprintf(b, sizeof b, "%04x:%02x:00.0", i >> 8, i & 0xff);
    return std::string(b);
  };
  std::string s = cpuOpen();
  for (int i = 0; i < n; ++i) {
    s += "<pci busid=\"" + bus(i) + "\" class=\"0x030200\"><gpu dev=\"" + std::to_string(i) + "\" sm=\"80\">";
    s += "<nvlink target=\"" + bus((i + 1) % n) + "\" count=\"2\" tclass=\"0x030200\"/>";
    s += "<nvlink target=\"" + bus((i + n - 1) % n) + "\" count=\"2\" tclass=\"0x030200\"/></gpu></pci>\n";
  }
  return s + "</cpu></system>\n";
}

// hwloc 2.9 dies with SIGSEGV in hwloc_topology_load on these; each must be an error.
TEST(TopoLimits, HwlocXmlThatCrashesHwlocIsRefused) {
  struct Case {
    const char* xml;
    const char* reason;
  } cases[] = {
      {"<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0x1\"><object type=\"PU\" os_index=\"0\" "
       "cpuset=\"0x1\"/></object></topology>",
       "complete_cpuset"},
      {"<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0x1\" nodeset=\"0x1\"><object type=\"PU\" "
       "os_index=\"0\" cpuset=\"0x1\"/></object></topology>",
       "complete_cpuset"},
      {"<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0x1\" nodeset=\"0x1\"><object type=\"NUMANode\" "
       "os_index=\"0\" cpuset=\"0x1\" nodeset=\"0x1\"/><object type=\"PU\" os_index=\"0\" cpuset=\"0x1\"/></object>"
       "</topology>",
       "complete_cpuset"},
      {"<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0x1\" complete_cpuset=\"0x1\" nodeset=\"0x1\" "
       "complete_nodeset=\"0x1\"><object type=\"PU\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\"/>"
       "</object></topology>",
       "NUMANode"},
      {"<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0xf...f\" complete_cpuset=\"0xf...f\" "
       "nodeset=\"0x1\" complete_nodeset=\"0x1\"><object type=\"NUMANode\" os_index=\"0\"/></object></topology>",
       "infinite"},
  };
  for (const Case& c : cases) {
    std::string p = writeTemp("crash.xml", c.xml);
    std::string verdict = loadBounded(p, kMemCap);
    EXPECT_NE(verdict.find(c.reason), std::string::npos) << c.xml << "\n -> " << verdict;
    EXPECT_NE(verdict.find(p), std::string::npos) << "the error names the file: " << verdict;
    std::remove(p.c_str());
  }
}

// A well-formed minimal export still loads.
TEST(TopoLimits, MinimalHwlocXmlWithANumaNodeLoads) {
  std::string p = writeTemp(
      "min.xml",
      "<topology version=\"2.0\"><object type=\"Machine\" cpuset=\"0x1\" complete_cpuset=\"0x1\" nodeset=\"0x1\" "
      "complete_nodeset=\"0x1\"><object type=\"NUMANode\" os_index=\"0\" cpuset=\"0x1\" complete_cpuset=\"0x1\" "
      "nodeset=\"0x1\" complete_nodeset=\"0x1\"/><object type=\"PU\" os_index=\"0\" cpuset=\"0x1\" "
      "complete_cpuset=\"0x1\"/></object></topology>");
  std::string verdict = loadBounded(p, kMemCap);
  if (verdict.find("without hwloc") == std::string::npos) {
    EXPECT_EQ(verdict, "ok");
  }
  std::remove(p.c_str());
}

// A FIFO would block open() until a writer came; it is refused at once.
TEST(TopoLimits, FifoIsRefusedWithoutBlocking) {
  std::string p = tempPath("topo.fifo");
  std::remove(p.c_str());
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  std::string verdict = loadBounded(p, kMemCap);
  EXPECT_NE(verdict.find("not a regular file"), std::string::npos) << verdict;
  std::remove(p.c_str());
}

TEST(TopoLimits, FileLargerThanTheCapIsRefusedBeforeReading) {
  std::string p = tempPath("big.xml");
  std::FILE* f = std::fopen(p.c_str(), "w");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(ftruncate(fileno(f), static_cast<off_t>(kMaxTopoFileBytes + 1)), 0);  // sparse
  std::fclose(f);
  std::string verdict = loadBounded(p, kMemCap);
  EXPECT_NE(verdict.find("MiB a topology file may have"), std::string::npos) << verdict;
  std::remove(p.c_str());
}

// 20k switches used 9.4 GB (a path for every pair of nodes): now refused by count, and
// below the count paths are kept for endpoints only.
TEST(TopoLimits, ManySwitchesAreRefusedOrLoadInBoundedMemory) {
  std::string p = writeTemp("sw20k.xml", switches(20000));
  std::string verdict = loadBounded(p, kMemCap);
  EXPECT_NE(verdict.find("more than the 8192"), std::string::npos) << verdict;
  std::remove(p.c_str());
  p = writeTemp("sw8k.xml", switches(static_cast<int>(kMaxNodes) - 1));
  EXPECT_EQ(loadBounded(p, kMemCap), "ok");
  std::remove(p.c_str());
}

TEST(TopoLimits, TooManyGpusAreRefusedAndAFullNvlinkRingLoads) {
  std::string p = writeTemp("nv2k.xml", nvlinkRing(2000));
  std::string verdict = loadBounded(p, kMemCap);
  EXPECT_NE(verdict.find("2000 GPUs, more than the 512"), std::string::npos) << verdict;
  std::remove(p.c_str());
  p = writeTemp("nv512.xml", nvlinkRing(static_cast<int>(kMaxGpus)));
  EXPECT_EQ(loadBounded(p, kMemCap), "ok");
  std::remove(p.c_str());
}

// "0-65535," repeated expanded range by range (65 KB of text, 2.1 GB of ids).
TEST(TopoLimits, RepeatedCpuRangesCostNothing) {
  std::string cell;
  for (int i = 0; i < 8000; ++i) cell += "0-65535,";
  cell.pop_back();
  Result<std::vector<int>> r = parseCpuRanges(cell);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value().size(), 65536u);
  EXPECT_FALSE(parseCpuRanges("0-65536").ok());
  EXPECT_FALSE(parseCpuRanges("3-1").ok());
  Result<std::vector<int>> mixed = parseCpuRanges("0,2,4,0-5,9");
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed.value(), (std::vector<int>{0, 1, 2, 3, 4, 5, 9}));

  std::string smi = "\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t" + cell + "\t0\n";
  std::string p = writeTemp("smi.txt", smi);
  EXPECT_EQ(loadBounded(p, kMemCap), "ok");
  std::remove(p.c_str());
}

// Memory running out while reading (std::bad_alloc) is an error, not an exception through
// the caller (the C API's init would abort the user's process).
TEST(TopoLimits, OutOfMemoryWhileReadingIsAnError) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "needs RLIMIT_AS, which sanitizers cannot run under";
#endif
  std::string p = writeTemp("sw8k.xml", switches(static_cast<int>(kMaxNodes) - 1));
  std::string verdict = loadBounded(p, size_t(1) << 20, true);
  EXPECT_NE(verdict.find("out of memory"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find(p), std::string::npos) << verdict;
  std::remove(p.c_str());
}

TEST(TopoLimits, XmlElementCountIsCapped) {
  std::string s = "<system version=\"1\">";
  for (size_t i = 0; i <= kMaxXmlElements; ++i) s += "<x/>";
  s += "</system>";
  Result<XmlElement> r = parseXml(s, "many.xml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 200000 elements"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace snccl::topo
