// NCCL topology XML (<system version="1">, the format of NCCL_TOPO_FILE and
// NCCL_TOPO_DUMP_FILE) to and from a System.
//
// Reading tolerates what real files contain: comments and prologs, files with only busid
// attributes, partial cloud files whose GPUs and NICs are bare <pci> elements (they become
// GPU/NIC nodes without <gpu>/<nic> data, to be completed by mergeDetected), <nic> directly
// under <cpu>, any attribute order, empty link_speed, link_width="0", latency "0" or
// "0.000000", the NVSwitch sentinel target and virtual switch bus ids (ffff:ff:01.0).
// Anything malformed is an error "<file>:<line>: <reason>".
//
// Writing emits NCCL's element and attribute order; host bridges (which NCCL's format has
// no element for) are left out and their children attached to the CPU.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "topology/system.h"

namespace snccl::topo {

Result<System> readNcclXml(std::string_view text, const std::string& source);
Result<System> readNcclXmlFile(const std::string& path);

std::string writeNcclXml(const System& sys);
Status writeNcclXmlFile(const System& sys, const std::string& path);

}  // namespace snccl::topo
