// The per-thread part of a perf run: communicators, buffers, the timed loops, validation
// and the aggregation of each result across threads and processes.
//
// Every call passes stream NULL: on host memory that is snccl's blocking mode, so the
// thread that times an operation is the one that runs it and no hand-off to a stream
// worker is measured. A thread with several ranks (-g) issues their calls inside one
// ncclGroupStart/End, as nccl-tests does.
//
// -A device: the buffers are device memory of the driver SNCCL_CUDA_DRIVER names
// (libcuda.so.1 by default), each rank issues on a CUDA stream of its own and every
// group is followed by a synchronisation of those streams, so a time is that of finished
// operations with any library; -c fills and checks host mirrors of the buffers, copied up
// before and down after the operation.
#include "sn_perf_run.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sn_perf_data.h"
#include "support/cuda_test.h"

#define SNP_NCCL(job, comm, call)                                            \
  do {                                                                      \
    ncclResult_t snp_r = (call);                                            \
    if (snp_r != ncclSuccess) failNccl((job), snp_r, (comm), __FILE__, __LINE__); \
  } while (0)

namespace snperf {

namespace {

// One rank driven by this thread.
struct RankBufs {
  ncclComm_t comm = nullptr;
  int rank = 0;
  char* send = nullptr;
  char* recv = nullptr;
  size_t sendBytes = 0;
  size_t recvBytes = 0;
  int32_t* sync = nullptr;  // one element, for the start barrier
  ncclRedOp_t op = ncclSum;
  void* regHandles[2] = {nullptr, nullptr};
  ncclWindow_t win = nullptr;
  sntest::CUstream stream = nullptr;     // -A device
  std::vector<char> hostSend, hostRecv;  // -A device: mirrors of send and recv for -c
};

// The CUDA driver of -A device, loaded once per process.
const sntest::TestCuda& perfCuda() {
  static const sntest::TestCuda c = sntest::loadTestCuda();
  return c;
}
bool onDevice(const Job& job) { return job.opt.alloc == BufAlloc::kDevice; }

struct Ctx {
  Job& job;
  int t;
  std::vector<RankBufs> ranks;
  Pattern pat;
  std::vector<OutBlock> blocks;
  size_t typeSize = 4;
  ncclDataType_t dt = ncclFloat32;
  int op = kSum;
  int root = -1;
};

// Per-process record of one result, exchanged through the coordinator.
struct ProcRecord {
  double timeSum, timeMin, timeMax, timeFirst;
  int64_t threads;
  uint64_t wrong;
};

ncclRedOp_t ncclOpOf(int op) {
  switch (op) {
    case kProd: return ncclProd;
    case kMax: return ncclMax;
    case kMin: return ncclMin;
    case kAvg: return ncclAvg;
    default: return ncclSum;
  }
}

// A non-blocking communicator (used with -g > 1) may answer ncclInProgress: wait it out.
void settle(Ctx& c, ncclResult_t r, const char* file, int line) {
  if (r == ncclSuccess) return;
  if (r != ncclInProgress) failNccl(c.job, r, nullptr, file, line);
  for (RankBufs& rb : c.ranks) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      SNP_NCCL(c.job, rb.comm, ncclCommGetAsyncError(rb.comm, &state));
      if (state == ncclInProgress) usleep(100);
    }
    if (state != ncclSuccess) failNccl(c.job, state, rb.comm, file, line);
  }
}

