// What a topology source may describe. Topology files come from users and bug reports,
// and rank 0 reads one at every communicator creation, so every reader is linear in its
// input and every input is bounded: a file beyond these limits is refused with an error
// naming the limit, never loaded at whatever memory and time it would take.
// docs/topology.md lists them for users.
#pragma once

#include <cstddef>

namespace snccl::topo {

// A topology file (any format). Real exports are well under 1 MiB.
inline constexpr size_t kMaxTopoFileBytes = size_t(16) << 20;
// Elements of one XML document (hwloc exports of 1000-core machines hold ~20k).
inline constexpr size_t kMaxXmlElements = 200000;
// Nodes of one System, by kind. NCCL's own tables stop at 576 per kind.
inline constexpr size_t kMaxGpus = 512;
inline constexpr size_t kMaxNics = 512;
inline constexpr size_t kMaxCpus = 256;  // CPU (NUMA) nodes
inline constexpr size_t kMaxNodes = 8192;  // all kinds, PCIe switches and bridges included
// Levels of the PCIe tree below a CPU (real machines have fewer than 10).
inline constexpr size_t kMaxTreeDepth = 64;
// NVLink and C2C entries of one GPU, and <pcilink>s of one switch (a GPU has at most 18
// NVLinks, each peer listed once).
inline constexpr size_t kMaxNvlinksPerGpu = 64;
// Links between one pair of devices: an <nvlink count>, an NV<n> cell of nvidia-smi.
inline constexpr int kMaxLinkCount = 64;
// The largest CPU id an affinity mask or CPU list may name.
inline constexpr int kMaxCpuId = 65535;
// Notes (things a reader ignored) kept per System; the rest are counted.
inline constexpr size_t kMaxNotes = 64;

}  // namespace snccl::topo
