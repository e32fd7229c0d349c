// What an hwloc XML export must hold before libhwloc is given it. libhwloc 2.9 crashes
// (SIGSEGV inside hwloc_topology_load) on some files it should refuse, e.g. a root
// object with a cpuset but no complete_cpuset, so snccl checks the structure every real
// export has and refuses the rest with a line number:
//   - one root <object> of type Machine (System in hwloc 1.x exports) carrying cpuset,
//     complete_cpuset, nodeset and complete_nodeset;
//   - every object with a cpuset has a complete_cpuset and the other way round, and the
//     same for nodesets;
//   - at least one NUMANode object;
//   - cpusets and nodesets are finite and name no CPU above kMaxCpuId.
#pragma once

#include <string>

#include "common/status.h"
#include "topology/xml.h"

namespace snccl::topo {

Status checkHwlocXml(const XmlElement& root, const std::string& source);

}  // namespace snccl::topo
