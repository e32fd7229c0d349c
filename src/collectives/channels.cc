// Splitting a call across channels (channels.h).
#include "collectives/channels.h"

#include <algorithm>
#include <vector>

#include "collectives/sched_util.h"

namespace snccl {

bool channelSplittable(CollKind coll) {
  switch (coll) {
    case CollKind::kAllReduce:
    case CollKind::kBroadcast:
    case CollKind::kReduce:
    case CollKind::kAllGather:
    case CollKind::kReduceScatter:
      return true;
    default:
      return false;
  }
}

int effectiveChannels(const CollArgs& args) {
  if (!channelSplittable(args.coll) || args.channels <= 1 || args.count < 2) return 1;
  const size_t c = std::min<size_t>({size_t(args.channels), size_t(kMaxChannels), args.count});
  return static_cast<int>(c);
}

size_t channelPartBegin(size_t count, int parts, int c) {
  if (c >= parts) return count;
  constexpr size_t kAlign = 16;
  const size_t per = count / size_t(parts) / kAlign * kAlign;
  if (per > 0) return per * size_t(c);
  return count * size_t(c) / size_t(parts);
}

namespace {

// Moves one buffer reference of part [lo, lo + partCount) into the call's buffers.
Status remapRef(const Schedule& part, BufRef* ref, size_t steps, size_t lo, size_t partCount, size_t count,
                const std::vector<size_t>& scratchBase) {
  if (ref->buf >= part.bufs.size()) return InternalError("a step names buffer %u of %zu", ref->buf, part.bufs.size());
  const BufDesc& d = part.bufs[ref->buf];
  if (d.role == BufRole::kScratch) {
    ref->offset += scratchBase[ref->buf];
    return OkStatus();
  }
  const size_t block = ref->offset / partCount, within = ref->offset % partCount;
  if (within + steps > partCount)
    return InternalError("a step of %zu elements at offset %zu crosses a block of %zu elements; the schedule "
                         "cannot be split into channels",
                         steps, ref->offset, partCount);
  ref->offset = block * count + lo + within;
  return OkStatus();
}

}  // namespace

Status generateSchedule(const AlgorithmDef& algo, const CollArgs& args, const ChannelPlan& plan, Schedule* out) {
  // One PeerFold per rank and call (schedule.h): an algorithm reading peers' buffers uses
  // no connection and is never split.
  const int parts = algo.readsPeers ? 1 : effectiveChannels(args);
  CollArgs a = args;
  a.channels = 1;
  if (parts == 1) return algo.generate(a, plan, out);
  out->clear();
  Schedule part;
  std::vector<size_t> scratchBase;
  for (int c = 0; c < parts; ++c) {
    const size_t lo = channelPartBegin(args.count, parts, c), hi = channelPartBegin(args.count, parts, c + 1);
    a.count = hi - lo;
    SNCCL_TRY(algo.generate(a, plan, &part));
    if (c == 0) {
      out->coll = part.coll;
      out->reduces = part.reduces;
      out->bufs.assign(part.bufs.size(), BufDesc{BufRole::kScratch, 0});
      for (size_t i = 0; i < part.bufs.size(); ++i) out->bufs[i].role = part.bufs[i].role;
    } else if (part.bufs.size() != out->bufs.size()) {
      return InternalError("%s: parts of one call declare %zu and %zu buffers", algo.name, out->bufs.size(),
                           part.bufs.size());
    }
    scratchBase.assign(part.bufs.size(), 0);
    for (size_t i = 0; i < part.bufs.size(); ++i) {
      const BufDesc& d = part.bufs[i];
      BufDesc& merged = out->bufs[i];
      if (d.role != merged.role) return InternalError("%s: parts disagree on the role of buffer %zu", algo.name, i);
      if (d.role == BufRole::kScratch) {
        scratchBase[i] = merged.elems;
        merged.elems += d.elems;
      } else {
        // A user buffer is whole blocks of the part's count (1 or nranks of them).
        if (d.elems % a.count != 0)
          return InternalError("%s: buffer %zu has %zu elements, not whole blocks of %zu", algo.name, i, d.elems,
                               a.count);
        merged.elems = d.elems / a.count * args.count;
      }
    }
    for (Lane& lane : part.lanes) {
      for (Step& st : lane.steps) {
        st.channel = static_cast<uint8_t>(c);
        if (sched::primReadsSrc(st.prim)) SNCCL_TRY(remapRef(part, &st.src, st.count, lo, a.count, args.count, scratchBase));
        if (sched::primWritesDst(st.prim)) SNCCL_TRY(remapRef(part, &st.dst, st.count, lo, a.count, args.count, scratchBase));
      }
      out->lanes.push_back(std::move(lane));
    }
  }
  return OkStatus();
}

}  // namespace snccl
