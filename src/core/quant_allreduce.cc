// The quantized AllReduce: argument checks and the ring of quant_allreduce.h.
#include "core/quant_allreduce.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

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
        "quantization to %d bits in blocks of %u: bits must be 8 or 4, "
        "the block an even number of elements from %u to %u",
        a.format.bits, a.format.block, quant::kMinBlock, quant::kMaxBlock);
  if (a.count > (SIZE_MAX / 4) / sizeof(float)) return InvalidArgument("count %zu is too large", a.count);
  if (groupDepth() > 0)
    return InvalidUsage("sncclAllReduceQuantized cannot be called between ncclGroupStart and ncclGroupEnd");
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
    return InvalidArgument("sncclAllReduceQuantized runs on host memory only; a buffer is %s memory", e->name());
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

// Runs the ring's exchanges in the order they are posted, on a helper thread when `async`
// (so the caller computes the next segment's step meanwhile), else at once on the caller.
class Exchanger {
 public:
  struct Item {
    const uint8_t* send;
    size_t sendBytes;
    uint8_t* recv;
    size_t recvBytes;
  };

  Exchanger(ncclComm* comm, bool async) : comm_(comm) {
    if (async) thread_ = std::thread([this] { loop(); });
  }
  ~Exchanger() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Queues an exchange; returns its ticket for wait().
  size_t post(const Item& it) {
    if (!thread_.joinable()) {
      if (error_.ok()) error_ = exchange(comm_, it.send, it.sendBytes, it.recv, it.recvBytes);
      return posted_++;
    }
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(it);
    cv_.notify_all();
    return posted_++;
  }
  // Waits until exchange `ticket` is done; the first error of any exchange so far.
  Status wait(size_t ticket) {
    if (!thread_.joinable()) return error_;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_ > ticket || !error_.ok(); });
    return error_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_, nothing left
      const Item it = queue_.front();
      queue_.pop_front();
      const bool failed = !error_.ok();
      lock.unlock();
      // After a failure the rest only drain: the ring is poisoned, the caller returns.
      Status st = failed ? OkStatus() : exchange(comm_, it.send, it.sendBytes, it.recv, it.recvBytes);
      lock.lock();
      if (!st.ok() && error_.ok()) error_ = std::move(st);
      ++done_;
      cv_.notify_all();
    }
  }

  ncclComm* comm_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;  // under mu_
  size_t posted_ = 0;       // caller's thread only
  size_t done_ = 0;         // under mu_ (async)
  bool stop_ = false;       // under mu_
  Status error_;            // under mu_ (async)
};

// Segments the data is cut into, so that one segment's exchange overlaps the next one's
// quantization: as many as keep each rank's chunk of a segment at least kMinSegmentElems,
// at most kMaxSegments. A function of (count, nranks, block) only, the same on every rank
// and call, so each element keeps its place in the ring (the residual depends on it).
constexpr size_t kMinSegmentElems = size_t(1) << 18;  // 1 MiB of fp32
constexpr int kMaxSegments = 4;
int segmentCount(size_t count, int n, uint32_t block) {
  const size_t perRank = count / size_t(n);
  int s = int(std::min<size_t>(kMaxSegments, std::max<size_t>(1, perRank / kMinSegmentElems)));
  while (s > 1 && count / block < size_t(s) * size_t(n)) --s;  // a block per chunk at least
  return n > 1 ? s : 1;
}

