// C API: collectives, point-to-point and groups.
#include "api/export.h"

#include <algorithm>

#include "core/enqueue.h"
#include "core/quant_allreduce.h"
#include "snccl/snccl.h"

using namespace snccl;

namespace {
ncclResult_t submit(PendingOp op, const char* call) { return apiResult(enqueue(op, call), call); }

PendingOp make(CollKind coll, const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
               int root, ncclComm_t comm, cudaStream_t stream) {
  PendingOp p;
  p.comm = comm;
  p.stream = stream;
  p.coll = coll;
  p.sendbuff = send;
  p.recvbuff = recv;
  p.count = count;
  p.dt = dt;
  p.op = op;
  p.root = root;
  return p;
}
}  // namespace

SNCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream),
                "ncclAllReduce");
}

SNCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream), "ncclReduce");
}

SNCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream),
                "ncclBroadcast");
}

SNCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
          cudaStream_t stream) {
  return submit(make(CollKind::kBroadcast, buff, buff, count, datatype, ncclSum, root, comm, stream), "ncclBcast");
}

SNCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream),
                "ncclReduceScatter");
}

SNCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream),
                "ncclAllGather");
}

SNCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kAlltoAll, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm, stream),
                "ncclAlltoAll");
}

SNCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream),
                "ncclGather");
}

SNCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
          int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(make(CollKind::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream),
                "ncclScatter");
}

SNCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
          ncclComm_t comm, cudaStream_t stream) {
  PendingOp p = make(CollKind::kSendRecv, sendbuff, nullptr, count, datatype, ncclSum, 0, comm, stream);
  p.peer = peer;
  p.isSend = true;
  return submit(p, "ncclSend");
}

SNCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
          cudaStream_t stream) {
  PendingOp p = make(CollKind::kSendRecv, nullptr, recvbuff, count, datatype, ncclSum, 0, comm, stream);
  p.peer = peer;
  p.isSend = false;
  return submit(p, "ncclRecv");
}

// snccl's own calls have no pncclX profiling alias.
extern "C" SNCCL_EXPORT ncclResult_t sncclAllReduceQuantized(const void* sendbuff, void* recvbuff, size_t count,
                                                             ncclDataType_t datatype, ncclRedOp_t op, int bits,
                                                             size_t blockSize, float* residual, ncclComm_t comm,
                                                             cudaStream_t stream) {
  const char* call = "sncclAllReduceQuantized";
  if (datatype != ncclFloat32)
    return apiResult(InvalidArgument("datatype %d: only ncclFloat32 is quantized", int(datatype)), call);
  if (op != ncclSum && op != ncclAvg)
    return apiResult(InvalidArgument("reduction operation %d: only ncclSum and ncclAvg are quantized", int(op)),
                     call);
  QuantAllReduceArgs a;
  a.send = static_cast<const float*>(sendbuff);
  a.recv = static_cast<float*>(recvbuff);
  a.count = count;
  a.average = op == ncclAvg;
  a.format.bits = bits;
  a.format.block = blockSize == 0 ? kernels::quant::kDefaultBlock
                                  : uint32_t(std::min<size_t>(blockSize, kernels::quant::kMaxBlock + 1));
  a.residual = residual;
  return apiResult(quantAllReduce(comm, a, stream), call);
}

SNCCL_API(ncclResult_t, ncclGroupStart) { return apiResult(groupStart(), "ncclGroupStart"); }

SNCCL_API(ncclResult_t, ncclGroupEnd) { return apiResult(groupEnd(), "ncclGroupEnd"); }

// Needs the cost model (algorithm selection issue); until then it says so and launches
// nothing, as the call requires.
SNCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  if (simInfo == nullptr || simInfo->magic != 0x74685283u) {
    groupDiscard();
    return apiResult(InvalidArgument("simInfo is NULL or not initialised with NCCL_SIM_INFO_INITIALIZER"),
                     "ncclGroupSimulateEnd");
  }
  Result<double> us = groupSimulateEnd();
  if (!us.ok()) return apiResult(us.status(), "ncclGroupSimulateEnd");
  simInfo->estimatedTime = static_cast<float>(us.value());
  return ncclSuccess;
}
