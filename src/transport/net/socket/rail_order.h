// The order of a node's rails in the socket net: interfaces whose NIC sits on a NUMA node
// this process runs on come first, then interfaces with no NUMA node (virtual ones: veth,
// bridges, loopback), then NICs of other NUMA nodes; within each class, the order
// SNCCL_SOCKET_IFNAME matched them in. Rail 0 carries every connection's control socket,
// and SNCCL_SOCKET_RAILS keeps the first rails, so on a node with more interfaces than
// rails a rank's traffic stays on the NICs nearest its memory and CPUs.
#pragma once

#include <sched.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace snccl::net::socknet {

enum class RailLocality { kLocal = 0, kUnknown = 1, kRemote = 2 };
const char* railLocalityName(RailLocality l);  // "local", "no NUMA node", "remote"

RailLocality railLocality(int nicNode, std::span<const int> localNodes);

// The stable order of rails whose NICs sit on `nicNodes` (-1: unknown), given the NUMA
// nodes this process runs on. Pure.
std::vector<size_t> localityOrder(std::span<const int> nicNodes, std::span<const int> localNodes);

// sysfs, under `sysRoot` ("/sys" outside tests):
// the NUMA node of an interface's device, -1 when it has none or it cannot be read;
int nicNumaNode(const std::string& sysRoot, const std::string& ifname);
// the NUMA nodes holding any CPU of `affinity` (empty when sysfs has no node directory).
std::vector<int> numaNodesOf(const std::string& sysRoot, const cpu_set_t& affinity);

}  // namespace snccl::net::socknet
