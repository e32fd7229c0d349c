// Private to src/collectives/kernels: the typed reduction loops and the table that names
// them, instantiated once per ISA translation unit (see vec_types.h for the namespace rule).
//
// A loop runs whole vectors, then the remainder once through the same lane code on a
// zero-padded copy, so results never depend on count or alignment. Loads and stores go
// through memcpy: any element-aligned pointer works, and dst may be a or b exactly, because
// each vector of a and b is read before the matching vector of dst is written.
#pragma once

#include "collectives/kernels/kernel_table.h"
#include "collectives/kernels/vec_formats.h"

namespace snccl::kernels::SNCCL_KERNEL_ISA {

template <class Tr>
inline constexpr bool kIsFloat = std::is_floating_point_v<typename Tr::Acc>;

// Integer lanes with the matching unsigned type: Sum and Prod wrap (no signed overflow UB).
template <class Tr>
using VUnsigned = Vec<std::make_unsigned_t<typename Tr::Acc>, Tr::kLanes>;
// Float lanes as same-width integers, for the sign/NaN bit tricks of Max and Min.
template <class Tr>
using VFloatBits = Vec<std::conditional_t<sizeof(typename Tr::Acc) == 8, int64_t, int32_t>, Tr::kLanes>;

template <class Tr>
struct OpSum {
  using V = typename Tr::VA;
  static V apply(V x, V y) {
    if constexpr (kIsFloat<Tr>) {
      return x + y;
    } else {
      using U = VUnsigned<Tr>;
      return (V)((U)x + (U)y);
    }
  }
};

template <class Tr>
struct OpProd {
  using V = typename Tr::VA;
  static V apply(V x, V y) {
    if constexpr (kIsFloat<Tr>) {
      return x * y;
    } else {
      using U = VUnsigned<Tr>;
      return (V)((U)x * (U)y);
    }
  }
};

// Float Max/Min: a NaN operand gives NaN, and -0 < +0. Both choices make the op commutative
// to the bit (x|y of two NaNs is the same NaN either way), so a result does not depend on
// which rank's data arrived first -- plain maxps is neither.
template <class Tr>
struct OpMax {
  using V = typename Tr::VA;
  static V apply(V x, V y) {
    if constexpr (kIsFloat<Tr>) {
      using B = VFloatBits<Tr>;
      B xb = (B)x, yb = (B)y;
      B tie = x == y ? (xb & yb) : (xb | yb);  // equal: +0 wins; unordered: a NaN
      return (V)(x > y ? xb : (x < y ? yb : tie));
    } else {
      return x > y ? x : y;
    }
  }
};

template <class Tr>
struct OpMin {
  using V = typename Tr::VA;
  static V apply(V x, V y) {
    if constexpr (kIsFloat<Tr>) {
      using B = VFloatBits<Tr>;
      B xb = (B)x, yb = (B)y;
      return (V)(x < y ? xb : (x > y ? yb : (xb | yb)));  // equal: -0 wins; unordered: a NaN
    } else {
      return x < y ? x : y;
    }
  }
};

// Avg: floats divide in Acc precision; integers truncate toward zero like C, computed in 64
// bits so a divisor wider than the type (200 for int8) is still exact. Integer division has
// no vector instruction; Avg of integers is rare enough for the scalar lane loop.
template <class Tr>
inline typename Tr::VA divideBy(typename Tr::VA v, uint32_t divisor) {
  using A = typename Tr::Acc;
  if constexpr (kIsFloat<Tr>) {
    return v / static_cast<A>(divisor);
  } else {
    using W = std::conditional_t<std::is_signed_v<A>, int64_t, uint64_t>;
    for (size_t l = 0; l < Tr::kLanes; ++l) v[l] = static_cast<A>(static_cast<W>(v[l]) / static_cast<W>(divisor));
    return v;
  }
}

// PreMulSum's scalar, stored in the op as one element of the dtype, in Acc form.
template <class Tr>
inline typename Tr::Acc scalarOf(const RedOpSpec& op) {
  typename Tr::Elem e;
  std::memcpy(&e, op.scalar, sizeof e);
  return Tr::widen(splat<typename Tr::VE>(e))[0];
}

// x * scalar, rounded to the dtype: the premultiplied input is a value of the dtype, so
// reduce(a, b, scaleB) == reduce(a, copy(b, scale)) and NCCL's preOp semantics hold.
template <class Tr>
inline typename Tr::VA scaleBy(typename Tr::VA v, typename Tr::Acc s) {
  if constexpr (kIsFloat<Tr>) {
    return Tr::widen(Tr::narrow(v * s));
  } else {
    using U = VUnsigned<Tr>;
    using UE = std::make_unsigned_t<typename Tr::Acc>;
    return (typename Tr::VA)((U)v * static_cast<UE>(s));
  }
}

// Vectors per main-loop iteration: all loads of a group are issued before its stores (legal
// because dst only ever aliases a or b exactly), giving the core independent work and
// amortising the loop overhead; the leftovers go one vector at a time, then the tail.
inline constexpr size_t kUnroll = 4;

template <class Tr, class Body>
inline void forEach2(unsigned char* d, const unsigned char* a, const unsigned char* b, size_t n, Body body) {
  using VE = typename Tr::VE;
  constexpr size_t kL = Tr::kLanes, kBytes = sizeof(VE);
  size_t i = 0;
  for (; i + kUnroll * kL <= n;
       i += kUnroll * kL, d += kUnroll * kBytes, a += kUnroll * kBytes, b += kUnroll * kBytes) {
    VE x[kUnroll], y[kUnroll];
    for (size_t u = 0; u < kUnroll; ++u) x[u] = loadVec<VE>(a + u * kBytes);
    for (size_t u = 0; u < kUnroll; ++u) y[u] = loadVec<VE>(b + u * kBytes);
    for (size_t u = 0; u < kUnroll; ++u) storeVec(d + u * kBytes, body(x[u], y[u]));
  }
  for (; i + kL <= n; i += kL, d += kBytes, a += kBytes, b += kBytes) {
    storeVec(d, body(loadVec<VE>(a), loadVec<VE>(b)));
  }
  if (size_t rest = (n - i) * sizeof(typename Tr::Elem)) {
    VE x{}, y{};
    std::memcpy(&x, a, rest);
    std::memcpy(&y, b, rest);
    VE r = body(x, y);
    std::memcpy(d, &r, rest);
  }
}

template <class Tr, class Body>
inline void forEach1(unsigned char* d, const unsigned char* s, size_t n, Body body) {
  using VE = typename Tr::VE;
  constexpr size_t kL = Tr::kLanes, kBytes = sizeof(VE);
  size_t i = 0;
  for (; i + kUnroll * kL <= n; i += kUnroll * kL, d += kUnroll * kBytes, s += kUnroll * kBytes) {
    VE x[kUnroll];
    for (size_t u = 0; u < kUnroll; ++u) x[u] = loadVec<VE>(s + u * kBytes);
    for (size_t u = 0; u < kUnroll; ++u) storeVec(d + u * kBytes, body(x[u]));
  }
  for (; i + kL <= n; i += kL, d += kBytes, s += kBytes) storeVec(d, body(loadVec<VE>(s)));
  if (size_t rest = (n - i) * sizeof(typename Tr::Elem)) {
    VE x{};
    std::memcpy(&x, s, rest);
    VE r = body(x);
    std::memcpy(d, &r, rest);
  }
}

// One vector of a (op) b, divided by `divisor` when finalizing: the lane arithmetic of
// every reduce loop.
template <class Tr, template <class> class Op, bool kFinalize>
inline typename Tr::VE combine(typename Tr::VE x, typename Tr::VE y, uint32_t divisor) {
  typename Tr::VA r = Op<Tr>::apply(Tr::widen(x), Tr::widen(y));
  if constexpr (kFinalize) r = divideBy<Tr>(r, divisor);
  return Tr::narrow(r);
}

template <class Tr, template <class> class Op, bool kFinalize>
void reduceLoop(void* dst, const void* a, const void* b, size_t n, const RedOpSpec& op) {
  const uint32_t divisor = op.divisor;
  forEach2<Tr>(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(a),
               static_cast<const unsigned char*>(b), n, [&](typename Tr::VE x, typename Tr::VE y) {
                 return combine<Tr, Op, kFinalize>(x, y, divisor);
               });
}

// One 64-byte line of results to each output. Streaming stores (to the first nstream
// outputs) skip reading the line before overwriting it, and an output that is 16-byte
// aligned keeps that alignment from line to line; other outputs get plain stores. Not
// fenced (reduce.h: streamFence).
inline void storeLine(void* const* outs, int nout, int nstream, size_t off, const unsigned char* line) {
  for (int k = 0; k < nout; ++k) {
    unsigned char* d = static_cast<unsigned char*>(outs[k]) + off;
#if defined(__x86_64__)
    if (k < nstream && (reinterpret_cast<uintptr_t>(d) & 15) == 0) {
      for (size_t q = 0; q < 64; q += 16) {
        __m128i v;
        std::memcpy(&v, line + q, 16);
        _mm_stream_si128(reinterpret_cast<__m128i*>(d + q), v);
      }
      continue;
    }
#endif
    std::memcpy(d, line, 64);
  }
}

// reduceLoop's results written to every output at once, a line at a time: loads of the
// next line overlap the streaming stores of this one, which a reduce into a cached buffer
// followed by a streaming copy of it does not (a 32 MiB fold to two outputs took 4.0 ms
// that way, 2.6-2.8 ms fused, on one core). Each line of a and b is read before
// any output line at the same place is written, so an output may be a or b exactly.
template <class Tr, template <class> class Op, bool kFinalize>
void reduceStreamLoop(void* const* outs, int nout, int nstream, size_t outOffset, const void* a, const void* b,
                      size_t n, const RedOpSpec& op) {
  using VE = typename Tr::VE;
  constexpr size_t kVec = sizeof(VE), kElem = sizeof(typename Tr::Elem), kLineElems = 64 / kElem;
  static_assert(64 % kVec == 0, "whole vectors per line");
  const uint32_t divisor = op.divisor;
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  alignas(64) unsigned char line[64];
  size_t i = 0;
  for (; i + kLineElems <= n; i += kLineElems) {
    const size_t off = i * kElem;
    VE x[64 / kVec], y[64 / kVec];
    for (size_t u = 0; u < 64 / kVec; ++u) x[u] = loadVec<VE>(pa + off + u * kVec);
    for (size_t u = 0; u < 64 / kVec; ++u) y[u] = loadVec<VE>(pb + off + u * kVec);
    for (size_t u = 0; u < 64 / kVec; ++u) storeVec(line + u * kVec, combine<Tr, Op, kFinalize>(x[u], y[u], divisor));
    storeLine(outs, nout, nstream, outOffset + off, line);
  }
  if (i < n) {  // under a line: through the ordinary loop, then plain stores
    const size_t off = i * kElem, rest = (n - i) * kElem;
    reduceLoop<Tr, Op, kFinalize>(line, pa + off, pb + off, n - i, op);
    for (int k = 0; k < nout; ++k) std::memcpy(static_cast<unsigned char*>(outs[k]) + outOffset + off, line, rest);
  }
}

template <class Tr, bool kScale, bool kFinalize>
void mapLoop(void* dst, const void* src, size_t n, const RedOpSpec& op) {
  const uint32_t divisor = op.divisor;
  const typename Tr::Acc s = kScale ? scalarOf<Tr>(op) : typename Tr::Acc{};
  forEach1<Tr>(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), n, [&](typename Tr::VE x) {
    typename Tr::VA r = Tr::widen(x);
    if constexpr (kScale) r = scaleBy<Tr>(r, s);
    if constexpr (kFinalize) r = divideBy<Tr>(r, divisor);
    return Tr::narrow(r);
  });
}

