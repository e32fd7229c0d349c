// Header equivalence, C++ side. This file is compiled twice: against NVIDIA's nccl.h
// (SNCCL_ABI_HEADER_CUDA, include path = the CUDA toolkit) and against snccl's
// (include path = include/snccl). Both builds check the same expectations with
// static_assert, so any difference between the headers fails the build; the
// GoogleTest cases only repeat a few checks at run time and report which header ran.
#include <nccl.h>

#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include <gtest/gtest.h>

#include "abi_expectations.h"

#if defined(SNCCL_ABI_HEADER_CUDA)
#if !defined(CUDART_VERSION)
#error "expected NVIDIA's nccl.h (which includes cuda_runtime.h)"
#endif
#define ABI_HEADER_NAME "CUDA toolkit nccl.h"
#else
// snccl's header must stand alone: nothing from CUDA may have been pulled in.
#if defined(CUDART_VERSION) || defined(__DRIVER_TYPES_H__)
#error "include/snccl/nccl.h must not include CUDA headers outside nvcc"
#endif
#define ABI_HEADER_NAME "snccl nccl.h"
#endif

namespace {

// ---- constants, enum values, sizes and offsets (shared with the C check) ----
#define ABI_STATIC(cond) static_assert(cond, #cond);
SNCCL_ABI_CONSTANTS(ABI_STATIC)

// ---- function signatures ----
// decltype(&f) names a deprecated function (ncclResetDebugInit) without calling it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define ABI_SIGNATURE(ret, name, params)                                                       \
  static_assert(std::is_same_v<decltype(&nccl##name), ret(*) params>, "signature of nccl" #name); \
  static_assert(std::is_same_v<decltype(&pnccl##name), ret(*) params>, "signature of pnccl" #name);
SNCCL_ABI_FUNCTIONS(ABI_SIGNATURE)
#pragma GCC diagnostic pop

#define ABI_COUNT(ret, name, params) +1
static_assert(0 SNCCL_ABI_FUNCTIONS(ABI_COUNT) == SNCCL_ABI_NUM_FUNCTIONS);

}  // namespace

// C language linkage: redeclaring a function with C linkage is ill-formed if the header
// declared it with C++ linkage (or with other parameters), so this fails to compile
// unless every function sits inside the header's extern "C" block.
#define ABI_C_LINKAGE(ret, name, params) \
  extern "C" ret nccl##name params;      \
  extern "C" ret pnccl##name params;
SNCCL_ABI_FUNCTIONS(ABI_C_LINKAGE)

namespace {

// ---- types that C cannot check ----
static_assert(std::is_same_v<ncclComm_t, struct ncclComm*>);
static_assert(std::is_same_v<ncclWindow_t, struct ncclWindow_vidmem*>);
static_assert(std::is_same_v<cudaStream_t, struct CUstream_st*>);
static_assert(std::is_same_v<ncclConfig_t, struct ncclConfig_v22800>);
static_assert(std::is_same_v<ncclSimInfo_t, struct ncclSimInfo_v22200>);

static_assert(std::is_enum_v<ncclResult_t> && std::is_enum_v<ncclDataType_t> && std::is_enum_v<ncclRedOp_t> &&
              std::is_enum_v<ncclScalarResidence_t> && std::is_enum_v<ncclRedOp_dummy_t>);
// The underlying type follows from the enumerator values; equal types mean equal ranges.
static_assert(std::is_same_v<std::underlying_type_t<ncclResult_t>, unsigned int>);
static_assert(std::is_same_v<std::underlying_type_t<ncclDataType_t>, unsigned int>);
static_assert(std::is_same_v<std::underlying_type_t<ncclRedOp_t>, unsigned int>);
static_assert(std::is_same_v<std::underlying_type_t<ncclScalarResidence_t>, unsigned int>);

static_assert(std::is_same_v<decltype(ncclUniqueId::internal), char[128]>);
static_assert(alignof(ncclUniqueId) == 1);
static_assert(std::is_trivially_copyable_v<ncclUniqueId> && std::is_standard_layout_v<ncclUniqueId>);

static_assert(alignof(ncclConfig_t) == 8);
static_assert(std::is_trivially_copyable_v<ncclConfig_t> && std::is_standard_layout_v<ncclConfig_t>);
static_assert(std::is_same_v<decltype(ncclConfig_t::size), size_t>);
static_assert(std::is_same_v<decltype(ncclConfig_t::magic), unsigned int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::version), unsigned int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::blocking), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::cgaClusterSize), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::minCTAs), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::maxCTAs), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::netName), const char*>);
static_assert(std::is_same_v<decltype(ncclConfig_t::splitShare), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::trafficClass), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::commName), const char*>);
static_assert(std::is_same_v<decltype(ncclConfig_t::collnetEnable), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::CTAPolicy), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::shrinkShare), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::nvlsCTAs), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::nChannelsPerNetPeer), int>);
static_assert(std::is_same_v<decltype(ncclConfig_t::nvlinkCentricSched), int>);

