// The IB net's pure choices (transport/net/ib/ib_select.h): the NCCL_IB_HCA filter, the
// RoCE GID choice over tables that real hardware rarely shows (IPv6 only, a table that
// starts late, types a container cannot read) and the range checks of the QP variables.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/net/ib/ib_select.h"

namespace snccl::net::ib {
namespace {

using Raw = std::array<uint8_t, 16>;

Raw raw(const char* ipv6) {
  Raw r{};
  EXPECT_EQ(inet_pton(AF_INET6, ipv6, r.data()), 1) << ipv6;
  return r;
}

GidEntry gid(int index, const char* ipv6, GidType type) { return GidEntry{index, raw(ipv6), type}; }

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

// ---- NCCL_IB_HCA ------------------------------------------------------------------------

HcaFilter parseOk(const char* spec) {
  Result<HcaFilter> f = HcaFilter::parse(spec);
  EXPECT_TRUE(f.ok()) << spec << ": " << f.status().message();
  return f.ok() ? f.value() : HcaFilter{};
}

TEST(IbHcaFilter, EmptySpecAllowsEveryDeviceAndPort) {
  HcaFilter f = parseOk("");
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  EXPECT_TRUE(f.entries.empty());
  EXPECT_TRUE(f.allows("mlx5_0", 1));
  EXPECT_TRUE(f.allows("rxe0", 2));
}

TEST(IbHcaFilter, ListOfDevicesWithAndWithoutPorts) {
  HcaFilter f = parseOk("mlx5_0:1,mlx5_1");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].name, "mlx5_0");
  EXPECT_EQ(f.entries[0].port, 1);
  EXPECT_EQ(f.entries[1].name, "mlx5_1");
  EXPECT_EQ(f.entries[1].port, -1) << "no port: every port";
  EXPECT_TRUE(f.allows("mlx5_0", 1));
  EXPECT_FALSE(f.allows("mlx5_0", 2)) << "only port 1 of mlx5_0 is listed";
  EXPECT_TRUE(f.allows("mlx5_1", 1));
  EXPECT_TRUE(f.allows("mlx5_1", 2));
  EXPECT_FALSE(f.allows("mlx5_2", 1));
  EXPECT_FALSE(f.allows("rxe0", 1));
}

TEST(IbHcaFilter, NamesArePrefixesUnlessExact) {
  HcaFilter prefix = parseOk("mlx5_1");
  EXPECT_TRUE(prefix.allows("mlx5_1", 1));
  EXPECT_TRUE(prefix.allows("mlx5_10", 1)) << "a prefix, as in NCCL";
  EXPECT_FALSE(prefix.allows("mlx5_", 1)) << "the device name must be at least as long as the entry";
  EXPECT_FALSE(prefix.allows("mlx4_1", 1));
  EXPECT_TRUE(parseOk("mlx").allows("mlx5_3", 4));

  HcaFilter exact = parseOk("=mlx5_1");
  EXPECT_TRUE(exact.exact);
  EXPECT_FALSE(exact.exclude);
  EXPECT_TRUE(exact.allows("mlx5_1", 1));
  EXPECT_TRUE(exact.allows("mlx5_1", 2));
  EXPECT_FALSE(exact.allows("mlx5_10", 1));
  EXPECT_FALSE(exact.allows("mlx5_", 1));
}

TEST(IbHcaFilter, CaretExcludesTheListedDevices) {
  HcaFilter f = parseOk("^mlx5_0");
  EXPECT_TRUE(f.exclude);
  EXPECT_FALSE(f.exact);
  EXPECT_FALSE(f.allows("mlx5_0", 1));
  EXPECT_FALSE(f.allows("mlx5_0", 2));
  EXPECT_FALSE(f.allows("mlx5_07", 1)) << "exclusion by prefix too";
  EXPECT_TRUE(f.allows("mlx5_1", 1));
  EXPECT_TRUE(f.allows("rxe0", 1));
}