// Several ranks in one thread cannot each block in init waiting for the others, so with
// -g > 1 they are created non-blocking and awaited together.
void initComms(Ctx& c) {
  Job& job = c.job;
  const int g = job.opt.nGpus;
  c.ranks.resize(g);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  for (int i = 0; i < g; ++i) {
    RankBufs& rb = c.ranks[i];
    rb.rank = (job.proc * job.opt.nThreads + c.t) * g + i;
    if (g == 1) {
      SNP_NCCL(job, nullptr, ncclCommInitRank(&rb.comm, job.nRanks, job.id, rb.rank));
    } else {
      ncclResult_t r = ncclCommInitRankConfig(&rb.comm, job.nRanks, job.id, rb.rank, &cfg);
      if (r != ncclInProgress) SNP_NCCL(job, rb.comm, r);
    }
  }
  settle(c, g == 1 ? ncclSuccess : ncclInProgress, __FILE__, __LINE__);
  for (RankBufs& rb : c.ranks) job.dog.add(rb.comm);
}

// One write per page of [p, p + bytes): the first-touch faults happen here, at setup, as
// they do inside ncclMemAlloc, so that -A compares allocation kinds and not page faults.
void prefault(void* p, size_t bytes) {
  if (bytes == 0) return;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  volatile char* c = static_cast<char*>(p);
  for (size_t off = 0; off < bytes; off += page) c[off] = 0;
  c[bytes - 1] = 0;  // the last page when p is not page aligned
}

// One buffer of the kind -A names.
void* allocBuf(Job& job, ncclComm_t comm, size_t bytes) {
  void* p = nullptr;
  switch (job.opt.alloc) {
    case BufAlloc::kDevice: {
      sntest::CUdeviceptr d = 0;
      if (perfCuda().memAlloc(&d, bytes) != 0)
        failInternal(job, "cuMemAlloc of " + std::to_string(bytes) + " bytes failed", __FILE__, __LINE__);
      return reinterpret_cast<void*>(d);
    }
    case BufAlloc::kMemAlloc:
      SNP_NCCL(job, comm, ncclMemAlloc(&p, bytes));
      return p;
    case BufAlloc::kMalloc:
      p = std::malloc(bytes);
      break;
    case BufAlloc::kMemalign:
      if (posix_memalign(&p, 64, bytes) != 0) p = nullptr;
      break;
  }
  if (p == nullptr) failInternal(job, "cannot allocate " + std::to_string(bytes) + " bytes", __FILE__, __LINE__);
  prefault(p, bytes);
  return p;
}

void freeBuf(Job& job, ncclComm_t comm, void* p) {
  if (job.opt.alloc == BufAlloc::kMemAlloc) SNP_NCCL(job, comm, ncclMemFree(p));
  else if (onDevice(job))
    perfCuda().memFree(sntest::CUdeviceptr(p));
  else std::free(p);
}

// Buffers are allocated once, for the largest size of any datatype, and reused; the slack
// covers -u's misalignment.
void allocBuffers(Ctx& c) {
  Job& job = c.job;
  const Counts k = job.coll.counts(job.maxBytes, 1, job.nRanks);
  const size_t slack = 64 + size_t(job.opt.unalign) * 8;
  if (onDevice(job) && !perfCuda().on) failInternal(job, "-A device: " + perfCuda().why, __FILE__, __LINE__);
  if (onDevice(job) && !perfCuda().bindThread())
    failInternal(job, "-A device: no context on device 0", __FILE__, __LINE__);
  for (RankBufs& rb : c.ranks) {
    rb.sendBytes = k.send + slack;
    rb.recvBytes = std::max(k.send, k.recv) + slack;
    rb.send = static_cast<char*>(allocBuf(job, rb.comm, rb.sendBytes));
    rb.recv = static_cast<char*>(allocBuf(job, rb.comm, rb.recvBytes));
    rb.sync = static_cast<int32_t*>(allocBuf(job, rb.comm, 64));
    if (onDevice(job)) {
      if (perfCuda().streamCreate(&rb.stream, 0) != 0) failInternal(job, "cuStreamCreate failed", __FILE__, __LINE__);
      perfCuda().memcpyHtoD(sntest::CUdeviceptr(rb.sync), "\0\0\0\0", 4);
      rb.hostSend.resize(rb.sendBytes);
      rb.hostRecv.resize(rb.recvBytes);
    }
  if (job.opt.localRegister == 1) {
      SNP_NCCL(job, rb.comm, ncclCommRegister(rb.comm, rb.send, rb.sendBytes, &rb.regHandles[0]));
      SNP_NCCL(job, rb.comm, ncclCommRegister(rb.comm, rb.recv, rb.recvBytes, &rb.regHandles[1]));
    }
  }
  if (job.opt.localRegister == 2) {
    // Symmetric windows are collective: every rank of the thread registers in one group.
    SNP_NCCL(job, nullptr, ncclGroupStart());
    for (RankBufs& rb : c.ranks)
      SNP_NCCL(job, rb.comm, ncclCommWindowRegister(rb.comm, rb.recv, rb.recvBytes, &rb.win, NCCL_WIN_COLL_SYMMETRIC));
    settle(c, ncclGroupEnd(), __FILE__, __LINE__);
  }
}

