// The quantized AllReduce (snccl.h: sncclAllReduceQuantized): a ring reduce-scatter and all-gather
// whose messages are block-quantized fp32 (collectives/kernels/quant.h).
//
// The data is cut into nranks chunks on block boundaries. In the reduce-scatter, rank r at step s
// sends chunk (r - s) mod n to r + 1, quantized after adding what it received for that chunk
// (requantized partial sums, so every hop carries the compressed size); after n - 1 steps it holds
// the full sum of chunk (r + 1) mod n, quantizes it once more and that encoding travels unchanged
// around the all-gather. Every rank, the owner included, decodes the owner's bytes, so all ranks
// get the same bits.
//
// Each rank quantizes every element position exactly once per call (the n - 1 chunks it forwards
// and the one it owns), which is what makes error feedback exact: with a residual buffer, a rank
// adds back at each position what its own quantization lost there in the previous call, and keeps
// what it loses now. Summed over calls, the outputs then differ from the exact sums by no more than
// the last call's residuals (they telescope), instead of by an error that grows with the number of
// calls. A residual belongs to one (communicator, count, format): the same rank always quantizes
// the same positions.
//
// The steps are point-to-point exchanges (enqueue.h: runP2PNow). A large call is cut into up to
// 4 segments, each its own ring over its share of the data, whose steps interleave: a helper
// thread runs the exchanges in posting order while the calling thread quantizes the next
// segment's step. The encodings live in one scratch block of the communicator, two per
// segment.
#pragma once

#include <cstddef>

#include "collectives/kernels/quant.h"
#include "common/status.h"
#include "snccl/nccl.h"

struct ncclComm;

namespace snccl {

struct QuantAllReduceArgs {
  const float* send = nullptr;
  float* recv = nullptr;
  size_t count = 0;
  bool average = false;  // ncclAvg: results divided by nranks after decoding
  kernels::quant::Format format;
  float* residual = nullptr;  // count elements, or nullptr: no error feedback
};

// Checks the arguments (InvalidArgument/InvalidUsage leave the communicator usable), then runs the
// call now (stream NULL) or queues it on the host stream.
Status quantAllReduce(ncclComm* comm, const QuantAllReduceArgs& args, cudaStream_t stream);

// [first, first + count) of chunk c when `count` elements in blocks of `block` are split into n
// chunks on block boundaries (the same on every rank).
struct ChunkRange {
  size_t first = 0, count = 0;
};
ChunkRange quantChunk(size_t count, uint32_t block, int n, int c);

}  // namespace snccl
