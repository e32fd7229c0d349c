// NCCL topology XML (NCCL_TOPO_FILE) as rank 0 reads it: readNcclXml on arbitrary bytes.
// A successful read is a System within the caps (system_invariants.h) that writes back as
// NCCL XML reading back equal; a failed read names the source.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "system_invariants.h"
#include "topology/nccl_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  snccl::Result<snccl::topo::System> sys = snccl::topo::readNcclXml(text, "fuzz.xml");
  if (!sys.ok()) {
    FUZZ_CHECK(sys.status().message().starts_with("fuzz.xml"), "error without the source: %s",
               sys.status().message().c_str());
    return 0;
  }
  snccl::fuzz::checkSystem(sys.value());
  snccl::fuzz::checkNcclRoundTrip(sys.value(), true);
  return 0;
}
