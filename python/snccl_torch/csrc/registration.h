// Registration of the tensors that come back call after call (DDP's gradient buckets, a
// tensor reduced in a loop). On snccl, ncclCommRegister makes a buffer's pages shareable,
// so the single-copy AllReduce reads peers' tensors directly instead of going through the
// rings. A storage is registered the second time the same storage is all-reduced, while
// nothing else of its group is in flight (registering moves its pages), and its DataPtr is
// wrapped so that the registration ends before the memory is freed. Only storages of
// torch's plain CPU allocator are taken (their DataPtr's context is the data pointer);
// views, copy-on-write storages and memory from other allocators are left alone.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "nccl_api.h"

namespace snccl_torch {

class TensorRegistry {
 public:
  // From SNCCL_TORCH_REGISTER and SNCCL_TORCH_REGISTER_BYTES; nullptr when turned off or
  // when the library cannot register.
  static std::unique_ptr<TensorRegistry> fromEnv(const NcclApi& api, ncclComm_t comm);
  TensorRegistry(const NcclApi& api, ncclComm_t comm, size_t minBytes);
  ~TensorRegistry();

  // `t` is about to be all-reduced and nothing else of the group is in flight; the caller
  // holds the group's communicator lock.
  void sighted(const at::Tensor& t);
  // The communicator goes away: with `deregister`, the live registrations end first (destroy);
  // without, the communicator is gone already (abort). Storages stay valid either way.
  void detach(bool deregister);
  size_t registered() const;  // live registrations

  struct State;  // shared with the wrapped storages (registration.cc)

 private:
  struct Sighting {
    const void* storage;
    const void* data;
    size_t bytes;
    int count;  // -1: registration failed, never again
  };
  std::shared_ptr<State> state_;
  size_t minBytes_;
  std::vector<Sighting> sightings_;  // the most recent storages, newest last
};

}  // namespace snccl_torch