TEST(IbHcaFilter, ExactExclusionOfOnePort) {
  HcaFilter f = parseOk("^=mlx5_1:2");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.exact);
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(f.entries[0].port, 2);
  EXPECT_FALSE(f.allows("mlx5_1", 2));
  EXPECT_TRUE(f.allows("mlx5_1", 1)) << "only port 2 is excluded";
  EXPECT_TRUE(f.allows("mlx5_10", 2)) << "exact: mlx5_10 is another device";
  EXPECT_TRUE(f.allows("mlx5_0", 2));
}

TEST(IbHcaFilter, EmptyItemsAreSkipped) {
  HcaFilter f = parseOk(",mlx5_0,,mlx5_1:2,");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].name, "mlx5_0");
  EXPECT_EQ(f.entries[1].name, "mlx5_1");
  EXPECT_EQ(f.entries[1].port, 2);
  // Nothing listed is the same as no filter, with or without '^'.
  EXPECT_TRUE(parseOk(",,").allows("mlx5_0", 1));
  HcaFilter caretOnly = parseOk("^");
  EXPECT_TRUE(caretOnly.exclude);
  EXPECT_TRUE(caretOnly.allows("mlx5_0", 1));
}

TEST(IbHcaFilter, PortRange) {
  EXPECT_EQ(parseOk("mlx5_0:255").entries.at(0).port, 255);
  EXPECT_EQ(parseOk("mlx5_0:1").entries.at(0).port, 1);
}

TEST(IbHcaFilter, BadPortsAreErrorsNamingTheItem) {
  for (const char* spec : {"mlx5_0:x", "mlx5_0:0", "mlx5_0:", "mlx5_0:256", "mlx5_0:-1", "mlx5_0:1x",
                           "mlx5_0:1:2", "mlx5_1,mlx5_0:x", "^=mlx5_0:0"}) {
    Result<HcaFilter> f = HcaFilter::parse(spec);
    ASSERT_FALSE(f.ok()) << spec;
    EXPECT_EQ(f.status().code(), ncclInvalidArgument) << spec;
    const std::string& m = f.status().message();
    EXPECT_TRUE(contains(m, "NCCL_IB_HCA")) << m;
    EXPECT_TRUE(contains(m, "bad port number")) << m;
    EXPECT_TRUE(contains(m, "'mlx5_0:")) << "the item is quoted: " << m;
  }
}

TEST(IbHcaFilter, AnItemWithoutADeviceNameIsAnError) {
  Result<HcaFilter> f = HcaFilter::parse("mlx5_0,:1");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ncclInvalidArgument);
  EXPECT_TRUE(contains(f.status().message(), "':1' names no device")) << f.status().message();
}

// ---- GID helpers --------------------------------------------------------------------------

TEST(IbGid, ParseSysfsType) {
  EXPECT_EQ(parseGidType("RoCE v2"), GidType::kRoceV2);
  EXPECT_EQ(parseGidType("IB/RoCE v1"), GidType::kRoceV1);
  EXPECT_EQ(parseGidType("IB"), GidType::kIb);
  EXPECT_EQ(parseGidType(""), GidType::kUnknown);
  EXPECT_EQ(parseGidType("iWARP"), GidType::kUnknown);
  EXPECT_STREQ(gidTypeName(GidType::kRoceV2), "RoCE v2");
  EXPECT_STREQ(gidTypeName(GidType::kRoceV1), "RoCE v1");
  EXPECT_STREQ(gidTypeName(GidType::kIb), "IB");
  EXPECT_STREQ(gidTypeName(GidType::kUnknown), "type unknown");
}

