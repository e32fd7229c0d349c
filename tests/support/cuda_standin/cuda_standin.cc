// A CPU stand-in for the slice of the CUDA driver API snccl calls (src/device/cuda_api.h)
// and the tests call (tests/support/cuda_test.h), built as a shared library that
// SNCCL_CUDA_DRIVER points at. It is not a GPU emulator; it keeps the properties the
// library's correctness depends on, so that tests can fail where a GPU would:
//
// - Device memory is not host memory. An allocation is a memfd mapped twice: at its
//   device address, in a region that stays PROT_NONE (host code that dereferences a
//   device pointer crashes, as on a GPU), and at a shadow address the stand-in's copies
//   and kernels use. cuPointerGetAttribute knows only live allocations.
// - Streams are ordered and asynchronous: each has a worker thread that runs its
//   operations in order (copies, kernel launches, host functions, stream memory
//   operations), later than the call that queued them. Handle 0 is the legacy stream.
// - Kernel launches of snccl's reduction kernel run the host build of the same source
//   (device/kernels/reduce_kernel.h) on the shadow addresses.
//
// Every device reports the name "snccl CPU stand-in of the CUDA driver" (the library logs
// it at INFO), so a log says which driver ran. sncclStandinFailLaunches(n) makes the next
// n kernel launches fail, and sncclStandinSetCapturing(stream, on) makes cuStreamIsCapturing
// report a stream as being captured into a graph, for tests of the error paths.
// sncclStandinSlowStreams(us) delays every stream operation by `us`, and
// sncclStandinPendingOps() counts the operations queued on all streams and not finished,
// so a test can see work left running behind a call that returned.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "device/cuda_api.h"
#include "device/kernels/reduce_kernel.h"

using namespace snccl::device;

namespace {

constexpr size_t kRegionBytes = size_t(16) << 30;
constexpr size_t kGranularity = size_t(64) << 10;
constexpr CUresult kLaunchFailed = 719;  // CUDA_ERROR_LAUNCH_FAILED

int streamDelayUs();  // sncclStandinSlowStreams

class Stream {
 public:
  Stream() : worker_([this] { run(); }) {}
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void push(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ops_.push_back(std::move(op));
      ++busy_;
    }
    cv_.notify_all();
  }
  void sync() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return busy_ == 0; });
  }
  bool idle() { return pending() == 0; }
  size_t pending() {
    std::lock_guard<std::mutex> lock(mutex_);
    return busy_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !ops_.empty(); });
      if (ops_.empty()) return;
      std::function<void()> op = std::move(ops_.front());
      ops_.pop_front();
      lock.unlock();
      if (int us = streamDelayUs(); us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
      op();
      lock.lock();
      --busy_;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  size_t busy_ = 0;
  bool stop_ = false;
  std::thread worker_;  // last: starts once the members above exist
};

struct Allocation {
  size_t bytes;
  int fd;
};

struct State {
  char* dev = nullptr;     // device addresses: PROT_NONE
  char* shadow = nullptr;  // where the bytes are
  std::mutex mutex;
  size_t bump = 0;
  std::map<uintptr_t, Allocation> allocs;     // by device address
  std::multimap<size_t, uintptr_t> freeList;  // reusable device ranges by size
  std::set<void*> hostAllocs;
  std::set<Stream*> streams;
  Stream* legacy = nullptr;
  std::atomic<int> failLaunches{0};
  std::atomic<int> streamDelayUs{0};
  std::set<CUstream> capturing;

