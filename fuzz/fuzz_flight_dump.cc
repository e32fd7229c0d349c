// sn_doctor's reader of flight recorder dumps (tools/flight_doctor.h): the files come from
// whatever a job left in a shared directory, so any bytes must parse or be refused. A
// dump that parses is diagnosed alone and beside a copy of itself as another rank: the
// verdict's ranks lie in the communicator, and nothing reads out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flight_doctor.h"
#include "fuzz_check.h"

namespace dx = snccl::doctor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dx::Dump d;
  std::string err;
  if (!dx::parseDump(text, &d, &err)) {
    FUZZ_CHECK(!err.empty(), "refused without a reason\n");
    return 0;
  }
  FUZZ_CHECK(d.rank >= 0 && d.rank < d.nranks, "accepted rank %d of %d\n", d.rank, d.nranks);
  std::vector<dx::Dump> dumps{d};
  dx::Dump other = d;
  other.rank = (d.rank + 1) % d.nranks;
  dumps.push_back(other);
  for (size_t k = 1; k <= dumps.size(); ++k) {
    const dx::Diagnosis g = dx::diagnose(std::vector<dx::Dump>(dumps.begin(), dumps.begin() + long(k)));
    FUZZ_CHECK(g.rank >= -1 && g.rank < d.nranks, "verdict names rank %d of %d\n", g.rank, d.nranks);
    FUZZ_CHECK(g.peer >= -1 && g.peer < d.nranks, "verdict names peer %d of %d\n", g.peer, d.nranks);
    FUZZ_CHECK(!g.summary.empty(), "empty summary\n");
  }
  return 0;
}