template <class Tr>
void toFloatLoop(float* dst, const void* src, size_t n) {
  using VE = typename Tr::VE;
  const auto* s = static_cast<const unsigned char*>(src);
  for (size_t i = 0; i < n; i += Tr::kLanes) {
    size_t m = n - i < Tr::kLanes ? n - i : Tr::kLanes;
    VE x{};
    std::memcpy(&x, s + i * sizeof(typename Tr::Elem), m * sizeof(typename Tr::Elem));
    VF f = Tr::widen(x);
    std::memcpy(dst + i, &f, m * sizeof(float));
  }
}

template <class Tr>
void fromFloatLoop(void* dst, const float* src, size_t n) {
  auto* d = static_cast<unsigned char*>(dst);
  for (size_t i = 0; i < n; i += Tr::kLanes) {
    size_t m = n - i < Tr::kLanes ? n - i : Tr::kLanes;
    VF f{};
    std::memcpy(&f, src + i, m * sizeof(float));
    typename Tr::VE x = Tr::narrow(f);
    std::memcpy(d + i * sizeof(typename Tr::Elem), &x, m * sizeof(typename Tr::Elem));
  }
}

// One base op's loops for one dtype, without and with the final division.
template <class Tr, template <class> class Op>
void fillOp(KernelTable& t, ncclDataType_t dt, ncclRedOp_t base) {
  t.reduce[dt][base][0] = reduceLoop<Tr, Op, false>;
  t.reduce[dt][base][1] = reduceLoop<Tr, Op, true>;
  t.reduceStream[dt][base][0] = reduceStreamLoop<Tr, Op, false>;
  t.reduceStream[dt][base][1] = reduceStreamLoop<Tr, Op, true>;
}