// Waits out a non-blocking communicator's ncclInProgress after a call on it alone.
void settleOne(Ctx& c, RankBufs& rb, ncclResult_t r, const char* file, int line) {
  ncclResult_t state = r;
  while (state == ncclInProgress) {
    usleep(100);
    SNP_NCCL(c.job, rb.comm, ncclCommGetAsyncError(rb.comm, &state));
  }
  if (state != ncclSuccess) failNccl(c.job, state, rb.comm, file, line);
}

void freeAll(Ctx& c) {
  for (RankBufs& rb : c.ranks) {
    for (void* h : rb.regHandles)
      if (h) SNP_NCCL(c.job, rb.comm, ncclCommDeregister(rb.comm, h));
    if (rb.win) SNP_NCCL(c.job, rb.comm, ncclCommWindowDeregister(rb.comm, rb.win));
    // Deregistered above, before the memory goes back.
    freeBuf(c.job, rb.comm, rb.send);
    freeBuf(c.job, rb.comm, rb.recv);
    freeBuf(c.job, rb.comm, rb.sync);
    if (rb.stream != nullptr) perfCuda().streamDestroy(rb.stream);
    c.job.dog.remove(rb.comm);
    settleOne(c, rb, ncclCommFinalize(rb.comm), __FILE__, __LINE__);
    SNP_NCCL(c.job, rb.comm, ncclCommDestroy(rb.comm));
  }
}

// The send and receive pointers of one rank for one placement (nccl-tests' layout).
void pointers(const Ctx& c, const RankBufs& rb, const Counts& k, bool inPlace, char** send, char** recv) {
  const size_t shift = size_t(c.job.opt.unalign) * c.typeSize;
  if (!inPlace) {
    *send = rb.send + shift;
    *recv = rb.recv + shift;
    return;
  }
  *send = rb.recv + shift + k.sendInplaceOff * size_t(rb.rank) * c.typeSize;
  *recv = rb.recv + shift + k.recvInplaceOff * size_t(rb.rank) * c.typeSize;
}

// -A device: waits for everything queued on the thread's ranks' streams.
void syncStreams(Ctx& c) {
  for (RankBufs& rb : c.ranks)
    if (rb.stream != nullptr && perfCuda().streamSynchronize(rb.stream) != 0)
      failInternal(c.job, "cuStreamSynchronize failed", __FILE__, __LINE__);
}

// Where -c reads and writes p: p itself, or its place in the host mirror (-A device).
char* hostView(RankBufs& rb, char* p) {
  if (rb.stream == nullptr) return p;
  if (p >= rb.send && p < rb.send + rb.sendBytes) return rb.hostSend.data() + (p - rb.send);
  return rb.hostRecv.data() + (p - rb.recv);
}
// Copies the mirrors up (toDevice) or recv's down.
void mirror(Ctx& c, bool toDevice) {
  const sntest::TestCuda& cu = perfCuda();
  for (RankBufs& rb : c.ranks) {
    if (rb.stream == nullptr) continue;
    bool ok = toDevice ? cu.memcpyHtoD(sntest::CUdeviceptr(rb.send), rb.hostSend.data(), rb.sendBytes) == 0 &&
                             cu.memcpyHtoD(sntest::CUdeviceptr(rb.recv), rb.hostRecv.data(), rb.recvBytes) == 0
                       : cu.memcpyDtoH(rb.hostRecv.data(), sntest::CUdeviceptr(rb.recv), rb.recvBytes) == 0;
    if (!ok) failInternal(c.job, "a copy between device memory and its host mirror failed", __FILE__, __LINE__);
  }
}

