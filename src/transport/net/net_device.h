// Which of a net plugin's devices a connection uses.
//
// The topology planner picks, per rank, the NIC its inter-node traffic should leave
// through (topo::Plan::rankNic: the GPU's closest NIC, or the NIC nearest to a host
// rank's NUMA node). The communicator hands that choice to the net transport as a NicHint
// (what the topology knows of the NIC: its PCI bus id and its ports' names), and the
// transport maps it to the plugin's device index by what getProperties reports: a device
// whose name (or, for RoCE, whose Ethernet interface) is one of the hint's names, or
// whose PCI path contains the hint's bus id.
// Without a hint, or when no device matches, channels spread over the devices in turn
// (device channel % ndev), so that the channels of a rank use every NIC.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "transport/net/net.h"

namespace snccl::net {

struct NicHint {
  std::string busId;               // "dddd:bb:dd.f" ("" unknown)
  std::vector<std::string> names;  // its ports' device names (mlx5_0, eth0, ...)
  bool empty() const { return busId.empty() && names.empty(); }
};

// The device of `devs` (the plugin's devices' properties, by index) that `channel` uses.
// 0 when devs is empty.
int pickNetDevice(std::span<const Properties> devs, const NicHint& hint, int channel);

// The same for a plugin, reading its devices' properties (a device whose properties
// cannot be read matches nothing).
int pickNetDevice(const Net& net, const NicHint* hint, int channel);

}  // namespace snccl::net
