// NCCL_ALGO / NCCL_PROTO syntax: `[^]elem[,elem...][;func:[^]elem,...]`.
//
// A section without `func:` applies to every collective; `func:` sections (AllReduce,
// Broadcast, ... without case) replace it for that collective, whatever their order.
// A leading `^` enables everything except the listed elements. Names match without case.
// Empty sections (a trailing `;`) are ignored; an empty element, an unknown collective
// or element name, or two sections for the same collective are syntax errors.
//
// Parsing is pure (no logging) so tests can call it; the selector logs what it returns.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "collectives/schedule.h"
#include "common/status.h"

namespace snccl::tuning {

constexpr int kCollKinds = static_cast<int>(CollKind::kCount);

// masks[coll]: bit i set = names[i] enabled for that collective (at most 64 names).
struct Selection {
  uint64_t masks[kCollKinds];
  bool restricted[kCollKinds];  // the text said something about this collective
  uint64_t mentioned;           // names that appear in the text
};

// Parses `text` over `names`. On error returns InvalidArgument naming the bad part and
// leaves *out all-enabled. An empty text enables everything.
Status parseSelection(std::string_view text, std::span<const std::string_view> names, Selection* out);

// What SNCCL_ALGO means for the registry: per collective, a mask over algorithms()
// indices (bit i = algorithms()[i]).
struct AlgoSpec {
  uint64_t allowed[kCollKinds];
  bool restricted[kCollKinds];
  std::string ignored;  // NCCL algorithm names accepted without effect ("NVLS, PAT")
};
// NCCL's algorithm names that have no host implementation: accepted, reported in
// `ignored`. Ring and Tree are snccl's own names too.
Status parseAlgoSpec(std::string_view text, AlgoSpec* out);

// SNCCL_PROTO: the host runtime has one protocol, Simple (slots and credits). LL and
// LL128 are accepted names; `simpleOff` is set for the collectives whose selection
// leaves only them (the runtime still uses Simple, after one warning).
struct ProtoSpec {
  bool simpleOff[kCollKinds];
  bool any = false;  // simpleOff is set for some collective
};
Status parseProtoSpec(std::string_view text, ProtoSpec* out);

}  // namespace snccl::tuning
