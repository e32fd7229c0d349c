// sn_top's reader of the traffic counter files ranks leave in SNCCL_STATS_DIR
// (tools/traffic_stats.h): any bytes parse or are refused; what parses has one counter
// set per rank and renders as a table and a picture without reading out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "traffic_stats.h"
#include "transport/rail_tally.h"

namespace tr = snccl::traffic;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tr::RankCounters r;
  std::string err;
  if (!tr::parseCounters(data, size, &r, &err)) {
    FUZZ_CHECK(!err.empty(), "refused without a reason\n");
    return 0;
  }
  FUZZ_CHECK(r.rank >= 0 && r.rank < r.nranks, "accepted rank %d of %d\n", r.rank, r.nranks);
  FUZZ_CHECK(r.peers.size() == size_t(r.nranks), "%zu counter sets for %d ranks\n", r.peers.size(), r.nranks);
  for (const tr::PeerCounters& p : r.peers) {
    FUZZ_CHECK(p.rails.size() <= size_t(snccl::kRailSlots), "%zu rails\n", p.rails.size());
    for (const tr::RailCount& rc : p.rails)
      FUZZ_CHECK(!rc.name.empty() && rc.name.size() < sizeof(snccl::RailCounters::name), "rail name of %zu bytes\n",
                 rc.name.size());
  }
  if (r.nranks > 256) return 0;  // rendering is quadratic in ranks: small ones exercise it
  const std::vector<tr::RankCounters> one{r};
  FUZZ_CHECK(!tr::renderTable(one, &one, 1.0).empty(), "empty table\n");
  const std::string svg = tr::renderSvg(one);
  FUZZ_CHECK(svg.rfind("<svg", 0) == 0 && svg.find("</svg>") != std::string::npos, "not an SVG\n");
  return 0;
}
