// Where a process's System comes from: live discovery (hwloc + NVML), a topology file
// (NCCL XML, hwloc XML or an nvidia-smi matrix, told apart by content), or a file
// completed by live discovery. systemForThisProcess() is what the communicator calls at
// creation; it honours SNCCL_TOPO_FILE / NCCL_TOPO_FILE and SNCCL_TOPO_DUMP_FILE /
// NCCL_TOPO_DUMP_FILE and logs what it found under the GRAPH subsystem.
#pragma once

#include <string>

#include "common/status.h"
#include "topology/system.h"

namespace snccl::topo {

struct DiscoveryOptions {
  bool useHwloc = true;
  bool useNvml = true;
  const char* nvmlLibrary = "libnvidia-ml.so.1";  // tests point this at a fake
};

// What discovery used, for logs and sn_topo.
struct DiscoveryReport {
  std::string hwloc;  // "hwloc 2.9.0: ..." or why not
  std::string nvml;   // "NVML driver ..., 8 GPUs" or "NVML unavailable: ..."
};

// This machine. Never fails for lack of GPUs, NVML or hwloc: without hwloc the CPUs come
// from sysfs NUMA nodes (or one CPU node), without NVML GPUs have no NVLink data.
Result<System> discoverLocal(const DiscoveryOptions& opt = {}, DiscoveryReport* report = nullptr);

enum class FileFormat { kNcclXml, kHwlocXml, kNvidiaSmi, kUnknown };
FileFormat sniffFormat(const std::string& text);
const char* formatName(FileFormat f);
// Never throws (an exhausted allocation is ncclSystemError).
Result<System> loadTopologyFile(const std::string& path);

// A file's System completed with live devices by bus id: bare <pci> GPUs/NICs of partial
// files take the live GPU/NIC data; live GPUs/NICs the file does not mention are added
// under the CPU with their NUMA node (or the first CPU). The file's structure wins.
Result<System> mergeDetected(const System& file, const System& live);

// SNCCL_TOPO_FILE (merged with discovery when it lacks GPU or NIC data) or discovery;
// then SNCCL_TOPO_DUMP_FILE if set. A topology file that is missing or refused is a WARN
// naming the path and the reason, and discovery is used instead (NCCL's behaviour).
// Never throws: exceptions of the readers become errors.
Result<System> systemForThisProcess();

// systemForThisProcess(), computed once per process (hwloc is slow to load) and reused.
const Result<System>& processSystem();

}  // namespace snccl::topo
