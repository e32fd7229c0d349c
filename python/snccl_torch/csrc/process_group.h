// ProcessGroupSnccl: a c10d backend running the NCCL C API (loaded with dlopen) on CPU
// tensors. Operations are queued on one snccl host stream per group and return at once; a
// completion thread finishes their Work objects (and futures) when the stream drains, and a
// watchdog aborts the communicator when an operation outlives the group's timeout.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "compat.h"
#include "nccl_api.h"
#include "registration.h"

namespace snccl_torch {

class WorkSnccl : public c10d::Work {
 public:
  WorkSnccl(c10d::OpType type, std::vector<at::Tensor> outputs);
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;

  // Called once by the group when the operation ended (eptr null on success).
  void complete(std::exception_ptr eptr);

  std::function<void()> onSuccess;   // copies results back to the user's tensors
  std::function<void()> onFinish;    // always runs (releases per-operation resources)
  std::vector<at::Tensor> keepAlive;  // buffers the library reads or writes until the end
  std::chrono::steady_clock::time_point deadline;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupSnccl : public BackendBase {
 public:
  ProcessGroupSnccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  // A group on a communicator made already (by ncclCommSplit); it owns `comm`.
  ProcessGroupSnccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout, ncclComm_t comm);
  ~ProcessGroupSnccl() override;

  const std::string getBackendName() const override { return "snccl"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplits,
                                               std::vector<int64_t>& inputSplits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  // Rank 0 waits for every rank to arrive (through the group's store, not the communicator,
  // so a dead or stuck rank cannot wedge it) and names the ranks that did not, as Gloo does.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // ncclCommSplit of this group's communicator, collective over the group: the ranks in
  // `ranks` (this group's ranks, in the new group's order) get a group on the child
  // communicator; every other rank must call it too, and gets nullptr. The child's timeout
  // is `timeout`. splitCount() counts the splits this group took part in.
  c10::intrusive_ptr<ProcessGroupSnccl> splitRanks(const c10::intrusive_ptr<c10d::Store>& store,
                                                   const std::vector<int>& ranks,
                                                   std::chrono::milliseconds timeout);
  int64_t splitCount() const { return splits_; }
  // Storages registered with the communicator (registration.h), for diagnostics and tests.
  int64_t registeredTensors() const { return registry_ ? static_cast<int64_t>(registry_->registered()) : 0; }
  bool canSplit() const { return api_.CommSplit != nullptr; }

#if SNCCL_TORCH_SPLIT
  bool supportsSplitting() const override { return canSplit(); }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  c10::intrusive_ptr<Options> getBackendOptions() override;
#endif

#if SNCCL_TORCH_COALESCING
  // Between startCoalescing and endCoalescing the operations are one NCCL group (one
  // ncclGroupStart/End): batch_isend_irecv's sends and receives cannot wait on each other.
  // Their Work objects complete together, with endCoalescing's.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
#endif

  // sncclAllReduceQuantized of a float32 tensor in place (snccl.h): `bits` 8 or 4, blocks of
  // `blockSize` elements (0: the library's default), average or sum; `residual` (float32, the
  // tensor's size, or empty for none) is the caller's error-feedback state.
  c10::intrusive_ptr<c10d::Work> allreduceQuantized(at::Tensor& tensor, at::Tensor& residual, int64_t bits,
                                                    int64_t blockSize, bool average);
  // The library in use (path, version) for diagnostics.
  static const NcclApi& api();

 private:
  struct Op;  // one operation being prepared (see process_group.cc)

  c10::intrusive_ptr<c10d::Work> launch(Op& op, const std::function<void(ncclComm_t)>& calls);
  // The PreMulSum reduction operators an operation creates (for ReduceOp.PREMUL_SUM)
  // on the communicator: `op` destroys them when it is released.
  std::shared_ptr<std::vector<ncclRedOp_t>> destroyOpsOnRelease(Op& op);
  void check(ncclResult_t r, const char* what);
  [[noreturn]] void fail(ncclResult_t r, const char* what);
  void completionLoop();
  void watchdogLoop();
  void abortComm(const std::string& why);
  // Hands Work objects whose operations are queued on the stream to the completion thread,
  // which finishes them in order; the caller holds commMutex_.
  void enqueueLocked(const std::vector<c10::intrusive_ptr<WorkSnccl>>& works);
  std::string errorText(ncclResult_t r, const char* what);  // the call, the code, the last error

  void start();  // the host stream and the completion and watchdog threads
  // Registers `t`'s storage when it recurs and nothing of the group is in flight.
  void maybeRegister(const at::Tensor& t);

  c10::intrusive_ptr<c10d::Store> store_;  // the group's (prefixed) store
  std::atomic<int64_t> splits_{0};         // splitRanks calls (read without the lock)
  uint64_t monitoredBarriers_ = 0;         // calls so far: the key of the next one

  const NcclApi& api_;
  std::chrono::milliseconds timeout_;
  sncclStream_t stream_ = nullptr;

  std::mutex commMutex_;  // guards comm_ (enqueue vs abort) and aborted_
  ncclComm_t comm_ = nullptr;
  std::string aborted_;  // non-empty once the communicator was aborted: why
  bool failed_ = false;  // an operation failed: destroy with abort
  bool coalescing_ = false;  // inside startCoalescing .. endCoalescing (an open NCCL group)
  std::vector<c10::intrusive_ptr<WorkSnccl>> coalesced_;  // its operations so far
  std::unique_ptr<TensorRegistry> registry_;  // null: registration off; guarded by commMutex_

  std::mutex mutex_;  // guards the fields below
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkSnccl>> pending_;  // queued on the stream, not finished
  std::chrono::steady_clock::time_point inflightDeadline_ = std::chrono::steady_clock::time_point::max();
  bool stop_ = false;          // completion thread: drain, then exit
  bool watchdogStop_ = false;  // watchdog thread: exit
  std::thread completion_;
  std::thread watchdog_;
};

}  // namespace snccl_torch
