// The parameter registry: every environment variable snccl reads is declared once in
// param_table.inc (name, NCCL alias, type, default, one-line help). sn_info lists the
// table; a variable not in it does not exist. SNCCL_* wins over its NCCL_* alias.
// Values are read once per process, on first use, and are immutable afterwards.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <string_view>

namespace snccl::params {

enum class Type : uint8_t { kInt, kString };

enum class Id : uint16_t {
#define SNCCL_PARAM(id, type, name, alias, def, help) id,
#include "common/param_table.inc"
#undef SNCCL_PARAM
  kCount
};

struct Def {
  Id id;
  Type type;
  const char* name;   // SNCCL_...
  const char* alias;  // NCCL_... or nullptr; several comma-separated: NCCL's name, then older ones
  const char* defaultValue;
  const char* help;
};

std::span<const Def> all();
const Def& def(Id id);
// The NCCL names of a parameter (Def::alias split at commas), in precedence order.
std::vector<std::string> aliases(const Def& d);

// Integer value (decimal, 0x hex, or with K/M/G suffix = x1024). A malformed value, or one
// outside the parameter's valid range (validRange), warns once and yields the default.
int64_t getInt(Id id);
// The values a parameter accepts at all ([INT64_MIN, INT64_MAX] for most); getInt rejects
// the others.
struct Range {
  int64_t lo, hi;
};
Range validRange(Id id);
// String value ("" when unset and no default).
const std::string& getString(Id id);
// True when the user set the variable (either name).
bool isSet(Id id);
// Which name the value came from ("SNCCL_X", "NCCL_X" or "default").
const char* source(Id id);

// The integer syntax getInt accepts: optional sign, decimal or 0x hex digits, optional
// K/M/G suffix (x1024 each step), surrounding blanks ignored. nullopt when malformed or
// out of int64 range. Exposed so tests and other parsers share one definition.
std::optional<int64_t> parseInt(std::string_view text);

// Resolves the variable from the environment *now* (same precedence and default as the
// cached value) without touching the cache. Only log::resetForTesting uses it: the log
// configuration may be re-read, the registry may not.
std::string readUncached(Id id);
// The name readUncached's value comes from ("SNCCL_X", "NCCL_X" or "default").
std::string readUncachedSource(Id id);

// getInt's value clamped to [lo, hi]. A value outside warns once, naming the variable,
// the value given and the value used.
int64_t getIntClamped(Id id, int64_t lo, int64_t hi);

}  // namespace snccl::params
