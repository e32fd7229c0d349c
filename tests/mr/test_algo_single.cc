// The single-copy AllReduce as an algorithm ("single"): which path a call takes by default
// and under SNCCL_ALGO (tests/mr/CMakeLists.txt runs this binary with SNCCL_ALGO unset,
// "single", "^single" and "ring"). Ranks are threads of one process, so they map each
// other's buffers. The path is read from the log: rank 0's TUNING line names the
// selector's pick per call size, and every rank's COLL line says when a call ran the
// single copy; the results are checked too (exact small-integer sums).
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "snccl/nccl.h"
#include "support/harness.h"
#include "support/temp_dir.h"

namespace {

constexpr size_t kBig = (size_t(1) << 20) + 3;  // floats: 4 MiB + 12 B, over the 128 KiB threshold
constexpr size_t kSmall = 1000;                  // 4000 B, under it

bool allreduce(ncclComm_t comm, int rank, int n, size_t count, bool inPlace) {
  std::vector<float> in(count), out(count, -1.0f);
  for (size_t i = 0; i < count; ++i) in[i] = float((i * 7 + size_t(rank)) % 23);
  float* dst = inPlace ? in.data() : out.data();
  if (ncclAllReduce(in.data(), dst, count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) return false;
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += float((i * 7 + size_t(r)) % 23);
    if (dst[i] != want) {
      std::fprintf(stderr, "rank %d count %zu element %zu: %g, expected %g\n", rank, count, i, double(dst[i]),
                   double(want));
      return false;
    }
  }
  return true;
}

// The algorithm rank 0's TUNING line names for an AllReduce of `bytes`, or "".
std::string pickFor(const std::string& log, size_t bytes) {
  const std::string key = "AllReduce " + std::to_string(bytes) + " bytes -> ";
  const size_t at = log.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  return log.substr(from, log.find(',', from) - from);
}

TEST(AlgoSingle, PathFollowsSncclAlgo) {
  sntest::TempDir dir("snccl-algo-single");
  ASSERT_FALSE(dir.path.empty());
  const std::string file = dir.path + "/log";
  // Read at the first log call, which comes after this (no communicator exists yet).
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "TUNING,COLL", 1);
  setenv("NCCL_DEBUG_FILE", file.c_str(), 1);
  const char* env = std::getenv("SNCCL_ALGO");
  const std::string algo = env ? env : "";
  const int n = 3;
  sntest::runRanks(sntest::Mode::kThreads, n, [&](ncclComm_t comm, int rank, int nranks) {
    return allreduce(comm, rank, nranks, kBig, false) && allreduce(comm, rank, nranks, kBig, true) &&
           allreduce(comm, rank, nranks, kSmall, false);
  });
  std::ifstream f(file);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string log = ss.str();
  const std::string big = pickFor(log, kBig * 4), small = pickFor(log, kSmall * 4);
  size_t singleLines = 0;
  for (size_t at = log.find("single copy: every rank reads"); at != std::string::npos;
       at = log.find("single copy: every rank reads", at + 1))
    ++singleLines;
  SCOPED_TRACE("SNCCL_ALGO=\"" + algo + "\"\n" + log);
  // The table logged at init lists the algorithm (threads map each other's buffers).
  EXPECT_NE(log.find("single copy from 128K"), std::string::npos);
  EXPECT_NE(small, "");
  EXPECT_NE(small, "single");  // under the threshold: never offered
  if (algo.empty() || algo == "single") {
    EXPECT_EQ(big, "single");
    EXPECT_EQ(singleLines, size_t(n));  // each rank logs the path when it changes
  } else if (algo == "^single") {
    EXPECT_NE(big, "");
    EXPECT_NE(big, "single");
    EXPECT_EQ(singleLines, 0u);
  } else {
    EXPECT_EQ(big, algo);
    EXPECT_EQ(singleLines, 0u);
  }
}

}  // namespace
