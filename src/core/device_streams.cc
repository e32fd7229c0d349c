// CUDA stream gates (device_streams.h).
#include "core/device_streams.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/wait.h"
#include "core/stream.h"
#include "device/cuda_driver.h"

namespace snccl {

namespace {

using device::CudaDriver;
using device::CUdeviceptr;
using device::CUstream;

class Gate {
 public:
  // The words are pinned host memory mapped for the device; made with the caller's
  // current context, portable to all.
  static Result<std::unique_ptr<Gate>> make() {
    const CudaDriver& drv = CudaDriver::get();
    auto g = std::unique_ptr<Gate>(new Gate());
    void* host = nullptr;
    SNCCL_TRY(drv.check(
        drv.api().memHostAlloc(&host, 64, device::CU_MEMHOSTALLOC_PORTABLE | device::CU_MEMHOSTALLOC_DEVICEMAP),
        "cuMemHostAlloc (stream gate)"));
    g->words_ = static_cast<std::atomic<uint32_t>*>(host);
    g->words_[0].store(0);
    g->words_[1].store(0);
    SNCCL_TRY(drv.check(drv.api().memHostGetDevicePointer(&g->devWords_, host, 0), "cuMemHostGetDevicePointer"));
    return g;
  }

  Status submit(cudaStream_t stream, std::function<Status()> task, std::function<bool()> abandoned) {
    const CudaDriver& drv = CudaDriver::get();
    const device::CudaApi& api = drv.api();
    auto s = reinterpret_cast<CUstream>(stream);
    std::lock_guard<std::mutex> lock(mutex_);
    const uint32_t n = next_ + 1;
    Status st = drv.check(api.streamWriteValue32(s, devWords_, n, device::CU_STREAM_WRITE_VALUE_DEFAULT),
                          "cuStreamWriteValue32 (the operation's start on the user's stream)");
    if (st.ok())
      st = drv.check(api.streamWaitValue32(s, devWords_ + sizeof(uint32_t), n, device::CU_STREAM_WAIT_VALUE_GEQ),
                     "cuStreamWaitValue32 (the user's stream waiting for the operation)");
    if (!st.ok()) {
      worker_.enqueue(std::move(task));
      return st;
    }
    next_ = n;
    std::atomic<uint32_t>* words = words_;
    worker_.enqueue([words, n, task = std::move(task), abandoned = std::move(abandoned)] {
      waitReached(&words[0], n, abandoned);
      Status st = task();
      if (!st.ok()) SN_WARN("an operation on a CUDA stream failed: %s", st.message().c_str());
      words[1].store(n, std::memory_order_release);
      return st;
    });
    return OkStatus();
  }

 private:
  Gate() = default;

  // Until *word reaches n (modulo 2^32, as the stream's GEQ compares) or abandoned().
  static void waitReached(std::atomic<uint32_t>* word, uint32_t n, const std::function<bool()>& abandoned) {
    Backoff backoff(50, 200);
    while (int32_t(word->load(std::memory_order_acquire) - n) < 0) {
      if (backoff.idle() != Backoff::Phase::kSleep) continue;
      if (abandoned()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  std::mutex mutex_;  // orders the memory operations on the stream with the worker's queue
  uint32_t next_ = 0;
  std::atomic<uint32_t>* words_ = nullptr;  // [0] started, [1] done
  CUdeviceptr devWords_ = 0;
  HostStream worker_;
};

struct Gates {
  std::mutex mutex;
  std::map<cudaStream_t, std::unique_ptr<Gate>> byStream;
};

// Never destroyed: a gate's worker may wait on a stream that never reaches it, and the
// process must still be able to exit.
Gates& gates() {
  static Gates* g = new Gates();
  return *g;
}

// The gate of `stream`, made on first use.
Result<Gate*> gateOf(cudaStream_t stream) {
  const CudaDriver& drv = CudaDriver::get();
  if (!drv.on())
    return InvalidUsage("stream %p is a CUDA stream, and GPU support is off: %s", (void*)stream, drv.why().c_str());
  Gates& g = gates();
  std::lock_guard<std::mutex> lock(g.mutex);
  std::unique_ptr<Gate>& slot = g.byStream[stream];
  if (slot == nullptr) {
    Result<std::unique_ptr<Gate>> made = Gate::make();
    if (!made.ok()) {
      g.byStream.erase(stream);
      return made.status();
    }
    slot = std::move(made).value();
  }
  return slot.get();
}

}  // namespace

Status prepareCudaStream(cudaStream_t stream) {
  SNCCL_TRY(gateOf(stream).status());
  const CudaDriver& drv = CudaDriver::get();
  int capture = device::CU_STREAM_CAPTURE_STATUS_NONE;
  SNCCL_TRY(drv.check(drv.api().streamIsCapturing(reinterpret_cast<CUstream>(stream), &capture),
                      "cuStreamIsCapturing"));
  if (capture != device::CU_STREAM_CAPTURE_STATUS_NONE)
    return InvalidUsage("stream %p is being captured into a CUDA graph, which snccl does not support: issue the "
                        "call outside the capture",
                        (void*)stream);
  return OkStatus();
}

Status submitOnCudaStream(cudaStream_t stream, std::function<Status()> task, std::function<bool()> abandoned) {
  SNCCL_ASSIGN_OR_RETURN(Gate * gate, gateOf(stream));
  return gate->submit(stream, std::move(task), std::move(abandoned));
}

}  // namespace snccl
