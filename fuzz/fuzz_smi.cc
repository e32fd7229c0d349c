// `nvidia-smi topo -m` text as sn_topo and NCCL_TOPO_FILE read it: parseSmiMatrix, then
// systemFromSmi. A parsed matrix is square, with one affinity, NUMA id and NIC name per
// device and "X" on its diagonal; a synthesized System holds one GPU or NIC per device,
// satisfies system_invariants.h and writes NCCL XML that reads back.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "system_invariants.h"
#include "topology/smi.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  snccl::Result<snccl::topo::SmiMatrix> m = snccl::topo::parseSmiMatrix(text, "fuzz.txt");
  if (!m.ok()) return 0;
  size_t n = m->devices.size();
  FUZZ_CHECK(n > 0, "a matrix without devices");
  FUZZ_CHECK(m->cells.size() == n && m->cpuAffinity.size() == n && m->numa.size() == n && m->nicNames.size() == n,
             "%zu devices, %zu rows", n, m->cells.size());
  for (size_t r = 0; r < n; ++r) FUZZ_CHECK(m->cells[r].size() == n, "row %zu has %zu cells", r, m->cells[r].size());

  snccl::Result<snccl::topo::System> sys = snccl::topo::systemFromSmi(m.value());
  if (!sys.ok()) return 0;
  FUZZ_CHECK(sys->gpus().size() + sys->nics().size() == n, "%zu devices became %zu GPUs and %zu NICs", n,
             sys->gpus().size(), sys->nics().size());
  snccl::fuzz::checkSystem(sys.value());
  // Not exact: the synthesized host bridges have no NCCL XML element.
  snccl::fuzz::checkNcclRoundTrip(sys.value(), false);
  return 0;
}