// One operation (times agg) on every rank of the thread, step by step.
void launch(Ctx& c, const Counts& k, bool inPlace, int agg) {
  Job& job = c.job;
  const int steps = job.coll.steps(job.nRanks);
  for (int step = 0; step < steps; ++step) {
    SNP_NCCL(job, nullptr, ncclGroupStart());
    for (int a = 0; a < agg; ++a) {
      for (RankBufs& rb : c.ranks) {
        char *send, *recv;
        pointers(c, rb, k, inPlace, &send, &recv);
        const auto stream = reinterpret_cast<cudaStream_t>(rb.stream);
        IssueArgs args{send, recv, k.param, c.dt, rb.op, c.root, rb.rank, job.nRanks, step, rb.comm, stream};
        SNP_NCCL(job, rb.comm, job.coll.issue(args));
      }
    }
    settle(c, ncclGroupEnd(), __FILE__, __LINE__);
    syncStreams(c);
  }
  job.dog.beat();
}

// All ranks of the job meet: a one-element allreduce, so that the timed loops start
// together within the library's own latency.
void syncAll(Ctx& c) {
  SNP_NCCL(c.job, nullptr, ncclGroupStart());
  for (RankBufs& rb : c.ranks)
    SNP_NCCL(
        c.job, rb.comm,
        ncclAllReduce(rb.sync, rb.sync, 1, ncclInt32, ncclSum, rb.comm, reinterpret_cast<cudaStream_t>(rb.stream)));
  settle(c, ncclGroupEnd(), __FILE__, __LINE__);
  syncStreams(c);
}

