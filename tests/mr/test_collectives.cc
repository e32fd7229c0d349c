// Multi-rank correctness of every collective: 12 datatypes, every reduction operator
// (PreMulSum with both scalar residences), 1..8 ranks, counts 0..1M+3, in-place (the
// offsets NCCL defines) and out-of-place, ranks as threads and as processes,
// launched blocking, on host streams (all ranks or only some) and grouped.
//
// Results are exact (float averages within 2 ulp). Every byte the library may not write
// is checked as well: guards around every buffer, inputs, the outputs of non-root ranks
// of Reduce/Gather, the unused send buffer of Scatter's non-roots.
//
// With SNTEST_DEVICE_BUFFERS=1 every buffer (guards included) is mirrored in device memory
// of the driver SNCCL_CUDA_DRIVER names (the CPU stand-in in CI): the calls get device
// pointers and CUDA streams instead of host streams, inputs go up and results come back
// on the same stream as the collective (asynchronous copies, so stream order is what makes
// the results right), and the checks run on the copies that came back.
//
// Sampling keeps the binary in minutes on 2 cores: counts {0,1,7,1023} get the full
// datatype x operator cross product; 1M+3 one rotating combination per (collective,
// mode, ranks). Roots cycle through 0, n-1 and n/2.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "snccl/snccl.h"
#include "support/buffers.h"
#include "support/cuda_test.h"
#include "support/harness.h"
#include "support/values.h"

namespace {

using namespace sntest;

enum class Coll { kAllReduce, kBroadcast, kBcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter };
constexpr Coll kAllColls[] = {Coll::kAllReduce,     Coll::kBroadcast, Coll::kBcast,  Coll::kReduce, Coll::kAllGather,
                              Coll::kReduceScatter, Coll::kAlltoAll,  Coll::kGather, Coll::kScatter};

const char* collName(Coll c) {
  static const char* kNames[] = {"AllReduce",     "Broadcast", "Bcast",  "Reduce", "AllGather",
                                 "ReduceScatter", "AlltoAll",  "Gather", "Scatter"};
  return kNames[int(c)];
}
void PrintTo(Coll c, std::ostream* os) { *os << collName(c); }
bool isReduction(Coll c) { return c == Coll::kAllReduce || c == Coll::kReduce || c == Coll::kReduceScatter; }

constexpr size_t kLargeCount = (size_t(1) << 20) + 3;

struct Case {
  Coll coll;
  ncclDataType_t dt;
  int op;  // OpKind; reductions only
  size_t count;
  bool inPlace;
  int root;
  size_t misalign;  // elements past a 64-byte boundary
  uint64_t seed;
};

std::string describe(const Case& c, int n) {
  std::string s = std::string(collName(c.coll)) + " " + typeName(c.dt);
  if (isReduction(c.coll)) s += std::string(" ") + opKindName(c.op);
  s += " count=" + std::to_string(c.count) + (c.inPlace ? " in-place" : " out-of-place") +
       " root=" + std::to_string(c.root) + " nranks=" + std::to_string(n) + " misalign=" + std::to_string(c.misalign);
  return s;
}

// What a run of elements of a buffer holds before or after the operation.
struct Region {
  enum Kind { kUntouched, kData, kReduced } kind;
  size_t begin, end;  // elements
  int src;            // kData: the rank whose input is expected here
  size_t base;        // kData/kReduced: the source element index at `begin`
};
Region U(size_t b, size_t e) { return {Region::kUntouched, b, e, 0, 0}; }
Region D(int src, size_t b, size_t e, size_t base) { return {Region::kData, b, e, src, base}; }
Region R(size_t b, size_t e, size_t base) { return {Region::kReduced, b, e, 0, base}; }

struct Side {
  std::string name;
  GuardedBuffer buf;
  std::vector<Region> init, expect;
  CUdeviceptr dev = 0;  // device mode: the mirror of buf.span()
};

bool deviceMode() {
  const char* v = std::getenv("SNTEST_DEVICE_BUFFERS");
  return v != nullptr && std::string(v) == "1";
}

// One collective on one rank: its buffers, launch and verification.
class CaseRun {
 public:
  CaseRun(const Case& c, int rank, int n) : c_(c), rank_(rank), n_(n), es_(typeInfo(c.dt).size) {
    if (isReduction(c.coll)) model_.build(c.dt, c.op, n, c.seed);
    layout();
    for (auto& s : sides_)
      for (const Region& reg : s->init)
        if (reg.kind == Region::kData)
          for (size_t k = reg.begin; k < reg.end; ++k)
            storeBits(s->buf.data(), k, es_, gen(reg.src, reg.base + (k - reg.begin)));
  }

  ~CaseRun() {
    for (auto& s : sides_)
      if (s->dev != 0) testCuda().memFree(s->dev);
    if (devScalar_ != 0) testCuda().memFree(devScalar_);
  }

  // Device mode: copies every buffer up to its device mirror (allocated on first use), or
  // every mirror down, asynchronously on `stream` when `async` (else with the legacy
  // stream's synchronous copies).
  bool toDevice(CUstream stream, bool async) { return mirror(stream, async, true); }
  bool fromDevice(CUstream stream, bool async) { return mirror(stream, async, false); }

