// Logging: NCCL_DEBUG levels, the NCCL_DEBUG_SUBSYS mask, NCCL's line format and the
// last-error text behind ncclGetLastError.
//
// The configuration is resolved on first use with params::readUncached (plain getenv with
// the registry's names, precedence and defaults), never through the registry's cache: the
// registry logs on a parameter's first get, so going through it here could re-enter our
// own initialisation; and resetForTesting must be able to re-read a changed environment
// while the registry stays read-once.
#include "common/log.h"

#include <strings.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <shared_mutex>
#include <string_view>

#include "common/params.h"

namespace snccl::log {
namespace {

constexpr int kUnconfigured = -1;

// The process context: every piece of mutable process-wide logging state. NCCL defines the
// debug level, subsystem mask, log file and last error as process-wide, so this is the one
// exception to house rule 3 besides the parameter registry; nothing else in this file is
// global (per-thread state lives in function-local thread_locals below).
//
// Concurrency: `level` and `mask` are read lock-free on the hot path. Everything a line
// needs besides them (out, host, epoch) is written only with `mu` held exclusively, while
// lines are written with `mu` held shared, so reconfiguring never closes or rewrites state
// under a writer. `errMu` guards the last-error text only.
//
// Allocated once and never freed: threads may still log while the process exits, after
// static destructors have run.
struct Context {
  std::atomic<int> level{kUnconfigured};  // published last (release) by configure()
  std::atomic<uint64_t> mask{0};

  std::shared_mutex mu;
  FILE* out = stdout;
  char host[256] = "unknown";
  std::chrono::steady_clock::time_point epoch;  // TRACE timestamps count from here

  std::mutex errMu;
  std::string lastError;

  std::atomic<Sink> sink{nullptr};  // setSink
};

Context& ctx() {
  static Context* const c = new Context;
  return *c;
}

int& threadDevice() {
  static thread_local int dev = 0;
  return dev;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool equalsNoCase(std::string_view a, const char* b) {
  return a.size() == std::strlen(b) && strncasecmp(a.data(), b, a.size()) == 0;
}

int parseLevel(std::string_view text) {
  static constexpr struct { const char* name; Level level; } kLevels[] = {
      {"VERSION", kVersion}, {"WARN", kWarn}, {"INFO", kInfo}, {"ABORT", kAbort}, {"TRACE", kTrace}};
  text = trim(text);
  for (const auto& l : kLevels)
    if (equalsNoCase(text, l.name)) return l.level;
  return kNone;  // unset or unknown: silent, as NCCL does
}

uint64_t parseSubsys(std::string_view text) {
  static constexpr struct { const char* name; uint64_t bit; } kNames[] = {
      {"INIT", kInit},     {"COLL", kColl},     {"P2P", kP2P},
      {"SHM", kShm},       {"NET", kNet},       {"GRAPH", kGraph},
      {"TUNING", kTuning}, {"ENV", kEnv},       {"ALLOC", kAlloc},
      {"CALL", kCall},     {"PROXY", kProxy},   {"NVLS", kNvls},
      {"BOOTSTRAP", kBootstrap}, {"REG", kReg}, {"PROFILE", kProfile},
      {"RAS", kRas},       {"ALL", kAll}};
  text = trim(text);
  const bool invert = !text.empty() && text.front() == '^';
  if (invert) text.remove_prefix(1);
  uint64_t mask = 0;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view name = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    for (const auto& n : kNames)
      if (equalsNoCase(name, n.name)) mask |= n.bit;  // unknown names are ignored, like NCCL
  }
  return invert ? ~mask : mask;
}

// NCCL_DEBUG_FILE: %h = short host name, %p = pid, %% = '%'; other % sequences stay as they are.
std::string expandPath(std::string_view pattern, const char* host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[i + 1];
      if (c == 'h') { out += host; ++i; continue; }
      if (c == 'p') { out += std::to_string(getpid()); ++i; continue; }
      if (c == '%') { out += '%'; ++i; continue; }
    }
    out += pattern[i];
  }
  return out;
}

void shortHostName(char* buf, size_t size) {
  if (gethostname(buf, size) != 0) {
    std::snprintf(buf, size, "unknown");
    return;
  }
  buf[size - 1] = '\0';
  if (char* dot = std::strchr(buf, '.')) *dot = '\0';
}

