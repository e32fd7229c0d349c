// The slice of the CUDA driver API (libcuda.so.1) snccl calls, with self-declared types
// so that a build needs no CUDA headers: the handles are opaque pointers, the enums carry
// the values of the driver's ABI, and each function is declared with the signature of the
// exported symbol it is loaded from (the *_v2 names where cuda.h maps a call onto one).
//
// The same table is what the CPU stand-in of the driver (tests/support/cuda_standin)
// exports, so a test run exercises this exact loading and calling path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snccl::device {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUhostFn = void (*)(void* userData);

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_IMAGE = 200;
inline constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;

// CUpointer_attribute
inline constexpr int CU_POINTER_ATTRIBUTE_CONTEXT = 1;
inline constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
inline constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
// CUmemorytype
inline constexpr unsigned CU_MEMORYTYPE_HOST = 1;
inline constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;
// Stream flags, memory-operation flags, host allocation flags.
inline constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
inline constexpr unsigned CU_STREAM_WAIT_VALUE_GEQ = 0;
inline constexpr unsigned CU_STREAM_WRITE_VALUE_DEFAULT = 0;
inline constexpr unsigned CU_MEMHOSTALLOC_PORTABLE = 1;
inline constexpr unsigned CU_MEMHOSTALLOC_DEVICEMAP = 2;
// CUstreamCaptureStatus
inline constexpr int CU_STREAM_CAPTURE_STATUS_NONE = 0;

// Function pointers, one per exported symbol. The field names drop the cu prefix.
struct CudaApi {
  CUresult (*init)(unsigned flags);                                                          // cuInit
  CUresult (*driverGetVersion)(int* version);                                                // cuDriverGetVersion
  CUresult (*getErrorString)(CUresult error, const char** str);                              // cuGetErrorString
  CUresult (*deviceGetCount)(int* count);                                                    // cuDeviceGetCount
  CUresult (*deviceGet)(CUdevice* device, int ordinal);                                      // cuDeviceGet
  CUresult (*deviceGetName)(char* name, int len, CUdevice dev);                              // cuDeviceGetName
  CUresult (*devicePrimaryCtxRetain)(CUcontext* ctx, CUdevice dev);                          // cuDevicePrimaryCtxRetain
  CUresult (*ctxSetCurrent)(CUcontext ctx);                                                  // cuCtxSetCurrent
  CUresult (*pointerGetAttribute)(void* data, int attribute, CUdeviceptr ptr);               // cuPointerGetAttribute
  CUresult (*streamCreate)(CUstream* stream, unsigned flags);                                // cuStreamCreate
  CUresult (*streamSynchronize)(CUstream stream);                                            // cuStreamSynchronize
  CUresult (*streamIsCapturing)(CUstream stream, int* status);  // cuStreamIsCapturing
  CUresult (*memAlloc)(CUdeviceptr* dptr, size_t bytes);                                     // cuMemAlloc_v2
  CUresult (*memFree)(CUdeviceptr dptr);                                                     // cuMemFree_v2
  CUresult (*memcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);  // cuMemcpyAsync
  CUresult (*memHostAlloc)(void** p, size_t bytes, unsigned flags);                          // cuMemHostAlloc
  CUresult (*memHostGetDevicePointer)(CUdeviceptr* dptr, void* p, unsigned flags);  // cuMemHostGetDevicePointer_v2
  CUresult (*streamWriteValue32)(CUstream stream, CUdeviceptr addr, uint32_t value, unsigned flags);  // _v2
  CUresult (*streamWaitValue32)(CUstream stream, CUdeviceptr addr, uint32_t value, unsigned flags);   // _v2
  CUresult (*moduleLoadData)(CUmodule* module, const void* image);                  // cuModuleLoadData
  CUresult (*moduleGetFunction)(CUfunction* f, CUmodule module, const char* name);  // cuModuleGetFunction
  CUresult (*launchKernel)(CUfunction f, unsigned gridX, unsigned gridY, unsigned gridZ, unsigned blockX,
                           unsigned blockY, unsigned blockZ, unsigned sharedBytes, CUstream stream, void** params,
                           void** extra);  // cuLaunchKernel
};

}  // namespace snccl::device