Status run(ncclComm* comm, const QuantAllReduceArgs& a, uint64_t seq) {
  const int n = comm->nranks, r = comm->rank;
  const quant::Format f = a.format;
  const uint32_t divisor = a.average ? uint32_t(n) : 0;
  const int nseg = segmentCount(a.count, n, f.block);
  // Segment g is [g * count / nseg, (g + 1) * count / nseg) rounded to blocks; its chunk c
  // is quantChunk's split of that range.
  const size_t blocks = (a.count + f.block - 1) / f.block;
  auto segFirst = [&](int g) { return std::min(a.count, blocks * size_t(g) / size_t(nseg) * f.block); };
  auto chunk = [&](int g, int c) {
    ChunkRange cr = quantChunk(segFirst(g + 1) - segFirst(g), f.block, n, ((c % n) + n) % n);
    cr.first += segFirst(g);
    return cr;
  };
  auto bytes = [&](const ChunkRange& c) { return quant::encodedBytes(c.count, f); };
  auto res = [&](const ChunkRange& c) { return a.residual != nullptr ? a.residual + c.first : nullptr; };
  // Two encodings per segment (what goes out, what came in), 64-byte aligned.
  size_t maxBytes = 64;
  for (int g = 0; g < nseg; ++g)
    for (int c = 0; c < n; ++c) maxBytes = std::max(maxBytes, (bytes(chunk(g, c)) + 63) / 64 * 64);
  ScratchLease lease;
  if (!lease.ensure(comm->caches.scratchPool, 2 * size_t(nseg) * maxBytes))
    return SystemError("cannot map %zu bytes of scratch memory", 2 * size_t(nseg) * maxBytes);
  struct Seg {
    uint8_t* out;
    uint8_t* in;
    size_t ticket = SIZE_MAX;  // its last posted exchange
  };
  std::vector<Seg> segs(static_cast<size_t>(nseg));
  for (int g = 0; g < nseg; ++g) {
    segs[g].out = reinterpret_cast<uint8_t*>(lease.data()) + 2 * size_t(g) * maxBytes;
    segs[g].in = segs[g].out + maxBytes;
  }
  Exchanger ex(comm, nseg > 1);
  // Step j of a segment: 0 .. n-2 reduce-scatter (forward requantized partial sums);
  // n-1 quantize the completed chunk once, decode it like every other rank will, and send
  // it into the all-gather; n .. 2n-2 decode what arrived and forward it unchanged. Every
  // step but the last posts one exchange.
  for (int j = 0; j <= 2 * n - 2; ++j) {
    for (int g = 0; g < nseg; ++g) {
      Seg& sg = segs[g];
      if (sg.ticket != SIZE_MAX) {
        Status st = ex.wait(sg.ticket);
        if (!st.ok()) {
          st.addContext("quantized AllReduce #" + std::to_string(seq) + " (count " + std::to_string(a.count) + ", " +
                        std::to_string(f.bits) + "-bit), " + (j <= n - 1 ? "reduce-scatter" : "all-gather") + " step " +
                        std::to_string(j <= n - 1 ? j - 1 : j - n));
          return st;
        }
      }
      Exchanger::Item it{};
      if (j < n - 1) {
        const ChunkRange out = chunk(g, r - j), in = chunk(g, r - j - 1);
        quant::encode(f, out.count, a.send + out.first, j == 0 ? nullptr : sg.in, res(out), sg.out, nullptr, 0);
        it = {sg.out, bytes(out), sg.in, bytes(in)};
      } else if (j == n - 1) {
        const ChunkRange own = chunk(g, r + 1);
        quant::encode(f, own.count, a.send + own.first, n > 1 ? sg.in : nullptr, res(own), sg.out, a.recv + own.first,
                      divisor);
        if (n > 1) it = {sg.out, bytes(own), sg.in, bytes(chunk(g, r))};
      } else {
        const int t = j - (n - 1);  // the all-gather exchange t - 1 has arrived
        const ChunkRange in = chunk(g, r - (t - 1));
        quant::decode(f, in.count, sg.in, a.recv + in.first, divisor);
        std::swap(sg.out, sg.in);
        if (t < n - 1) it = {sg.out, bytes(chunk(g, r + 1 - t)), sg.in, bytes(chunk(g, r - t))};
      }
      sg.ticket = it.send != nullptr ? ex.post(it) : SIZE_MAX;
    }
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
