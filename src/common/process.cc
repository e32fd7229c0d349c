#include "common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace snccl {

uint64_t pidNamespaceId() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

namespace {
// The state letter of /proc/<pid>/stat ("pid (comm) S ..."), which follows the last ')'
// since comm may itself hold parentheses and spaces; '?' when it cannot be read, '-'
// when the process does not exist.
char processState(pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? '-' : '?';
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return '?';
  buf[n] = '\0';
  const char* rp = std::strrchr(buf, ')');
  if (rp == nullptr || rp[1] != ' ') return '?';
  return rp[2];
}
}  // namespace

bool processGone(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char state = processState(pid);
  return state == '-' || state == 'Z' || state == 'X' || state == 'x';
}

bool processStopped(pid_t pid) {
  if (pid <= 0) return false;
  char state = processState(pid);
  return state == 'T' || state == 't';
}

uint64_t processStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // Fields after "(comm)": state is field 3, starttime field 22.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  // p is at the space before field 3; each step moves to the space before the next field.
  for (int field = 3; field < 22 && p != nullptr; ++field) p = std::strchr(p + 1, ' ');
  if (p == nullptr) return 0;
  return std::strtoull(p + 1, nullptr, 10);
}

}  // namespace snccl
