// Microbenchmarks of the CPU reduction kernels: reduce() (sum) for every datatype at 64 KiB
// (cache resident) and 4 MiB per buffer, next to memcpy of the same bytes, which is the
// ceiling a bandwidth-bound kernel is judged against. bytes_per_second counts the bytes of
// one buffer per call (the nccl-tests "algbw" view); the `traffic` counter adds everything
// the call moves (reduce: read a and b, write dst = 3x; memcpy: 2x).
//
// The single-copy AllReduce's last combine at 2 ranks, 32 MiB per buffer (out of cache):
// reduceStream() to two outputs with streaming stores, against reduce() into one output
// and a memcpy of it into the other (both 4x: read a and b, write two outputs).
//
//   ./bench_kernels --benchmark_filter='4MiB'    # one size
//   ./bench_kernels --benchmark_filter='float/'  # one type, every table
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/kernels/kernel_table.h"
#include "collectives/kernels/reduce.h"

namespace {

using snccl::kernels::KernelTable;
using snccl::kernels::RedOpSpec;

constexpr size_t kSizes[] = {64 << 10, 4 << 20};

std::string sizeName(size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

// Inputs are small normal numbers of the dtype (a byte pattern that is finite for every
// format), so no lane takes a NaN or saturation path a real workload would not.
std::vector<unsigned char> inputBuffer(size_t bytes, ncclDataType_t dt) {
  std::vector<unsigned char> v(bytes);
  const size_t size = snccl::kernels::typeSize(dt);
  for (size_t i = 0; i < bytes; ++i) v[i] = (i % size == size - 1) ? 0x3C : static_cast<unsigned char>(i * 13);
  return v;
}

void setRates(benchmark::State& state, size_t bytes, int touches) {
  const double total = double(state.iterations()) * double(bytes);
  state.SetBytesProcessed(int64_t(total));
  state.counters["traffic"] =
      benchmark::Counter(total * touches, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

void benchReduce(benchmark::State& state, const KernelTable* table, ncclDataType_t dt, size_t bytes) {
  const size_t count = bytes / snccl::kernels::typeSize(dt);
  std::vector<unsigned char> a = inputBuffer(bytes, dt), b = inputBuffer(bytes, dt), dst(bytes);
  RedOpSpec op;  // sum
  for (auto _ : state) {
    if (table) {
      snccl::kernels::reduceWith(*table, dst.data(), a.data(), b.data(), count, dt, op, false, false);
    } else {
      snccl::kernels::reduce(dst.data(), a.data(), b.data(), count, dt, op, false, false);
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  setRates(state, bytes, 3);
}

void benchMemcpy(benchmark::State& state, size_t bytes) {
  std::vector<unsigned char> src = inputBuffer(bytes, ncclUint8), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  setRates(state, bytes, 2);
}

void benchFoldTwo(benchmark::State& state, bool streamed) {
  constexpr size_t bytes = size_t(32) << 20;
  const size_t count = bytes / sizeof(float);
  std::vector<unsigned char> a = inputBuffer(bytes, ncclFloat32), b = inputBuffer(bytes, ncclFloat32), d0(bytes),
                             d1(bytes);
  void* outs[2] = {d0.data(), d1.data()};
  RedOpSpec op;  // sum
  for (auto _ : state) {
    if (streamed) {
      snccl::kernels::reduceStream(outs, 2, 2, a.data(), b.data(), count, ncclFloat32, op, false, false);
      snccl::kernels::streamFence();
    } else {
      snccl::kernels::reduce(d0.data(), a.data(), b.data(), count, ncclFloat32, op, false, false);
      std::memcpy(d1.data(), d0.data(), bytes);
    }
    benchmark::DoNotOptimize(d1.data());
    benchmark::ClobberMemory();
  }
  setRates(state, bytes, 4);
}

// The in-place fold of the single copy at 2 ranks: each input is also an output, written
// with streaming stores (nstream 2) or plain ones (0) right after its lines were loaded.
void benchFoldInPlace(benchmark::State& state, int nstream) {
  const size_t bytes = size_t(state.range(0));
  const size_t count = bytes / sizeof(float);
  std::vector<unsigned char> a = inputBuffer(bytes, ncclFloat32), b = inputBuffer(bytes, ncclFloat32);
  void* outs[2] = {a.data(), b.data()};
  RedOpSpec op;  // sum
  for (auto _ : state) {
    snccl::kernels::reduceStream(outs, 2, nstream, a.data(), b.data(), count, ncclFloat32, op, false, false);
    snccl::kernels::streamFence();
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  setRates(state, bytes, 4);
}

void registerAll() {
  benchmark::RegisterBenchmark("fold_two_outputs/stream/float/32MiB", benchFoldTwo, true);
  benchmark::RegisterBenchmark("fold_two_outputs/reduce_memcpy/float/32MiB", benchFoldTwo, false);
  benchmark::RegisterBenchmark("fold_in_place/stream/float", benchFoldInPlace, 2)->Arg(1 << 20)->Arg(32 << 20);
  benchmark::RegisterBenchmark("fold_in_place/plain/float", benchFoldInPlace, 0)->Arg(1 << 20)->Arg(32 << 20);
  for (size_t bytes : kSizes) {
    const std::string size = sizeName(bytes);
    benchmark::RegisterBenchmark(("memcpy/" + size).c_str(), benchMemcpy, bytes);
    for (int t = 0; t < ncclNumTypes; ++t) {
      const auto dt = static_cast<ncclDataType_t>(t);
      const std::string type = snccl::kernels::typeName(dt);
      benchmark::RegisterBenchmark(("reduce_sum/" + type + "/" + size).c_str(), benchReduce, nullptr, dt, bytes);
    }
    // The ISA tables side by side, to keep the AVX2 multiversioning honest.
    for (const KernelTable* table : {&snccl::kernels::genericKernels(), snccl::kernels::avx2Kernels()}) {
      if (!table) continue;
      for (ncclDataType_t dt : {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat8e4m3}) {
        const std::string name =
            std::string("reduce_sum_") + table->isa + "/" + snccl::kernels::typeName(dt) + "/" + size;
        benchmark::RegisterBenchmark(name.c_str(), benchReduce, table, dt, bytes);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  registerAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
