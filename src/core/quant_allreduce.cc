// The quantized AllReduce: argument checks and the ring of quant_allreduce.h.
#include "core/quant_allreduce.h"

#include <algorithm>
#include <array>
#include <utility>

#include "core/comm.h"
#include "core/engine/registry.h"
#include "core/enqueue.h"
#include "core/scratch_pool.h"
#include "core/stream.h"

namespace snccl {

namespace quant = kernels::quant;

ChunkRange quantChunk(size_t count, uint32_t block, int n, int c) {
  const size_t nb = (count + block - 1) / block;
  const size_t lo = nb * size_t(c) / size_t(n), hi = nb * size_t(c + 1) / size_t(n);
  const size_t first = std::min(count, lo * block), last = std::min(count, hi * block);
  return {first, last - first};
}

namespace {

bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  auto pa = static_cast<const char*>(a), pb = static_cast<const char*>(b);
  return na && nb && pa < pb + nb && pb < pa + na;
}

Status checkArgs(ncclComm* comm, const QuantAllReduceArgs& a, cudaStream_t stream) {
  SNCCL_TRY(checkComm(comm));
  if (!quant::validFormat(a.format.bits, a.format.block))
    return InvalidArgument(
        "quantization to %d bits in blocks of %u: bits must "
        "be 8 or 4, the block an even "
        "number of elements from %u to %u",
        a.format.bits, a.format.block, quant::kMinBlock, quant::kMaxBlock);
  if (a.count > (SIZE_MAX / 4) / sizeof(float)) return InvalidArgument("count %zu is too large", a.count);
  if (groupDepth() > 0)
    return InvalidUsage(
        "sncclAllReduceQuantized cannot be called between "
        "ncclGroupStart and ncclGroupEnd");
  if (stream != nullptr && lookupStream(stream) == nullptr)
    return InvalidUsage("stream %p is not an snccl host stream (sncclStreamCreate)", (void*)stream);
  if (a.count == 0) return OkStatus();
  if (a.send == nullptr) return InvalidArgument("sendbuff is NULL");
  if (a.recv == nullptr) return InvalidArgument("recvbuff is NULL");
  const size_t bytes = a.count * sizeof(float);
  if (a.send != a.recv && overlaps(a.send, bytes, a.recv, bytes))
    return InvalidArgument("sendbuff and recvbuff overlap without being equal");
  if (a.residual != nullptr &&
      (overlaps(a.residual, bytes, a.send, bytes) || overlaps(a.residual, bytes, a.recv, bytes)))
    return InvalidArgument("the residual buffer overlaps sendbuff or recvbuff");
  const engine::OpBuffer bufs[] = {{"sendbuff", a.send}, {"recvbuff", a.recv}, {"residual", a.residual}};
  SNCCL_ASSIGN_OR_RETURN(const engine::DataEngine* e, engine::opEngine(bufs));
  if (e != &engine::hostEngine())
    return InvalidArgument(
        "sncclAllReduceQuantized runs on host memory only; "
        "a buffer is %s memory",
        e->name());
  return OkStatus();
}

// One step of the ring: send `sendBytes` from s to the next rank, receive `recvBytes` from the
// previous one into d.
Status exchange(ncclComm* comm, const uint8_t* s, size_t sendBytes, uint8_t* d, size_t recvBytes) {
  const int n = comm->nranks, r = comm->rank;
  std::array<PendingOp, 2> ops;
  for (PendingOp& p : ops) {
    p.comm = comm;
    p.coll = CollKind::kSendRecv;
    p.dt = ncclUint8;
  }
  ops[0].sendbuff = s;
  ops[0].count = sendBytes;
  ops[0].peer = (r + 1) % n;
  ops[0].isSend = true;
  ops[1].recvbuff = d;
  ops[1].count = recvBytes;
  ops[1].peer = (r + n - 1) % n;
  return runP2PNow(ops);
}

Status run(ncclComm* comm, const QuantAllReduceArgs& a, uint64_t seq) {
  const int n = comm->nranks, r = comm->rank;
  const quant::Format f = a.format;
  const uint32_t divisor = a.average ? uint32_t(n) : 0;
  auto chunk = [&](int c) { return quantChunk(a.count, f.block, n, ((c % n) + n) % n); };
  auto res = [&](const ChunkRange& c) { return a.residual != nullptr ? a.residual + c.first : nullptr; };
  size_t maxBytes = 1;
  for (int c = 0; c < n; ++c) maxBytes = std::max(maxBytes, quant::encodedBytes(chunk(c).count, f));
  ScratchLease sendLease, recvLease;
  if (!sendLease.ensure(comm->caches.scratchPool, maxBytes) ||
      (n > 1 && !recvLease.ensure(comm->caches.scratchPool, maxBytes)))
    return SystemError("cannot map 2 x %zu bytes of scratch memory", maxBytes);
  auto encS = reinterpret_cast<uint8_t*>(sendLease.data());
  auto encR = reinterpret_cast<uint8_t*>(recvLease.data());
  auto fail = [&](Status st, const char* phase, int step) {
    st.addContext("quantized AllReduce #" + std::to_string(seq) + " (count " + std::to_string(a.count) + ", " +
                  std::to_string(f.bits) + "-bit), " + phase + " step " + std::to_string(step));
    return st;
  };
  // Reduce-scatter: forward requantized partial sums.
  const uint8_t* prev = nullptr;
  for (int s = 0; s < n - 1; ++s) {
    const ChunkRange out = chunk(r - s), in = chunk(r - s - 1);
    quant::encode(f, out.count, a.send + out.first, prev, res(out), encS, nullptr, 0);
    Status st = exchange(comm, encS, quant::encodedBytes(out.count, f), encR, quant::encodedBytes(in.count, f));
    if (!st.ok()) return fail(std::move(st), "reduce-scatter", s);
    prev = encR;
  }
  // This rank's chunk is complete: quantize it once, decode it like every other rank will.
  const ChunkRange own = chunk(r + 1);
  quant::encode(f, own.count, a.send + own.first, prev, res(own), encS, a.recv + own.first, divisor);
  // All-gather: forward each encoding unchanged.
  for (int t = 0; t < n - 1; ++t) {
    const ChunkRange out = chunk(r + 1 - t), in = chunk(r - t);
    Status st = exchange(comm, encS, quant::encodedBytes(out.count, f), encR, quant::encodedBytes(in.count, f));
    if (!st.ok()) return fail(std::move(st), "all-gather", t);
    quant::decode(f, in.count, encR, a.recv + in.first, divisor);
    std::swap(encS, encR);
  }
  return OkStatus();
}

}  // namespace

Status quantAllReduce(ncclComm* comm, const QuantAllReduceArgs& args, cudaStream_t stream) {
  SNCCL_TRY(checkArgs(comm, args, stream));
  // It counts as a collective: every rank calls it in the same order, and the signatures of the
  // collectives after it stay aligned only if every rank counts it.
  const uint64_t seq = comm->ordering.collSeq++;
  if (args.count == 0) return OkStatus();
  if (stream == nullptr) return run(comm, args, seq);
  lookupStream(stream)->enqueue([comm, args, seq] { return run(comm, args, seq); });
  return OkStatus();
}

}  // namespace snccl
