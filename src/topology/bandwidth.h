// Link bandwidths in GB/s, NCCL's figures (topo.h): they are what NCCL's tuner expects,
// about 80 % of the raw link rate, so snccl's cost model and NCCL's agree on a machine.
#pragma once

#include <cstdint>

#include "topology/system.h"

namespace snccl::topo::bw {

inline constexpr double kLoc = 5000.0;     // LOC_BW: same device / root complex
inline constexpr double kPciDefault = 12.0;  // PCI_BW: Gen3 x16
inline constexpr double kNetDefault = 12.0;  // NET_BW: a NIC without speed information

// width x lane rate / 80, lane rate in units of 100 Mb/s (Gen1 15 ... Gen6 480). Unknown
// speed counts as Gen3 and unknown width (0) as x16, as NCCL does.
double pci(double linkGts, int linkWidth);
// Lane rate in NCCL's units for a GT/s figure (2.5 -> 15, 8 -> 60, ...); 60 when unknown.
int pciLaneRate(double linkGts);

// One NVLink of a GPU with this compute capability x 10 (sm 0 = unknown: 20.0).
double nvlinkPerLink(int sm);
// hwloc's NVLinkBandwidth figure (MB/s) for one link of that generation; used to turn
// hwloc's per-peer sums back into link counts.
int hwlocNvlinkMBs(int sm);

// A NIC port: speed Mb/s / 8000; speed <= 0 counts as 10000 Mb/s.
double net(int64_t speedMbps);

// Between two CPU sockets, by the first CPU's architecture and model (QPI/UPI/xGMI).
double interCpu(const CpuAttrs& cpu);

// C2C (Grace <-> GPU): per-link MB/s x count / 1000.
double c2c(int bwMBs, int count);

}  // namespace snccl::topo::bw