TEST(IbGid, StringsAndClasses) {
  EXPECT_EQ(gidString(raw("fe80::1")), "fe80::1");
  EXPECT_EQ(gidString(raw("::ffff:10.0.0.1")), "::ffff:10.0.0.1");
  EXPECT_EQ(gidString(raw("2001:db8::5")), "2001:db8::5");
  EXPECT_EQ(gidString(Raw{}), "::");

  EXPECT_TRUE(gidIsZero(Raw{}));
  EXPECT_FALSE(gidIsZero(raw("::1")));

  EXPECT_TRUE(gidIsLinkLocal(raw("fe80::1")));
  EXPECT_TRUE(gidIsLinkLocal(raw("febf::1"))) << "fe80::/10 ends at febf";
  EXPECT_FALSE(gidIsLinkLocal(raw("fec0::1")));
  EXPECT_FALSE(gidIsLinkLocal(raw("fe00::1")));
  EXPECT_FALSE(gidIsLinkLocal(raw("::ffff:169.254.0.1"))) << "an IPv4 link-local address is IPv4-mapped";

  EXPECT_TRUE(gidIsV4Mapped(raw("::ffff:10.0.0.1")));
  EXPECT_FALSE(gidIsV4Mapped(raw("::10.0.0.1"))) << "IPv4-compatible is not IPv4-mapped";
  EXPECT_FALSE(gidIsV4Mapped(raw("::fffe:10.0.0.1")));
  EXPECT_FALSE(gidIsV4Mapped(raw("1::ffff:10.0.0.1")));
  EXPECT_FALSE(gidIsV4Mapped(raw("2001:db8::5")));
}

// ---- chooseGid ----------------------------------------------------------------------------

// A ConnectX port with one IPv4 and one global IPv6 address: each address appears once
// per RoCE version, v1 first.
std::vector<GidEntry> dualStackTable() {
  return {
      gid(0, "fe80::1", GidType::kRoceV1),         gid(1, "fe80::1", GidType::kRoceV2),
      gid(2, "::ffff:10.1.2.3", GidType::kRoceV1), gid(3, "::ffff:10.1.2.3", GidType::kRoceV2),
      gid(4, "2001:db8::5", GidType::kRoceV1),     gid(5, "2001:db8::5", GidType::kRoceV2),
  };
}

GidChoice chooseOk(const std::vector<GidEntry>& table, int tableLen, bool ethernet, const GidPolicy& policy) {
  Result<GidChoice> c = chooseGid(table, tableLen, ethernet, policy);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return c.ok() ? c.value() : GidChoice{};
}

TEST(IbChooseGid, RoceV2Ipv4MappedByDefault) {
  GidChoice c = chooseOk(dualStackTable(), 16, true, GidPolicy{});
  EXPECT_EQ(c.index, 3);
  EXPECT_TRUE(contains(c.reason, "index 3 (::ffff:10.1.2.3, RoCE v2)")) << c.reason;
  EXPECT_TRUE(contains(c.reason, "the first RoCE v2 IPv4-mapped GID")) << c.reason;
}

TEST(IbChooseGid, Ipv4MappedPreferredOverAnEarlierIpv6) {
  std::vector<GidEntry> t = {gid(0, "fe80::1", GidType::kRoceV2), gid(1, "2001:db8::5", GidType::kRoceV2),
                             gid(2, "::ffff:10.1.2.3", GidType::kRoceV2)};
  EXPECT_EQ(chooseOk(t, 4, true, GidPolicy{}).index, 2);
}

TEST(IbChooseGid, RoceV2PreferredOverAnEarlierV1) {
  std::vector<GidEntry> t = {gid(0, "::ffff:10.1.2.3", GidType::kRoceV1),
                             gid(1, "::ffff:10.1.2.3", GidType::kRoceV2)};
  EXPECT_EQ(chooseOk(t, 2, true, GidPolicy{}).index, 1);
  // The version outranks the family: a v2 IPv6 GID beats a v1 IPv4-mapped one.
  std::vector<GidEntry> u = {gid(0, "::ffff:10.1.2.3", GidType::kRoceV1), gid(1, "2001:db8::5", GidType::kRoceV2)};
  GidChoice c = chooseOk(u, 2, true, GidPolicy{});
  EXPECT_EQ(c.index, 1);
  EXPECT_TRUE(contains(c.reason, "other family")) << c.reason;
}

TEST(IbChooseGid, AmongEqualsTheLowestIndex) {
  std::vector<GidEntry> t = {gid(2, "::ffff:10.1.2.3", GidType::kRoceV2), gid(3, "::ffff:10.9.9.9", GidType::kRoceV2)};
  EXPECT_EQ(chooseOk(t, 4, true, GidPolicy{}).index, 2);
}

