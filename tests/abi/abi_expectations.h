/* The NCCL 2.28.9 ABI as a list of expectations, shared by every ABI check.
 *
 * The same lists are checked against NVIDIA's nccl.h (CUDA toolkit) and against
 * include/snccl/nccl.h, in C++ (header_check.cc, static_assert) and in C99
 * (header_check_c.c), so a difference between the two headers breaks the build.
 * symbols.sh also expands SNCCL_ABI_FUNCTIONS with the preprocessor to get the
 * 41 API function names. Include nccl.h first; this file is C99 and C++ compatible.
 *
 * Sizes and offsets are those of LP64 (x86_64, aarch64, ppc64le Linux). */
#ifndef SNCCL_TESTS_ABI_EXPECTATIONS_H_
#define SNCCL_TESTS_ABI_EXPECTATIONS_H_

/* The 41 API functions: X(return type, name without the nccl/pnccl prefix, (parameters)).
 * Each one exists as ncclName and pncclName with exactly this signature.
 * Top-level const on a parameter (const ncclComm_t) is not part of the type. */
#define SNCCL_ABI_FUNCTIONS(X)                                                                                \
  X(ncclResult_t, MemAlloc, (void**, size_t))                                                                 \
  X(ncclResult_t, MemFree, (void*))                                                                           \
  X(ncclResult_t, GetVersion, (int*))                                                                         \
  X(ncclResult_t, GetUniqueId, (ncclUniqueId*))                                                               \
  X(ncclResult_t, CommInitRankConfig, (ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*))                   \
  X(ncclResult_t, CommInitRank, (ncclComm_t*, int, ncclUniqueId, int))                                        \
  X(ncclResult_t, CommInitAll, (ncclComm_t*, int, const int*))                                                \
  X(ncclResult_t, CommFinalize, (ncclComm_t))                                                                 \
  X(ncclResult_t, CommDestroy, (ncclComm_t))                                                                  \
  X(ncclResult_t, CommAbort, (ncclComm_t))                                                                    \
  X(ncclResult_t, CommRevoke, (ncclComm_t, int))                                                              \
  X(ncclResult_t, CommSplit, (ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*))                              \
  X(ncclResult_t, CommShrink, (ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int))                       \
  X(ncclResult_t, CommInitRankScalable, (ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*))           \
  X(const char*, GetErrorString, (ncclResult_t))                                                              \
  X(const char*, GetLastError, (ncclComm_t))                                                                  \
  X(void, ResetDebugInit, (void))                                                                             \
  X(ncclResult_t, CommGetAsyncError, (ncclComm_t, ncclResult_t*))                                             \
  X(ncclResult_t, CommCount, (const ncclComm_t, int*))                                                        \
  X(ncclResult_t, CommCuDevice, (const ncclComm_t, int*))                                                     \
  X(ncclResult_t, CommUserRank, (const ncclComm_t, int*))                                                     \
  X(ncclResult_t, CommRegister, (const ncclComm_t, void*, size_t, void**))                                    \
  X(ncclResult_t, CommDeregister, (const ncclComm_t, void*))                                                  \
  X(ncclResult_t, CommWindowRegister, (ncclComm_t, void*, size_t, ncclWindow_t*, int))                        \
  X(ncclResult_t, CommWindowDeregister, (ncclComm_t, ncclWindow_t))                                           \
  X(ncclResult_t, RedOpCreatePreMulSum, (ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,          \
                                         ncclComm_t))                                                         \
  X(ncclResult_t, RedOpDestroy, (ncclRedOp_t, ncclComm_t))                                                    \
  X(ncclResult_t, Reduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,          \
                           cudaStream_t))                                                                     \
  X(ncclResult_t, Bcast, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                      \
  X(ncclResult_t, Broadcast, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))     \
  X(ncclResult_t, AllReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,            \
                              cudaStream_t))                                                                  \
  X(ncclResult_t, ReduceScatter, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,        \
                                  cudaStream_t))                                                              \
  X(ncclResult_t, AllGather, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))          \
  X(ncclResult_t, AlltoAll, (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t))           \
  X(ncclResult_t, Gather, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))        \
  X(ncclResult_t, Scatter, (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))       \
  X(ncclResult_t, Send, (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                 \
  X(ncclResult_t, Recv, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))                       \
  X(ncclResult_t, GroupStart, (void))                                                                         \
  X(ncclResult_t, GroupEnd, (void))                                                                           \
  X(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t*))

#define SNCCL_ABI_NUM_FUNCTIONS 41