  // Enqueues the collective (in a group, records it).
  bool launch(ncclComm_t comm, cudaStream_t stream) {
    ncclRedOp_t op = ncclSum;
    if (isReduction(c_.coll) && !makeOp(comm, &op)) return false;
    const int root = c_.root;
    const size_t n = c_.count;
    ncclResult_t res = ncclSuccess;
    void* sb = at(send_);  // what the library gets: the buffers or their device mirrors
    void* rb = at(recv_);
    switch (c_.coll) {
      case Coll::kAllReduce: res = ncclAllReduce(sb, rb, n, c_.dt, op, comm, stream); break;
      case Coll::kBroadcast: res = ncclBroadcast(sb, rb, n, c_.dt, root, comm, stream); break;
      case Coll::kBcast: res = ncclBcast(rb, n, c_.dt, root, comm, stream); break;
      case Coll::kReduce: res = ncclReduce(sb, rb, n, c_.dt, op, root, comm, stream); break;
      case Coll::kAllGather: res = ncclAllGather(sb, rb, n, c_.dt, comm, stream); break;
      case Coll::kReduceScatter: res = ncclReduceScatter(sb, rb, n, c_.dt, op, comm, stream); break;
      case Coll::kAlltoAll: res = ncclAlltoAll(sb, rb, n, c_.dt, comm, stream); break;
      case Coll::kGather: res = ncclGather(sb, rb, n, c_.dt, root, comm, stream); break;
      case Coll::kScatter: res = ncclScatter(sb, rb, n, c_.dt, root, comm, stream); break;
    }
    return ncclOk(res, describe(c_, n_), rank_);
  }

  // Destroys the PreMulSum operator: allowed as soon as the calls using it returned.
  bool releaseOp(ncclComm_t comm) {
    if (!haveOp_) return true;
    haveOp_ = false;
    return ncclOk(ncclRedOpDestroy(op_, comm), "ncclRedOpDestroy for " + describe(c_, n_), rank_);
  }

  // Verifies every buffer after completion; reports the first problem of each buffer.
  bool check() const {
    bool ok = true;
    for (const auto& s : sides_) {
      std::string damage = s->buf.guardDamage();
      if (!damage.empty()) {
        ADD_FAILURE() << "rank " << rank_ << ": " << describe(c_, n_) << ": " << s->name << ": " << damage;
        ok = false;
      }
      for (const Region& reg : s->expect)
        if (!checkRegion(*s, reg)) {
          ok = false;
          break;
        }
    }
    return ok;
  }

 private:
  uint64_t gen(int src, size_t idx) const {
    return isReduction(c_.coll) ? model_.input(src, idx) : rawBits(c_.seed, src, idx, es_);
  }

  Side& add(const char* name, size_t elems) {
    sides_.push_back(std::make_unique<Side>());
    sides_.back()->name = name;
    sides_.back()->buf.reset(elems * es_, c_.misalign * es_);
    return *sides_.back();
  }
  void* at(Side& s, size_t elem) { return s.buf.data() + elem * es_; }
  // The pointer the library gets for host pointer p: p, or its device mirror.
  void* at(void* p) {
    for (auto& s : sides_) {
      auto* c = static_cast<uint8_t*>(p);
      if (s->dev != 0 && c >= s->buf.span() && c <= s->buf.span() + s->buf.spanBytes())
        return reinterpret_cast<void*>(s->dev + CUdeviceptr(c - s->buf.span()));
    }
    return p;
  }
  bool mirror(CUstream stream, bool async, bool up) {
    const TestCuda& cu = testCuda();
    for (auto& s : sides_) {
      if (up && s->dev == 0 && cu.memAlloc(&s->dev, s->buf.spanBytes()) != 0) return false;
      uint8_t* host = s->buf.span();
      const size_t n = s->buf.spanBytes();
      CUresult r = up ? (async ? cu.memcpyHtoDAsync(s->dev, host, n, stream) : cu.memcpyHtoD(s->dev, host, n))
                      : (async ? cu.memcpyDtoHAsync(host, s->dev, n, stream) : cu.memcpyDtoH(host, s->dev, n));
      if (r != 0) return false;
    }
    return true;
  }
  // Writes the PreMulSum scalar where the library reads it (device memory in device mode).
  void putScalar(uint64_t bits) {
    storeBits(scalar_, 0, es_, bits);
    if (devScalar_ != 0) testCuda().memcpyHtoD(devScalar_, scalar_, es_);
  }

