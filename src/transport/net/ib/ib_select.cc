#include "transport/net/ib/ib_select.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstdlib>
#include <tuple>

#include "common/socket.h"

namespace snccl::net::ib {

Result<HcaFilter> HcaFilter::parse(std::string_view spec) {
  HcaFilter f;
  if (!spec.empty() && spec.front() == '^') {
    f.exclude = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    f.exact = true;
    spec.remove_prefix(1);
  }
  auto trim = [](std::string_view t) {
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
    return t;
  };
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = trim(spec.substr(0, comma));
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (item.empty()) continue;
    Entry e;
    size_t colon = item.find(':');
    e.name = std::string(trim(item.substr(0, colon)));
    if (colon != std::string_view::npos) {
      std::string_view port = trim(item.substr(colon + 1));
      int p = 0;
      bool digits = !port.empty() && port.size() <= 3;
      for (char ch : port) {
        digits = digits && ch >= '0' && ch <= '9';
        p = p * 10 + (ch - '0');
      }
      if (!digits || p < 1 || p > 255)
        return InvalidArgument("NCCL_IB_HCA: '%.*s' has a bad port number (expected dev[:port], port 1..255)",
                               int(item.size()), item.data());
      e.port = p;
    }
    if (e.name.empty())
      return InvalidArgument("NCCL_IB_HCA: '%.*s' names no device", int(item.size()), item.data());
    if (e.name.find_first_of("^=") != std::string::npos)
      return InvalidArgument("NCCL_IB_HCA: '%.*s': '^' and '=' may only start the whole list", int(item.size()),
                             item.data());
    f.entries.push_back(std::move(e));
  }
  return f;
}

bool HcaFilter::allows(std::string_view dev, int port) const {
  if (entries.empty()) return true;
  bool listed = false;
  for (const Entry& e : entries) {
    bool nameOk = exact ? dev == e.name : dev.substr(0, e.name.size()) == e.name;
    if (nameOk && (e.port < 0 || e.port == port)) listed = true;
  }
  return listed != exclude;
}

const char* gidTypeName(GidType t) {
  switch (t) {
    case GidType::kIb: return "IB";
    case GidType::kRoceV1: return "RoCE v1";
    case GidType::kRoceV2: return "RoCE v2";
    default: return "type unknown";
  }
}

GidType parseGidType(std::string_view text) {
  if (text.find("v2") != std::string_view::npos) return GidType::kRoceV2;
  if (text.find("v1") != std::string_view::npos) return GidType::kRoceV1;  // "IB/RoCE v1"
  if (text == "IB") return GidType::kIb;
  return GidType::kUnknown;
}

std::string gidString(const std::array<uint8_t, 16>& raw) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, raw.data(), buf, sizeof buf);
  return buf;
}

bool gidIsZero(const std::array<uint8_t, 16>& raw) {
  for (uint8_t b : raw)
    if (b != 0) return false;
  return true;
}

bool gidIsLinkLocal(const std::array<uint8_t, 16>& raw) { return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80; }

bool gidIsV4Mapped(const std::array<uint8_t, 16>& raw) {
  for (int i = 0; i < 10; ++i)
    if (raw[size_t(i)] != 0) return false;
  return raw[10] == 0xff && raw[11] == 0xff;
}

