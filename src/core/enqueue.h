// Enqueue: NCCL's group semantics and the launch of operations.
//
// Calls between ncclGroupStart/End are recorded per thread (NCCL's group depth is
// thread-local) and launched at the outermost ncclGroupEnd; a call outside a group is a
// group of one. At launch, operations are grouped by stream, then by communicator: the
// collectives of a communicator run in call order, followed by all its sends and receives
// merged into one schedule (so pairs in any order complete). A NULL stream runs the group
// now on the calling thread; a host stream queues it on the stream's worker.
#pragma once

#include <span>

#include "collectives/schedule.h"
#include "common/status.h"
#include "snccl/nccl.h"

struct ncclComm;

namespace snccl {

namespace engine {
class DataEngine;
}

struct PendingOp {
  ncclComm* comm = nullptr;
  cudaStream_t stream = nullptr;
  CollKind coll = CollKind::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  ncclDataType_t dt = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  int peer = -1;        // kSendRecv
  bool isSend = false;  // kSendRecv
  // The engine of the buffers the call touches on this rank (set by enqueue; nullptr:
  // it touches none).
  const engine::DataEngine* engine = nullptr;
};

// Checks the arguments (InvalidArgument leaves the communicator usable), then runs the op
// or records it in the current group.
Status enqueue(const PendingOp& op, const char* call);
Status groupStart();
Status groupEnd();
// Drops the current group's operations and returns how many there were.
size_t groupDiscard();
// ncclGroupSimulateEnd: ends the group like groupEnd but, instead of running its
// operations, returns the cost model's estimate of their time in microseconds (the sum of
// the selector's predictions; a send or receive costs its link's latency plus bytes over
// bandwidth). The operations are dropped.
Result<double> groupSimulateEnd();
int groupDepth();
// Runs sends and receives of one communicator now, on the calling thread, outside any
// group the thread has open (for operations built from point-to-point steps, such as the
// quantized AllReduce). The ops must have been checked (their engine set).
Status runP2PNow(std::span<const PendingOp> ops);

}  // namespace snccl
