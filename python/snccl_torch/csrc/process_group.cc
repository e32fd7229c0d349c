// ProcessGroupSnccl life cycle: the library, the communicator, Work objects, and the
// completion and watchdog threads that finish them. The operations are in reductions.cc and
// data_movement.cc.
#include "process_group.h"

#include <cstring>
#include <stdexcept>

#include "op.h"

namespace snccl_torch {

using c10d::OpType;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------
// Work

WorkSnccl::WorkSnccl(OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(-1, type), outputs_(std::move(outputs)) {
  future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

c10::intrusive_ptr<c10::ivalue::Future> WorkSnccl::getFuture() { return future_; }

std::vector<at::Tensor> WorkSnccl::result() { return outputs_; }

void WorkSnccl::complete(std::exception_ptr eptr) {
  if (!eptr && onSuccess) {
    try {
      onSuccess();
    } catch (...) {
      eptr = std::current_exception();
    }
  }
  if (onFinish) onFinish();
  onSuccess = nullptr;
  onFinish = nullptr;
  keepAlive.clear();
  finish(eptr);  // completed_, wakes wait()
  if (eptr)
    future_->setError(eptr);
  else
    future_->markCompleted(c10::IValue(outputs_));
}

const NcclApi& ProcessGroupSnccl::api() {
  std::string err;
  const NcclApi* a = loadNcclApi(&err);
  if (!a) SNCCL_THROW("snccl backend: " + err);
  return *a;
}

std::string ProcessGroupSnccl::errorText(ncclResult_t r, const char* what) {
  std::string msg = std::string("snccl backend: ") + what + " failed: " + api_.GetErrorString(r);
  if (api_.GetLastError) {
    const char* last = api_.GetLastError(comm_);
    if (last && *last) msg += std::string(": ") + last;
  }
  return msg;
}

[[noreturn]] void ProcessGroupSnccl::fail(ncclResult_t r, const char* what) {
  SNCCL_THROW(errorText(r, what));
}

void ProcessGroupSnccl::check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress) fail(r, what);
}

// ---------------------------------------------------------------------------------------
// Life cycle

ProcessGroupSnccl::ProcessGroupSnccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout)
    : BackendBase(rank, size), store_(store), api_(api()), timeout_(timeout) {
  ncclUniqueId id;
  const std::string key = "snccl/uid";
  if (rank_ == 0) {
    check(api_.GetUniqueId(&id), "ncclGetUniqueId");
    const auto* p = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(p, p + sizeof(id)));
  } else {
    std::vector<uint8_t> v = store->get(key);  // waits up to the store's timeout
    TORCH_CHECK(v.size() == sizeof(id), "snccl backend: bad unique id in the store (", v.size(),
                " bytes)");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  check(api_.CommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  start();
}

ProcessGroupSnccl::ProcessGroupSnccl(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size, std::chrono::milliseconds timeout,
                                     ncclComm_t comm)
    : BackendBase(rank, size), store_(store), api_(api()), timeout_(timeout), comm_(comm) {
  start();
}

void ProcessGroupSnccl::start() {
  registry_ = TensorRegistry::fromEnv(api_, comm_);
  if (api_.StreamCreate) {
    ncclResult_t r = api_.StreamCreate(&stream_);
    if (r != ncclSuccess) {
      api_.CommDestroy(comm_);
      comm_ = nullptr;
      fail(r, "sncclStreamCreate");
    }
    completion_ = std::thread([this] { completionLoop(); });
    watchdog_ = std::thread([this] { watchdogLoop(); });
  }
  init();
}

ProcessGroupSnccl::~ProcessGroupSnccl() {
  if (completion_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;  // the completion thread drains pending work first
      cv_.notify_all();
    }
    completion_.join();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      watchdogStop_ = true;
      cv_.notify_all();
    }
    watchdog_.join();
  }
  if (stream_) api_.StreamDestroy(stream_);
  std::lock_guard<std::mutex> lock(commMutex_);
  // registrations end before the communicator (the storages stay, with private pages)
  if (registry_) registry_->detach(comm_ != nullptr && !failed_);
  if (comm_) {
    if (failed_ && api_.CommAbort)
      api_.CommAbort(comm_);
    else
      api_.CommDestroy(comm_);
    comm_ = nullptr;
  }
}