static_assert(alignof(ncclSimInfo_t) == 8);
static_assert(std::is_trivially_copyable_v<ncclSimInfo_t> && std::is_standard_layout_v<ncclSimInfo_t>);
static_assert(std::is_same_v<decltype(ncclSimInfo_t::size), size_t>);
static_assert(std::is_same_v<decltype(ncclSimInfo_t::magic), unsigned int>);
static_assert(std::is_same_v<decltype(ncclSimInfo_t::version), unsigned int>);
static_assert(std::is_same_v<decltype(ncclSimInfo_t::estimatedTime), float>);

// Macro types (a user's printf format or overload depends on them).
static_assert(std::is_same_v<decltype(NCCL_VERSION_CODE), int>);
static_assert(std::is_same_v<decltype(NCCL_VERSION(2, 28, 9)), int>);
static_assert(std::is_same_v<decltype(NCCL_UNIQUE_ID_BYTES), int>);
static_assert(std::is_same_v<decltype(NCCL_CONFIG_UNDEF_INT), int>);
static_assert(std::is_same_v<decltype(NCCL_SPLIT_NOCOLOR), int>);
static_assert(std::is_same_v<decltype(NCCL_UNDEF_FLOAT), float>);
static_assert(NCCL_UNDEF_FLOAT == -1.0f);
static_assert(std::is_same_v<decltype(NCCL_SUFFIX), const char(&)[1]>);
static_assert(std::is_same_v<decltype(NCCL_WIN_COLL_SYMMETRIC), int>);
static_assert(std::is_same_v<decltype(NCCL_CTA_POLICY_ZERO), int>);
static_assert(std::is_same_v<decltype(NCCL_SHRINK_ABORT), int>);
static_assert(std::is_same_v<decltype(NCCL_REVOKE_DEFAULT), int>);
constexpr ncclComm_t kNullComm = NCCL_COMM_NULL;
static_assert(kNullComm == nullptr);
constexpr const char* kUndefPtr = NCCL_CONFIG_UNDEF_PTR;
static_assert(kUndefPtr == nullptr);

// ---- initializers ----
constexpr ncclConfig_t kConfig = NCCL_CONFIG_INITIALIZER;
SNCCL_ABI_CONFIG_INITIALIZER(ABI_STATIC, kConfig)
constexpr ncclSimInfo_t kSimInfo = NCCL_SIM_INFO_INITIALIZER;
SNCCL_ABI_SIM_INFO_INITIALIZER(ABI_STATIC, kSimInfo)

TEST(AbiHeader, ConfigInitializerAtRunTime) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
#define ABI_EXPECT(cond) EXPECT_TRUE(cond) << #cond;
  SNCCL_ABI_CONFIG_INITIALIZER(ABI_EXPECT, config)
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  SNCCL_ABI_SIM_INFO_INITIALIZER(ABI_EXPECT, sim)
}

TEST(AbiHeader, UniqueIdIsPlainBytes) {
  ncclUniqueId a;
  std::memset(&a, 0x5a, sizeof(a));
  ncclUniqueId b = a;  // passed by value across the ABI: a plain 128-byte copy
  EXPECT_EQ(0, std::memcmp(&a, &b, NCCL_UNIQUE_ID_BYTES));
}

TEST(AbiHeader, Which) {
  RecordProperty("header", ABI_HEADER_NAME);
  std::printf("checked %d API functions (+ pnccl twins) in %s\n", SNCCL_ABI_NUM_FUNCTIONS, ABI_HEADER_NAME);
}

}  // namespace
