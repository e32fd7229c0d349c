// The CUDA driver, loaded with dlopen once per process (SNCCL_CUDA_DRIVER, default
// libcuda.so.1), and the per-device state the device engine works with.
//
// A process without the driver, or whose driver has no device, runs as a host-only
// build: CudaDriver::get().on() is false and why() says why (logged once at INFO). Nothing
// here is ever unloaded: the driver's state lives as long as the process.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "common/status.h"
#include "device/cuda_api.h"

namespace snccl::device {

// What the device engine needs on one device: its primary context, a stream of its own
// for the engine's copies and kernels (non-blocking, so it never waits for the legacy
// default stream), the reduction kernel, and device scratch for operands that are host
// memory (kernels read and write device memory only). `mutex` serialises the engine's
// use of the stream and the scratch.
struct DeviceContext {
  int ordinal = -1;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUfunction reduceKernel = nullptr;  // nullptr: this build has no kernel image for it
  std::string noKernelWhy;
  std::mutex mutex;
  CUdeviceptr scratch = 0;
  size_t scratchBytes = 0;
};

class CudaDriver {
 public:
  static constexpr int kMaxDevices = 64;

  // The process's driver, loaded on first use.
  static const CudaDriver& get();

  bool on() const { return api_ != nullptr; }
  // Why GPU support is off ("" when on).
  const std::string& why() const { return why_; }
  // "<path>: <n> device(s), device 0 <name>, driver <version>" (when on).
  const std::string& describe() const { return describe_; }
  const CudaApi& api() const { return *api_; }

  // Whether p is device memory of this driver (host memory, or no driver: false).
  bool isDevice(const void* p) const;
  // The device ordinal of device memory p, or -1.
  int deviceOf(const void* p) const;
  // OkStatus for CUDA_SUCCESS, else an error naming the call and the driver's text.
  Status check(CUresult r, const char* call) const;
  // The state of device `ordinal`, made on first use (its context is made current on
  // the calling thread by the caller, with api().ctxSetCurrent).
  Result<DeviceContext*> device(int ordinal) const;

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

 private:
  CudaDriver();
  Status load();
  Status setUp(DeviceContext* d) const;

  std::unique_ptr<CudaApi> api_;  // null when off
  std::string why_, describe_;
  int devices_ = 0;
  // Per-device state, created under devicesMutex_ and never freed (the driver lives as
  // long as the process).
  mutable std::mutex devicesMutex_;
  mutable std::array<std::unique_ptr<DeviceContext>, kMaxDevices> devicesState_;
};

}  // namespace snccl::device
