// Host streams: NCCL's asynchronous model on the CPU (snccl.h).
//
// A host stream owns one worker thread that runs queued tasks in order. The library
// recognises its own streams through a registry, so a cudaStream_t argument that is not
// in it is known to be a real CUDA stream (or garbage) and is never dereferenced.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/status.h"

struct sncclHostStream;

namespace snccl {

class HostStream {
 public:
  // The worker runs near the NUMA node of the creating thread (SNCCL_NUMA_BIND).
  HostStream();
  ~HostStream();  // drains the queue, then joins the worker

  void enqueue(std::function<Status()> task);
  // Waits until the queue is empty; returns (and clears) the first error since last time.
  Status synchronize();
  // ncclSuccess when idle, ncclInProgress while busy, or the pending error (not cleared).
  Status query();

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<Status()>> queue_;
  size_t busy_ = 0;  // queued + running
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

// Registry of live host streams (the only process-wide state of this layer).
sncclHostStream* registerStream(HostStream* stream);
// The stream behind a handle, or nullptr when the handle is not one of ours.
HostStream* lookupStream(const void* handle);
// Removes and returns the stream (nullptr when unknown).
HostStream* unregisterStream(const void* handle);

}  // namespace snccl
