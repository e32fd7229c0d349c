// sn_*_perf: nccl-tests compatible benchmarks of snccl on host memory.
//
// One implementation serves every tool: a table of collectives (sn_perf_colls.cc)
// describes sizes, bandwidth factors, how to issue one operation and which output
// elements each rank must hold afterwards; the runner (sn_perf_run.cc) sweeps sizes,
// types, operations and roots; the report (sn_perf_report.cc) prints nccl-tests 2.19.6's
// table byte for byte. Each executable is sn_perf_main.cc compiled with the name of its
// collective (see perf/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "snccl/nccl.h"

namespace snperf {

// Exit codes: nccl-tests' testResult_t, so scripts written for it keep working.
enum ExitCode { kOk = 0, kInternal = 1, kCudaError = 2, kNcclError = 3, kTimeout = 4, kNotImplemented = 5,
                kInvalidUsage = 6, kWrongResults = 7 };

// Reduction operators the tools can run ("-o"); kMulSum is ncclRedOpCreatePreMulSum.
enum OpKind { kSum, kProd, kMax, kMin, kAvg, kMulSum, kNumOpKinds };
const char* opKindName(int op);

// How the tools allocate their buffers ("-A"): ncclMemAlloc, or what a torch or MPI program
// passes, plain malloc or posix_memalign to 64 bytes (torch's CPU allocator), or device
// memory (cuMemAlloc through the driver SNCCL_CUDA_DRIVER names, calls on CUDA streams).
enum class BufAlloc { kMemAlloc, kMalloc, kMemalign, kDevice };
const char* bufAllocName(BufAlloc a);

struct Options {
  int nThreads = 1;
  int nGpus = 1;
  size_t minBytes = size_t(32) << 20;
  size_t maxBytes = size_t(32) << 20;
  size_t stepBytes = size_t(1) << 20;
  int stepFactor = 1;  // > 1: multiplicative steps (-f)
  int iters = 20;
  int warmup = 1;
  int aggIters = 1;
  int cycles = 1;  // 0: forever
  int check = 1;
  int blocking = 0;
  int average = 1;
  int timeoutSec = 0;
  int localRegister = 0;
  int unalign = 0;
  BufAlloc alloc = BufAlloc::kMemAlloc;
  bool parallelInit = false;
  bool streamNull = false;
  bool cpuTime = false;
  bool timestamps = false;
  bool perIterTiming = false;  // -I 1: time every call on its own and report percentiles
  bool memReport = false;
  std::string jsonFile;
  std::vector<ncclDataType_t> types{ncclFloat32};
  std::vector<int> ops{kSum};
  int root = 0;  // -1: every root ("-r all")
};

// Parses nccl-tests' command line. Returns -1 to go on, else the exit code (0 after -h).
int parseOptions(int argc, char** argv, const char* prog, Options* out);
// "8", "64K", "1.5M", "2G" -> bytes (x1024 per suffix); false on a malformed size.
bool parseSize(const char* text, size_t* out);

// How the processes of a run find each other: one process (mode a), mpirun (b) or a
// RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT launcher (c). Only the first thread of each
// process calls it.
class Coordinator {
 public:
  virtual ~Coordinator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank 0's id reaches every process.
  virtual bool broadcastId(ncclUniqueId* id) = 0;
  // Every process contributes `bytes` bytes; `all` receives size() * bytes, by rank.
  virtual bool allGather(const void* mine, size_t bytes, void* all) = 0;
  // Ends the whole job with `code` (mpirun needs MPI_Abort to stop the other ranks).
  [[noreturn]] virtual void abortJob(int code);
  // A short description for messages, e.g. "mpirun" or "RANK/WORLD_SIZE (tcp 10.0.0.1:29500)".
  virtual std::string mode() const = 0;
};
using CoordinatorFactory = std::unique_ptr<Coordinator> (*)(int* argc, char*** argv, std::string* err);

// Mode (a) or (c), chosen by the environment.
std::unique_ptr<Coordinator> makeLaunchCoordinator(int* argc, char*** argv, std::string* err);
// Mode (b), in the *_perf_mpi executables only.
std::unique_ptr<Coordinator> makeMpiCoordinator(int* argc, char*** argv, std::string* err);
// The TCP coordinator of mode (c) on its own (tests use it directly).
std::unique_ptr<Coordinator> makeTcpCoordinator(int rank, int size, const std::string& addr, int port,
                                                std::string* err);

struct CollDesc;
// The whole tool: parse, launch, run, report. Returns the exit code.
int toolMain(int argc, char** argv, const char* collName, CoordinatorFactory factory);

// The basename of __FILE__, for the "file:line" of nccl-tests' error lines.
const char* baseName(const char* path);
std::string hostName();

}  // namespace snperf