TEST(IbChooseGid, RoceVersionOnePolicy) {
  GidPolicy v1;
  v1.roceVersion = 1;
  GidChoice c = chooseOk(dualStackTable(), 16, true, v1);
  EXPECT_EQ(c.index, 2);
  EXPECT_TRUE(contains(c.reason, "the first RoCE v1 IPv4-mapped GID")) << c.reason;
}

TEST(IbChooseGid, LinkLocalIsNeverChosen) {
  // Only link-local GIDs of the wanted version; a global one of the other version wins.
  std::vector<GidEntry> t = {gid(0, "fe80::1", GidType::kRoceV2), gid(1, "febf::2", GidType::kRoceV2),
                             gid(2, "::ffff:10.1.2.3", GidType::kRoceV1)};
  GidChoice c = chooseOk(t, 4, true, GidPolicy{});
  EXPECT_EQ(c.index, 2);
  EXPECT_TRUE(contains(c.reason, "no RoCE v2 GID configured; the best of another type")) << c.reason;
}

TEST(IbChooseGid, Ipv6OnlyFallsBackToTheOtherFamily) {
  std::vector<GidEntry> t = {gid(0, "fe80::1", GidType::kRoceV1), gid(1, "fe80::1", GidType::kRoceV2),
                             gid(2, "2001:db8::5", GidType::kRoceV1), gid(3, "2001:db8::5", GidType::kRoceV2)};
  GidChoice c = chooseOk(t, 16, true, GidPolicy{});
  EXPECT_EQ(c.index, 3);
  EXPECT_TRUE(contains(c.reason, "2001:db8::5")) << c.reason;
  EXPECT_TRUE(contains(c.reason, "no RoCE v2 IPv4-mapped GID")) << c.reason;
  EXPECT_TRUE(contains(c.reason, "other family")) << c.reason;
}

TEST(IbChooseGid, Inet6Policy) {
  GidPolicy v6;
  v6.family = AF_INET6;
  GidChoice c = chooseOk(dualStackTable(), 16, true, v6);
  EXPECT_EQ(c.index, 5);
  EXPECT_TRUE(contains(c.reason, "the first RoCE v2 IPv6 GID")) << c.reason;

  // IPv4 only: the IPv4-mapped v2 GID, and the reason says the family was not found.
  std::vector<GidEntry> v4only = {gid(0, "fe80::1", GidType::kRoceV2), gid(1, "::ffff:10.1.2.3", GidType::kRoceV1),
                                  gid(2, "::ffff:10.1.2.3", GidType::kRoceV2)};
  GidChoice d = chooseOk(v4only, 4, true, v6);
  EXPECT_EQ(d.index, 2);
  EXPECT_TRUE(contains(d.reason, "no RoCE v2 IPv6 GID")) << d.reason;
  EXPECT_TRUE(contains(d.reason, "other family")) << d.reason;
}

TEST(IbChooseGid, TableThatStartsLate) {
  // A container that maps only part of the port's table: entries 4..7 of 8.
  std::vector<GidEntry> t = {gid(4, "fe80::1", GidType::kRoceV1), gid(5, "fe80::1", GidType::kRoceV2),
                             gid(6, "::ffff:10.1.2.3", GidType::kRoceV1), gid(7, "::ffff:10.1.2.3", GidType::kRoceV2)};
  GidChoice c = chooseOk(t, 8, true, GidPolicy{});
  EXPECT_EQ(c.index, 7);
  EXPECT_TRUE(contains(c.reason, "index 7 ")) << c.reason;
}

TEST(IbChooseGid, EntriesBeyondTheTableAndZeroGidsAreIgnored) {
  std::vector<GidEntry> t = {gid(0, "::", GidType::kRoceV2), gid(1, "::ffff:10.1.2.3", GidType::kRoceV1),
                             gid(8, "::ffff:10.1.2.3", GidType::kRoceV2)};
  EXPECT_EQ(chooseOk(t, 8, true, GidPolicy{}).index, 1) << "index 8 is outside gid_tbl_len 8";
}

