// Runs one of the project's executables (a tool under test) through the shell, bounded by
// timeout(1), and keeps what it printed (stdout and stderr) and its exit status.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace sntest {

struct ToolRun {
  int status = -1;  // the exit status; -1: it did not exit (a signal, or popen failed)
  std::string out;
};

inline ToolRun runTool(const std::string& commandLine, int timeoutSec = 60) {
  ToolRun r;
  const std::string cmd = "timeout " + std::to_string(timeoutSec) + " " + commandLine + " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int st = pclose(p);
  if (st != -1 && WIFEXITED(st)) r.status = WEXITSTATUS(st);
  return r;
}

}  // namespace sntest
