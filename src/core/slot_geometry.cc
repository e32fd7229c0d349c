#include "core/slot_geometry.h"

#include "transport/connection.h"  // kMaxSteps

namespace snccl {

Result<SlotGeometry> slotGeometry(bool spansNodes) {
  auto pick = [spansNodes](params::Id net, params::Id node) {
    return spansNodes && (params::isSet(net) || !params::isSet(node)) ? net : node;
  };
  SlotGeometry g;
  g.stepsFrom = pick(params::Id::NetSteps, params::Id::Steps);
  g.buffFrom = pick(params::Id::NetBuffSize, params::Id::BuffSize);
  const int64_t steps = params::getInt(g.stepsFrom);
  if (steps < 2 || steps > int64_t(kMaxSteps))
    return InvalidArgument("%s=%lld is out of range [2, %u]", params::def(g.stepsFrom).name, (long long)steps,
                           kMaxSteps);
  const int64_t buff = params::getInt(g.buffFrom);
  const int64_t slot = buff / steps / 64 * 64;
  if (slot < 4096 || slot > (int64_t(1) << 30))
    return InvalidArgument("%s=%lld gives %lld-byte slots; need 4 KiB..1 GiB per slot", params::def(g.buffFrom).name,
                           (long long)buff, (long long)slot);
  g.nsteps = uint32_t(steps);
  g.slotBytes = uint32_t(slot);
  return g;
}

}  // namespace snccl
