// The symbolic simulator behind checker.h: symbolic values, per-rank storage with
// in-place aliasing, FIFO connections and the lane scheduler. checker.cc decides what
// each collective must produce; this file only executes schedules faithfully.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/checker.h"
#include "collectives/schedule.h"
#include "common/status.h"

namespace snccl::check {

// One element. hash is the sum of mix(origin) over the contributions (wrapping), so a sum
// is independent of reduction order and a single origin can be decoded (mix is a bijection).
struct Sym {
  uint64_t hash = 0;
  uint32_t n = 0;     // contributions (1 for an original element)
  uint32_t bits = 0;  // low 31 bits: contributions scaled by PreMulSum; top bit: finalized
  bool operator==(const Sym&) const = default;
};
constexpr uint32_t kFinalized = 1u << 31;
inline uint32_t scaledOf(const Sym& v) { return v.bits & ~kFinalized; }
inline bool finalizedOf(const Sym& v) { return (v.bits & kFinalized) != 0; }

// The original content of element `idx` of buffer `buf` of rank `rank`.
Sym origin(int rank, uint32_t buf, size_t idx);
// Decodes a single-origin value; false when v is not one.
bool decodeOrigin(const Sym& v, int* rank, uint32_t* buf, size_t* idx);

// Where one buffer of a rank lives: in-place calls put `inner` inside `outer`'s storage.
struct Alias {
  bool on = false;
  uint16_t inner = 0, outer = 0;
  size_t offset = 0;  // elements from the start of outer
};

// Expected final content of element i of output buffer b of rank r.
using ExpectFn = std::function<Sym(int r, uint16_t b, size_t i)>;

class Sim {
 public:
  Sim(int nranks, size_t chunkElems, const CheckOptions& opts);

  // Validates rank r's schedule statically and lays out its storage. Ranks are added in
  // order 0..nranks-1, then run() executes them all.
  Status addRank(int r, const Schedule& s, const Alias& alias);
  Status run();
  // Compares every Output-role buffer of every rank with `expect`.
  Status verify(const ExpectFn& expect) const;

  std::string describe(const Sym& v) const;

 private:
  struct CStep {  // a Step resolved to storage positions and connection indices
    uint32_t srcPos, dstPos, count, sendFifo, recvFifo;
    uint16_t srcBuf, dstBuf;
    uint8_t prim, flags;
  };
  struct Fifo {
    int32_t from, to;
    int32_t sendLane = -1, recvLane = -1;  // one lane per side (global lane ids)
    bool senderWaiting = false, receiverWaiting = false;
    uint32_t queued = 0;
    uint64_t sent = 0, received = 0;
    size_t head = 0;
    std::vector<Sym> data;  // messages: a header (hash = count) then the values
  };
  struct LaneRun {
    uint32_t rank, lane;
    size_t first, next, end;  // indices into the rank's steps
    bool queued = false, done = false;
    bool atFold = false;  // waits in a PeerFold barrier for the other ranks
  };
  struct RankMem {
    std::vector<CStep> steps;  // all lanes' steps, lane by lane
    std::vector<BufDesc> bufs;
    std::vector<size_t> base;  // storage position of each buffer
    std::vector<Sym> vals;
    std::vector<int32_t> tags;  // lane access tags, only when the rank has several lanes
    uint32_t firstLane = 0, nLanes = 0;
    bool reduces = false;
    bool collective = false;  // buffers 0/1 are Input/Output
  };

  Status layout(int r, const Schedule& s, const Alias& alias);
  Status addStep(int r, uint32_t laneId, const Schedule& s, size_t lane, size_t idx);
  Status checkRef(int r, const Schedule& s, const Step& st, const BufRef& ref, bool isDst, uint32_t* pos) const;
  uint32_t fifoFor(int from, int to, int channel);
  Status advance(uint32_t laneId);
  // A lane reached a PeerFold step: waits for one from every rank, then runs them all
  // (*passed: this lane's step ran).
  Status arriveAtFold(uint32_t laneId, bool* passed);
  Status runFolds();
  Status execute(uint32_t laneId, const CStep& s);
  Status popMessage(uint32_t laneId, const CStep& s);
  Status readSrc(uint32_t laneId, const CStep& s, bool combine);
  Status access(uint32_t laneId, uint32_t pos, uint16_t buf, bool write);
  Status combineInto(Sym* acc, const Sym& v) const;
  Status finalize(Sym* v) const;
  void wake(int32_t laneId);
  Status deadlockError() const;
  Status leftoverError() const;
  std::string stepName(uint32_t laneId, size_t stepIdx) const;
  std::string elemName(int r, uint16_t buf, uint32_t pos) const;
  std::string bufLabel(int r, uint32_t buf, size_t i) const;
  Status stepError(uint32_t laneId, const std::string& what) const;

  int n_;
  size_t chunk_;
  CheckOptions opts_;
  std::vector<RankMem> ranks_;
  std::vector<LaneRun> lanes_;
  std::vector<Fifo> fifos_;
  std::vector<uint32_t> dense_;  // channel 0's fifo of (from, to) at from*n+to, for up to 2048 ranks
  std::unordered_map<uint64_t, uint32_t> fifoIndex_;  // beyond that, and other channels
  std::deque<uint32_t> ready_;
  std::vector<Sym> tmp_;  // values of the step being executed
  std::vector<uint32_t> foldLanes_;  // lanes waiting in the current PeerFold barrier, by arrival
  std::vector<int32_t> foldRankLane_;  // per rank: its lane in that barrier, or -1
  size_t finished_ = 0;
  CheckStats stats_;
};

}  // namespace snccl::check