void ProcessGroupSnccl::abortComm(const std::string& why) {
  std::lock_guard<std::mutex> lock(commMutex_);
  if (!comm_ || !aborted_.empty()) return;
  aborted_ = why;
  if (registry_) registry_->detach(false);  // the abort ends them with the communicator
  if (api_.CommAbort) {
    api_.CommAbort(comm_);  // fails the queued operations; frees the communicator
    comm_ = nullptr;
  }
}

void ProcessGroupSnccl::completionLoop() {
  for (;;) {
    std::deque<c10::intrusive_ptr<WorkSnccl>> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || !pending_.empty(); });
      if (pending_.empty()) return;  // stopping and drained
      batch.swap(pending_);
      inflightDeadline_ = batch.front()->deadline;  // FIFO: the earliest
      cv_.notify_all();
    }
    // Every operation of the batch was queued before this call: when the stream drains,
    // they have all ended.
    ncclResult_t r = api_.StreamSynchronize(stream_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      inflightDeadline_ = Clock::time_point::max();
    }
    std::exception_ptr eptr;
    if (r != ncclSuccess) {
      std::string msg = std::string("snccl backend: operation failed: ") + api_.GetErrorString(r);
      {
        std::lock_guard<std::mutex> lock(commMutex_);
        failed_ = true;
        if (!aborted_.empty()) {
          msg += ": " + aborted_;
        } else if (api_.GetLastError) {
          const char* last = api_.GetLastError(comm_);
          if (last && *last) msg += std::string(": ") + last;
        }
      }
      eptr = std::make_exception_ptr(std::runtime_error(msg));
    }
    for (auto& w : batch) w->complete(eptr);
  }
}

void ProcessGroupSnccl::watchdogLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!watchdogStop_) {
    if (inflightDeadline_ == Clock::time_point::max()) {
      cv_.wait(lock);
      continue;
    }
    auto deadline = inflightDeadline_;
    cv_.wait_until(lock, deadline);
    if (inflightDeadline_ == deadline && Clock::now() >= deadline) {
      inflightDeadline_ = Clock::time_point::max();
      lock.unlock();
      abortComm("operation timed out after " + std::to_string(timeout_.count()) +
                " ms (the group's timeout); communicator aborted");
      lock.lock();
    }
  }
}

void ProcessGroupSnccl::maybeRegister(const at::Tensor& t) {
  if (!registry_) return;
  std::lock_guard<std::mutex> lock(commMutex_);
  if (!comm_ || !aborted_.empty() || coalescing_) return;
  {
    std::lock_guard<std::mutex> lock2(mutex_);  // nothing queued, nothing being waited for
    if (!pending_.empty() || inflightDeadline_ != Clock::time_point::max()) return;
  }
  registry_->sighted(t);
}

void ProcessGroupSnccl::enqueueLocked(const std::vector<c10::intrusive_ptr<WorkSnccl>>& works) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto deadline = Clock::now() + timeout_;
  for (const auto& w : works) {
    w->deadline = deadline;
    pending_.push_back(w);
  }
  cv_.notify_all();
}

// Queues the operation's calls on the stream (or runs them, without host streams) and
// returns its Work.
c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::launch(
    Op& op, const std::function<void(ncclComm_t)>& calls) {
  auto work = c10::make_intrusive<WorkSnccl>(op.type, op.outputs);
  work->keepAlive = std::move(op.keep);
  auto copies = std::move(op.copies);
  if (!copies.empty()) {
    work->onSuccess = [copies] {
      for (const auto& c : copies) c.first.copy_(c.second);
    };
  }
  work->onFinish = std::move(op.release);
  std::exception_ptr err;
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(commMutex_);
    try {
      if (!aborted_.empty()) SNCCL_THROW("snccl backend: the communicator was aborted: " + aborted_);
      calls(comm_);
    } catch (...) {
      err = std::current_exception();
    }
    if (!err && coalescing_) {
      coalesced_.push_back(work);  // queued (or run) when the group ends: endCoalescing
      return work;
    }
    if (!err && !stream_) {
      done = true;  // blocking library calls: already finished
    } else if (!err) {
      enqueueLocked({work});
    }
  }
  // outside commMutex_: release and the copies may take it
  if (err) {
    if (work->onFinish) work->onFinish();
    work->onFinish = nullptr;
    std::rethrow_exception(err);
  }
  if (done) work->complete(nullptr);
  return work;
}

}  // namespace snccl_torch