double clockUs(bool cpu) {
  timespec ts;
  clock_gettime(cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
}

// Microseconds per operation over the timed iterations (-n x -m). With -I 1 every
// iteration starts after a barrier and its time lands in the thread's iterUs.
double timeHalf(Ctx& c, const Counts& k, bool inPlace) {
  const Options& o = c.job.opt;
  if (o.perIterTiming) {
    std::vector<double>& times = c.job.iterUs[size_t(c.t)];
    times.clear();
    double sum = 0;
    for (int i = 0; i < o.iters; ++i) {
      syncAll(c);
      const double t0 = clockUs(o.cpuTime);
      launch(c, k, inPlace, o.aggIters);
      times.push_back((clockUs(o.cpuTime) - t0) / o.aggIters);
      sum += times.back();
    }
    return sum / o.iters;
  }
  syncAll(c);
  const double t0 = clockUs(o.cpuTime);
  for (int i = 0; i < o.iters; ++i) {
    launch(c, k, inPlace, o.aggIters);
    if (o.blocking == 1) syncAll(c);
  }
  if (o.blocking == 3) syncAll(c);
  return (clockUs(o.cpuTime) - t0) / (double(o.iters) * o.aggIters);
}

// The test hook: damage one element of every rank's output, far from any rounding.
void injectWrong(Ctx& c, const Counts& k, bool inPlace) {
  for (RankBufs& rb : c.ranks) {
    c.blocks.clear();
    c.job.coll.outputs(rb.rank, c.job.nRanks, c.root, k, &c.blocks);
    for (const OutBlock& b : c.blocks) {
      if (b.len == 0) continue;
      char *send, *recv;
      pointers(c, rb, k, inPlace, &send, &recv);
      hostView(rb, recv)[(b.outOff + 1) * c.typeSize - 1] ^= 0x40;  // an exponent or high-order bit
      break;
    }
  }
}

// -c passes: fresh inputs, one operation, every output element compared.
uint64_t validate(Ctx& c, const Counts& k, bool inPlace, uint64_t seed) {
  Job& job = c.job;
  uint64_t wrong = 0;
  for (int pass = 0; pass < job.opt.check; ++pass) {
    c.pat.build(c.dt, job.coll.reduces ? c.op : -1, job.nRanks, seed * 1000003 + uint64_t(pass));
    for (RankBufs& rb : c.ranks) {
      char *send, *recv;
      pointers(c, rb, k, inPlace, &send, &recv);
      poison(hostView(rb, recv), k.recv * c.typeSize);  // before the inputs: in place they overlap
      c.pat.fill(rb.rank, hostView(rb, send), k.send);
    }
    mirror(c, true);
    launch(c, k, inPlace, 1);
    mirror(c, false);
    if (job.injectWrong) injectWrong(c, k, inPlace);
    for (RankBufs& rb : c.ranks) {
      char *send, *recv;
      pointers(c, rb, k, inPlace, &send, &recv);
      c.blocks.clear();
      job.coll.outputs(rb.rank, job.nRanks, c.root, k, &c.blocks);
      for (const OutBlock& b : c.blocks) wrong += c.pat.countWrong(b, hostView(rb, recv));
    }
  }
  return wrong;
}

// Combines the threads' and processes' times (-a) and wrong counts into one result.
HalfResult aggregate(Ctx& c, const Counts& k, double timeUs, uint64_t wrong) {
  Job& job = c.job;
  job.slots[c.t] = {timeUs, wrong};
  job.bar.arrive_and_wait();
  HalfResult h;
  if (c.t != 0) return h;  // the next syncAll keeps slots stable until thread 0 is done
  ProcRecord mine{0, 1e300, 0, job.slots[0].time, int64_t(job.slots.size()), 0};
  for (const ThreadSlot& s : job.slots) {
    mine.timeSum += s.time;
    mine.timeMin = std::min(mine.timeMin, s.time);
    mine.timeMax = std::max(mine.timeMax, s.time);
    mine.wrong += s.wrong;
  }
  if (mine.wrong > 0) ++job.localErrorResults;
  std::vector<ProcRecord> all(job.nProcs);
  if (!job.coord.allGather(&mine, sizeof mine, all.data())) failInternal(job, "result exchange failed", __FILE__, __LINE__);
  double sum = 0, mn = 1e300, mx = 0;
  int64_t n = 0;
  for (const ProcRecord& p : all) {
    sum += p.timeSum;
    n += p.threads;
    mn = std::min(mn, p.timeMin);
    mx = std::max(mx, p.timeMax);
    h.wrong += p.wrong;
  }
  const double t[] = {all[0].timeFirst, sum / double(n), mn, mx};
  h.timeUs = t[job.opt.average];
  h.checked = job.opt.check > 0;
  const double bytes = double(k.param) * double(c.typeSize) * job.coll.algFactor(job.nRanks);
  h.algBw = h.timeUs > 0 ? bytes / (h.timeUs * 1e-6) / 1e9 : 0;
  h.busBw = h.algBw * job.coll.busFactor(job.nRanks);
  job.dog.beat();
  return h;
}

// -I 1: each call's time is that of its slowest rank (threads, then processes); the
// median, 99th percentile (nearest rank) and largest over the timed calls.
struct IterStats {
  double p50 = 0, p99 = 0, max = 0;
};
IterStats iterStats(Ctx& c) {
  Job& job = c.job;
  job.bar.arrive_and_wait();
  IterStats st;
  if (c.t != 0) {
    job.bar.arrive_and_wait();  // thread 0 reads every thread's times first
    return st;
  }
  const size_t n = size_t(job.opt.iters);
  std::vector<double> mine(n, 0.0);
  for (const std::vector<double>& times : job.iterUs)
    for (size_t i = 0; i < n && i < times.size(); ++i) mine[i] = std::max(mine[i], times[i]);
  job.bar.arrive_and_wait();
  std::vector<double> all(n * size_t(job.nProcs));
  if (!job.coord.allGather(mine.data(), n * sizeof(double), all.data()))
    failInternal(job, "per-call time exchange failed", __FILE__, __LINE__);
  std::vector<double> slowest(n, 0.0);
  for (int p = 0; p < job.nProcs; ++p)
    for (size_t i = 0; i < n; ++i) slowest[i] = std::max(slowest[i], all[size_t(p) * n + i]);
  std::sort(slowest.begin(), slowest.end());
  auto rank = [&](double q) { return slowest[std::min(n - 1, size_t(std::ceil(q * double(n))) - 1)]; };
  st.p50 = rank(0.5);
  st.p99 = rank(0.99);
  st.max = slowest.back();
  return st;
}

void progress(Job& job, const RowResult& row, size_t total) {
  using clock = std::chrono::steady_clock;
  static const clock::time_point start = clock::now();
  static clock::time_point last = start;
  const clock::time_point now = clock::now();
  const double since = std::chrono::duration<double>(now - last).count();
  if (job.proc != 0 || job.progressSec <= 0 || since < job.progressSec) return;
  last = now;
  const double elapsed = std::chrono::duration<double>(now - start).count();
  std::string of = total ? "/" + std::to_string(total) : "";
  std::fprintf(stderr, "# progress: row %zu%s (%zu B %s %s), %.0f s elapsed\n", job.report.rowsDone(),
               of.c_str(), row.size, row.type.c_str(), row.redop.c_str(), elapsed);
}

// One size: both placements, printed as one row.
void runSize(Ctx& c, size_t bytes, uint64_t seed, size_t totalRows) {
  Job& job = c.job;
  const Counts k = job.coll.counts(bytes, c.typeSize, job.nRanks);
  RowResult row;
  row.size = std::max(k.send, k.recv) * c.typeSize;
  row.count = k.param;
  row.type = typeDesc(c.dt).name;
  row.redop = job.coll.reduces ? opKindName(c.op) : "none";
  row.root = c.root;
  if (c.t == 0) job.report.startRow(row);
  IterStats calls[2];
  for (int inPlace = 0; inPlace < 2; ++inPlace) {
    const double us = timeHalf(c, k, inPlace);
    if (job.opt.perIterTiming) calls[inPlace] = iterStats(c);
    const uint64_t wrong = job.opt.check > 0 ? validate(c, k, inPlace, seed * 2 + uint64_t(inPlace)) : 0;
    HalfResult h = aggregate(c, k, us, wrong);
    if (c.t == 0) job.report.addHalf(inPlace, h);
  }
  if (c.t == 0) {
    job.report.endRow();
    if (job.opt.perIterTiming && job.proc == 0)
      std::printf("#  per call (us), slowest rank: out-of-place p50 %.1f p99 %.1f max %.1f; "
                  "in-place p50 %.1f p99 %.1f max %.1f\n",
                  calls[0].p50, calls[0].p99, calls[0].max, calls[1].p50, calls[1].p99, calls[1].max);
    progress(job, row, totalRows);
  }
}

// One datatype x operator x root: warm up at the largest and smallest sizes, then sweep.
// Unlike nccl-tests, the warm-up runs both placements: an in-place call may take another
// path than an out-of-place one, and a path's first call connects its peers, which must
// not land in a timed loop.
void runTest(Ctx& c, uint64_t testIndex, size_t totalRows) {
  Job& job = c.job;
  const std::vector<size_t> sizes = sweepSizes(job.opt, job.minBytes, job.maxBytes);
  for (size_t bytes : {job.maxBytes, job.minBytes}) {
    const Counts k = job.coll.counts(bytes, c.typeSize, job.nRanks);
    for (bool inPlace : {false, true})
      for (int i = 0; i < job.opt.warmup; ++i) launch(c, k, inPlace, 1);
  }
  for (size_t i = 0; i < sizes.size(); ++i) runSize(c, sizes[i], testIndex * 4099 + i, totalRows);
}

void withOp(Ctx& c, int op) {
  c.op = op;
  for (RankBufs& rb : c.ranks) {
    if (rb.op >= ncclNumOps) SNP_NCCL(c.job, rb.comm, ncclRedOpDestroy(rb.op, rb.comm));
    rb.op = ncclOpOf(op);
    if (op != kMulSum) continue;
    uint64_t scalar = encodeValue(typeDesc(c.dt), mulSumScalar(typeDesc(c.dt)));  // little-endian prefix
    SNP_NCCL(c.job, rb.comm, ncclRedOpCreatePreMulSum(&rb.op, &scalar, c.dt, ncclScalarHostImmediate, rb.comm));
  }
}

void sweep(Ctx& c) {
  Job& job = c.job;
  const Options& o = job.opt;
  std::vector<int> ops = job.coll.reduces ? o.ops : std::vector<int>{-1};
  std::vector<int> roots{-1};
  if (job.coll.rooted) {
    roots.clear();
    for (int r = o.root < 0 ? 0 : o.root; r <= (o.root < 0 ? job.nRanks - 1 : o.root); ++r) roots.push_back(r);
  }
  const size_t perCycle =
      o.types.size() * ops.size() * roots.size() * sweepSizes(o, job.minBytes, job.maxBytes).size();
  uint64_t testIndex = 0;
  for (int cycle = 0; o.cycles == 0 || cycle < o.cycles; ++cycle) {
    for (ncclDataType_t dt : o.types) {
      c.dt = dt;
      c.typeSize = size_t(typeDesc(dt).size);
      for (int op : ops) {
        withOp(c, op);
        for (int root : roots) {
          c.root = root;
          runTest(c, ++testIndex, size_t(o.cycles) * perCycle);
        }
      }
      withOp(c, kSum);
    }
  }
}

}  // namespace

