// Discrete-event timing of schedules (sim_engine.h).
#include "sim_engine.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

namespace snccl::sim {

namespace {

struct SStep {
  int32_t sendFifo = -1, recvFifo = -1;
  float execUs = 0;  // time the step occupies its rank
};

struct Fifo {
  double latUs = 0;
  uint64_t sent = 0, consumed = 0;
  int32_t waitingSender = -1, waitingReceiver = -1;  // blocked lane, or -1
  std::vector<double> arrive, freeAt;               // per slot
};

struct LaneRun {
  int32_t rank;
  size_t next, end;
  double readyAt = 0;
  bool queued = false;
};

class Engine {
 public:
  Engine(const Cluster& c) : c_(c), busy_(size_t(c.nranks), 0.0) {}

  Status add(int r, const Schedule& s) {
    for (const Lane& lane : s.lanes) {
      LaneRun lr{r, steps_.size(), 0};
      for (const Step& st : lane.steps) {
        SStep x;
        const double bytes = double(st.count) * elemBytes_;
        tuning::LinkClass cls = tuning::LinkClass::kLocal;
        auto worse = [&](int peer) {
          const tuning::LinkClass pc = c_.nodeOf(peer) != c_.nodeOf(r) ? tuning::LinkClass::kNet : c_.intra;
          if (static_cast<int>(pc) > static_cast<int>(cls)) cls = pc;
        };
        if (st.sendPeer >= 0) worse(st.sendPeer);
        if (st.recvPeer >= 0) worse(st.recvPeer);
        if (st.sendPeer < 0 && st.recvPeer < 0) cls = c_.intra;  // a local copy
        x.execUs = float(bytes / (c_.params.of(cls).bwGBps * 1e3));
        if (st.sendPeer >= 0) x.sendFifo = fifo(r, st.sendPeer);
        if (st.recvPeer >= 0) x.recvFifo = fifo(st.recvPeer, r);
        steps_.push_back(x);
      }
      lr.end = steps_.size();
      if (lr.end > lr.next) lanes_.push_back(lr);
    }
    return OkStatus();
  }

  Result<SimResult> run() {
    for (size_t l = 0; l < lanes_.size(); ++l) tryLane(int32_t(l));
    SimResult res;
    while (!heap_.empty()) {
      auto [t, l] = heap_.top();
      heap_.pop();
      LaneRun& lr = lanes_[size_t(l)];
      const double start = std::max(t, busy_[size_t(lr.rank)]);
      if (start > t) {  // another lane of the rank ran meanwhile
        heap_.push({start, l});
        continue;
      }
      lr.queued = false;
      const SStep& s = steps_[lr.next];
      const double finish = start + s.execUs;
      busy_[size_t(lr.rank)] = finish;
      lr.readyAt = finish;
      res.steps++;
      res.us = std::max(res.us, finish);
      int32_t wakeA = -1, wakeB = -1;
      if (s.recvFifo >= 0) {
        Fifo& f = fifos_[size_t(s.recvFifo)];
        f.freeAt[f.consumed % f.freeAt.size()] = finish;
        f.consumed++;
        wakeA = f.waitingSender;
        f.waitingSender = -1;
      }
      if (s.sendFifo >= 0) {
        Fifo& g = fifos_[size_t(s.sendFifo)];
        g.arrive[g.sent % g.arrive.size()] = finish + g.latUs;
        g.sent++;
        res.messages++;
        res.us = std::max(res.us, finish + g.latUs);
        wakeB = g.waitingReceiver;
        g.waitingReceiver = -1;
      }
      lr.next++;
      tryLane(l);
      if (wakeA >= 0) tryLane(wakeA);
      if (wakeB >= 0) tryLane(wakeB);
    }
    for (const LaneRun& lr : lanes_)
      if (lr.next != lr.end) return InternalError("simulation stuck: rank %d waits at a step (deadlock)", lr.rank);
    return res;
  }

  void setElemBytes(size_t b) { elemBytes_ = double(b); }

 private:
  int32_t fifo(int from, int to) {
    const uint64_t key = uint64_t(uint32_t(from)) << 32 | uint32_t(to);
    auto [it, fresh] = index_.try_emplace(key, int32_t(fifos_.size()));
    if (fresh) {
      Fifo f;
      const tuning::LinkClass cls = c_.nodeOf(from) != c_.nodeOf(to) ? tuning::LinkClass::kNet : c_.intra;
      f.latUs = c_.params.of(cls).latUs;
      f.arrive.assign(size_t(c_.slots), 0);
      f.freeAt.assign(size_t(c_.slots), 0);
      fifos_.push_back(std::move(f));
    }
    return it->second;
  }

  // Queues lane l at the earliest time its next step can start, or registers it as
  // waiting on the connection that blocks it.
  void tryLane(int32_t l) {
    LaneRun& lr = lanes_[size_t(l)];
    if (lr.queued || lr.next == lr.end) return;
    const SStep& s = steps_[lr.next];
    double t = std::max(lr.readyAt, busy_[size_t(lr.rank)]);
    if (s.recvFifo >= 0) {
      Fifo& f = fifos_[size_t(s.recvFifo)];
      if (f.consumed >= f.sent) {
        f.waitingReceiver = l;
        return;
      }
      t = std::max(t, f.arrive[f.consumed % f.arrive.size()]);
    }
    if (s.sendFifo >= 0) {
      Fifo& g = fifos_[size_t(s.sendFifo)];
      const uint64_t slots = g.freeAt.size();
      if (g.sent - g.consumed >= slots) {
        g.waitingSender = l;
        return;
      }
      if (g.sent >= slots) t = std::max(t, g.freeAt[g.sent % slots]);
    }
    lr.queued = true;
    heap_.push({t, l});
  }

  const Cluster& c_;
  double elemBytes_ = 4;
  std::vector<SStep> steps_;
  std::vector<LaneRun> lanes_;
  std::vector<Fifo> fifos_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::vector<double> busy_;
  using Ev = std::pair<double, int32_t>;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<Ev>> heap_;
};

}  // namespace

ChannelPlan clusterPlan(const Cluster& c) {
  ChannelPlan p;
  for (int r = 0; r < c.nranks; ++r) p.hosts.push_back(uint64_t(c.nodeOf(r)) + 1);
  return p;
}

Result<uint64_t> rankSteps(const AlgorithmDef& algo, const CollArgs& args, const ChannelPlan& plan) {
  Schedule s;
  CollArgs a = args;
  a.rank = 0;
  SNCCL_TRY(algo.generate(a, plan, &s));
  uint64_t n = 0;
  for (const Lane& l : s.lanes) n += l.steps.size();
  return n;
}

Result<SimResult> simulate(const AlgorithmDef& algo, const CollArgs& args, const Cluster& c, const ChannelPlan& plan) {
  Engine e(c);
  e.setElemBytes(4);
  Schedule s;
  for (int r = 0; r < c.nranks; ++r) {
    CollArgs a = args;
    a.rank = r;
    SNCCL_TRY(algo.generate(a, plan, &s));
    SNCCL_TRY(e.add(r, s));
  }
  return e.run();
}

}  // namespace snccl::sim
