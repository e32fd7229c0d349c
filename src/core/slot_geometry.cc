#include "core/slot_geometry.h"

#include "transport/connection.h"  // kMaxSteps

namespace snccl {

Result<SlotGeometry> slotGeometry(bool spansNodes, const net::SlotDefaults& netDefaults) {
  auto pick = [spansNodes](params::Id net, params::Id node) {
    return spansNodes && (params::isSet(net) || !params::isSet(node)) ? net : node;
  };
  SlotGeometry g;
  g.stepsFrom = pick(params::Id::NetSteps, params::Id::Steps);
  g.buffFrom = pick(params::Id::NetBuffSize, params::Id::BuffSize);
  g.stepsFromNet = g.stepsFrom == params::Id::NetSteps && !params::isSet(g.stepsFrom) && netDefaults.steps != 0;
  g.buffFromNet = g.buffFrom == params::Id::NetBuffSize && !params::isSet(g.buffFrom) && netDefaults.buffBytes != 0;
  const int64_t steps = g.stepsFromNet ? int64_t(netDefaults.steps) : params::getInt(g.stepsFrom);
  g.buffBytes = g.buffFromNet ? int64_t(netDefaults.buffBytes) : params::getInt(g.buffFrom);
  if (steps < 2 || steps > int64_t(kMaxSteps))
    return InvalidArgument("%s=%lld%s is out of range [2, %u]", params::def(g.stepsFrom).name, (long long)steps,
                           g.stepsFromNet ? " (the net's default)" : "", kMaxSteps);
  const int64_t slot = g.buffBytes / steps / 64 * 64;
  if (slot < 4096 || slot > (int64_t(1) << 30))
    return InvalidArgument("%s=%lld%s gives %lld-byte slots; need 4 KiB..1 GiB per slot", params::def(g.buffFrom).name,
                           (long long)g.buffBytes, g.buffFromNet ? " (the net's default)" : "", (long long)slot);
  g.nsteps = uint32_t(steps);
  g.slotBytes = uint32_t(slot);
  return g;
}

net::SlotDefaults processNetSlotDefaults() {
  Result<net::Net*> n = net::defaultNet();
  return n.ok() ? n.value()->slotDefaults() : net::SlotDefaults{};
}

std::string describe(const SlotGeometry& g) {
  const char* from = g.stepsFromNet && g.buffFromNet ? ", the net's defaults"
                     : g.stepsFromNet                ? ", the net's default steps"
                     : g.buffFromNet                 ? ", the net's default size"
                                                     : "";
  return format("%s=%u, %s=%lld%s", params::def(g.stepsFrom).name, g.nsteps, params::def(g.buffFrom).name,
                (long long)g.buffBytes, from);
}

}  // namespace snccl
