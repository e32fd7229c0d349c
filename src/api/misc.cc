// C API: memory, registration, windows, custom reduction operators.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "api/export.h"
#include "collectives/kernels/reduce.h"
#include "common/params.h"
#include "core/comm.h"
#include "core/flight_dump.h"
#include "core/mem_blocks.h"
#include "device/cuda_driver.h"

using namespace snccl;

// Host memory: page-aligned, prefaulted, and mappable by the node's other processes
// (core/mem_blocks.h), which is what lets an AllReduce read its peers' buffers directly.
SNCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr == nullptr || size == 0) return apiResult(InvalidArgument("ptr is NULL or size is 0"), "ncclMemAlloc");
  Result<void*> p = memblocks::allocate(size);
  if (!p.ok()) return apiResult(p.status(), "ncclMemAlloc");
  *ptr = p.value();
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  return apiResult(memblocks::release(ptr), "ncclMemFree");
}

// Whether registering `size` bytes on `comm` should make the buffer's pages readable by
// the node's other processes (core/user_pages.h): only where the single-copy AllReduce
// could use them, i.e. a communicator of one node with ranks in other processes, and a
// buffer at least as large as the smallest single-copy AllReduce.
namespace {
bool shareRegistered(const ncclComm* comm, size_t size) {
  if (params::getInt(params::Id::ShareRegistered) == 0 || !comm->singleCopy.mappable) return false;
  if (comm->singleCopy.minBytes == 0 || size < comm->singleCopy.minBytes) return false;
  const uint64_t me = comm->peers.info[comm->rank].processToken;
  for (const PeerInfo& p : comm->peers.info)
    if (p.processToken != me) return true;
  return false;
}
}  // namespace

// Host buffers need no registration for the shm and local transports; the handle
// records the range so deregistration can be checked, and net plugins that need
// registration register it with their comms when a message first uses it
// (net/reg_cache.h, which also says what deregistering a buffer in use does). Large
// host buffers on a communicator of one node's processes are also shared
// (shareRegistered).
SNCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  Status st = checkComm(comm, false);
  if (st.ok() && (handle == nullptr || (buff == nullptr && size > 0)))
    st = InvalidArgument("handle is NULL or buff is NULL");
  // The registration cache and the net plugins take buff + size and round it up to a
  // page: that must not wrap around the address space.
  constexpr size_t kPageSlack = size_t(1) << 16;  // the largest page a plugin rounds to
  if (st.ok() && size > UINTPTR_MAX - kPageSlack - reinterpret_cast<uintptr_t>(buff))
    st = InvalidArgument("buff %p + size %zu lies past the end of the address space", buff, size);
  if (!st.ok()) return apiResult(st, "ncclCommRegister");
  // Device memory is recorded only: sharing remaps host pages, and no net reads device
  // memory in place (core/engine/engine.h).
  const bool device = device::CudaDriver::get().isDevice(buff);
  *handle = comm->regs.add(buff, size, !device && shareRegistered(comm, size));
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  Status st = checkComm(comm, false);
  if (!st.ok()) return apiResult(st, "ncclCommDeregister");
  if (!comm->regs.remove(handle))
    return apiResult(InvalidArgument("handle %p is not registered on this communicator (or was deregistered "
                                     "already)", handle),
                     "ncclCommDeregister");
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
          int winFlags) {
  return apiResult(InvalidUsage("ncclCommWindowRegister is not supported by snccl yet (symmetric windows need "
                                "device memory)"),
                   "ncclCommWindowRegister");
}

SNCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  return apiResult(InvalidUsage("ncclCommWindowDeregister is not supported by snccl yet"),
                   "ncclCommWindowDeregister");
}

SNCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
          ncclScalarResidence_t residence, ncclComm_t comm) {
  Status st = checkComm(comm, false);
  if (st.ok() && (op == nullptr || scalar == nullptr)) st = InvalidArgument("op or scalar is NULL");
  if (st.ok() && (datatype < 0 || datatype >= ncclNumTypes)) st = InvalidArgument("invalid datatype %d", datatype);
  if (st.ok() && residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
    st = InvalidArgument("invalid scalar residence %d", residence);
  if (!st.ok()) return apiResult(st, "ncclRedOpCreatePreMulSum");
  PreMulOp p;
  p.live = true;
  p.dt = datatype;
  p.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    std::memcpy(p.value, scalar, kernels::typeSize(datatype));
  } else {
    p.ptr = scalar;  // host build: a host pointer, read when each operation is launched
  }
  *op = static_cast<ncclRedOp_t>(ncclNumOps + int(comm->redOps.add(p)));
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  Status st = checkComm(comm, false);
  if (st.ok() && op < ncclNumOps) st = InvalidArgument("operation %d is built in and cannot be destroyed", int(op));
  if (!st.ok()) return apiResult(st, "ncclRedOpDestroy");
  if (!comm->redOps.remove(size_t(op) - ncclNumOps))
    return apiResult(InvalidArgument("operation %d was not created on this communicator", int(op)),
                     "ncclRedOpDestroy");
  return ncclSuccess;
}

// A communicator in error state is the main reason to ask: it is not refused.
extern "C" SNCCL_EXPORT ncclResult_t sncclCommDumpFlightRecorder(ncclComm_t comm, const char* path) {
  const char* call = "sncclCommDumpFlightRecorder";
  Status st = checkComm(comm, false);
  if (st.ok() && comm->errors.state.load() == int(CommState::kInitializing))
    st = InvalidUsage("the communicator is still being initialised");
  if (!st.ok()) return apiResult(st, call);
  std::string file = path != nullptr ? std::string(path) : std::string();
  if (file.empty()) {
    const std::string& dir = params::getString(params::Id::FlightDir);
    if (dir.empty())
      return apiResult(InvalidUsage("path is NULL and SNCCL_FLIGHT_DIR is not set: nowhere to write to"), call);
    file = flight::dumpPath(dir, *comm);
  }
  return apiResult(flight::dumpTo(comm, file, "request"), call);
}