/* Integer constant expressions that must all be true (usable in C99 and C++). */
#define SNCCL_ABI_CONSTANTS(X)                                                              \
  /* version macros */                                                                      \
  X(NCCL_MAJOR == 2)                                                                        \
  X(NCCL_MINOR == 28)                                                                       \
  X(NCCL_PATCH == 9)                                                                        \
  X(sizeof("" NCCL_SUFFIX) == 1)                                                            \
  X(NCCL_VERSION_CODE == 22809)                                                             \
  X(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) == NCCL_VERSION_CODE)                  \
  X(NCCL_VERSION(2, 8, 4) == 2804)                                                          \
  X(NCCL_VERSION(2, 7, 8) == 2708)                                                          \
  X(NCCL_VERSION(1, 9, 0) == 10900)                                                         \
  X(NCCL_VERSION(2, 9, 6) == 20906)                                                         \
  X(NCCL_VERSION(2, 28, 9) == 22809)                                                        \
  X(NCCL_VERSION(3, 0, 1) == 30001)                                                         \
  /* plain constants */                                                                     \
  X(NCCL_UNIQUE_ID_BYTES == 128)                                                            \
  X(NCCL_CONFIG_UNDEF_INT == INT_MIN)                                                       \
  X(NCCL_SPLIT_NOCOLOR == -1)                                                               \
  X(NCCL_WIN_DEFAULT == 0)                                                                  \
  X(NCCL_WIN_COLL_SYMMETRIC == 1)                                                           \
  X(NCCL_WIN_REQUIRED_ALIGNMENT == 4096)                                                    \
  X(NCCL_CTA_POLICY_DEFAULT == 0)                                                           \
  X(NCCL_CTA_POLICY_EFFICIENCY == 1)                                                        \
  X(NCCL_CTA_POLICY_ZERO == 2)                                                              \
  X(NCCL_SHRINK_DEFAULT == 0)                                                               \
  X(NCCL_SHRINK_ABORT == 1)                                                                 \
  X(NCCL_REVOKE_DEFAULT == 0)                                                               \
  /* ncclResult_t */                                                                        \
  X(sizeof(ncclResult_t) == 4)                                                              \
  X(ncclSuccess == 0)                                                                       \
  X(ncclUnhandledCudaError == 1)                                                            \
  X(ncclSystemError == 2)                                                                   \
  X(ncclInternalError == 3)                                                                 \
  X(ncclInvalidArgument == 4)                                                               \
  X(ncclInvalidUsage == 5)                                                                  \
  X(ncclRemoteError == 6)                                                                   \
  X(ncclInProgress == 7)                                                                    \
  X(ncclNumResults == 8)                                                                    \
  /* ncclDataType_t, aliases included */                                                    \
  X(sizeof(ncclDataType_t) == 4)                                                            \
  X(ncclInt8 == 0)                                                                          \
  X(ncclChar == 0)                                                                          \
  X(ncclUint8 == 1)                                                                         \
  X(ncclInt32 == 2)                                                                         \
  X(ncclInt == 2)                                                                           \
  X(ncclUint32 == 3)                                                                        \
  X(ncclInt64 == 4)                                                                         \
  X(ncclUint64 == 5)                                                                        \
  X(ncclFloat16 == 6)                                                                       \
  X(ncclHalf == 6)                                                                          \
  X(ncclFloat32 == 7)                                                                       \
  X(ncclFloat == 7)                                                                         \
  X(ncclFloat64 == 8)                                                                       \
  X(ncclDouble == 8)                                                                        \
  X(ncclBfloat16 == 9)                                                                      \
  X(ncclFloat8e4m3 == 10)                                                                   \
  X(ncclFloat8e5m2 == 11)                                                                   \
  X(ncclNumTypes == 12)                                                                     \
  /* ncclRedOp_t: 4 bytes with room for dynamic (PreMulSum) ops up to INT_MAX */            \
  X(sizeof(ncclRedOp_dummy_t) == 4)                                                         \
  X(ncclNumOps_dummy == 5)                                                                  \
  X(sizeof(ncclRedOp_t) == 4)                                                               \
  X(ncclSum == 0)                                                                           \
  X(ncclProd == 1)                                                                          \
  X(ncclMax == 2)                                                                           \
  X(ncclMin == 3)                                                                           \
  X(ncclAvg == 4)                                                                           \
  X(ncclNumOps == 5)                                                                        \
  X(ncclMaxRedOp == 0x7fffffff)                                                             \
  /* ncclScalarResidence_t */                                                               \
  X(sizeof(ncclScalarResidence_t) == 4)                                                     \
  X(ncclScalarDevice == 0)                                                                  \
  X(ncclScalarHostImmediate == 1)                                                           \
  /* handles */                                                                             \
  X(sizeof(ncclComm_t) == sizeof(void*))                                                    \
  X(sizeof(ncclWindow_t) == sizeof(void*))                                                  \
  X(sizeof(cudaStream_t) == sizeof(void*))                                                  \
  /* ncclUniqueId: opaque 128 bytes passed by value */                                      \
  X(sizeof(ncclUniqueId) == 128)                                                            \
  X(offsetof(ncclUniqueId, internal) == 0)                                                  \
  X(sizeof(((ncclUniqueId*)0)->internal) == 128)                                            \
  X(sizeof(((ncclUniqueId*)0)->internal[0]) == 1)                                           \
  /* ncclConfig_t (struct ncclConfig_v22800) */                                             \
  X(sizeof(ncclConfig_t) == 80)                                                             \
  X(offsetof(ncclConfig_t, size) == 0)                                                      \
  X(offsetof(ncclConfig_t, magic) == 8)                                                     \
  X(offsetof(ncclConfig_t, version) == 12)                                                  \
  X(offsetof(ncclConfig_t, blocking) == 16)                                                 \
  X(offsetof(ncclConfig_t, cgaClusterSize) == 20)                                           \
  X(offsetof(ncclConfig_t, minCTAs) == 24)                                                  \
  X(offsetof(ncclConfig_t, maxCTAs) == 28)                                                  \
  X(offsetof(ncclConfig_t, netName) == 32)                                                  \
  X(offsetof(ncclConfig_t, splitShare) == 40)                                               \
  X(offsetof(ncclConfig_t, trafficClass) == 44)                                             \
  X(offsetof(ncclConfig_t, commName) == 48)                                                 \
  X(offsetof(ncclConfig_t, collnetEnable) == 56)                                            \
  X(offsetof(ncclConfig_t, CTAPolicy) == 60)                                                \
  X(offsetof(ncclConfig_t, shrinkShare) == 64)                                              \
  X(offsetof(ncclConfig_t, nvlsCTAs) == 68)                                                 \
  X(offsetof(ncclConfig_t, nChannelsPerNetPeer) == 72)                                      \
  X(offsetof(ncclConfig_t, nvlinkCentricSched) == 76)                                       \
  X(sizeof(((ncclConfig_t*)0)->size) == 8)                                                  \
  X(sizeof(((ncclConfig_t*)0)->magic) == 4)                                                 \
  X(sizeof(((ncclConfig_t*)0)->version) == 4)                                               \
  X(sizeof(((ncclConfig_t*)0)->netName) == 8)                                               \
  X(sizeof(((ncclConfig_t*)0)->commName) == 8)                                              \
  X(sizeof(((ncclConfig_t*)0)->nvlinkCentricSched) == 4)                                    \
  /* ncclSimInfo_t (struct ncclSimInfo_v22200) */                                           \
  X(sizeof(ncclSimInfo_t) == 24)                                                            \
  X(offsetof(ncclSimInfo_t, size) == 0)                                                     \
  X(offsetof(ncclSimInfo_t, magic) == 8)                                                    \
  X(offsetof(ncclSimInfo_t, version) == 12)                                                 \
  X(offsetof(ncclSimInfo_t, estimatedTime) == 16)                                           \
  X(sizeof(((ncclSimInfo_t*)0)->estimatedTime) == 4)

