// The CUDA driver through dlopen (cuda_driver.h).
#include "device/cuda_driver.h"

#include <dlfcn.h>

#include "common/log.h"
#include "common/params.h"
#include "device/kernels/reduce_kernel.h"
#include "device/reduce_kernel_image.h"

namespace snccl::device {

namespace {

template <typename Fn>
bool resolve(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

}  // namespace

const CudaDriver& CudaDriver::get() {
  static const CudaDriver driver;
  return driver;
}

CudaDriver::CudaDriver() {
  Status st = load();
  if (!st.ok()) {
    api_.reset();
    why_ = st.message();
    SN_INFO(log::kInit, "GPU support off: %s", why_.c_str());
    return;
  }
  SN_INFO(log::kInit, "GPU support on: %s", describe_.c_str());
}

Status CudaDriver::load() {
  const std::string& path = params::getString(params::Id::CudaDriverPath);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return SystemError("the CUDA driver %s cannot be loaded (%s)", path.c_str(), dlerror());
  auto api = std::make_unique<CudaApi>();
  const char* missing = nullptr;
#define SN_CU(field, sym) \
  if (missing == nullptr && !resolve(lib, sym, &api->field)) missing = sym;
  SN_CU(init, "cuInit")
  SN_CU(driverGetVersion, "cuDriverGetVersion")
  SN_CU(getErrorString, "cuGetErrorString")
  SN_CU(deviceGetCount, "cuDeviceGetCount")
  SN_CU(deviceGet, "cuDeviceGet")
  SN_CU(deviceGetName, "cuDeviceGetName")
  SN_CU(devicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
  SN_CU(ctxSetCurrent, "cuCtxSetCurrent")
  SN_CU(pointerGetAttribute, "cuPointerGetAttribute")
  SN_CU(streamCreate, "cuStreamCreate")
  SN_CU(streamSynchronize, "cuStreamSynchronize")
  SN_CU(streamIsCapturing, "cuStreamIsCapturing")
  SN_CU(memAlloc, "cuMemAlloc_v2")
  SN_CU(memFree, "cuMemFree_v2")
  SN_CU(memcpyAsync, "cuMemcpyAsync")
  SN_CU(memHostAlloc, "cuMemHostAlloc")
  SN_CU(memHostGetDevicePointer, "cuMemHostGetDevicePointer_v2")
  SN_CU(streamWriteValue32, "cuStreamWriteValue32_v2")
  SN_CU(streamWaitValue32, "cuStreamWaitValue32_v2")
  SN_CU(moduleLoadData, "cuModuleLoadData")
  SN_CU(moduleGetFunction, "cuModuleGetFunction")
  SN_CU(launchKernel, "cuLaunchKernel")
#undef SN_CU
  if (missing != nullptr) {
    dlclose(lib);
    return SystemError("the CUDA driver %s lacks %s", path.c_str(), missing);
  }
  api_ = std::move(api);  // check() below reads the error strings through it
  SNCCL_TRY(check(api_->init(0), "cuInit"));
  int version = 0;
  SNCCL_TRY(check(api_->driverGetVersion(&version), "cuDriverGetVersion"));
  SNCCL_TRY(check(api_->deviceGetCount(&devices_), "cuDeviceGetCount"));
  if (devices_ <= 0) return SystemError("the CUDA driver %s sees no device", path.c_str());
  CUdevice dev = 0;
  char name[256] = {};
  SNCCL_TRY(check(api_->deviceGet(&dev, 0), "cuDeviceGet"));
  SNCCL_TRY(check(api_->deviceGetName(name, int(sizeof name) - 1, dev), "cuDeviceGetName"));
  describe_ = format("%s: %d device(s), device 0 %s, driver %d.%d", path.c_str(), devices_, name, version / 1000,
                     version % 1000 / 10);
  return OkStatus();
}

Status CudaDriver::check(CUresult r, const char* call) const {
  if (r == CUDA_SUCCESS) return OkStatus();
  const char* text = nullptr;
  if (api_ == nullptr || api_->getErrorString(r, &text) != CUDA_SUCCESS || text == nullptr) text = "unknown error";
  return SystemError("%s failed: CUDA error %d (%s)", call, r, text);
}

bool CudaDriver::isDevice(const void* p) const {
  if (api_ == nullptr || p == nullptr) return false;
  unsigned type = 0;
  return api_->pointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CUdeviceptr(p)) == CUDA_SUCCESS &&
         type == CU_MEMORYTYPE_DEVICE;
}

int CudaDriver::deviceOf(const void* p) const {
  int ordinal = -1;
  if (!isDevice(p) ||
      api_->pointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CUdeviceptr(p)) != CUDA_SUCCESS)
    return -1;
  return ordinal;
}

Result<DeviceContext*> CudaDriver::device(int ordinal) const {
  if (api_ == nullptr) return InvalidUsage("GPU support is off: %s", why_.c_str());
  if (ordinal < 0 || ordinal >= devices_ || ordinal >= kMaxDevices)
    return InvalidArgument("CUDA device %d does not exist (%d device(s))", ordinal, devices_);
  std::lock_guard<std::mutex> lock(devicesMutex_);
  std::unique_ptr<DeviceContext>& slot = devicesState_[size_t(ordinal)];
  if (slot == nullptr) {
    auto d = std::make_unique<DeviceContext>();
    d->ordinal = ordinal;
    SNCCL_TRY(setUp(d.get()));
    slot = std::move(d);
  }
  return slot.get();
}

Status CudaDriver::setUp(DeviceContext* d) const {
  CUdevice dev = 0;
  SNCCL_TRY(check(api_->deviceGet(&dev, d->ordinal), "cuDeviceGet"));
  SNCCL_TRY(check(api_->devicePrimaryCtxRetain(&d->ctx, dev), "cuDevicePrimaryCtxRetain"));
  SNCCL_TRY(check(api_->ctxSetCurrent(d->ctx), "cuCtxSetCurrent"));
  SNCCL_TRY(check(api_->streamCreate(&d->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate"));
  // An empty image (a build without nvcc) is refused by a real driver: reductions on the
  // device then fail with noKernelWhy. The CPU stand-in takes any image.
  CUmodule module = nullptr;
  CUresult r = api_->moduleLoadData(&module, kReduceKernelImage);
  if (r == CUDA_SUCCESS) r = api_->moduleGetFunction(&d->reduceKernel, module, kernels::kReduceKernelName);
  if (r != CUDA_SUCCESS) {
    d->reduceKernel = nullptr;
    d->noKernelWhy = check(r, kReduceKernelImageBytes == 0 ? "cuModuleLoadData (this build has no kernel image: "
                                                             "nvcc was not found when it was built)"
                                                           : "cuModuleLoadData/cuModuleGetFunction")
                         .message();
    SN_WARN("GPU device %d: no reduction kernel, so reductions on its memory fail: %s", d->ordinal,
            d->noKernelWhy.c_str());
  }
  return OkStatus();
}

}  // namespace snccl::device