TEST(IbChooseGid, UnreadableTypesAreUsableWithAReason) {
  // No type could be read (a container without the gid_attrs files): the family decides.
  std::vector<GidEntry> t = {gid(0, "fe80::1", GidType::kUnknown), gid(1, "2001:db8::5", GidType::kUnknown),
                             gid(2, "::ffff:10.1.2.3", GidType::kUnknown)};
  GidChoice c = chooseOk(t, 4, true, GidPolicy{});
  EXPECT_EQ(c.index, 2);
  EXPECT_TRUE(contains(c.reason, "type unknown")) << c.reason;
  EXPECT_TRUE(contains(c.reason, "could not be read")) << c.reason;
  EXPECT_TRUE(contains(c.reason, "container")) << c.reason;
}

TEST(IbChooseGid, UnknownTypeRanksBelowAKnownV2AndAboveAKnownV1) {
  std::vector<GidEntry> t = {gid(1, "::ffff:10.1.2.3", GidType::kUnknown), gid(3, "::ffff:10.1.2.3", GidType::kRoceV2)};
  EXPECT_EQ(chooseOk(t, 4, true, GidPolicy{}).index, 3);
  // A known v2 of the other family still beats an unknown of the wanted family.
  std::vector<GidEntry> u = {gid(1, "::ffff:10.1.2.3", GidType::kUnknown), gid(3, "2001:db8::5", GidType::kRoceV2)};
  EXPECT_EQ(chooseOk(u, 4, true, GidPolicy{}).index, 3);
  // An unknown type may be the wanted version; a known v1 is not.
  std::vector<GidEntry> v = {gid(1, "::ffff:10.1.2.3", GidType::kRoceV1), gid(2, "::ffff:10.1.2.3", GidType::kUnknown)};
  GidChoice c = chooseOk(v, 4, true, GidPolicy{});
  EXPECT_EQ(c.index, 2);
  EXPECT_TRUE(contains(c.reason, "could not be read")) << c.reason;
}

TEST(IbChooseGid, OnlyLinkLocalIsAnError) {
  std::vector<GidEntry> t = {gid(0, "fe80::1", GidType::kRoceV1), gid(1, "fe80::1", GidType::kRoceV2),
                             gid(2, "::", GidType::kRoceV2)};
  Result<GidChoice> c = chooseGid(t, 16, true, GidPolicy{});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ncclSystemError);
  const std::string& m = c.status().message();
  EXPECT_TRUE(contains(m, "no usable RoCE GID")) << m;
  EXPECT_TRUE(contains(m, "2 link-local")) << m;
  EXPECT_TRUE(contains(m, "NCCL_IB_GID_INDEX")) << "names the way out: " << m;

  Result<GidChoice> empty = chooseGid({}, 16, true, GidPolicy{});
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(contains(empty.status().message(), "0 entries read of 16")) << empty.status().message();
}

TEST(IbChooseGid, ForcedIndex) {
  GidPolicy forced;
  forced.forcedIndex = 2;
  GidChoice c = chooseOk(dualStackTable(), 16, true, forced);
  EXPECT_EQ(c.index, 2) << "a v1 GID, because the user asked for it";
  EXPECT_TRUE(contains(c.reason, "from NCCL_IB_GID_INDEX")) << c.reason;
  EXPECT_TRUE(contains(c.reason, "RoCE v1")) << c.reason;

  forced.forcedIndex = 0;
  EXPECT_EQ(chooseOk(dualStackTable(), 16, true, forced).index, 0) << "forced link-local is the user's choice";
}

TEST(IbChooseGid, ForcedIndexMustBeAConfiguredEntry) {
  GidPolicy forced;
  std::vector<GidEntry> t = dualStackTable();
  t.push_back(gid(7, "::", GidType::kRoceV2));
  for (int index : {6, 7, 8, 100}) {
    forced.forcedIndex = index;
    Result<GidChoice> c = chooseGid(t, 8, true, forced);
    ASSERT_FALSE(c.ok()) << index;
    EXPECT_EQ(c.status().code(), ncclInvalidArgument);
    const std::string expect = "NCCL_IB_GID_INDEX=" + std::to_string(index) + ":";
    EXPECT_TRUE(contains(c.status().message(), expect.c_str())) << c.status().message();
    EXPECT_TRUE(contains(c.status().message(), "table of 8 entries")) << c.status().message();
  }
  // In the table's read entries but at or beyond gid_tbl_len.
  forced.forcedIndex = 5;
  EXPECT_FALSE(chooseGid(t, 5, true, forced).ok());
}

