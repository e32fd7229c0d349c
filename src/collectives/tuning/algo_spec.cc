// Parser of NCCL's algorithm / protocol selection syntax (algo_spec.h).
#include "collectives/tuning/algo_spec.h"

#include <cctype>
#include <vector>

#include "collectives/algorithm.h"

namespace snccl::tuning {

namespace {

bool sameNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// `[^]elem[,elem...]` -> mask over names.
Status parseList(std::string_view list, std::span<const std::string_view> names, uint64_t* mask,
                 uint64_t* mentioned) {
  list = trim(list);
  bool invert = false;
  if (!list.empty() && list.front() == '^') {
    invert = true;
    list.remove_prefix(1);
  }
  if (trim(list).empty()) return InvalidArgument("empty list in '%.*s'", int(list.size()), list.data());
  uint64_t m = 0;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view elem = trim(list.substr(pos, comma - pos));
    if (elem.empty()) return InvalidArgument("empty element in '%.*s'", int(list.size()), list.data());
    size_t i = 0;
    while (i < names.size() && !sameNoCase(elem, names[i])) ++i;
    if (i == names.size()) return InvalidArgument("unknown name '%.*s'", int(elem.size()), elem.data());
    m |= uint64_t(1) << i;
    pos = comma + 1;
  }
  const uint64_t all = names.size() >= 64 ? ~uint64_t(0) : (uint64_t(1) << names.size()) - 1;
  *mask = invert ? (all & ~m) : m;
  *mentioned |= m;
  return OkStatus();
}

int collByName(std::string_view name) {
  for (int k = 0; k < kCollKinds; ++k)
    if (sameNoCase(name, collName(static_cast<CollKind>(k)))) return k;
  return -1;
}

void enableAll(Selection* out, size_t nnames) {
  const uint64_t all = nnames >= 64 ? ~uint64_t(0) : (uint64_t(1) << nnames) - 1;
  for (int k = 0; k < kCollKinds; ++k) {
    out->masks[k] = all;
    out->restricted[k] = false;
  }
  out->mentioned = 0;
}

Status parseSections(std::string_view text, std::span<const std::string_view> names, Selection* out) {
  bool haveGlobal = false, perColl[kCollKinds] = {};
  uint64_t global = 0;
  uint64_t own[kCollKinds] = {};
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t semi = text.find(';', pos);
    if (semi == std::string_view::npos) semi = text.size();
    std::string_view sec = trim(text.substr(pos, semi - pos));
    pos = semi + 1;
    if (sec.empty()) continue;
    const size_t colon = sec.find(':');
    if (colon == std::string_view::npos) {
      if (haveGlobal) return InvalidArgument("two sections without a collective ('%.*s')", int(sec.size()), sec.data());
      SNCCL_TRY(parseList(sec, names, &global, &out->mentioned).addContext(std::string(sec)));
      haveGlobal = true;
      continue;
    }
    std::string_view func = trim(sec.substr(0, colon));
    const int k = collByName(func);
    if (k < 0) return InvalidArgument("unknown collective '%.*s'", int(func.size()), func.data());
    if (perColl[k]) return InvalidArgument("collective '%.*s' given twice", int(func.size()), func.data());
    SNCCL_TRY(parseList(sec.substr(colon + 1), names, &own[k], &out->mentioned).addContext(std::string(sec)));
    perColl[k] = true;
  }
  for (int k = 0; k < kCollKinds; ++k) {
    if (perColl[k]) {
      out->masks[k] = own[k];
      out->restricted[k] = true;
    } else if (haveGlobal) {
      out->masks[k] = global;
      out->restricted[k] = true;
    }
  }
  return OkStatus();
}

// NCCL algorithm names with no host implementation (ring and tree are ours too).
constexpr std::string_view kNcclOnly[] = {"CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT", "Collnet"};

}  // namespace

Status parseSelection(std::string_view text, std::span<const std::string_view> names, Selection* out) {
  enableAll(out, names.size());
  if (names.size() > 64) return InternalError("more than 64 names");
  Status st = parseSections(text, names, out);
  if (!st.ok()) enableAll(out, names.size());
  return st;
}

Status parseAlgoSpec(std::string_view text, AlgoSpec* out) {
  std::span<const AlgorithmDef> algos = algorithms();
  std::vector<std::string_view> names;  // distinct registry names, then NCCL-only ones
  for (const AlgorithmDef& a : algos) {
    bool seen = false;
    for (std::string_view n : names) seen = seen || n == a.name;
    if (!seen) names.push_back(a.name);
  }
  const size_t own = names.size();
  for (std::string_view n : kNcclOnly) names.push_back(n);
  for (int k = 0; k < kCollKinds; ++k) {
    out->allowed[k] = ~uint64_t(0);
    out->restricted[k] = false;
  }
  out->ignored.clear();
  if (algos.size() > 64) return InternalError("more than 64 algorithms");
  Selection sel;
  SNCCL_TRY(parseSelection(text, names, &sel));
  for (size_t i = own; i < names.size(); ++i)  // NCCL-only names: accepted, no effect
    if (sel.mentioned >> i & 1) out->ignored += (out->ignored.empty() ? "" : ", ") + std::string(names[i]);
  for (int k = 0; k < kCollKinds; ++k) {
    out->restricted[k] = sel.restricted[k];
    uint64_t m = 0;
    for (size_t i = 0; i < algos.size(); ++i) {
      if (static_cast<int>(algos[i].coll) != k) continue;
      for (size_t j = 0; j < own; ++j)
        if (names[j] == algos[i].name && (sel.masks[k] >> j & 1)) m |= uint64_t(1) << i;
    }
    out->allowed[k] = sel.restricted[k] ? m : ~uint64_t(0);
  }
  return OkStatus();
}

Status parseProtoSpec(std::string_view text, ProtoSpec* out) {
  constexpr std::string_view kProtos[] = {"LL", "LL128", "Simple"};
  for (bool& b : out->simpleOff) b = false;
  out->any = false;
  Selection sel;
  SNCCL_TRY(parseSelection(text, kProtos, &sel));
  for (int k = 0; k < kCollKinds; ++k) {
    out->simpleOff[k] = sel.restricted[k] && !(sel.masks[k] >> 2 & 1);
    out->any = out->any || out->simpleOff[k];
  }
  return OkStatus();
}

}  // namespace snccl::tuning
