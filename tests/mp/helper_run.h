// Runs this test binary again as a helper process (fork + exec of /proc/self/exe, with
// `helperVar` set, so its main() runs the helper instead of the tests) with a fresh
// environment for snccl's logging and parameters, and collects the log files the helper
// wrote into a directory: for tests of what a user sees in NCCL_DEBUG output.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "mp/mp_util.h"
#include "support/temp_dir.h"

namespace mp {

struct HelperRun {
  int rc = -1;
  pid_t pid = 0;
  std::vector<std::string> files;  // names in the log directory
  std::vector<std::string> lines;  // of all files
};

inline HelperRun runHelper(const char* helperVar, const std::string& dir,
                           const std::vector<std::pair<std::string, std::string>>& env, int timeoutSec = 60) {
  HelperRun run;
  std::string how;
  run.rc = mp::runChild(
      [&] {
        for (const char* v : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "SNCCL_DEBUG",
                              "SNCCL_DEBUG_SUBSYS", "SNCCL_DEBUG_FILE"})
          unsetenv(v);
        for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
        setenv(helperVar, "1", 1);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);  // stdout output (no NCCL_DEBUG_FILE) is not ours to check here
        execl("/proc/self/exe", helperVar, (char*)nullptr);
        return 127;
      },
      timeoutSec, &how, &run.pid);
  if (run.rc == -1) ADD_FAILURE() << "helper " << helperVar << " " << how;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      run.files.push_back(e->d_name);
      std::ifstream f(dir + "/" + e->d_name);
      std::string line;
      while (std::getline(f, line)) run.lines.push_back(line);
    }
    closedir(d);
  }
  return run;
}

using TempDir = sntest::TempDir;

inline std::string dump(const HelperRun& run) {
  std::string s;
  for (size_t i = 0; i < run.lines.size() && i < 60; ++i) s += "  | " + run.lines[i] + "\n";
  return s;
}

}  // namespace mp
