// Decision tables of the selector, for the TUNING log, sn_info --model and sn_sim.
#include <cstdio>

#include "collectives/tuning/selector.h"

namespace snccl::tuning {

namespace {
constexpr size_t kSizes[] = {8,         64,        256,        1 << 10,  4 << 10,   16 << 10,  64 << 10,
                             256 << 10, 1 << 20,   4 << 20,    16 << 20, 64 << 20,  256 << 20, size_t(1) << 30};

std::string fmtUs(double us) {
  char b[32];
  if (us < 0) return "-";
  std::snprintf(b, sizeof b, us < 100 ? "%.1f" : "%.0f", us);
  return b;
}
}  // namespace

std::span<const size_t> tableSizes() { return kSizes; }

std::string sizeLabel(size_t bytes) {
  char b[32];
  if (bytes >= (size_t(1) << 30) && bytes % (size_t(1) << 30) == 0) std::snprintf(b, sizeof b, "%zuG", bytes >> 30);
  else if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) std::snprintf(b, sizeof b, "%zuM", bytes >> 20);
  else if (bytes >= 1024 && bytes % 1024 == 0) std::snprintf(b, sizeof b, "%zuK", bytes >> 10);
  else std::snprintf(b, sizeof b, "%zu", bytes);
  return b;
}

std::vector<CollKind> tunedCollectives() {
  std::vector<CollKind> out;
  for (int k = 0; k < kCollKinds; ++k) {
    int n = 0;
    for (const AlgorithmDef& a : algorithms()) n += static_cast<int>(a.coll) == k;
    if (n > 1) out.push_back(static_cast<CollKind>(k));
  }
  return out;
}

std::string describeTuner(const Tuner& t) {
  const CommShape& s = t.shape;
  const LinkParams& in = t.params.of(s.intra);
  const LinkParams& out = t.params.of(s.inter);
  std::string nodes = s.uniform() ? format("%d per node", s.minPerNode)
                                  : format("%d-%d per node", s.minPerNode, s.maxPerNode);
  std::string line = format("model %s: %d ranks, %d node%s (%s), intra %s %.1f us %.1f GB/s", t.params.name, s.nranks,
                            s.nnodes, s.nnodes == 1 ? "" : "s", nodes.c_str(), linkClassName(s.intra), in.latUs,
                            in.bwGBps);
  if (s.nnodes > 1) line += format(", inter %s %.1f us %.1f GB/s", linkClassName(s.inter), out.latUs, out.bwGBps);
  if (s.oversub > 1.0)
    line += format(", %.2g ranks per CPU (+%.1f us per hop, bandwidth / %.2g)", s.oversub, t.params.switchUs * s.oversub,
                   s.oversub);
  if (singleCopyApplies(s, ~size_t(0)))
    line += format(", single copy from %s B (SNCCL_SINGLE_COPY_BYTES)", sizeLabel(s.singleCopyBytes).c_str());
  const LinkParams& lim = t.params.of(s.worst());
  line += format(", slot %zu B; protocol Simple; channels %d-%d, %d side by side on %s", t.slotBytes,
                 t.over.minChannels, t.over.maxChannels, std::min(t.over.maxChannels, std::max(1, lim.overlapChannels)),
                 linkClassName(s.worst()));
  if (lim.chanBwGBps > 0) line += format(" (%.3g GB/s each)", lim.chanBwGBps);
  return line;
}

std::vector<std::string> decisionTable(const Tuner& t, CollKind coll) {
  std::vector<const AlgorithmDef*> cols;
  for (const AlgorithmDef& a : algorithms())
    if (a.coll == coll && hasFormula(a.name, coll) && (a.maxRanks == 0 || t.shape.nranks <= a.maxRanks) &&
        (!a.readsPeers || singleCopyApplies(t.shape, ~size_t(0))))
      cols.push_back(&a);
  std::vector<std::string> lines;
  std::string head = format("%-13s %6s", collName(coll), "bytes");
  for (const AlgorithmDef* a : cols) head += format(" %9s", a->name);
  head += "  pick (us predicted; chunk[; channels])";
  lines.push_back(head);
  for (size_t bytes : kSizes) {
    std::string row = format("%-13s %6s", "", sizeLabel(bytes).c_str());
    for (const AlgorithmDef* a : cols) {
      row += format(" %9s", fmtUs(bestFor(t, a->name, coll, bytes).us).c_str());
    }
    const Decision d = select(t, coll, bytes);
    row += format("  %s; %s", d.algo ? d.algo->name : "-", sizeLabel(d.chunkBytes).c_str());
    if (d.channels > 1) row += format("; %d channels", d.channels);
    if (d.forced) row += " (SNCCL_ALGO)";
    lines.push_back(row);
  }
  return lines;
}

}  // namespace snccl::tuning