Result<GidChoice> chooseGid(const std::vector<GidEntry>& table, int tableLen, bool ethernet, const GidPolicy& policy) {
  auto find = [&](int index) -> const GidEntry* {
    for (const GidEntry& e : table)
      if (e.index == index) return &e;
    return nullptr;
  };
  if (policy.forcedIndex >= 0) {
    const GidEntry* e = find(policy.forcedIndex);
    if (policy.forcedIndex >= tableLen || e == nullptr || gidIsZero(e->raw))
      return InvalidArgument("NCCL_IB_GID_INDEX=%d: the port has no configured GID there (table of %d entries)",
                             policy.forcedIndex, tableLen);
    return GidChoice{e->index, "index " + std::to_string(e->index) + " (" + gidString(e->raw) + ", " +
                                   gidTypeName(e->type) + ") from NCCL_IB_GID_INDEX"};
  }
  if (!ethernet) {
    const GidEntry* e = find(0);
    if (e == nullptr || gidIsZero(e->raw)) return SystemError("InfiniBand port has no GID at index 0");
    return GidChoice{0, "index 0 (" + gidString(e->raw) + "): InfiniBand uses the subnet manager's GID"};
  }
  const GidType wantType = policy.roceVersion == 1 ? GidType::kRoceV1 : GidType::kRoceV2;
  const bool wantV4 = policy.family != AF_INET6;
  const GidEntry* best = nullptr;
  std::tuple<int, int, int> bestRank{};  // (version class, family mismatch, index): lower is better
  int linkLocal = 0;
  for (const GidEntry& e : table) {
    if (e.index >= tableLen || gidIsZero(e.raw)) continue;
    if (gidIsLinkLocal(e.raw)) {
      ++linkLocal;
      continue;
    }
    // Version class: 0 the preferred version, 1 a type that could not be read, 2 another.
    std::tuple<int, int, int> rank{e.type == wantType ? 0 : (e.type == GidType::kUnknown ? 1 : 2),
                                   gidIsV4Mapped(e.raw) == wantV4 ? 0 : 1, e.index};
    if (best == nullptr || rank < bestRank) {
      best = &e;
      bestRank = rank;
    }
  }
  if (best == nullptr)
    return SystemError("no usable RoCE GID: %zu entries read of %d, %d link-local (never used: not routable), "
                       "none other configured; give the interface an IP address or set NCCL_IB_GID_INDEX",
                       table.size(), tableLen, linkLocal);
  std::string what = "index " + std::to_string(best->index) + " (" + gidString(best->raw) + ", " +
                     gidTypeName(best->type) + ")";
  const char* want = wantV4 ? "IPv4-mapped" : "IPv6";
  std::string why;
  if (std::get<0>(bestRank) == 0 && std::get<1>(bestRank) == 0) {
    why = std::string(": the first ") + gidTypeName(wantType) + " " + want + " GID";
  } else if (std::get<0>(bestRank) == 0) {
    why = std::string(": no ") + gidTypeName(wantType) + " " + want + " GID; the first " + gidTypeName(wantType) +
          " GID of the other family";
  } else if (std::get<0>(bestRank) == 1) {
    why = std::string(": no ") + gidTypeName(wantType) + " GID readable; this one's type could not be read (a " +
          "container that does not map the port's GID attributes?)" +
          (std::get<1>(bestRank) != 0 ? std::string(", and it is not ") + want : std::string());
  } else {
    why = std::string(": no ") + gidTypeName(wantType) + " GID configured; the best of another type";
  }
  return GidChoice{best->index, what + why};
}

Result<QpParams> qpParamsFromValues(int64_t timeout, int64_t retryCnt, int64_t tc, int64_t sl, int64_t qps,
                                    int64_t splitBytes) {
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi)
      return InvalidArgument("%s=%lld is out of range %lld..%lld", name, static_cast<long long>(v),
                             static_cast<long long>(lo), static_cast<long long>(hi));
    return OkStatus();
  };
  SNCCL_TRY(range("NCCL_IB_TIMEOUT", timeout, 1, 31));
  SNCCL_TRY(range("NCCL_IB_RETRY_CNT", retryCnt, 0, 7));
  SNCCL_TRY(range("NCCL_IB_TC", tc, 0, 255));
  SNCCL_TRY(range("NCCL_IB_SL", sl, 0, 15));
  SNCCL_TRY(range("NCCL_IB_QPS_PER_CONNECTION", qps, 1, 16));
  SNCCL_TRY(range("SNCCL_IB_SPLIT_BYTES", splitBytes, 1, int64_t(1) << 40));
  return QpParams{int(timeout), int(retryCnt), int(tc), int(sl), int(qps), size_t(splitBytes)};
}

Result<GidPolicy> gidPolicyFromValues(int64_t gidIndex, int64_t roceVersion, std::string_view family) {
  if (gidIndex < -1 || gidIndex > 65535)
    return InvalidArgument("NCCL_IB_GID_INDEX=%lld: expected -1 (choose) or a table index",
                           static_cast<long long>(gidIndex));
  if (roceVersion != 1 && roceVersion != 2)
    return InvalidArgument("NCCL_IB_ROCE_VERSION_NUM=%lld: expected 1 or 2", static_cast<long long>(roceVersion));
  if (family.empty()) family = "AF_INET";
  Result<int> fam = sock::parseFamily(family);
  if (!fam.ok() || fam.value() == AF_UNSPEC)
    return InvalidArgument("NCCL_IB_ADDR_FAMILY=%.*s: expected AF_INET or AF_INET6", int(family.size()),
                           family.data());
  return GidPolicy{int(gidIndex), int(roceVersion), fam.value()};
}

}  // namespace snccl::net::ib