// Reads the environment and publishes the configuration. Returns the level and, in
// `warning`, a WARN to emit once the lock is released (writing it here would self-deadlock).
void emit(Context& c, Level level, uint64_t subsys, const char* file, int line, const std::string& msg);

// `badLevel` is set to a WARN that is printed whatever the level: NCCL_DEBUG named no
// level, so the user asked for logging and would otherwise get silence.
int configure(Context& c, std::string& warning, std::string& badLevel) {
  std::unique_lock lock(c.mu);
  int level = c.level.load(std::memory_order_relaxed);
  if (level != kUnconfigured) return level;  // another thread got here first

  const std::string levelText = params::readUncached(params::Id::Debug);
  level = parseLevel(levelText);
  if (level == kNone && !trim(levelText).empty())
    badLevel = "Invalid value '" + levelText + "' for " + params::readUncachedSource(params::Id::Debug) +
               " (accepted: VERSION, WARN, INFO, ABORT, TRACE); logging stays off";
  shortHostName(c.host, sizeof(c.host));
  c.epoch = std::chrono::steady_clock::now();
  // NCCL opens the file only above VERSION, so a VERSION-only run never creates it.
  std::string pattern = params::readUncached(params::Id::DebugFile);
  if (level > kVersion && !pattern.empty() && c.sink.load(std::memory_order_acquire) == nullptr) {
    std::string path = expandPath(pattern, c.host);
    FILE* f = std::fopen(path.c_str(), "we");  // e: children exec'd later do not inherit it
    if (f != nullptr) {
      c.out = f;
    } else {
      warning = "Cannot open debug file " + path + " (" + std::strerror(errno) +
                "); logging to stdout";
    }
  }
  c.mask.store(parseSubsys(params::readUncached(params::Id::DebugSubsys)),
               std::memory_order_relaxed);
  c.level.store(level, std::memory_order_release);  // makes mask and the rest visible
  return level;
}

int currentLevel(Context& c) {
  int level = c.level.load(std::memory_order_acquire);
  if (level != kUnconfigured) return level;
  std::string warning, badLevel;
  level = configure(c, warning, badLevel);
  if (!warning.empty()) write(kWarn, kAll, __FILE__, __LINE__, "%s", warning.c_str());
  if (!badLevel.empty()) {
    setLastError(badLevel);
    emit(c, kWarn, kAll, __FILE__, __LINE__, badLevel);
  }
  return level;
}

const char* baseName(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

std::string formatMessage(const char* fmt, va_list ap) {
  char small[512];
  va_list copy;
  va_copy(copy, ap);
  int n = std::vsnprintf(small, sizeof(small), fmt, copy);
  va_end(copy);
  if (n < 0) return std::string();
  std::string msg;
  if (static_cast<size_t>(n) < sizeof(small)) {
    msg.assign(small, static_cast<size_t>(n));
  } else {
    msg.resize(static_cast<size_t>(n));
    std::vsnprintf(msg.data(), msg.size() + 1, fmt, ap);
  }
  // The line gets its own newline; a caller's trailing one would leave an empty line.
  while (!msg.empty() && msg.back() == '\n') msg.pop_back();
  return msg;
}

// "[%F %T] ": the wall-clock stamp NCCL puts on WARN lines only.
void appendTimestamp(std::string& line) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[64];
  size_t n = std::strftime(stamp, sizeof(stamp), "[%F %T] ", &tm);
  line.append(stamp, n);
}

