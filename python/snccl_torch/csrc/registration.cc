// TensorRegistry: see registration.h.
#include "registration.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_set>

#include <unistd.h>

namespace snccl_torch {

struct TensorRegistry::State {
  pid_t pid = getpid();  // registrations belong to this process, not to a forked child
  std::mutex mutex;      // guards comm and handles
  const NcclApi* api;
  ncclComm_t comm;  // nullptr once detached
  std::unordered_set<void*> handles;
};

namespace {

constexpr size_t kMaxSightings = 64;

// The context of a wrapped DataPtr: the original one (freed last) and the registration.
struct Wrapped {
  at::DataPtr original;
  std::shared_ptr<TensorRegistry::State> state;
  void* handle;
};

void releaseWrapped(void* ctx) {
  auto* w = static_cast<Wrapped*>(ctx);
  // In a child of fork the library has made the pages private already, and the parent's
  // locks may have been held at the fork: only the memory is freed there.
  if (getpid() == w->state->pid) {
    std::lock_guard<std::mutex> lock(w->state->mutex);
    if (w->state->comm && w->state->handles.erase(w->handle))
      w->state->api->CommDeregister(w->state->comm, w->handle);  // pages private again
  }
  delete w;  // then the original DataPtr frees the memory
}

}  // namespace

std::unique_ptr<TensorRegistry> TensorRegistry::fromEnv(const NcclApi& api, ncclComm_t comm) {
  const char* on = std::getenv(kRegisterEnv);
  if ((on && std::string(on) == "0") || !api.CommRegister || !api.CommDeregister) return nullptr;
  // Below about 8 MiB the single copy measured no faster than the rings under torch's host
  // stream (1 MiB: about 2x slower), so smaller tensors are not registered by default.
  size_t minBytes = size_t(8) << 20;
  if (const char* b = std::getenv(kRegisterBytesEnv); b && *b) minBytes = std::strtoull(b, nullptr, 10);
  return std::make_unique<TensorRegistry>(api, comm, minBytes);
}

TensorRegistry::TensorRegistry(const NcclApi& api, ncclComm_t comm, size_t minBytes)
    : state_(std::make_shared<State>()), minBytes_(minBytes) {
  state_->api = &api;
  state_->comm = comm;
}

TensorRegistry::~TensorRegistry() { detach(false); }

void TensorRegistry::detach(bool deregister) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (deregister && state_->comm)
    for (void* h : state_->handles) state_->api->CommDeregister(state_->comm, h);
  state_->handles.clear();
  state_->comm = nullptr;
}

size_t TensorRegistry::registered() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->handles.size();
}

void TensorRegistry::sighted(const at::Tensor& t) {
  if (!t.has_storage() || t.nbytes() < minBytes_) return;
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const at::DataPtr& dp = impl->data_ptr();
  // the plain CPU allocator's memory, not registered yet (a wrapped one has our context)
  if (!dp.get() || dp.get_context() != dp.get() || !dp.device().is_cpu()) return;
  const size_t bytes = impl->nbytes();
  auto it = std::find_if(sightings_.begin(), sightings_.end(), [&](const Sighting& s) {
    return s.storage == impl && s.data == dp.get() && s.bytes == bytes;
  });
  if (it == sightings_.end()) {
    if (sightings_.size() == kMaxSightings) sightings_.erase(sightings_.begin());
    sightings_.push_back({impl, dp.get(), bytes, 1});
    return;
  }
  if (it->count < 0 || ++it->count < 2) return;
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (!state_->comm) return;
  void* handle = nullptr;
  if (state_->api->CommRegister(state_->comm, dp.get(), bytes, &handle) != ncclSuccess) {
    it->count = -1;
    return;
  }
  sightings_.erase(it);
  auto* w = new Wrapped{at::DataPtr(), state_, handle};
  void* data = dp.get();
  const c10::Device device = dp.device();
  w->original = impl->set_data_ptr(at::DataPtr(data, w, &releaseWrapped, device));
  state_->handles.insert(handle);
}

}  // namespace snccl_torch