template <class Tr>
void fillType(KernelTable& t, ncclDataType_t dt) {
  fillOp<Tr, OpSum>(t, dt, ncclSum);
  fillOp<Tr, OpProd>(t, dt, ncclProd);
  fillOp<Tr, OpMax>(t, dt, ncclMax);
  fillOp<Tr, OpMin>(t, dt, ncclMin);
  t.map[dt][0][0] = mapLoop<Tr, false, false>;
  t.map[dt][0][1] = mapLoop<Tr, false, true>;
  t.map[dt][1][0] = mapLoop<Tr, true, false>;
  t.map[dt][1][1] = mapLoop<Tr, true, true>;
  if constexpr (std::is_same_v<typename Tr::Acc, float> && !std::is_same_v<typename Tr::Elem, float>) {
    t.toFloat[dt] = toFloatLoop<Tr>;
    t.fromFloat[dt] = fromFloatLoop<Tr>;
  }
}

inline KernelTable makeTable(const char* isa) {
  KernelTable t{};
  t.isa = isa;
  fillType<Plain<int8_t>>(t, ncclInt8);
  fillType<Plain<uint8_t>>(t, ncclUint8);
  fillType<Plain<int32_t>>(t, ncclInt32);
  fillType<Plain<uint32_t>>(t, ncclUint32);
  fillType<Plain<int64_t>>(t, ncclInt64);
  fillType<Plain<uint64_t>>(t, ncclUint64);
  fillType<Fp16>(t, ncclFloat16);
  fillType<Plain<float>>(t, ncclFloat32);
  fillType<Plain<double>>(t, ncclFloat64);
  fillType<Bf16>(t, ncclBfloat16);
  fillType<Fp8E4M3>(t, ncclFloat8e4m3);
  fillType<Fp8E5M2>(t, ncclFloat8e5m2);
  return t;
}

}  // namespace snccl::kernels::SNCCL_KERNEL_ISA