  void layout() {
    const int r = rank_, root = c_.root;
    const size_t c = c_.count, N = size_t(n_) * c, rc = size_t(r) * c;
    switch (c_.coll) {
      case Coll::kAllReduce:
      case Coll::kReduce: {
        bool writes = c_.coll == Coll::kAllReduce || r == root;
        if (c_.inPlace) {
          Side& b = add("buffer (in-place)", c);
          b.init = {D(r, 0, c, 0)};
          b.expect = writes ? std::vector<Region>{R(0, c, 0)} : b.init;
          send_ = recv_ = at(b, 0);
        } else {
          Side& s = add("sendbuff", c);
          s.init = s.expect = {D(r, 0, c, 0)};
          Side& d = add("recvbuff", c);
          d.init = {U(0, c)};
          d.expect = {writes ? R(0, c, 0) : U(0, c)};
          send_ = at(s, 0);
          recv_ = at(d, 0);
        }
        break;
      }
      case Coll::kBroadcast:
      case Coll::kBcast:
        if (c_.inPlace) {
          Side& b = add("buffer (in-place)", c);
          b.init = {r == root ? D(root, 0, c, 0) : U(0, c)};
          b.expect = {D(root, 0, c, 0)};
          send_ = recv_ = at(b, 0);
        } else {
          Side& s = add("sendbuff", c);
          s.init = s.expect = {D(r, 0, c, 0)};
          Side& d = add("recvbuff", c);
          d.init = {U(0, c)};
          d.expect = {D(root, 0, c, 0)};
          send_ = at(s, 0);
          recv_ = at(d, 0);
        }
        break;
      case Coll::kAllGather: {
        Side& d = add(c_.inPlace ? "recvbuff (in-place)" : "recvbuff", N);
        for (int p = 0; p < n_; ++p) d.expect.push_back(D(p, p * c, p * c + c, 0));
        if (c_.inPlace) {
          d.init = {U(0, rc), D(r, rc, rc + c, 0), U(rc + c, N)};
          send_ = at(d, rc);
        } else {
          Side& s = add("sendbuff", c);
          s.init = s.expect = {D(r, 0, c, 0)};
          d.init = {U(0, N)};
          send_ = at(s, 0);
        }
        recv_ = at(d, 0);
        break;
      }
      case Coll::kReduceScatter:
        if (c_.inPlace) {
          Side& b = add("sendbuff (in-place)", N);
          b.init = {D(r, 0, N, 0)};
          b.expect = {D(r, 0, rc, 0), R(rc, rc + c, rc), D(r, rc + c, N, rc + c)};
          send_ = at(b, 0);
          recv_ = at(b, rc);
        } else {
          Side& s = add("sendbuff", N);
          s.init = s.expect = {D(r, 0, N, 0)};
          Side& d = add("recvbuff", c);
          d.init = {U(0, c)};
          d.expect = {R(0, c, rc)};
          send_ = at(s, 0);
          recv_ = at(d, 0);
        }
        break;
      case Coll::kAlltoAll: {
        Side& s = add("sendbuff", N);
        s.init = s.expect = {D(r, 0, N, 0)};
        Side& d = add("recvbuff", N);
        d.init = {U(0, N)};
        for (int p = 0; p < n_; ++p) d.expect.push_back(D(p, p * c, p * c + c, rc));
        send_ = at(s, 0);
        recv_ = at(d, 0);
        break;
      }
      case Coll::kGather: {
        std::vector<Region> gathered;
        for (int p = 0; p < n_; ++p) gathered.push_back(D(p, p * c, p * c + c, 0));
        if (c_.inPlace) {
          // Root: sendbuff == recvbuff + root*count. Non-roots use the same shape; their
          // buffer must keep its input and stay untouched elsewhere.
          Side& b = add("recvbuff (in-place)", N);
          b.init = {U(0, rc), D(r, rc, rc + c, 0), U(rc + c, N)};
          b.expect = r == root ? gathered : b.init;
          send_ = at(b, rc);
          recv_ = at(b, 0);
        } else {
          Side& s = add("sendbuff", c);
          s.init = s.expect = {D(r, 0, c, 0)};
          Side& d = add(r == root ? "recvbuff" : "recvbuff of a non-root", N);
          d.init = {U(0, N)};
          d.expect = r == root ? gathered : d.init;
          send_ = at(s, 0);
          recv_ = at(d, 0);
        }
        break;
      }
      case Coll::kScatter:
        if (c_.inPlace && r == root) {
          Side& b = add("sendbuff (in-place)", N);
          b.init = b.expect = {D(root, 0, N, 0)};
          send_ = at(b, 0);
          recv_ = at(b, size_t(root) * c);
        } else {
          Side& s = add(r == root ? "sendbuff" : "sendbuff of a non-root", N);
          s.init = s.expect = {r == root ? D(root, 0, N, 0) : U(0, N)};
          Side& d = add("recvbuff", c);
          d.init = {U(0, c)};
          d.expect = {D(root, 0, c, rc)};
          send_ = at(s, 0);
          recv_ = at(d, 0);
        }
        break;
    }
  }