/* Field values of NCCL_CONFIG_INITIALIZER (c is an ncclConfig_t initialised with it). */
#define SNCCL_ABI_CONFIG_INITIALIZER(X, c)   \
  X((c).size == 80)                          \
  X((c).size == sizeof(ncclConfig_t))        \
  X((c).magic == 0xcafebeefu)                \
  X((c).version == 22809u)                   \
  X((c).blocking == INT_MIN)                 \
  X((c).cgaClusterSize == INT_MIN)           \
  X((c).minCTAs == INT_MIN)                  \
  X((c).maxCTAs == INT_MIN)                  \
  X((c).netName == NULL)                     \
  X((c).splitShare == INT_MIN)               \
  X((c).trafficClass == INT_MIN)             \
  X((c).commName == NULL)                    \
  X((c).collnetEnable == INT_MIN)            \
  X((c).CTAPolicy == INT_MIN)                \
  X((c).shrinkShare == INT_MIN)              \
  X((c).nvlsCTAs == INT_MIN)                 \
  X((c).nChannelsPerNetPeer == INT_MIN)      \
  X((c).nvlinkCentricSched == INT_MIN)

/* Field values of NCCL_SIM_INFO_INITIALIZER. */
#define SNCCL_ABI_SIM_INFO_INITIALIZER(X, s) \
  X((s).size == 24)                          \
  X((s).size == sizeof(ncclSimInfo_t))       \
  X((s).magic == 0x74685283u)                \
  X((s).version == 22809u)                   \
  X((s).estimatedTime == -1.0f)

#endif /* SNCCL_TESTS_ABI_EXPECTATIONS_H_ */
