// The subset of the NCCL C ABI (2.x) the backend calls, resolved at run time with dlopen, so
// one extension binary serves libsnccl and any NCCL-compatible library. No nccl.h, no CUDA.
#pragma once

#include <cstddef>
#include <string>

namespace snccl_torch {

struct CUstreamOpaque;
using ncclComm_t = struct ncclCommOpaque*;
using cudaStream_t = CUstreamOpaque*;
using sncclStream_t = struct sncclHostStreamOpaque*;
struct ncclUniqueId {
  char internal[128];
};

// A host stream passed as the cudaStream_t argument (snccl.h's SNCCL_STREAM).
inline cudaStream_t asCuda(sncclStream_t s) { return reinterpret_cast<cudaStream_t>(s); }

// Values fixed by the NCCL ABI.
enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum ncclDataType_t : int {
  ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
  ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10, ncclFloat8e5m2 = 11,
};
enum ncclRedOp_t : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };
inline constexpr int kSplitNoColor = -1;  // NCCL_SPLIT_NOCOLOR
enum ncclScalarResidence_t : int { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 };

// The function table. Required entries are never null once load() succeeded; optional ones
// (marked) may be null when the library lacks them (e.g. real NCCL has no host streams).
struct NcclApi {
  ncclResult_t (*GetVersion)(int*);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);                                   // optional
  // ncclCommSplit; the config (ncclConfig_t*) is always null: the child inherits the parent's
  ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t*, void*);     // optional
  const char* (*GetErrorString)(ncclResult_t);
  const char* (*GetLastError)(ncclComm_t);                                 // optional
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                           cudaStream_t);                                 // optional
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*RedOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t,
                                       ncclScalarResidence_t, ncclComm_t);  // optional
  ncclResult_t (*RedOpDestroy)(ncclRedOp_t, ncclComm_t);                  // optional
  ncclResult_t (*CommRegister)(ncclComm_t, void*, size_t, void**);          // optional
  ncclResult_t (*CommDeregister)(ncclComm_t, void*);                       // optional
  // sncclAllReduceQuantized (include/snccl/snccl.h)                        // optional
  ncclResult_t (*AllReduceQuantized)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int,
                                     size_t, float*, ncclComm_t, cudaStream_t);
  // snccl host streams (include/snccl/snccl.h); all four or none.
  ncclResult_t (*StreamCreate)(sncclStream_t*);
  ncclResult_t (*StreamSynchronize)(sncclStream_t);
  ncclResult_t (*StreamQuery)(sncclStream_t);
  ncclResult_t (*StreamDestroy)(sncclStream_t);

  std::string path;  // the file actually loaded
  int version = 0;   // ncclGetVersion
};

// The environment variable that chooses the library (a path or a soname). The extension
// reads it; it is not a library parameter (the library's are in src/common/param_table.inc).
inline constexpr const char* kLibEnv = "SNCCL_TORCH_LIB";
// Registration of recurring all_reduce tensors (registration.h): "0" turns it off; the
// smallest storage registered, in bytes (default 8 MiB).
inline constexpr const char* kRegisterEnv = "SNCCL_TORCH_REGISTER";
inline constexpr const char* kRegisterBytesEnv = "SNCCL_TORCH_REGISTER_BYTES";

// Loads the library once per process (SNCCL_TORCH_LIB, else the libsnccl this extension was
// built with, else libsnccl.so.0, else libnccl.so.2). Returns the table, or nullptr with
// *error set to why (the names tried, the missing symbol).
const NcclApi* loadNcclApi(std::string* error);

}  // namespace snccl_torch
