// Everything that differs between torch 1.13 and torch 2.x, in one place. The backend's
// class body compiles unchanged against either base.
#pragma once

#include <torch/version.h>

#include <c10/util/Exception.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace snccl_torch {

#if TORCH_VERSION_MAJOR >= 2
// torch 2.x: a backend derives from c10d::Backend; ProcessGroup is a dispatcher built in Python.
using BackendBase = c10d::Backend;
#define SNCCL_TORCH_2X 1
#else
// torch 1.13: Python accepts only a c10d::ProcessGroup subclass (Backend is not bound).
using BackendBase = c10d::ProcessGroup;
#define SNCCL_TORCH_2X 0
#endif

// Coalescing (Backend::supportsCoalescing, startCoalescing/endCoalescing, which
// batch_isend_irecv and the coalescing manager use) and the coalesced tensor collectives:
// the API of torch 2.6 and later (built and tested against 2.15).
// Communicator split (Backend::supportsSplitting, split, getBackendOptions), which
// torch.distributed.split_group and new_group use when the default group is bound to a
// device: the same API level.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6)
#define SNCCL_TORCH_COALESCING 1
#define SNCCL_TORCH_SPLIT 1
#else
#define SNCCL_TORCH_COALESCING 0
#define SNCCL_TORCH_SPLIT 0
#endif

// Errors from the library: torch >= 2.1 has DistBackendError (a RuntimeError subclass in
// Python); earlier versions raise RuntimeError.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define SNCCL_THROW(msg) C10_THROW_ERROR(DistBackendError, msg)
#else
#define SNCCL_THROW(msg) TORCH_CHECK(false, msg)
#endif

// c10d::ReduceOp::PREMUL_SUM and its supplement exist from torch 1.13 on. The tensor factor
// is one tensor in 2.x, a vector (one per device) in 1.13.
#define SNCCL_HAVE_PREMUL_SUM 1
#if SNCCL_TORCH_2X
inline at::Tensor premulTensorFactor(const c10d::NCCLPreMulSumSupplement& s) {
  return s.tensor_factor;
}
#else
inline at::Tensor premulTensorFactor(const c10d::NCCLPreMulSumSupplement& s) {
  return s.tensor_factors.empty() ? at::Tensor() : s.tensor_factors[0];
}
#endif

}  // namespace snccl_torch