std::vector<size_t> sweepSizes(const Options& o, size_t minBytes, size_t maxBytes) {
  std::vector<size_t> out;
  for (size_t s = minBytes; s <= maxBytes;) {
    out.push_back(s);
    const size_t next = o.stepFactor > 1 ? s * size_t(o.stepFactor) : s + o.stepBytes;
    if (next <= s) break;  // -b 0 with -f, or overflow
    s = next;
  }
  return out;
}

void runThread(Job& job, int t) {
  Ctx c{job, t, {}, {}, {}};
  initComms(c);
  allocBuffers(c);
  job.dog.beat();
  sweep(c);
  // Nobody destroys a communicator a peer thread may still be using for its last result.
  job.bar.arrive_and_wait();
  freeAll(c);
}

void failNccl(Job& job, ncclResult_t r, ncclComm_t comm, const char* file, int line) {
  // After a -T abort the communicators are gone; the watchdog reports and exits.
  while (job.dog.fired()) pause();
  std::printf("%s: Test NCCL failure %s:%d '%s / %s'\n", job.host.c_str(), baseName(file), line,
              ncclGetErrorString(r), ncclGetLastError(comm));
  job.coord.abortJob(kNcclError);
  _exit(kNcclError);  // abortJob does not return; virtual calls hide that from the compiler
}

void failInternal(Job& job, const std::string& what, const char* file, int line) {
  while (job.dog.fired()) pause();
  std::printf(" .. %s pid %d: Test failure %s:%d (%s)\n", job.host.c_str(), int(getpid()), baseName(file), line,
              what.c_str());
  job.coord.abortJob(kInternal);
  _exit(kInternal);
}

}  // namespace snperf
