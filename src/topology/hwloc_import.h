// Systems from hwloc: the running machine, or an hwloc XML export (lstopo --of xml).
//
// One CPU node per NUMA node; each GPU (CUDA/NVML OS device, or NVIDIA PCI display/3D
// controller) and NIC (OpenFabrics/network OS device, or an InfiniBand-class function)
// with its PCIe ancestors: the host bridge and the switches (upstream ports; root ports and
// downstream ports collapse as in NCCL). NVSwitch PCI devices and the NVLinkBandwidth
// distance matrix (hwloc's NVML backend) give the NVLinks. Builds without hwloc return
// an error from every function here; hwlocAvailable() says which build this is.
#pragma once

#include <string>

#include "common/status.h"
#include "topology/system.h"

namespace snccl::topo {

bool hwlocAvailable();
// "hwloc 2.9.0" (the library loaded at run time), or why there is none.
std::string hwlocDescription();

// The builder is returned (not the System) so discovery can merge NVML data first.
Result<SystemBuilder> hwlocBuilderFromXml(const std::string& path);
Result<SystemBuilder> hwlocBuilderLive();

Result<System> systemFromHwlocXml(const std::string& path);

// hwloc's "GPUModel" text -> compute capability x 10 (0 when unknown); exposed for tests.
int smFromGpuModel(const std::string& model);

}  // namespace snccl::topo
