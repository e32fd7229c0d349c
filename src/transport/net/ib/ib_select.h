// Pure choices of the IB net: which devices and ports NCCL_IB_HCA allows, and which GID
// of a port a RoCE connection uses. No verbs calls here; ib_device.cc feeds them what the
// device reports, and the unit tests feed them tables that are hard to find on real
// hardware (IPv6 only, a table that starts late, unreadable types).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace snccl::net::ib {

// NCCL_IB_HCA: "[^][=]dev[:port],dev[:port],..." Names are prefixes unless '=' follows
// the optional '^'; a name without a port matches every port of the device. '^' turns
// the list into an exclusion list. An empty spec allows everything. Blanks around items
// are ignored; a port must be a number 1..255; '^' or '=' elsewhere is an error.
struct HcaFilter {
  struct Entry {
    std::string name;
    int port = -1;  // -1: every port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;

  static Result<HcaFilter> parse(std::string_view spec);
  bool allows(std::string_view dev, int port) const;
};

enum class GidType : uint8_t { kUnknown, kIb, kRoceV1, kRoceV2 };
const char* gidTypeName(GidType t);
// "RoCE v2" -> kRoceV2, "IB/RoCE v1" -> kRoceV1 (sysfs gid_attrs/types).
GidType parseGidType(std::string_view sysfsText);

struct GidEntry {
  int index = 0;
  std::array<uint8_t, 16> raw{};
  GidType type = GidType::kUnknown;  // kUnknown also when its type could not be read
};

// "::ffff:10.99.0.1", "fe80::...": the GID as an IPv6 address.
std::string gidString(const std::array<uint8_t, 16>& raw);
bool gidIsZero(const std::array<uint8_t, 16>& raw);
bool gidIsLinkLocal(const std::array<uint8_t, 16>& raw);   // fe80::/10
bool gidIsV4Mapped(const std::array<uint8_t, 16>& raw);    // ::ffff:a.b.c.d

struct GidPolicy {
  int forcedIndex = -1;   // NCCL_IB_GID_INDEX; -1: choose
  int roceVersion = 2;    // NCCL_IB_ROCE_VERSION_NUM
  int family = 0;         // AF_INET or AF_INET6 (NCCL_IB_ADDR_FAMILY)
};

struct GidChoice {
  int index = -1;
  std::string reason;  // one line for the log and sn_info
};

// The GID a port uses. `table` holds the entries that could be read (not necessarily
// contiguous: a container's table may start late), `tableLen` the port's gid_tbl_len.
//  - InfiniBand: index 0 (the port's GID from the subnet manager) unless forced.
//  - Ethernet (RoCE): a forced index is used if it is in the table and configured.
//    Otherwise the best entry that is configured and not link-local, ranked by: the
//    preferred RoCE version (an entry whose type could not be read ranks after it and
//    before the other version), then the preferred family (IPv4-mapped for AF_INET),
//    then the lowest index. Whatever is not the first choice comes with a reason that
//    says why.
Result<GidChoice> chooseGid(const std::vector<GidEntry>& table, int tableLen, bool ethernet, const GidPolicy& policy);

// Validated QP parameters (NCCL_IB_TIMEOUT 1..31, NCCL_IB_RETRY_CNT 0..7, NCCL_IB_TC
// 0..255, NCCL_IB_SL 0..15, NCCL_IB_QPS_PER_CONNECTION 1..16, NCCL_IB_ROCE_VERSION_NUM
// 1..2): out-of-range values are an error naming the variable, never silently wrapped
// into the verbs' bit fields (a timeout of 32 would wrap to 0: wait forever).
struct QpParams {
  int timeout = 20;
  int retryCnt = 7;
  int tc = 0;
  int sl = 0;
  int qpsPerConn = 1;
  size_t splitBytes = 65536;
};
Result<QpParams> qpParamsFromValues(int64_t timeout, int64_t retryCnt, int64_t tc, int64_t sl, int64_t qps,
                                    int64_t splitBytes);
Result<GidPolicy> gidPolicyFromValues(int64_t gidIndex, int64_t roceVersion, std::string_view family);

}  // namespace snccl::net::ib
