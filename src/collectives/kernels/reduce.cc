// reduce() and copy(): resolve (dtype, op, flags) to one typed loop of the best kernel table,
// plus the type and op names the logs and perf tools print.
#include <atomic>
#include <cstring>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "collectives/kernels/kernel_table.h"

namespace snccl::kernels {

size_t typeSize(ncclDataType_t dt) {
  switch (dt) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* typeName(ncclDataType_t dt) {
  static constexpr const char* kNames[ncclNumTypes] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                                                       "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return dt >= 0 && dt < ncclNumTypes ? kNames[dt] : "invalid";
}

const char* opName(ncclRedOp_t op) {
  static constexpr const char* kNames[ncclNumOps] = {"sum", "prod", "max", "min", "avg"};
  // Values from ncclNumOps up are dynamic ops, which ncclRedOpCreatePreMulSum hands out.
  return op >= 0 && op < ncclNumOps ? kNames[op] : "premulsum";
}

const KernelTable& bestKernels() {
  static const KernelTable& table = avx2Kernels() ? *avx2Kernels() : genericKernels();
  return table;
}

namespace {

// The API layer validates types and ops before anything reaches a kernel; an invalid pair
// here is a bug upstream, and doing nothing beats writing through a garbage table slot.
bool valid(ncclDataType_t dt, const RedOpSpec& op) {
  return typeSize(dt) != 0 && op.base >= ncclSum && op.base < kNumBaseOps;
}

// Dividing by 1 is exact in every type, so Avg on one rank is the plain loop.
bool divides(const RedOpSpec& op, bool finalize) { return finalize && op.divisor > 1; }

// PreMulSum: b scaled into a cache-resident block first, then reduced by
// reduceBlock(offset in bytes, scaled block, elements). Two passes keep the product rounded
// to the dtype (no fused multiply-add, whatever the compiler targets), and reading each
// block of a and b before its outputs are written keeps an output that is a or b safe.
template <class ReduceBlock>
void forEachScaledBlock(const KernelTable& k, const void* b, size_t count, ncclDataType_t dt, const RedOpSpec& op,
                        ReduceBlock reduceBlock) {
  constexpr size_t kBlockBytes = 8192;  // a multiple of every table's vector bytes
  alignas(64) unsigned char scaled[kBlockBytes];
  const MapFn scale = k.map[dt][1][0];
  const size_t size = typeSize(dt), perBlock = kBlockBytes / size;
  const auto* pb = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < count; i += perBlock) {
    const size_t n = count - i < perBlock ? count - i : perBlock;
    scale(scaled, pb + i * size, n, op);
    reduceBlock(i * size, scaled, n);
  }
}

}  // namespace

void reduceWith(const KernelTable& k, void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt,
                const RedOpSpec& op, bool scaleB, bool finalize) {
  if (count == 0 || !valid(dt, op)) return;
  const ReduceFn fn = k.reduce[dt][op.base][divides(op, finalize)];
  if (!(scaleB && op.hasScalar)) {
    fn(dst, a, b, count, op);
    return;
  }
  forEachScaledBlock(k, b, count, dt, op, [&](size_t off, const void* scaled, size_t n) {
    fn(static_cast<unsigned char*>(dst) + off, static_cast<const unsigned char*>(a) + off, scaled, n, op);
  });
}

void reduceStreamWith(const KernelTable& k, void* const* out, int nout, int nstream, const void* a, const void* b,
                      size_t count, ncclDataType_t dt, const RedOpSpec& op, bool scaleB, bool finalize) {
  if (count == 0 || nout <= 0 || !valid(dt, op)) return;
  const ReduceStreamFn fn = k.reduceStream[dt][op.base][divides(op, finalize)];
  if (!(scaleB && op.hasScalar)) {
    fn(out, nout, nstream, 0, a, b, count, op);
    return;
  }
  forEachScaledBlock(k, b, count, dt, op, [&](size_t off, const void* scaled, size_t n) {
    fn(out, nout, nstream, off, static_cast<const unsigned char*>(a) + off, scaled, n, op);
  });
}

void copyWith(const KernelTable& k, void* dst, const void* src, size_t count, ncclDataType_t dt, const RedOpSpec& op,
              bool scale, bool finalize) {
  if (count == 0 || typeSize(dt) == 0) return;
  const bool s = scale && op.hasScalar, f = divides(op, finalize);
  if (s || f) {
    k.map[dt][s][f](dst, src, count, op);
  } else if (dst != src) {
    std::memcpy(dst, src, count * typeSize(dt));
  }
}

void reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt, const RedOpSpec& op, bool scaleB,
            bool finalize) {
  reduceWith(bestKernels(), dst, a, b, count, dt, op, scaleB, finalize);
}

void reduceStream(void* const* out, int nout, int nstream, const void* a, const void* b, size_t count,
                  ncclDataType_t dt, const RedOpSpec& op, bool scaleB, bool finalize) {
  reduceStreamWith(bestKernels(), out, nout, nstream, a, b, count, dt, op, scaleB, finalize);
}

void streamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void copy(void* dst, const void* src, size_t count, ncclDataType_t dt, const RedOpSpec& op, bool scale, bool finalize) {
  copyWith(bestKernels(), dst, src, count, dt, op, scale, finalize);
}

}  // namespace snccl::kernels
