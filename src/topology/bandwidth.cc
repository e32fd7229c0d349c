// NCCL's bandwidth constants (topo.h / topo.cc), in GB/s.
#include "topology/bandwidth.h"

#include <cmath>

namespace snccl::topo::bw {

int pciLaneRate(double gts) {
  // Encoding overhead makes Gen3 and later non-linear in GT/s (8 GT/s -> 60, not 48).
  struct Gen {
    double gts;
    int rate;
  };
  static constexpr Gen kGens[] = {{2.5, 15}, {5.0, 30}, {8.0, 60}, {16.0, 120}, {32.0, 240}, {64.0, 480}};
  for (const Gen& g : kGens)
    if (std::fabs(gts - g.gts) < 0.01) return g.rate;
  return 60;
}

double pci(double linkGts, int linkWidth) {
  int width = linkWidth > 0 ? linkWidth : 16;
  return width * pciLaneRate(linkGts) / 80.0;
}

double nvlinkPerLink(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm == 86) return 12.0;
  if (sm >= 70 || sm == 0) return 20.0;
  return 18.0;  // sm60 (P100, NVLink1)
}

int hwlocNvlinkMBs(int sm) {
  if (sm >= 100) return 50000;
  if (sm > 0 && sm < 70) return 20000;
  return 25000;
}

double net(int64_t speedMbps) {
  if (speedMbps <= 0) speedMbps = 10000;
  return static_cast<double>(speedMbps) / 8000.0;
}

double interCpu(const CpuAttrs& cpu) {
  const std::string& a = cpu.arch;
  if (a == "ppc64" || a == "ppc64le") return 32.0;  // POWER9
  if (a == "arm64" || a == "aarch64") return 6.0;
  if (a != "x86_64") return kLoc;  // unknown architecture: NCCL leaves LOC_BW
  if (cpu.vendor == "GenuineIntel") {
    if (cpu.familyId == 6 && cpu.modelId >= 0xCF) return 40.0;  // Emerald Rapids
    if (cpu.familyId == 6 && cpu.modelId >= 0x8F) return 22.0;  // Sapphire Rapids
    if (cpu.familyId == 6 && cpu.modelId >= 0x55) return 10.0;  // Skylake
    return 6.0;                                                 // Broadwell and older
  }
  if (cpu.vendor == "AuthenticAMD") return 16.0;
  if (cpu.vendor == "CentaurHauls" || cpu.vendor == "  Shanghai  ") {
    return cpu.familyId == 7 && cpu.modelId == 0x5B ? 9.0 : 6.0;  // Zhaoxin (Yongfeng 9)
  }
  return kLoc;
}

double c2c(int bwMBs, int count) { return static_cast<double>(bwMBs) * count / 1000.0; }

}  // namespace snccl::topo::bw