TEST(IbChooseGid, InfinibandUsesIndexZero) {
  // An InfiniBand port's GIDs are subnet prefix + port GUID: link-local by form, and right.
  std::vector<GidEntry> t = {gid(0, "fe80::248a:703:49:d4f0", GidType::kIb),
                             gid(1, "::ffff:10.1.2.3", GidType::kRoceV2)};
  GidChoice c = chooseOk(t, 128, false, GidPolicy{});
  EXPECT_EQ(c.index, 0);
  EXPECT_TRUE(contains(c.reason, "InfiniBand")) << c.reason;
  EXPECT_TRUE(contains(c.reason, "fe80::248a:703:49:d4f0")) << c.reason;

  GidPolicy forced;
  forced.forcedIndex = 1;
  EXPECT_EQ(chooseOk(t, 128, false, forced).index, 1) << "forcing applies to InfiniBand too";

  Result<GidChoice> none = chooseGid({gid(1, "fe80::1", GidType::kIb)}, 128, false, GidPolicy{});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(contains(none.status().message(), "index 0")) << none.status().message();
}

// ---- Variables ------------------------------------------------------------------------------

TEST(IbParams, QpParamsInRange) {
  Result<QpParams> p = qpParamsFromValues(20, 7, 0, 0, 1, 65536);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->timeout, 20);
  EXPECT_EQ(p->retryCnt, 7);
  EXPECT_EQ(p->tc, 0);
  EXPECT_EQ(p->sl, 0);
  EXPECT_EQ(p->qpsPerConn, 1);
  EXPECT_EQ(p->splitBytes, 65536u);

  Result<QpParams> lo = qpParamsFromValues(1, 0, 0, 0, 1, 1);
  ASSERT_TRUE(lo.ok()) << lo.status().message();
  Result<QpParams> hi = qpParamsFromValues(31, 7, 255, 15, 16, int64_t(1) << 40);
  ASSERT_TRUE(hi.ok()) << hi.status().message();
  EXPECT_EQ(hi->timeout, 31);
  EXPECT_EQ(hi->tc, 255);
  EXPECT_EQ(hi->sl, 15);
  EXPECT_EQ(hi->qpsPerConn, 16);
  EXPECT_EQ(hi->splitBytes, size_t(1) << 40);
}

struct BadQp {
  int64_t timeout, retry, tc, sl, qps, split;
  const char* expect;
};

TEST(IbParams, QpParamsOutOfRangeNameTheVariable) {
  const BadQp cases[] = {
      {0, 7, 0, 0, 1, 65536, "NCCL_IB_TIMEOUT=0 is out of range 1..31"},
      {32, 7, 0, 0, 1, 65536, "NCCL_IB_TIMEOUT=32 is out of range 1..31"},
      {int64_t(1) << 32, 7, 0, 0, 1, 65536, "NCCL_IB_TIMEOUT=4294967296"},
      {20, 8, 0, 0, 1, 65536, "NCCL_IB_RETRY_CNT=8 is out of range 0..7"},
      {20, -1, 0, 0, 1, 65536, "NCCL_IB_RETRY_CNT=-1"},
      {20, 7, 256, 0, 1, 65536, "NCCL_IB_TC=256 is out of range 0..255"},
      {20, 7, -1, 0, 1, 65536, "NCCL_IB_TC=-1"},
      {20, 7, 0, 16, 1, 65536, "NCCL_IB_SL=16 is out of range 0..15"},
      {20, 7, 0, 0, 0, 65536, "NCCL_IB_QPS_PER_CONNECTION=0 is out of range 1..16"},
      {20, 7, 0, 0, 17, 65536, "NCCL_IB_QPS_PER_CONNECTION=17"},
      {20, 7, 0, 0, 1, 0, "SNCCL_IB_SPLIT_BYTES=0"},
      {20, 7, 0, 0, 1, (int64_t(1) << 40) + 1, "SNCCL_IB_SPLIT_BYTES=1099511627777"},
      // The first bad variable is the one named.
      {0, 8, 0, 0, 1, 65536, "NCCL_IB_TIMEOUT=0"},
  };
  for (const BadQp& b : cases) {
    Result<QpParams> p = qpParamsFromValues(b.timeout, b.retry, b.tc, b.sl, b.qps, b.split);
    ASSERT_FALSE(p.ok()) << b.expect;
    EXPECT_EQ(p.status().code(), ncclInvalidArgument) << b.expect;
    EXPECT_TRUE(contains(p.status().message(), b.expect)) << p.status().message();
  }
}