// Builds the complete line and writes it with one fwrite, so concurrent lines (from
// threads or, through a shared file, from other processes) never interleave mid-line.
void emit(Context& c, Level level, uint64_t subsys, const char* file, int line,
          const std::string& msg) {
  if (Sink sink = c.sink.load(std::memory_order_acquire); sink != nullptr) {
    sink(level, subsys, file, line, msg.c_str());
    return;
  }
  const int pid = static_cast<int>(getpid());  // not cached: fork() changes it
  const int tid = static_cast<int>(gettid());
  const int dev = threadDevice();
  std::shared_lock lock(c.mu);
  char prefix[512];
  std::string out;
  out.reserve(msg.size() + 160);
  switch (level) {
    case kVersion:
      prefix[0] = '\0';
      break;
    case kWarn:
      out += '\n';
      appendTimestamp(out);
      std::snprintf(prefix, sizeof(prefix), "%s:%d:%d [%d] %s:%d NCCL WARN ", c.host, pid, tid,
                    dev, baseName(file), line);
      break;
    case kAbort:
      std::snprintf(prefix, sizeof(prefix), "%s:%d:%d [%d] %s:%d NCCL ABORT ", c.host, pid, tid,
                    dev, baseName(file), line);
      break;
    case kTrace:
      if (subsys == kCall) {  // API-call trace has its own short form in NCCL
        std::snprintf(prefix, sizeof(prefix), "%s:%d:%d NCCL CALL ", c.host, pid, tid);
      } else {
        double ms = std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - c.epoch).count();
        std::snprintf(prefix, sizeof(prefix), "%s:%d:%d [%d] %f %s:%d NCCL TRACE ", c.host, pid,
                      tid, dev, ms, baseName(file), line);
      }
      break;
    default:  // kInfo
      std::snprintf(prefix, sizeof(prefix), "%s:%d:%d [%d] NCCL INFO ", c.host, pid, tid, dev);
      break;
  }
  out += prefix;
  out += msg;
  out += '\n';
  std::fwrite(out.data(), 1, out.size(), c.out);
  std::fflush(c.out);  // a crash right after a WARN must not lose it
}

}  // namespace

bool enabled(Level level, uint64_t subsys) {
  Context& c = ctx();
  return level > kNone && level <= currentLevel(c) &&
         (c.mask.load(std::memory_order_relaxed) & subsys) != 0;
}

void write(Level level, uint64_t subsys, const char* file, int line, const char* fmt, ...) {
  const bool print = enabled(level, subsys);
  // A WARN is recorded even when nothing is printed: ncclGetLastError must not depend on
  // NCCL_DEBUG.
  if (!print && level != kWarn) return;
  va_list ap;
  va_start(ap, fmt);
  std::string msg = formatMessage(fmt, ap);
  va_end(ap);
  if (level == kWarn) setLastError(msg);
  if (print) emit(ctx(), level, subsys, file, line, msg);
}

void printVersionBanner(const char* text) {
  Context& c = ctx();
  const int level = currentLevel(c);
  if (level == kVersion || level == kWarn) {
    if (enabled(kVersion, kAll)) emit(c, kVersion, kAll, __FILE__, __LINE__, text);
  } else if (enabled(kInfo, kAll)) {
    emit(c, kInfo, kAll, __FILE__, __LINE__, text);
  }
}

const char* lastError() {
  // Per-thread copy: the pointer must survive other threads' WARNs until this thread's
  // next call, which a pointer into the shared string could not.
  static thread_local std::string copy;
  Context& c = ctx();
  std::lock_guard lock(c.errMu);
  copy = c.lastError;
  return copy.c_str();
}

void setLastError(const std::string& text) {
  Context& c = ctx();
  std::lock_guard lock(c.errMu);
  c.lastError = text;
}

void setThreadDevice(int dev) { threadDevice() = dev; }

void setSink(Sink sink) { ctx().sink.store(sink, std::memory_order_release); }

void resetForTesting() {
  Context& c = ctx();
  std::unique_lock lock(c.mu);  // waits for lines in flight, so the file is not closed under them
  if (c.out != stdout) std::fclose(c.out);
  c.out = stdout;
  c.level.store(kUnconfigured, std::memory_order_release);
}

bool WarnLimiter::allow(Clock::time_point now) {
  if (inWindow_ == 0 || now - windowStart_ >= period_) {
    windowStart_ = now;
    inWindow_ = 0;
  }
  if (inWindow_ < burst_) {
    ++inWindow_;
    return true;
  }
  ++suppressed_;
  ++suppressedTotal_;
  return false;
}

std::string WarnLimiter::suppressedNote() {
  if (suppressed_ == 0) return "";
  std::string s = " (" + std::to_string(suppressed_) + " more like this suppressed)";
  suppressed_ = 0;
  return s;
}

}  // namespace snccl::log