  bool makeOp(ncclComm_t comm, ncclRedOp_t* op) {
    static const ncclRedOp_t kBuiltin[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    if (c_.op < kOpPreMulImm) {
      *op = kBuiltin[c_.op];
      return true;
    }
    const uint64_t scalar = encodeValue(c_.dt, preMulScalar(c_.dt));
    const bool immediate = c_.op == kOpPreMulImm;
    // Host-immediate: the value is read by the create call; changing it afterwards must
    // not matter. Device residence: only the pointer is kept and read when the operation
    // runs, so the value set after the create call must be the one used.
    if (!immediate && deviceMode() && devScalar_ == 0 && testCuda().memAlloc(&devScalar_, 8) != 0) return false;
    putScalar(immediate ? scalar : encodeValue(c_.dt, 5));
    void* where = devScalar_ != 0 ? reinterpret_cast<void*>(devScalar_) : static_cast<void*>(scalar_);
    ncclResult_t res =
        ncclRedOpCreatePreMulSum(op, where, c_.dt, immediate ? ncclScalarHostImmediate : ncclScalarDevice, comm);
    if (!ncclOk(res, "ncclRedOpCreatePreMulSum for " + describe(c_, n_), rank_)) return false;
    putScalar(immediate ? encodeValue(c_.dt, 7) : scalar);
    op_ = *op;
    haveOp_ = true;
    return true;
  }

  bool checkRegion(const Side& s, const Region& reg) const {
    size_t bad = 0, first = 0;
    uint64_t firstGot = 0, firstWant = 0;
    if (reg.kind == Region::kUntouched) {
      size_t where = 0;
      if (s.buf.untouched(reg.begin * es_, reg.end * es_, &where)) return true;
      ADD_FAILURE() << "rank " << rank_ << ": " << describe(c_, n_) << ": " << s.name << ": byte " << where
                    << " (element " << where / es_ << ") was written but must stay untouched";
      return false;
    }
    for (size_t k = reg.begin; k < reg.end; ++k) {
      uint64_t got = loadBits(s.buf.data(), k, es_);
      size_t idx = reg.base + (k - reg.begin);
      bool good;
      uint64_t want;
      if (reg.kind == Region::kData) {
        want = gen(reg.src, idx);
        good = got == want;
      } else {
        want = model_.expBits[idx % kPeriod];
        good = model_.accepts(idx, got);
      }
      if (!good && bad++ == 0) {
        first = k;
        firstGot = got;
        firstWant = want;
      }
    }
    if (bad == 0) return true;
    ADD_FAILURE() << "rank " << rank_ << ": " << describe(c_, n_) << ": " << s.name << " element " << first
                  << ": got " << showElem(c_.dt, firstGot) << ", expected " << showElem(c_.dt, firstWant)
                  << (reg.kind == Region::kData ? " (input of rank " + std::to_string(reg.src) + ")" : "")
                  << "; " << bad << " wrong element(s) in [" << reg.begin << ", " << reg.end << ")";
    return false;
  }

  Case c_;
  int rank_, n_;
  size_t es_;
  ReductionModel model_;
  std::vector<std::unique_ptr<Side>> sides_;
  void* send_ = nullptr;
  void* recv_ = nullptr;
  alignas(8) unsigned char scalar_[8] = {};
  CUdeviceptr devScalar_ = 0;
  ncclRedOp_t op_ = ncclSum;
  bool haveOp_ = false;
};

// How a batch of cases is issued.
enum class Launch { kBlocking, kStream, kStreamOddRanks };
struct Batch {
  std::vector<Case> cases;
  bool grouped = false;
  Launch launch = Launch::kBlocking;
};

// The sampled plan of one test; identical on every rank (and every process).
std::vector<Batch> makePlan(Coll coll, Mode mode, int n) {
  const int roots[3] = {0, n - 1, n / 2};
  const uint64_t seed = 1000003ull * (int(coll) + 1) + 1009ull * n + (mode == Mode::kProcesses ? 7 : 0);
  std::vector<Case> cases;
  auto add = [&](ncclDataType_t dt, int op, size_t count, bool inPlace) {
    size_t i = cases.size();
    cases.push_back({coll, dt, op, count, inPlace, roots[i % 3], size_t(i % 4 == 3 ? 1 : 0), seed + 7919 * i});
  };
  const size_t counts[] = {0, 1, 7, 1023};
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto dt = ncclDataType_t(t);
    if (isReduction(coll)) {
      for (int op = 0; op < kNumOpKinds; ++op)
        for (int k = 0; k < 4; ++k) add(dt, op, counts[k], (k + t + op) % 2 == 1);
    } else {
      for (int k = 0; k < 4; ++k) {
        if (coll != Coll::kBcast) add(dt, kOpSum, counts[k], false);
        // AlltoAll has no in-place form in NCCL 2.28.
        if (coll != Coll::kAlltoAll) add(dt, kOpSum, counts[k], true);
      }
    }
  }
  std::vector<Batch> plan;
  // Rotating mix: blocking, two queued on a stream, grouped, stream on odd ranks only,
  // grouped on a stream.
  for (size_t i = 0, b = 0; i < cases.size(); ++b) {
    Batch batch;
    size_t take = 1;
    switch (b % 6) {
      case 1: take = 2; batch.launch = Launch::kStream; break;
      case 3: take = 3; batch.grouped = true; break;
      case 4: batch.launch = Launch::kStreamOddRanks; break;
      case 5: take = 3; batch.grouped = true; batch.launch = Launch::kStream; break;
      default: break;
    }
    for (size_t k = 0; k < take && i < cases.size(); ++k) batch.cases.push_back(cases[i++]);
    plan.push_back(batch);
  }
  // One large case, rotating datatype and operator over the tests. Collectives whose
  // buffers hold n*count elements use 1- and 2-byte types from 4 ranks up.
  const bool nTimes = coll == Coll::kAllGather || coll == Coll::kReduceScatter || coll == Coll::kAlltoAll ||
                      coll == Coll::kGather || coll == Coll::kScatter;
  std::vector<ncclDataType_t> types;
  for (int t = 0; t < ncclNumTypes; ++t)
    if (!nTimes || n < 4 || typeInfo(ncclDataType_t(t)).size <= 2) types.push_back(ncclDataType_t(t));
  const size_t pick = size_t(int(coll) * 5 + n * 3 + (mode == Mode::kProcesses ? 1 : 0));
  Case big{coll,
           types[pick % types.size()],
           isReduction(coll) ? int(pick % kNumOpKinds) : int(kOpSum),
           kLargeCount,
           coll == Coll::kBcast || (coll != Coll::kAlltoAll && pick % 2 == 1),
           roots[pick % 3],
           pick % 3 == 2 ? size_t(1) : size_t(0),
           seed + 99991};
  Batch large;
  large.cases.push_back(big);
  large.launch = pick % 2 == 0 ? Launch::kStream : Launch::kBlocking;
  // At 8 ranks reductions also get a wide type with a rounding operator.
  if (isReduction(coll) && n == 8) {
    Case wide = big;
    wide.dt = coll == Coll::kReduceScatter ? ncclBfloat16 : (mode == Mode::kThreads ? ncclFloat32 : ncclFloat64);
    wide.op = mode == Mode::kThreads ? kOpAvg : kOpPreMulDev;
    wide.inPlace = !big.inPlace;
    wide.seed = seed + 424243;
    large.cases.push_back(wide);
  }
  plan.push_back(large);
  return plan;
}

// Runs the plan on one rank. A failed call stops the rank (its peers then hang and the
// watchdog reports it); wrong data is reported and the plan continues.
//
// Device mode: a call without a stream runs on the legacy default stream, which the ranks
// of one process share, and two ranks' collectives queued on one stream wait for each
// other forever (as on a GPU). `legacyStream` says whether this rank may use it (it has
// a process of its own); otherwise its blocking calls go on a second stream of its own.
bool runPlan(const std::vector<Batch>& plan, ncclComm_t comm, int rank, int n, bool legacyStream) {
  const bool device = deviceMode();
  sncclStream_t stream = nullptr;
  CUstream cuStream = nullptr, blocking = nullptr;
  if (device) {
    if (!testCuda().on) {
      ADD_FAILURE() << "SNTEST_DEVICE_BUFFERS=1 without a driver: " << testCuda().why;
      return false;
    }
    if (!testCuda().bindThread() || testCuda().streamCreate(&cuStream, 0) != 0 ||
        (!legacyStream && testCuda().streamCreate(&blocking, 0) != 0)) {
      ADD_FAILURE() << "rank " << rank << ": cannot create a CUDA stream";
      return false;
    }
  } else if (!ncclOk(sncclStreamCreate(&stream), "sncclStreamCreate", rank)) {
    return false;
  }
  bool ok = true;
  int wrong = 0;
  for (const Batch& batch : plan) {
    bool onStream = batch.launch == Launch::kStream || (batch.launch == Launch::kStreamOddRanks && rank % 2 == 1);
    cudaStream_t s = !onStream ? reinterpret_cast<cudaStream_t>(blocking)
                     : device  ? reinterpret_cast<cudaStream_t>(cuStream)
                               : SNCCL_STREAM(stream);
    std::vector<std::unique_ptr<CaseRun>> runs;
    for (const Case& c : batch.cases) runs.push_back(std::make_unique<CaseRun>(c, rank, n));
    for (auto& run : runs)
      if (device && !run->toDevice(cuStream, onStream)) {
        ADD_FAILURE() << "rank " << rank << ": cannot mirror a buffer in device memory";
        return false;
      }
    if (batch.grouped) ok = ok && ncclOk(ncclGroupStart(), "ncclGroupStart", rank);
    for (auto& run : runs) ok = ok && run->launch(comm, s);
    if (batch.grouped) ok = ok && ncclOk(ncclGroupEnd(), "ncclGroupEnd", rank);
    for (auto& run : runs) ok = run->releaseOp(comm) && ok;
    if (device) {
      // The results come back behind the collective on its stream (or the legacy one).
      if (!onStream && blocking != nullptr) ok = testCuda().streamSynchronize(blocking) == 0 && ok;
      for (auto& run : runs) ok = run->fromDevice(cuStream, onStream) && ok;
      if (onStream) ok = testCuda().streamSynchronize(cuStream) == 0 && ok;
      ncclResult_t async = ncclSuccess;
      ok = ncclOk(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError", rank) && ok;
      ok = ncclOk(async, "the collective on a CUDA stream", rank) && ok;
    } else if (onStream) {
      ok = ncclOk(sncclStreamSynchronize(stream), "sncclStreamSynchronize", rank) && ok;
    }
    if (!ok) break;
    // Wrong data does not stop the rank (its peers would hang); after 10 wrong results
    // the remaining ones go unchecked to keep the log readable.
    for (auto& run : runs)
      if (wrong < 10 && !run->check() && ++wrong == 10)
        ADD_FAILURE() << "rank " << rank << ": 10 wrong results, not checking the rest";
  }
  if (device) {
    testCuda().streamDestroy(cuStream);
    if (blocking != nullptr) testCuda().streamDestroy(blocking);
  } else {
    ncclOk(sncclStreamDestroy(stream), "sncclStreamDestroy", rank);
  }
  return ok && wrong == 0;
}

// The test's own datatype model against known encodings (so that a codec bug cannot
// hide a library bug by agreeing with it).
TEST(TestModel, KnownEncodings) {
  EXPECT_EQ(encodeFloat(ncclFloat16, 1.0), 0x3C00u);
  EXPECT_EQ(encodeFloat(ncclFloat16, -2.5), 0xC100u);
  EXPECT_EQ(encodeFloat(ncclFloat16, 65504.0), 0x7BFFu);
  EXPECT_EQ(encodeFloat(ncclFloat16, std::ldexp(1.0, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(encodeFloat(ncclBfloat16, 1.0), 0x3F80u);
  EXPECT_EQ(encodeFloat(ncclBfloat16, -3.0), 0xC040u);
  EXPECT_EQ(encodeFloat(ncclFloat8e4m3, 1.0), 0x38u);
  EXPECT_EQ(encodeFloat(ncclFloat8e4m3, 448.0), 0x7Eu);  // max finite; 0x7F is NaN
  EXPECT_EQ(encodeFloat(ncclFloat8e4m3, -2.0), 0xC0u);
  EXPECT_EQ(encodeFloat(ncclFloat8e4m3, std::ldexp(1.0, -9)), 0x01u);
  EXPECT_EQ(encodeFloat(ncclFloat8e5m2, 1.0), 0x3Cu);
  EXPECT_EQ(encodeFloat(ncclFloat8e5m2, 57344.0), 0x7Bu);
  EXPECT_EQ(encodeFloat(ncclFloat8e5m2, -0.5), 0xB8u);
  EXPECT_EQ(encodeFloat(ncclFloat8e5m2, std::ldexp(1.0, -16)), 0x01u);
  EXPECT_TRUE(std::isnan(decodeFloat(ncclFloat8e4m3, 0x7F)));
  EXPECT_EQ(decodeFloat(ncclFloat8e4m3, 0x7E), 448.0);
  EXPECT_TRUE(std::isinf(decodeFloat(ncclFloat8e5m2, 0x7C)));
  EXPECT_EQ(encodeFloat(ncclFloat8e5m2, 10.0), 0x49u);  // 1.01b x 2^3
  EXPECT_EQ(encodeFloat(ncclFloat8e4m3, 9.0), 0x51u);   // 1.001b x 2^3
  // Every pattern of the 8- and 16-bit formats round-trips (NaNs excepted).
  for (ncclDataType_t dt : {ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2}) {
    uint64_t patterns = uint64_t(1) << (8 * typeInfo(dt).size);
    for (uint64_t b = 0; b < patterns; ++b) {
      double v = decodeFloat(dt, b);
      if (std::isnan(v) || std::isinf(v)) continue;
      ASSERT_EQ(encodeFloat(dt, v), b) << typeName(dt) << " pattern " << b;
    }
  }
  EXPECT_EQ(decodeInt(ncclInt8, 0xFB), -5);
  EXPECT_EQ(decodeInt(ncclUint8, 0xFB), 251);
  EXPECT_EQ(ulpOf(ncclFloat16, 1.0), std::ldexp(1.0, -10));
  EXPECT_EQ(ulpOf(ncclFloat8e4m3, 3.0), 0.25);
}

// Buffers NCCL does not use may be NULL: Reduce's and Gather's recvbuff and Scatter's
// sendbuff on non-roots (documented in nccl.h), Broadcast's sendbuff on non-roots (NCCL
// checks it only on the root), and every buffer when count is 0.
bool nullBuffers(ncclComm_t comm, int rank, int n) {
  const size_t c = 1023;
  bool ok = true;
  // A rejected NULL is reported, then the call is repeated with a real buffer so that the
  // peers, already inside the collective, can finish (one failure must not hang the run).
  auto issue = [&](const char* what, const std::function<ncclResult_t(bool withNull)>& call) {
    ncclResult_t res = call(true);
    if (res == ncclInvalidArgument) {
      ADD_FAILURE() << "rank " << rank << ": " << what << " rejected a NULL buffer that NCCL does not use: "
                    << ncclGetLastError(nullptr);
      ok = false;
      res = call(false);
    }
    return ncclOk(res, what, rank);
  };
  auto fail = [&](const char* what, int root, size_t i, int64_t got, int64_t want) {
    ADD_FAILURE() << "rank " << rank << ": " << what << " root=" << root << " with NULL non-root buffer: element "
                  << i << " = " << got << ", expected " << want;
    ok = false;
  };
  std::vector<int32_t> spare(size_t(n) * c);
  for (int root = 0; root < n; ++root) {
    const bool isRoot = rank == root;
    std::vector<int32_t> mine(c), big(size_t(n) * c), out(size_t(n) * c, -1);
    for (size_t i = 0; i < c; ++i) mine[i] = int32_t(rank * 100000 + int(i));
    for (size_t i = 0; i < big.size(); ++i) big[i] = int32_t(rank * 100000 + int(i));
    auto orNull = [&](void* p, bool withNull) { return isRoot || !withNull ? p : nullptr; };
    if (!issue("ncclBroadcast with NULL sendbuff on non-roots", [&](bool z) {
          return ncclBroadcast(orNull(mine.data(), z), out.data(), c, ncclInt32, root, comm, nullptr);
        }))
      return false;
    for (size_t i = 0; i < c; ++i)
      if (out[i] != root * 100000 + int(i)) {
        fail("Broadcast", root, i, out[i], root * 100000 + int(i));
        break;
      }
    if (!issue("ncclReduce with NULL recvbuff on non-roots", [&](bool z) {
          return ncclReduce(mine.data(), orNull(out.data(), z), c, ncclInt32, ncclSum, root, comm, nullptr);
        }))
      return false;
    for (size_t i = 0; isRoot && i < c; ++i) {
      int64_t want = int64_t(n) * (n - 1) / 2 * 100000 + int64_t(n) * int64_t(i);
      if (out[i] != want) {
        fail("Reduce", root, i, out[i], want);
        break;
      }
    }
    if (!issue("ncclGather with NULL recvbuff on non-roots", [&](bool z) {
          return ncclGather(mine.data(), orNull(out.data(), z), c, ncclInt32, root, comm, nullptr);
        }))
      return false;
    for (size_t i = 0; isRoot && i < size_t(n) * c; ++i) {
      int32_t want = int32_t(int(i / c) * 100000 + int(i % c));
      if (out[i] != want) {
        fail("Gather", root, i, out[i], want);
        break;
      }
    }
    if (!issue("ncclScatter with NULL sendbuff on non-roots", [&](bool z) {
          return ncclScatter(orNull(big.data(), z), out.data(), c, ncclInt32, root, comm, nullptr);
        }))
      return false;
    for (size_t i = 0; i < c; ++i) {
      int32_t want = int32_t(root * 100000 + rank * int(c) + int(i));
      if (out[i] != want) {
        fail("Scatter", root, i, out[i], want);
        break;
      }
    }
  }
  // Count 0: every buffer NULL, every collective, and a grouped send/recv.
  void* s = spare.data();
  auto zero = [&](const char* what, auto call) { return issue(what, [&](bool z) { return call(z ? nullptr : s); }); };
  bool alive =
      zero("count-0 AllReduce", [&](void* p) { return ncclAllReduce(p, p, 0, ncclFloat32, ncclSum, comm, nullptr); }) &&
      zero("count-0 Broadcast", [&](void* p) { return ncclBroadcast(p, p, 0, ncclFloat32, 0, comm, nullptr); }) &&
      zero("count-0 Bcast", [&](void* p) { return ncclBcast(p, 0, ncclFloat32, n - 1, comm, nullptr); }) &&
      zero("count-0 Reduce", [&](void* p) { return ncclReduce(p, p, 0, ncclFloat32, ncclMax, 0, comm, nullptr); }) &&
      zero("count-0 AllGather", [&](void* p) { return ncclAllGather(p, p, 0, ncclFloat32, comm, nullptr); }) &&
      zero("count-0 ReduceScatter",
           [&](void* p) { return ncclReduceScatter(p, p, 0, ncclFloat32, ncclSum, comm, nullptr); }) &&
      zero("count-0 AlltoAll", [&](void* p) { return ncclAlltoAll(p, p, 0, ncclFloat32, comm, nullptr); }) &&
      zero("count-0 Gather", [&](void* p) { return ncclGather(p, p, 0, ncclFloat32, 0, comm, nullptr); }) &&
      zero("count-0 Scatter", [&](void* p) { return ncclScatter(p, p, 0, ncclFloat32, 0, comm, nullptr); });
  if (!alive || !ncclOk(ncclGroupStart(), "ncclGroupStart", rank)) return false;
  ok = ncclOk(ncclSend(nullptr, 0, ncclFloat32, (rank + 1) % n, comm, nullptr), "count-0 Send", rank) && ok;
  ok = ncclOk(ncclRecv(nullptr, 0, ncclFloat32, (rank + n - 1) % n, comm, nullptr), "count-0 Recv", rank) && ok;
  ok = ncclOk(ncclGroupEnd(), "ncclGroupEnd", rank) && ok;
  return ok;
}

class NullBuffers : public ::testing::TestWithParam<Mode> {};

TEST_P(NullBuffers, UnusedBuffersMayBeNull) { runRanks(GetParam(), 3, nullBuffers, 120); }

INSTANTIATE_TEST_SUITE_P(All, NullBuffers, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode>& info) { return std::string(modeName(info.param)); });

// One communicator used from two host streams and from blocking calls: operations run
// in issue order per communicator (the same on every rank), whatever stream carries them.
bool streamsShareComm(ncclComm_t comm, int rank, int n) {
  constexpr int kOps = 24;
  constexpr size_t kCount = 4099;
  sncclStream_t s[2] = {nullptr, nullptr};
  bool ok = ncclOk(sncclStreamCreate(&s[0]), "sncclStreamCreate", rank) &&
            ncclOk(sncclStreamCreate(&s[1]), "sncclStreamCreate", rank);
  std::vector<std::vector<int64_t>> bufs(kOps, std::vector<int64_t>(kCount));
  for (int k = 0; k < kOps && ok; ++k) {
    for (size_t i = 0; i < kCount; ++i) bufs[k][i] = int64_t(k) * 100000 + rank * 1000 + int64_t(i % 997);
    // Streams 0 and 1 alternate; every fourth operation is blocking (NULL stream).
    cudaStream_t st = k % 4 == 3 ? nullptr : SNCCL_STREAM(s[k % 2]);
    ok = ncclOk(ncclAllReduce(bufs[k].data(), bufs[k].data(), kCount, ncclInt64, ncclSum, comm, st),
                "ncclAllReduce #" + std::to_string(k), rank);
  }
  for (auto& st : s)
    if (st != nullptr) {
      ok = ok && ncclOk(sncclStreamSynchronize(st), "sncclStreamSynchronize", rank);
      ncclOk(sncclStreamDestroy(st), "sncclStreamDestroy", rank);
    }
  for (int k = 0; k < kOps && ok; ++k)
    for (size_t i = 0; i < kCount; ++i) {
      int64_t want = int64_t(n) * k * 100000 + int64_t(n) * (n - 1) / 2 * 1000 + n * int64_t(i % 997);
      if (bufs[k][i] != want) {
        ADD_FAILURE() << "rank " << rank << ": allreduce #" << k << " element " << i << " = " << bufs[k][i]
                      << ", expected " << want;
        ok = false;
        break;
      }
    }
  return ok;
}

class StreamsShareComm : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(StreamsShareComm, TwoStreamsAndBlocking) {
  auto [mode, n] = GetParam();
  runRanks(mode, n, streamsShareComm, 120);
}

INSTANTIATE_TEST_SUITE_P(All, StreamsShareComm,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(2, 5)),
                         modeRanksName);

// Several communicators per rank used in an interleaved order (as PyTorch does with
// process groups): the parent, a split with every rank in reverse order, and the odd/even
// halves. Each operation's result depends on which communicator carried it.
bool interleavedComms(ncclComm_t comm, int rank, int n) {
  ncclComm_t rev = nullptr, half = nullptr;
  if (!ncclOk(ncclCommSplit(comm, 0, n - 1 - rank, &rev, nullptr), "ncclCommSplit (reverse)", rank) ||
      !ncclOk(ncclCommSplit(comm, rank % 2, rank, &half, nullptr), "ncclCommSplit (halves)", rank))
    return false;
  int revRank = -1, halfRank = -1, halfSize = 0;
  bool ok = ncclOk(ncclCommUserRank(rev, &revRank), "ncclCommUserRank", rank) &&
            ncclOk(ncclCommUserRank(half, &halfRank), "ncclCommUserRank", rank) &&
            ncclOk(ncclCommCount(half, &halfSize), "ncclCommCount", rank);
  if (ok && (revRank != n - 1 - rank || halfRank != rank / 2 || halfSize != (n + 1 - rank % 2) / 2)) {
    ADD_FAILURE() << "rank " << rank << ": split ranks " << revRank << "/" << halfRank << " size " << halfSize;
    ok = false;
  }
  const size_t c = 5003;
  for (int it = 0; it < 12 && ok; ++it) {
    ncclComm_t comms[3] = {comm, rev, half};
    int which = it % 3;
    std::vector<int64_t> buf(c);
    for (size_t i = 0; i < c; ++i) buf[i] = int64_t(rank + 1) * (it + 1) + int64_t(i);
    if (which == 1) {
      // Broadcast from the reverse communicator's rank 0 = parent rank n-1.
      ok = ncclOk(ncclBroadcast(buf.data(), buf.data(), c, ncclInt64, 0, rev, nullptr), "Broadcast on split", rank);
      for (size_t i = 0; ok && i < c; ++i)
        if (buf[i] != int64_t(n) * (it + 1) + int64_t(i)) {
          ADD_FAILURE() << "rank " << rank << ": broadcast on the reversed split, element " << i << " = " << buf[i];
          ok = false;
        }
      continue;
    }
    ok = ncclOk(ncclAllReduce(buf.data(), buf.data(), c, ncclInt64, ncclSum, comms[which], nullptr),
                "AllReduce on communicator " + std::to_string(which), rank);
    int64_t members = 0;  // sum of (r + 1) over the ranks of the communicator used
    for (int r = 0; r < n; ++r)
      if (which == 0 || r % 2 == rank % 2) members += r + 1;
    int64_t size = which == 0 ? n : halfSize;
    for (size_t i = 0; ok && i < c; ++i)
      if (buf[i] != members * (it + 1) + size * int64_t(i)) {
        ADD_FAILURE() << "rank " << rank << ": allreduce #" << it << " on communicator " << which << ", element "
                      << i << " = " << buf[i] << ", expected " << members * (it + 1) + size * int64_t(i);
        ok = false;
      }
  }
  ok = ncclOk(ncclCommDestroy(rev), "ncclCommDestroy", rank) && ok;
  ok = ncclOk(ncclCommDestroy(half), "ncclCommDestroy", rank) && ok;
  return ok;
}

class InterleavedComms : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(InterleavedComms, SplitsUsedInTurn) {
  auto [mode, n] = GetParam();
  runRanks(mode, n, interleavedComms, 120);
}

INSTANTIATE_TEST_SUITE_P(All, InterleavedComms,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(3, 5)),
                         modeRanksName);

class Collectives : public ::testing::TestWithParam<std::tuple<Coll, Mode, int>> {};

TEST_P(Collectives, Grid) {
  auto [coll, mode, n] = GetParam();
  const std::vector<Batch> plan = makePlan(coll, mode, n);
  const bool legacyStream = mode == Mode::kProcesses || n == 1;
  runRanks(
      mode, n, [&](ncclComm_t comm, int rank, int nranks) { return runPlan(plan, comm, rank, nranks, legacyStream); },
      120);
}

std::string gridName(const ::testing::TestParamInfo<std::tuple<Coll, Mode, int>>& info) {
  auto [coll, mode, n] = info.param;
  return std::string(collName(coll)) + "_" + modeName(mode) + "_" + std::to_string(n);
}

INSTANTIATE_TEST_SUITE_P(All, Collectives,
                         ::testing::Combine(::testing::ValuesIn(kAllColls),
                                            ::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::ValuesIn(gridRankCounts({1, 2, 3, 4, 5, 8}))),
                         gridName);

}  // namespace