TEST(IbParams, GidPolicyFromValues) {
  Result<GidPolicy> d = gidPolicyFromValues(-1, 2, "AF_INET");
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ(d->forcedIndex, -1);
  EXPECT_EQ(d->roceVersion, 2);
  EXPECT_EQ(d->family, AF_INET);

  Result<GidPolicy> v6 = gidPolicyFromValues(3, 1, "af_inet6");
  ASSERT_TRUE(v6.ok()) << v6.status().message();
  EXPECT_EQ(v6->forcedIndex, 3);
  EXPECT_EQ(v6->roceVersion, 1);
  EXPECT_EQ(v6->family, AF_INET6);

  EXPECT_TRUE(gidPolicyFromValues(65535, 2, "AF_INET").ok());
}

TEST(IbParams, GidPolicyErrorsNameTheVariable) {
  struct Bad {
    int64_t index, version;
    const char* family;
    const char* expect;
  };
  const Bad cases[] = {
      {-2, 2, "AF_INET", "NCCL_IB_GID_INDEX=-2"},
      {65536, 2, "AF_INET", "NCCL_IB_GID_INDEX=65536"},
      {-1, 0, "AF_INET", "NCCL_IB_ROCE_VERSION_NUM=0: expected 1 or 2"},
      {-1, 3, "AF_INET", "NCCL_IB_ROCE_VERSION_NUM=3: expected 1 or 2"},
      {-1, 2, "AF_UNIX", "NCCL_IB_ADDR_FAMILY=AF_UNIX: expected AF_INET or AF_INET6"},
  };
  // Empty means no preference given: IPv4, as when the variable is unset.
  Result<GidPolicy> empty = gidPolicyFromValues(-1, 2, "");
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_EQ(empty.value().family, AF_INET);
  for (const Bad& b : cases) {
    Result<GidPolicy> p = gidPolicyFromValues(b.index, b.version, b.family);
    ASSERT_FALSE(p.ok()) << b.expect;
    EXPECT_EQ(p.status().code(), ncclInvalidArgument) << b.expect;
    EXPECT_TRUE(contains(p.status().message(), b.expect)) << p.status().message();
  }
}

// Blanks around items are ignored; ports are plain numbers; '^' and '=' only lead.
TEST(HcaFilterStrict, BlanksSignsAndMisplacedPrefixes) {
  Result<HcaFilter> f = HcaFilter::parse(" mlx5_0 : 1 , mlx5_1");
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_TRUE(f.value().allows("mlx5_0", 1));
  EXPECT_FALSE(f.value().allows("mlx5_0", 2));
  EXPECT_TRUE(f.value().allows("mlx5_1", 2));
  for (const char* bad : {"mlx5_0:+1", "mlx5_0:1x", "=^mlx5_0", "mlx5_0,^mlx5_1", "mlx5_0,=mlx5_1"}) {
    Result<HcaFilter> b = HcaFilter::parse(bad);
    EXPECT_FALSE(b.ok()) << bad;
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), ncclInvalidArgument) << bad;
    }
  }
}

// Equal candidates: the lowest index wins, whatever order the table was read in.
TEST(ChooseGidTie, LowestIndexWinsOverTableOrder) {
  GidEntry a;
  a.index = 5;
  a.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 5};
  a.type = GidType::kRoceV2;
  GidEntry b = a;
  b.index = 3;
  b.raw[15] = 3;
  Result<GidChoice> c = chooseGid({a, b}, 8, true, GidPolicy{-1, 2, AF_INET});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value().index, 3);
}

}  // namespace
}  // namespace snccl::net::ib
