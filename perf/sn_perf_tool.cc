// toolMain: the life of one sn_*_perf process — options, launch mode, header, the threads
// that drive its ranks, footer, JSON and exit code — and the -T watchdog.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "sn_perf_data.h"
#include "sn_perf_run.h"

namespace snperf {

namespace {

constexpr size_t kGiB = size_t(1) << 30;

// Bytes the kernel can hand out without swapping, or 0 when unknown.
size_t memAvailable() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  size_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// nccl-tests lowers -e when the buffers would not fit; here the limit is host memory,
// shared by the ranks of every process on the host. Processes agree on the smallest.
size_t fitMaxBytes(const Options& o, const CollDesc& coll, Coordinator& coord, int nRanks, int procsHere) {
  size_t maxBytes = o.maxBytes;
  const Counts k = coll.counts(o.maxBytes, 1, nRanks);
  const double perRank = double(k.send) + double(std::max(k.send, k.recv));
  const double need = perRank * o.nThreads * o.nGpus * procsHere;
  const size_t avail = memAvailable();
  if (avail > 2 * kGiB && need > double(avail - kGiB) && o.maxBytes > 0)
    maxBytes = size_t(double(o.maxBytes) * (double(avail - kGiB) / need));
  std::vector<uint64_t> all(coord.size());
  uint64_t mine = maxBytes;
  if (!coord.allGather(&mine, sizeof mine, all.data())) return maxBytes;
  for (uint64_t v : all) maxBytes = std::min<size_t>(maxBytes, v);
  return maxBytes;
}

// Processes of this job on this host (they share its memory).
int procsOnHost(const std::vector<DevRec>& devs, const std::string& host) {
  std::vector<int32_t> pids;
  for (const DevRec& d : devs)
    if (host == d.host && std::find(pids.begin(), pids.end(), d.pid) == pids.end()) pids.push_back(d.pid);
  return std::max<int>(1, int(pids.size()));
}

std::vector<DevRec> gatherDevices(const Options& o, Coordinator& coord, const std::string& host, bool* ok) {
  const int local = o.nThreads * o.nGpus;
  std::vector<DevRec> mine(local), all(size_t(local) * coord.size());
  for (int i = 0; i < local; ++i) {
    DevRec& d = mine[i];
    d.rank = coord.rank() * local + i;
    d.pid = int32_t(getpid());
    d.dev = i;
    std::snprintf(d.host, sizeof d.host, "%s", host.c_str());
  }
  *ok = coord.allGather(mine.data(), sizeof(DevRec) * local, all.data());
  return all;
}

// A usage error every process detects alike; only rank 0 says it.
int usageError(Coordinator& coord, const std::string& prog, const std::string& msg) {
  if (coord.rank() == 0) std::fprintf(stderr, "%s: %s\n", prog.c_str(), msg.c_str());
  return kInvalidUsage;
}

int checkRanks(const Options& o, const CollDesc& coll, Coordinator& coord, const std::string& prog, int nRanks) {
  if (coll.powerOfTwoRanks && (nRanks & (nRanks - 1)) != 0)
    return usageError(coord, prog, "needs a power-of-two number of ranks, got " + std::to_string(nRanks));
  if (coll.rooted && o.root >= nRanks)
    return usageError(coord, prog, "invalid root " + std::to_string(o.root) + " for " + std::to_string(nRanks) +
                                       " ranks");
  return -1;
}

void readEnv(Job& job) {
  const char* inject = std::getenv("SNCCL_PERF_INJECT_WRONG");
  job.injectWrong = inject != nullptr && std::strcmp(inject, "1") == 0;
  if (const char* p = std::getenv("SNCCL_PERF_PROGRESS")) job.progressSec = std::strtod(p, nullptr);
}

// Runs the threads of this process; the first one is the main thread (MPI is funneled).
void runThreads(Job& job) {
  std::vector<std::thread> threads;
  for (int t = 1; t < job.opt.nThreads; ++t) threads.emplace_back([&job, t] { runThread(job, t); });
  runThread(job, 0);
  for (std::thread& th : threads) th.join();
}

// How the buffers were allocated and registered (-A, -R), for the -M line.
std::string allocDesc(const Options& o) {
  std::string s = o.alloc == BufAlloc::kMemAlloc ? "ncclMemAlloc"
                  : o.alloc == BufAlloc::kMalloc ? "malloc"
                                                 : "posix_memalign 64";
  if (o.localRegister == 1) s += ", ncclCommRegister";
  if (o.localRegister == 2) s += ", symmetric window";
  return s;
}

// -M: what each rank holds; there is no device memory to report.
std::vector<std::string> memReport(const Options& o, const CollDesc& coll, size_t maxBytes, int nRanks) {
  if (!o.memReport) return {};
  const Counts k = coll.counts(maxBytes, 1, nRanks);
  return {"# Host memory per rank: send " + std::to_string(k.send) + " B, recv " +
          std::to_string(std::max(k.send, k.recv)) + " B (" + allocDesc(o) + ", prefaulted, reused for every size)"};
}

uint64_t totalErrorResults(Job& job) {
  std::vector<uint64_t> all(job.nProcs);
  if (!job.coord.allGather(&job.localErrorResults, sizeof(uint64_t), all.data()))
    failInternal(job, "result exchange failed", __FILE__, __LINE__);
  uint64_t sum = 0;
  for (uint64_t v : all) sum += v;
  return sum;
}

}  // namespace

int64_t Watchdog::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Watchdog::start(int seconds, std::string host) {
  seconds_ = seconds;
  host_ = std::move(host);
  if (seconds <= 0) return;
  thread_ = std::thread([this] {
    uint64_t seen = beats_.load(std::memory_order_relaxed);
    int64_t since = nowNs();  // when `seen` was first read
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const uint64_t now = beats_.load(std::memory_order_relaxed);
      if (now != seen) {
        seen = now;
        since = nowNs();
      } else if (nowNs() - since > int64_t(seconds_) * 1000000000) {
        fire();
      }
    }
  });
}

