// Logging with NCCL's levels, subsystems and line format.
//
// Honours NCCL_DEBUG / SNCCL_DEBUG (VERSION, WARN, INFO, ABORT, TRACE), NCCL_DEBUG_SUBSYS
// (comma list, leading ^ inverts; default INIT,BOOTSTRAP,ENV) and NCCL_DEBUG_FILE (%h host,
// %p pid). Output goes to stdout unless a file is given. Every WARN also becomes the text
// returned by ncclGetLastError(). Configuration is read once per process.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace snccl::log {

enum Level : int { kNone = 0, kVersion = 1, kWarn = 2, kInfo = 3, kAbort = 4, kTrace = 5 };

// Subsystem bits, equal to NCCL's so NCCL_DEBUG_SUBSYS means the same.
enum Subsys : uint64_t {
  kInit = 0x1,
  kColl = 0x2,
  kP2P = 0x4,
  kShm = 0x8,
  kNet = 0x10,
  kGraph = 0x20,
  kTuning = 0x40,
  kEnv = 0x80,
  kAlloc = 0x100,
  kCall = 0x200,
  kProxy = 0x400,
  kNvls = 0x800,
  kBootstrap = 0x1000,
  kReg = 0x2000,
  kProfile = 0x4000,
  kRas = 0x8000,
  kAll = ~uint64_t(0),
};

// True when a message of this level and subsystem would be printed (cheap: two loads).
bool enabled(Level level, uint64_t subsys);

// Writes one line. WARN lines are also stored as the last error.
void write(Level level, uint64_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// The text of the last WARN (or error set with setLastError), "" when none.
// The returned pointer stays valid until the calling thread's next call.
const char* lastError();
void setLastError(const std::string& text);

// The "NCCL version ..." banner: a bare line at level VERSION or WARN, an INFO line
// (with prefix) at INFO and above, nothing when logging is off. Mirrors NCCL's showVersion.
void printVersionBanner(const char* text);

// Device index printed in "[dev]" for lines written by this thread (default 0).
void setThreadDevice(int dev);

// Hands every line that passes the level and subsystem filters to `sink` instead of
// writing it (then NCCL_DEBUG_FILE is not opened): a copy of snccl loaded as an NCCL net
// plugin writes through the logger its host gives it (transport/net/ext/ext_export.h).
// Set it before anything is logged.
using Sink = void (*)(Level level, uint64_t subsys, const char* file, int line, const char* text);
void setSink(Sink sink);

// Bounds how often one kind of WARN is written, so a condition that repeats in a loop (a
// stranger's connections, a failing accept) cannot flood the log: at most `burst` lines
// per `period`; the lines beyond that are counted, and the count rides on the next line
// written. Owned by whoever warns (one per kind of message), not shared; not thread-safe.
class WarnLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WarnLimiter(int burst = 5, Clock::duration period = std::chrono::seconds(10))
      : burst_(burst), period_(period) {}
  // True when the caller should write its line now; then `suppressedNote()` is the text
  // to append (" (N more like this suppressed)", or "" when none were).
  bool allow(Clock::time_point now = Clock::now());
  std::string suppressedNote();
  uint64_t suppressedTotal() const { return suppressedTotal_; }

 private:
  int burst_;
  Clock::duration period_;
  Clock::time_point windowStart_{};
  int inWindow_ = 0;
  uint64_t suppressed_ = 0;       // since the last line written
  uint64_t suppressedTotal_ = 0;  // ever
};

// Forget the parsed configuration so the next call re-reads the environment
// (ncclResetDebugInit; tests use it).
void resetForTesting();

}  // namespace snccl::log

#define SN_LOG_(level, subsys, ...)                                           \
  do {                                                                        \
    if (::snccl::log::enabled(level, subsys))                                 \
      ::snccl::log::write(level, subsys, __FILE__, __LINE__, __VA_ARGS__);    \
  } while (0)

#define SN_WARN(...) ::snccl::log::write(::snccl::log::kWarn, ::snccl::log::kAll, __FILE__, __LINE__, __VA_ARGS__)
#define SN_INFO(subsys, ...) SN_LOG_(::snccl::log::kInfo, subsys, __VA_ARGS__)
#define SN_TRACE(subsys, ...) SN_LOG_(::snccl::log::kTrace, subsys, __VA_ARGS__)
