// PreparedSchedule: what the executor derives from a schedule once (it is cached with the
// schedule): the connections it uses (analyse), and for net rings which steps are the only
// writers of their destination range and which receives could land in place (zeroCopy).
#include <algorithm>
#include <tuple>

#include "core/comm.h"

namespace snccl {

namespace {

void collectPeers(const Schedule& sched, std::vector<ConnKey>* sends, std::vector<ConnKey>* recvs,
                  size_t* maxRecvCount) {
  sends->clear();
  recvs->clear();
  *maxRecvCount = 0;
  for (const Lane& lane : sched.lanes)
    for (const Step& st : lane.steps) {
      if (primSends(st.prim)) sends->push_back({st.sendPeer, st.channel});
      if (primReceives(st.prim)) {
        recvs->push_back({st.recvPeer, st.channel});
        *maxRecvCount = std::max(*maxRecvCount, st.count);
      }
    }
  for (auto* v : {sends, recvs}) {
    std::sort(v->begin(), v->end());
    v->erase(std::unique(v->begin(), v->end()), v->end());
  }
}

// Lanes run in no fixed order relative to each other, so "no other step" means no other
// step of any lane, earlier or later. Writes are sorted by (buffer, start); a write is
// alone when it starts at or after the end of every write sorted before it and ends at or
// before the start of the next one.
void markSoleWriters(const Schedule& sched, std::vector<std::vector<uint8_t>>* sole) {
  struct Write {
    uint16_t buf;
    size_t lo, hi;  // elements [lo, hi)
    uint32_t lane, step;
  };
  std::vector<Write> writes;
  sole->assign(sched.lanes.size(), {});
  for (size_t l = 0; l < sched.lanes.size(); ++l) {
    const std::vector<Step>& steps = sched.lanes[l].steps;
    (*sole)[l].assign(steps.size(), 0);
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      if (!primWritesDst(st.prim) || st.count == 0) continue;
      writes.push_back({st.dst.buf, st.dst.offset, st.dst.offset + st.count, uint32_t(l), uint32_t(i)});
    }
  }
  std::sort(writes.begin(), writes.end(),
            [](const Write& a, const Write& b) { return std::tie(a.buf, a.lo) < std::tie(b.buf, b.lo); });
  size_t reach = 0;  // the furthest end of the writes before, in the same buffer
  for (size_t k = 0; k < writes.size(); ++k) {
    const Write& w = writes[k];
    if (k == 0 || writes[k - 1].buf != w.buf) reach = 0;
    const bool clearBefore = reach <= w.lo;
    const bool clearAfter = k + 1 == writes.size() || writes[k + 1].buf != w.buf || writes[k + 1].lo >= w.hi;
    (*sole)[w.lane][w.step] = clearBefore && clearAfter;
    reach = std::max(reach, w.hi);
  }
}

void listRecvTargets(const Schedule& sched, const std::vector<ConnKey>& recvs,
                     const std::vector<std::vector<uint8_t>>& sole,
                     std::vector<std::vector<ZeroCopyInfo::TargetStep>>* targets) {
  targets->assign(recvs.size(), {});
  std::vector<uint32_t> received(recvs.size(), 0);
  for (size_t l = 0; l < sched.lanes.size(); ++l) {
    const std::vector<Step>& steps = sched.lanes[l].steps;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& st = steps[i];
      if (!primReceives(st.prim)) continue;
      const ConnKey key{st.recvPeer, st.channel};
      const size_t c = size_t(std::lower_bound(recvs.begin(), recvs.end(), key) - recvs.begin());
      const uint32_t index = received[c]++;
      if (st.prim == Prim::kRecv && sole[l][i] && sched.bufs[st.dst.buf].role == BufRole::kOutput)
        (*targets)[c].push_back({index, uint32_t(l), uint32_t(i)});
    }
  }
}

}  // namespace

void PreparedSchedule::analyse() {
  collectPeers(sched, &sends, &recvs, &maxRecvCount);
  totalSteps = 0;
  for (const Lane& l : sched.lanes) totalSteps += l.steps.size();
}

const ZeroCopyInfo& PreparedSchedule::zeroCopy() const {
  if (!zeroCopyDone_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(zeroCopyMu_);
    if (!zeroCopyDone_.load(std::memory_order_relaxed)) {
      markSoleWriters(sched, &zeroCopy_.soleWriter);
      listRecvTargets(sched, recvs, zeroCopy_.soleWriter, &zeroCopy_.recvTargets);
      zeroCopyDone_.store(true, std::memory_order_release);
    }
  }
  return zeroCopy_;
}

}  // namespace snccl
