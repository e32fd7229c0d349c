// Liveness of other processes on this host, for failing fast when a peer dies.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace snccl {

// Identity of this process's PID namespace (the inode of /proc/self/ns/pid; 0 unknown).
// Two processes can compare pids only when these are equal and nonzero.
uint64_t pidNamespaceId();

// True when `pid` no longer runs: it does not exist, or it is a zombie (dead, not yet
// reaped by its parent: kill(pid, 0) still succeeds on it) or being torn down.
bool processGone(pid_t pid);

// True when `pid` is stopped: by a signal (SIGSTOP, SIGTSTP) or by a debugger. It may
// resume, so this is a diagnosis for an error already decided, not a failure by itself.
bool processStopped(pid_t pid);

// When `pid` started, in clock ticks since boot (/proc/<pid>/stat field 22); 0 when it
// does not exist or cannot be read. A pid and its start time name one process even after
// the pid is reused.
uint64_t processStartTime(pid_t pid);

}  // namespace snccl