  State() {
    dev =
        static_cast<char*>(mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    shadow =
        static_cast<char*>(mmap(nullptr, kRegionBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  }
};

State& st() {
  static State* s = new State();  // never destroyed: stream workers may outlive main
  return *s;
}

// After fork the child has no stream workers: it starts with no streams (the parent's
// Stream objects are abandoned) and fresh locks. Device memory stays mapped (memfd).
void afterForkInChild() {
  State& s = st();
  new (&s.mutex) std::mutex();
  s.streams.clear();
  s.legacy = nullptr;
}
[[maybe_unused]] const int kAtFork = pthread_atfork(nullptr, nullptr, afterForkInChild);

bool isDev(CUdeviceptr p, size_t* offset = nullptr) {
  State& s = st();
  auto c = reinterpret_cast<char*>(p);
  if (c < s.dev || c >= s.dev + kRegionBytes) return false;
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.allocs.upper_bound(uintptr_t(p));
  if (it == s.allocs.begin()) return false;
  --it;
  if (uintptr_t(p) >= it->first + it->second.bytes) return false;
  if (offset != nullptr) *offset = size_t(c - s.dev);
  return true;
}

// Where the stand-in reads and writes p: its shadow for device memory, p itself for host.
void* at(CUdeviceptr p) {
  State& s = st();
  auto c = reinterpret_cast<char*>(p);
  if (c >= s.dev && c < s.dev + kRegionBytes) return s.shadow + (c - s.dev);
  return c;
}

int streamDelayUs() { return st().streamDelayUs.load(); }

Stream* streamOf(CUstream h) {
  if (h != nullptr) return reinterpret_cast<Stream*>(h);
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.legacy == nullptr) {
    s.legacy = new Stream();
    s.streams.insert(s.legacy);
  }
  return s.legacy;
}

void syncAll() {
  State& s = st();
  std::set<Stream*> all;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    all = s.streams;
  }
  for (Stream* x : all) x->sync();
}

CUcontext fakeContext() { return reinterpret_cast<CUcontext>(uintptr_t(0x5c0)); }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void sncclStandinFailLaunches(int n) { st().failLaunches.store(n); }
__attribute__((visibility("default"))) void sncclStandinSlowStreams(int us) { st().streamDelayUs.store(us); }
__attribute__((visibility("default"))) size_t sncclStandinPendingOps() {
  std::lock_guard<std::mutex> lock(st().mutex);
  size_t n = st().legacy != nullptr ? st().legacy->pending() : 0;
  for (Stream* s : st().streams) n += s->pending();
  return n;
}
__attribute__((visibility("default"))) void sncclStandinSetCapturing(CUstream s, int on) {
  std::lock_guard<std::mutex> lock(st().mutex);
  if (on) {
    st().capturing.insert(s);
  } else {
    st().capturing.erase(s);
  }
}

CUresult cuInit(unsigned) {
  st();
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult e, const char** str) {
  switch (e) {
    case CUDA_SUCCESS:
      *str = "no error";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *str = "invalid argument";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *str = "out of memory";
      break;
    case CUDA_ERROR_INVALID_HANDLE:
      *str = "invalid resource handle";
      break;
    case CUDA_ERROR_NOT_FOUND:
      *str = "named symbol not found";
      break;
    case CUDA_ERROR_NOT_READY:
      *str = "device not ready";
      break;
    case kLaunchFailed:
      *str = "unspecified launch failure (stand-in: sncclStandinFailLaunches)";
      break;
    default:
      *str = "stand-in error";
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_VALUE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  snprintf(name, size_t(len), "%s", "snccl CPU stand-in of the CUDA driver");
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  *ctx = fakeContext();
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxSynchronize() {
  syncAll();
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr p) {
  bool dev = isDev(p);
  bool host = false;
  if (!dev) {
    std::lock_guard<std::mutex> lock(st().mutex);
    host = st().hostAllocs.count(reinterpret_cast<void*>(p)) != 0;
  }
  if (!dev && !host) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = 0;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) = fakeContext();
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  State& s = st();
  if (s.dev == MAP_FAILED || s.shadow == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const size_t size = (std::max<size_t>(bytes, 1) + kGranularity - 1) / kGranularity * kGranularity;
  std::lock_guard<std::mutex> lock(s.mutex);
  size_t off;
  auto reuse = s.freeList.find(size);
  if (reuse != s.freeList.end()) {
    off = reuse->second;
    s.freeList.erase(reuse);
  } else {
    if (s.bump + size > kRegionBytes) return CUDA_ERROR_OUT_OF_MEMORY;
    off = s.bump;
    s.bump += size;
  }
  int fd = memfd_create("snccl-cuda-standin", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, off_t(size)) != 0 ||
      mmap(s.shadow + off, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    if (fd >= 0) close(fd);
    s.freeList.emplace(size, off);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.allocs[uintptr_t(s.dev + off)] = {size, fd};
  *p = CUdeviceptr(s.dev + off);
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  State& s = st();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.allocs.find(uintptr_t(p));
  if (it == s.allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  const size_t off = size_t(reinterpret_cast<char*>(p) - s.dev);
  mmap(s.shadow + off, it->second.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  close(it->second.fd);
  s.freeList.emplace(it->second.bytes, off);
  s.allocs.erase(it);
  return CUDA_SUCCESS;
}
CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned) {
  *p = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (*p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(*p, 0, bytes);
  std::lock_guard<std::mutex> lock(st().mutex);
  st().hostAllocs.insert(*p);
  return CUDA_SUCCESS;
}
CUresult cuMemFreeHost(void* p) {
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().hostAllocs.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  free(p);
  return CUDA_SUCCESS;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned) {
  *d = CUdeviceptr(p);
  return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream* s, unsigned) {
  auto* x = new Stream();
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    st().streams.insert(x);
  }
  *s = reinterpret_cast<CUstream>(x);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream h) {
  if (h == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Stream* x = reinterpret_cast<Stream*>(h);
  {
    std::lock_guard<std::mutex> lock(st().mutex);
    if (st().streams.erase(x) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  x->sync();
  delete x;
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream h) {
  streamOf(h)->sync();
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream h, int* status) {
  std::lock_guard<std::mutex> lock(st().mutex);
  *status = st().capturing.count(h) != 0 ? 1 : 0;  // CU_STREAM_CAPTURE_STATUS_ACTIVE : NONE
  return CUDA_SUCCESS;
}
CUresult cuStreamQuery(CUstream h) { return streamOf(h)->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY; }

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream h) {
  streamOf(h)->push([dst, src, bytes] { std::memcpy(at(dst), at(src), bytes); });
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes, CUstream h) {
  return cuMemcpyAsync(dst, CUdeviceptr(src), bytes, h);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes, CUstream h) {
  return cuMemcpyAsync(CUdeviceptr(dst), src, bytes, h);
}
// The synchronous copies follow the legacy stream's earlier work, as the driver's do.
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  streamOf(nullptr)->sync();
  std::memcpy(at(dst), src, bytes);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  streamOf(nullptr)->sync();
  std::memcpy(dst, at(src), bytes);
  return CUDA_SUCCESS;
}

CUresult cuStreamWriteValue32_v2(CUstream h, CUdeviceptr addr, uint32_t value, unsigned) {
  streamOf(h)->push(
      [addr, value] { reinterpret_cast<std::atomic<uint32_t>*>(at(addr))->store(value, std::memory_order_release); });
  return CUDA_SUCCESS;
}
CUresult cuStreamWaitValue32_v2(CUstream h, CUdeviceptr addr, uint32_t value, unsigned flags) {
  if (flags != CU_STREAM_WAIT_VALUE_GEQ) return CUDA_ERROR_NOT_SUPPORTED;
  streamOf(h)->push([addr, value] {
    auto* w = reinterpret_cast<std::atomic<uint32_t>*>(at(addr));
    while (int32_t(w->load(std::memory_order_acquire) - value) < 0) usleep(20);
  });
  return CUDA_SUCCESS;
}
CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void* data) {
  streamOf(h)->push([fn, data] { fn(data); });
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule* m, const void*) {
  *m = reinterpret_cast<CUmodule>(uintptr_t(0x30d));
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char* name) {
  if (std::strcmp(name, kernels::kReduceKernelName) != 0) return CUDA_ERROR_NOT_FOUND;
  *f = reinterpret_cast<CUfunction>(uintptr_t(0xf17));
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream h,
                        void** params, void**) {
  if (f != reinterpret_cast<CUfunction>(uintptr_t(0xf17)) || params == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int fail = st().failLaunches.load();
  while (fail > 0 && !st().failLaunches.compare_exchange_weak(fail, fail - 1)) {
  }
  if (fail > 0) return kLaunchFailed;
  // Kernel parameters are copied at launch, as the driver does.
  kernels::ReduceKernelArgs a = *static_cast<const kernels::ReduceKernelArgs*>(params[0]);
  for (const void* p : {static_cast<const void*>(a.dst), a.a, a.b})
    if (p != nullptr && !isDev(CUdeviceptr(p))) return CUDA_ERROR_INVALID_VALUE;  // kernels see device memory only
  a.dst = at(CUdeviceptr(a.dst));
  a.a = at(CUdeviceptr(a.a));
  if (a.b != nullptr) a.b = at(CUdeviceptr(a.b));
  streamOf(h)->push([a] { kernels::reduceRange(a, 0, 1); });
  return CUDA_SUCCESS;
}

}  // extern "C"
