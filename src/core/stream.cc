// Host stream worker and registry.
#include "core/stream.h"

#include <unordered_set>

#include "topology/affinity.h"

namespace snccl {

HostStream::HostStream()
    : worker_([this, numa = topo::currentNumaNode()] {
        topo::placeHelperThread(numa, "host stream worker");
        run();
      }) {}

HostStream::~HostStream() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return busy_ == 0; });
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void HostStream::enqueue(std::function<Status()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    ++busy_;
  }
  cv_.notify_all();
}

void HostStream::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::function<Status()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Status st = task();
    lock.lock();
    if (!st.ok() && error_.ok()) error_ = st;
    --busy_;
    cv_.notify_all();
  }
}

Status HostStream::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return busy_ == 0; });
  Status st = std::move(error_);
  error_ = Status();
  return st;
}

Status HostStream::query() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_.ok()) return error_;
  if (busy_ != 0) return Status(ncclInProgress, "");
  return OkStatus();
}

namespace {
struct Registry {
  std::mutex mutex;
  std::unordered_set<const void*> streams;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

sncclHostStream* registerStream(HostStream* stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.streams.insert(stream);
  return reinterpret_cast<sncclHostStream*>(stream);
}

HostStream* lookupStream(const void* handle) {
  if (handle == nullptr) return nullptr;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.streams.count(handle) ? static_cast<HostStream*>(const_cast<void*>(handle)) : nullptr;
}

HostStream* unregisterStream(const void* handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.streams.erase(handle) == 0) return nullptr;
  return static_cast<HostStream*>(const_cast<void*>(handle));
}

}  // namespace snccl
