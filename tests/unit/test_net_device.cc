// The net device a connection uses (transport/net/net_device.h): the topology's NIC
// mapped to the plugin's device by name or PCI path, else channels spread over devices.
#include <gtest/gtest.h>

#include <vector>

#include "transport/net/net_device.h"

namespace snccl::net {
namespace {

Properties dev(const char* name, const char* pciPath) {
  Properties p;
  p.name = name;
  p.pciPath = pciPath;
  return p;
}

const std::vector<Properties> kFourNics = {
    dev("mlx5_0", "/sys/devices/pci0000:00/0000:00:01.0/0000:0c:00.0"),
    dev("mlx5_1", "/sys/devices/pci0000:00/0000:00:01.0/0000:0c:00.1"),
    dev("mlx5_2", "/sys/devices/pci0000:80/0000:80:01.0/0000:8a:00.0"),
    dev("mlx5_3", "/sys/devices/pci0000:80/0000:80:01.0/0000:8a:00.1"),
};

TEST(NetDevice, MatchesThePlannersNicByName) {
  NicHint hint{"", {"mlx5_2"}};
  for (int channel = 0; channel < 8; ++channel) EXPECT_EQ(pickNetDevice(kFourNics, hint, channel), 2);
  EXPECT_EQ(pickNetDevice(kFourNics, NicHint{"", {"eth9", "mlx5_3"}}, 0), 3) << "any of the NIC's port names";
}

TEST(NetDevice, MatchesThePlannersNicByBusId) {
  EXPECT_EQ(pickNetDevice(kFourNics, NicHint{"0000:0c:00.1", {}}, 5), 1);
  EXPECT_EQ(pickNetDevice(kFourNics, NicHint{"0000:8a:00.0", {"unknown0"}}, 1), 2);
  // A bus id matches a whole path component only.
  EXPECT_EQ(pickNetDevice(kFourNics, NicHint{"0000:0c:00.", {}}, 3), 3) << "a prefix is no match: fallback";
}

// A RoCE device the topology knows only by its Ethernet interface (a software device
// such as rxe, or hwloc without the RDMA device) is found through Properties::netdev.
TEST(NetDevice, MatchesARoceDeviceByItsInterface) {
  std::vector<Properties> devs = {dev("rxe0", ""), dev("rxe1", "")};
  devs[0].netdev = "eth0";
  devs[1].netdev = "eth1";
  for (int channel = 0; channel < 4; ++channel) EXPECT_EQ(pickNetDevice(devs, NicHint{"", {"eth1"}}, channel), 1);
  EXPECT_EQ(pickNetDevice(devs, NicHint{"", {"eth7"}}, 2), 0) << "no match: channel % devices";
}

TEST(NetDevice, WithoutTopologyChannelsSpreadOverDevices) {
  NicHint none;
  for (int channel = 0; channel < 9; ++channel) EXPECT_EQ(pickNetDevice(kFourNics, none, channel), channel % 4);
  // A NIC the plugin does not have (another node type, a name it reports differently).
  NicHint other{"0000:ff:00.0", {"bnxt_re0"}};
  for (int channel = 0; channel < 5; ++channel) EXPECT_EQ(pickNetDevice(kFourNics, other, channel), channel % 4);
}

TEST(NetDevice, DevicesWithoutNamesOrPathsAndNoDevices) {
  std::vector<Properties> bare(3);
  EXPECT_EQ(pickNetDevice(bare, NicHint{"0000:0c:00.0", {"mlx5_0"}}, 4), 1);
  EXPECT_EQ(pickNetDevice(std::vector<Properties>{}, NicHint{}, 7), 0);
  EXPECT_EQ(pickNetDevice(std::vector<Properties>{dev("eth0", "")}, NicHint{"", {"eth0"}}, 3), 0);
}

}  // namespace
}  // namespace snccl::net
