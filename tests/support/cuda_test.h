// The CUDA driver as tests reach it: the library SNCCL_CUDA_DRIVER names (the CPU stand-in
// of tests/support/cuda_standin in CI, libcuda.so.1 on a GPU machine), loaded with dlopen
// so that the test and snccl share one instance of it. Tests of device memory skip,
// saying why, when it is not there.
#pragma once

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "device/cuda_api.h"

namespace sntest {

using snccl::device::CUcontext;
using snccl::device::CUdevice;
using snccl::device::CUdeviceptr;
using snccl::device::CUhostFn;
using snccl::device::CUresult;
using snccl::device::CUstream;

struct TestCuda {
  bool on = false;
  std::string why, name, path;
  bool standin = false;  // the CPU stand-in, not a GPU
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*deviceGet)(CUdevice*, int) = nullptr;
  CUresult (*deviceGetName)(char*, int, CUdevice) = nullptr;
  CUresult (*primaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext) = nullptr;
  CUresult (*ctxSynchronize)() = nullptr;
  CUresult (*memAlloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*memFree)(CUdeviceptr) = nullptr;
  CUresult (*memcpyHtoD)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*memcpyDtoH)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*memcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*memcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  CUresult (*streamCreate)(CUstream*, unsigned) = nullptr;
  CUresult (*streamDestroy)(CUstream) = nullptr;
  CUresult (*streamSynchronize)(CUstream) = nullptr;
  CUresult (*launchHostFunc)(CUstream, CUhostFn, void*) = nullptr;
  void (*standinFailLaunches)(int) = nullptr;            // the stand-in only
  void (*standinSetCapturing)(CUstream, int) = nullptr;  // the stand-in only
  void (*standinSlowStreams)(int) = nullptr;             // the stand-in only
  size_t (*standinPendingOps)() = nullptr;               // the stand-in only

  // Makes device 0's primary context current on the calling thread (each rank thread).
  bool bindThread() const {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    return on && deviceGet(&dev, 0) == 0 && primaryCtxRetain(&ctx, dev) == 0 && ctxSetCurrent(ctx) == 0;
  }
};

inline TestCuda loadTestCuda() {
  TestCuda c;
  const char* env = std::getenv("SNCCL_CUDA_DRIVER");
  c.path = env != nullptr && *env != '\0' ? env : "libcuda.so.1";
  void* lib = dlopen(c.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    c.why = "no CUDA driver: " + c.path + " cannot be loaded (" + dlerror() + ")";
    return c;
  }
  bool ok = true;
  auto get = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
    if (*fn == nullptr && ok) {
      ok = false;
      c.why = c.path + " lacks " + name;
    }
  };
  get(&c.init, "cuInit");
  get(&c.deviceGet, "cuDeviceGet");
  get(&c.deviceGetName, "cuDeviceGetName");
  get(&c.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  get(&c.ctxSetCurrent, "cuCtxSetCurrent");
  get(&c.ctxSynchronize, "cuCtxSynchronize");
  get(&c.memAlloc, "cuMemAlloc_v2");
  get(&c.memFree, "cuMemFree_v2");
  get(&c.memcpyHtoD, "cuMemcpyHtoD_v2");
  get(&c.memcpyDtoH, "cuMemcpyDtoH_v2");
  get(&c.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  get(&c.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  get(&c.streamCreate, "cuStreamCreate");
  get(&c.streamDestroy, "cuStreamDestroy_v2");
  get(&c.streamSynchronize, "cuStreamSynchronize");
  get(&c.launchHostFunc, "cuLaunchHostFunc");
  if (!ok) return c;
  c.standinFailLaunches = reinterpret_cast<void (*)(int)>(dlsym(lib, "sncclStandinFailLaunches"));
  c.standinSetCapturing = reinterpret_cast<void (*)(CUstream, int)>(dlsym(lib, "sncclStandinSetCapturing"));
  c.standinSlowStreams = reinterpret_cast<void (*)(int)>(dlsym(lib, "sncclStandinSlowStreams"));
  c.standinPendingOps = reinterpret_cast<size_t (*)()>(dlsym(lib, "sncclStandinPendingOps"));
  c.standin = c.standinFailLaunches != nullptr;
  CUdevice dev = 0;
  char name[256] = {};
  if (c.init(0) != 0 || c.deviceGet(&dev, 0) != 0 || c.deviceGetName(name, sizeof name - 1, dev) != 0) {
    c.why = c.path + ": no CUDA device";
    return c;
  }
  c.name = name;
  c.on = true;
  return c;
}

// The process's driver for tests, loaded once. Prints, once, which driver the tests of
// device memory run on: the CPU stand-in is not a GPU.
inline const TestCuda& testCuda() {
  static const TestCuda c = [] {
    TestCuda t = loadTestCuda();
    if (t.on)
      std::printf("[ DEVICE   ] device memory on %s (%s)%s\n", t.name.c_str(), t.path.c_str(),
                  t.standin ? ": the CPU stand-in of the CUDA driver, not a GPU" : "");
    else
      std::printf("[ DEVICE   ] %s\n", t.why.c_str());
    return t;
  }();
  return c;
}

}  // namespace sntest
