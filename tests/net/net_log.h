// Multi-rank runs whose NCCL_DEBUG=INFO log the test reads.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "net/net_cluster.h"
#include "support/temp_dir.h"

namespace nettest {

inline std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `c` with NCCL_DEBUG=INFO for `subsys` into files of a fresh directory and expects
// every rank to exit 0; returns the logs of all ranks, concatenated.
inline std::string runLogged(Cluster c, const std::string& subsys, const Body& body) {
  sntest::TempDir dir("snccl-netlog");
  if (dir.path.empty()) {
    ADD_FAILURE() << "mkdtemp: " << strerror(errno);
    return "";
  }
  c.env.push_back({"NCCL_DEBUG", "INFO"});
  c.env.push_back({"NCCL_DEBUG_SUBSYS", subsys});
  c.env.push_back({"NCCL_DEBUG_FILE", dir.path + "/log.%p"});
  Outcome o = runCluster(c, body);
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  std::string all;
  for (const auto& e : std::filesystem::directory_iterator(dir.path)) all += readFile(e.path());
  return all;
}

}  // namespace nettest
