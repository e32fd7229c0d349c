// Validation data of the perf tools: the 12 datatypes, input patterns whose reductions are
// exact in any order, and the checker that counts wrong output elements.
//
// Reductions: every input is a small integer, chosen per datatype, operator and rank count
// so that every partial result of any reduction order is exactly representable (the
// result cannot depend on the library's order). Inputs repeat with a prime period, so the
// expected result of every element is tabulated once per pass. Float averages are the one
// inexact case (sum / n rounded once, or pre-divided): accepted within 2 ulp of the type.
// Data movement: raw pseudo-random bit patterns (NaN encodings included) that name their
// source rank and index, compared bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sn_perf.h"

namespace snperf {

struct TypeDesc {
  ncclDataType_t dt;
  const char* name;  // nccl-tests' spelling ("half", "f8e4m3", ...)
  int size;
  bool isFloat;
  bool isSigned;
  int expBits, mantBits, bias;  // floating formats
  double exactLimit;            // every integer in [-limit, limit] (or [0, limit]) is exact
};
const TypeDesc& typeDesc(ncclDataType_t dt);
// nullptr when the name is unknown.
const TypeDesc* findType(const char* name);

// Floating formats: `v` must be representable (the patterns only encode integers).
uint64_t encodeValue(const TypeDesc& t, double v);
double decodeFloat(const TypeDesc& t, uint64_t bits);
// The spacing of the type's representable numbers at |v|.
double ulpOf(const TypeDesc& t, double v);

// One output range a rank must hold after an operation: elements [outOff, outOff+len) of
// its output equal the inputs [srcOff, srcOff+len) of rank `src`, or, when src < 0, the
// reduction over all ranks of the inputs at global indexes [srcOff, srcOff+len).
struct OutBlock {
  size_t outOff;
  size_t len;
  int src;
  size_t srcOff;
};

// The inputs and expected outputs of one validation pass, identical on every rank and
// process for the same arguments.
class Pattern {
 public:
  static constexpr size_t kPeriod = 1021;

  // op < 0: data movement (raw bits); else an OpKind.
  void build(ncclDataType_t dt, int op, int nranks, uint64_t seed);
  // Bits of input element `idx` of rank `rank`.
  uint64_t input(int rank, size_t idx) const;
  // Writes inputs [0, count) of `rank` to `dst`.
  void fill(int rank, void* dst, size_t count) const;
  // Number of elements of `out` (indexed from the start of the output buffer) that differ
  // from what `b` says they must hold.
  size_t countWrong(const OutBlock& b, const void* out) const;
  // PreMulSum's scalar in the datatype's encoding.
  uint64_t scalarBits() const { return scalarBits_; }
  const TypeDesc& type() const { return *type_; }

 private:
  bool acceptsReduced(size_t j, uint64_t got) const;
  template <typename U>
  size_t countWrongT(const OutBlock& b, const U* out) const;
  template <typename U>
  void fillT(int rank, U* dst, size_t count) const;
  void buildReduction();
  int64_t reductionInput(int rank, size_t j) const;

  const TypeDesc* type_ = nullptr;
  int op_ = -1;
  int n_ = 1;
  uint64_t seed_ = 0;
  uint64_t mask_ = 0;
  uint64_t scalarBits_ = 0;
  std::vector<uint64_t> in_;       // [rank * kPeriod + j]
  std::vector<uint64_t> expBits_;  // [j]
  std::vector<double> expVal_;     // [j]
};

// A pattern no operation produces, written over outputs before the validation pass.
void poison(void* dst, size_t bytes);
// The datatype's PreMulSum scalar, as a double.
double mulSumScalar(const TypeDesc& t);

}  // namespace snperf
