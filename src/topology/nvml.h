// NVML, loaded with dlopen at run time (no NVML header or library is needed to build):
// GPUs by PCI bus id with their NVML index, compute capability, NVLink peers and link
// counts (NVSwitches included), and the pairs NVML refuses P2P between.
//
// Never fails: a host without the driver gets available = false and a reason, which
// discovery logs at INFO. Every per-link query that fails is recorded in `notes` instead
// of silently dropping the link (a GPU that loses its NVLinks this way loses most of its
// bandwidth, and the log is the only place that shows why).
#pragma once

#include <string>
#include <vector>

#include "topology/system.h"

namespace snccl::topo {

struct NvmlGpu {
  std::string busId;  // normalized
  int index = -1;
  int sm = 0;
  std::string name;
  std::vector<NvLinkSpec> nvlinks;        // summed per target, tclass from the remote type
  std::vector<std::string> p2pBlocked;    // peers whose P2P read or write status is not OK
};

struct NvmlProbe {
  bool available = false;
  std::string message;  // why not available, or the driver version
  std::vector<NvmlGpu> gpus;
  std::vector<std::string> notes;
};

// `library` is the soname to dlopen; tests pass the path of a fake NVML.
NvmlProbe probeNvml(const char* library = "libnvidia-ml.so.1");

// Folds the probe into a builder: GPUs found by bus id get their NVML data; GPUs hwloc did
// not see are added under the first CPU.
void mergeNvml(const NvmlProbe& probe, SystemBuilder* b);

}  // namespace snccl::topo
