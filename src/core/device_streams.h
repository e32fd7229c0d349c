// Operations on CUDA streams: stream order without blocking the caller.
//
// A group's operations on a CUDA stream s run on a host worker of s's gate, bracketed by
// two stream memory operations the calling thread queues on s:
//   cuStreamWriteValue32(s, started, n)  -- reached once the work queued before is done;
//   cuStreamWaitValue32(s, done, n, GEQ) -- work queued after waits here;
// the worker waits until `started` reaches n, runs the operations, and writes n into
// `done`, also when they failed (the error goes to the communicators, which are then in
// error state, and to the log): a failed operation never leaves the user's stream blocked.
// The wait for `started` ends early when `abandoned()` says so (a communicator of the
// operations was aborted: ncclCommAbort waits for queued work, and a stream that never
// gets there must not keep it waiting); the operations then run and fail at once.
// `started` and `done` are two words of pinned host memory the device writes and reads.
//
// One gate per stream handle, made on first use and kept for the life of the process
// (the registry is the only process-wide state of this layer, like the host streams').
// NULL is the legacy default stream: a call with device buffers and no stream runs there.
#pragma once

#include <functional>

#include "common/status.h"
#include "snccl/nccl.h"

namespace snccl {

// Whether operations can be queued on `stream` (GPU support is on, the stream is not
// being captured into a CUDA graph: a replay would repeat the two stream operations with
// a value already reached, and never the operations), making its gate on first use.
Status prepareCudaStream(cudaStream_t stream);
// Queues task on `stream` as above and returns. When the driver refuses the stream
// operations, task still runs (its communicators' later operations wait for it; the
// peers are in the call too) without waiting for the stream, and the error is returned.
Status submitOnCudaStream(cudaStream_t stream, std::function<Status()> task, std::function<bool()> abandoned);

}  // namespace snccl
