// The parameter registry: param_table.inc expanded into a constant table, plus the values
// read from the environment once per process.
//
// Layering with the logger (log.cc): the logger resolves NCCL_DEBUG* through readUncached,
// which only calls getenv, so logger initialisation never enters the registry. The registry
// in turn is filled without logging; a malformed value is reported (and "X set by
// environment" announced) on the first get of that parameter, after the fill completed.
// So neither module can re-enter the other's one-time initialisation.
#include "common/params.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <limits>

#include "common/log.h"

namespace snccl::params {
namespace {

constexpr Def kDefs[] = {
#define SNCCL_PARAM(id, type, name, alias, def, help) {Id::id, type, name, alias, def, help},
#include "common/param_table.inc"
#undef SNCCL_PARAM
};
constexpr size_t kNumParams = static_cast<size_t>(Id::kCount);
static_assert(std::size(kDefs) == kNumParams);

constexpr bool idsMatchIndex() {
  for (size_t i = 0; i < kNumParams; ++i)
    if (static_cast<size_t>(kDefs[i].id) != i) return false;
  return true;
}
static_assert(idsMatchIndex(), "def(id) indexes the table by id");

constexpr size_t index(Id id) { return static_cast<size_t>(id); }

// Parameters some of whose integers mean nothing: getInt rejects those (a WARN naming the
// variable, then the default), as NCCL users expect of a negative timeout, instead of
// letting the code that reads them guess (a negative SNCCL_TIMEOUT used to disable every
// timeout).
struct Limit {
  Id id;
  Range range;
};
constexpr Limit kLimits[] = {
    {Id::Timeout, {0, 365LL * 24 * 3600}},  // seconds; 0: no limit
    {Id::FlightRecorder, {0, 1 << 20}},
    {Id::FlightSignal, {0, 64}},
};

struct Raw {
  std::string text;
  std::string source;  // the variable's name, or "default"
  bool set;
};

// SNCCL_X first, then its NCCL aliases in order, then the default. An empty value counts
// as unset, because `NCCL_X= cmd` is how shells clear an inherited variable for one
// command.
Raw resolve(const Def& d) {
  std::vector<std::string> names = aliases(d);
  names.insert(names.begin(), d.name);
  for (const std::string& name : names) {
    const char* v = std::getenv(name.c_str());
    if (v != nullptr && *v != '\0') return {v, name, true};
  }
  return {d.defaultValue, "default", false};
}

struct Value {
  std::string text;
  std::string source = "default";
  bool set = false;
  bool malformed = false;  // set but not an integer: number holds the default instead
  bool outOfRange = false;  // set to an integer validRange() rejects: number holds the default
  int64_t number = 0;
};

// The process-wide registry (house rule 3 allows exactly this and the communicator).
// `values` is written once inside the static initialiser and read-only afterwards; the
// `reported` flags are the only later writes, and they are atomic. Never freed, so that
// threads still running during exit can read parameters after static destructors ran.
struct Registry {
  std::array<Value, kNumParams> values;
  std::array<std::atomic<bool>, kNumParams> reported{};
  std::array<std::atomic<bool>, kNumParams> clampReported{};  // getIntClamped's WARN
};

Registry& registry() {
  // Function-local static: C++ guarantees one thread fills it and the others wait.
  // Nothing in here may log (see the header comment).
  static Registry* const reg = [] {
    auto* r = new Registry;
    for (size_t i = 0; i < kNumParams; ++i) {
      Raw raw = resolve(kDefs[i]);
      Value& v = r->values[i];
      v.text = std::move(raw.text);
      v.source = std::move(raw.source);
      v.set = raw.set;
      std::optional<int64_t> n = parseInt(v.text);
      if (!n && raw.set && kDefs[i].type == Type::kInt) {
        v.malformed = true;
        n = parseInt(kDefs[i].defaultValue);
      }
      const Range ok = validRange(kDefs[i].id);
      if (n && raw.set && kDefs[i].type == Type::kInt && (*n < ok.lo || *n > ok.hi)) {
        v.outOfRange = true;
        n = parseInt(kDefs[i].defaultValue);
      }
      v.number = n.value_or(0);
    }
    return r;
  }();
  return *reg;
}

// First get of a parameter: say where a user-set value came from (NCCL prints the same
// "set by environment" INFO line under the ENV subsystem), or warn once about a malformed
// integer. Runs outside the registry's initialiser, so logging here is safe.
const Value& get(Id id, bool asInt) {
  Registry& r = registry();
  const size_t i = index(id);
  const Value& v = r.values[i];
  // A malformed integer read as a string is left unreported so that the getInt which
  // falls back to the default still warns.
  if ((v.malformed || v.outOfRange) && !asInt) return v;
  if (v.set && !r.reported[i].load(std::memory_order_acquire) &&
      !r.reported[i].exchange(true, std::memory_order_acq_rel)) {
    if (asInt && v.malformed) {
      SN_WARN("Invalid value '%s' for %s (expected an integer such as 42, 0x2a, -1 or 4K); "
              "using the default %s",
              v.text.c_str(), v.source.c_str(), kDefs[i].defaultValue);
    } else if (asInt && v.outOfRange) {
      const Range ok = validRange(id);
      SN_WARN("Invalid value '%s' for %s (accepted: %lld..%lld); using the default %s", v.text.c_str(),
              v.source.c_str(), (long long)ok.lo, (long long)ok.hi, kDefs[i].defaultValue);
    } else {
      SN_INFO(log::kEnv, "%s set by environment to %s", v.source.c_str(), v.text.c_str());
    }
  }
  return v;
}

bool isBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

std::span<const Def> all() { return kDefs; }

const Def& def(Id id) { return kDefs[index(id)]; }

int64_t getInt(Id id) { return get(id, true).number; }

const std::string& getString(Id id) { return get(id, false).text; }

bool isSet(Id id) { return registry().values[index(id)].set; }

const char* source(Id id) { return registry().values[index(id)].source.c_str(); }

std::vector<std::string> aliases(const Def& d) {
  std::vector<std::string> out;
  if (d.alias == nullptr) return out;
  std::string_view rest = d.alias;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    out.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return out;
}

std::string readUncached(Id id) { return resolve(def(id)).text; }

std::string readUncachedSource(Id id) { return resolve(def(id)).source; }

Range validRange(Id id) {
  for (const Limit& l : kLimits)
    if (l.id == id) return l.range;
  return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
}

int64_t getIntClamped(Id id, int64_t lo, int64_t hi) {
  const int64_t given = getInt(id);
  const int64_t used = std::clamp(given, lo, hi);
  Registry& r = registry();
  if (used != given && !r.clampReported[index(id)].exchange(true, std::memory_order_acq_rel))
    SN_WARN("%s=%lld is outside %lld..%lld; using %lld", r.values[index(id)].source.c_str(), (long long)given,
            (long long)lo, (long long)hi, (long long)used);
  return used;
}

std::optional<int64_t> parseInt(std::string_view s) {
  while (!s.empty() && isBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && isBlank(s.back())) s.remove_suffix(1);

  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  // K/M/G never collide with hex digits (a-f), so "0x1K" is unambiguous.
  int shift = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: break;
    }
    if (shift != 0) s.remove_suffix(1);
  }
  // Decimal unless 0x: a leading 0 is not octal, "010" means ten to every user.
  int base = 10;
  if (s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  // from_chars accepts no sign or blanks here, so any stray character fails the parse.
  if (s.empty()) return std::nullopt;
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), magnitude, base);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;

  // |INT64_MIN| is one more than INT64_MAX.
  const uint64_t limit = uint64_t(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
  if (magnitude > (limit >> shift)) return std::nullopt;
  magnitude <<= shift;
  if (negative) return static_cast<int64_t>(0 - magnitude);  // wraps correctly for INT64_MIN
  return static_cast<int64_t>(magnitude);
}

}  // namespace snccl::params