void Watchdog::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void Watchdog::add(ncclComm_t comm) {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  comms_.push_back(comm);
}

void Watchdog::remove(ncclComm_t comm) {
  std::lock_guard<std::timed_mutex> lock(mutex_);
  comms_.erase(std::remove(comms_.begin(), comms_.end(), comm), comms_.end());
}

// Aborting releases ranks blocked in snccl; their failures stay silent (failNccl waits
// while fired) so that the exit code is the timeout's. An abort that itself hangs does
// not hold the exit up for long.
void Watchdog::fire() {
  fired_.store(true);
  std::printf("%s: Test timeout (%ds) %s:%d\n", host_.c_str(), seconds_, baseName(__FILE__), __LINE__);
  std::fflush(stdout);
  std::vector<ncclComm_t> comms;
  if (mutex_.try_lock_for(std::chrono::seconds(1))) {
    comms = comms_;
    mutex_.unlock();
  }
  std::atomic<bool> done{false};
  std::thread([comms, &done] {
    for (ncclComm_t c : comms) ncclCommAbort(c);
    done.store(true);
  }).detach();
  for (int i = 0; i < 100 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::fflush(stdout);
  _exit(kTimeout);
}

int toolMain(int argc, char** argv, const char* collName, CoordinatorFactory factory) {
  const std::string prog = baseName(argv[0]);
  const CollDesc* coll = findColl(collName);
  Options opt;
  if (coll == nullptr) return kInternal;
  if (int rc = parseOptions(argc, argv, prog.c_str(), &opt); rc >= 0) return rc;
  Watchdog dog;
  dog.start(opt.timeoutSec, hostName());
  std::string err;
  std::unique_ptr<Coordinator> coord = factory(&argc, &argv, &err);
  if (!coord) {
    std::fprintf(stderr, "%s: %s\n", prog.c_str(), err.c_str());
    return kInvalidUsage;
  }
  const int nRanks = coord->size() * opt.nThreads * opt.nGpus;
  if (int rc = checkRanks(opt, *coll, *coord, prog, nRanks); rc >= 0) return rc;
  const std::string host = hostName();
  bool ok = false;
  std::vector<DevRec> devs = gatherDevices(opt, *coord, host, &ok);
  if (!ok) {
    std::fprintf(stderr, "%s: device exchange failed\n", prog.c_str());
    return kInternal;
  }
  const size_t maxBytes = fitMaxBytes(opt, *coll, *coord, nRanks, procsOnHost(devs, host));
  RunInfo info{prog, coord->mode(), coord->size(), nRanks, maxBytes};
  Report report(opt, info, coord->rank() == 0);
  Job job(opt, *coll, *coord, report, dog, opt.nThreads);
  job.nProcs = coord->size();
  job.proc = coord->rank();
  job.nRanks = nRanks;
  job.maxBytes = maxBytes;
  job.minBytes = std::min(opt.minBytes, maxBytes);
  job.host = host;
  readEnv(job);
  report.header(devs, info.maxBytes < opt.maxBytes, memReport(opt, *coll, info.maxBytes, nRanks));
  if (job.proc == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&job.id); r != ncclSuccess) failNccl(job, r, nullptr, __FILE__, __LINE__);
  }
  if (!coord->broadcastId(&job.id)) failInternal(job, "unique id exchange failed", __FILE__, __LINE__);
  runThreads(job);
  const uint64_t errors = totalErrorResults(job);
  job.dog.stop();
  int code = report.finish(errors);
  if (!opt.jsonFile.empty() && job.proc == 0 && !report.writeJson(opt.jsonFile, errors)) {
    std::fprintf(stderr, "%s: cannot write %s\n", prog.c_str(), opt.jsonFile.c_str());
    if (code == kOk) code = kInternal;
  }
  return code;
}

}  // namespace snperf
