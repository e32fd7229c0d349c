// C API: memory, registration, windows, custom reduction operators.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "api/export.h"
#include "collectives/kernels/reduce.h"
#include "core/comm.h"

using namespace snccl;

namespace {
// ncclMemAlloc'd blocks start one page after a header recording the mapping's size.
struct AllocHeader {
  uint64_t magic;
  size_t bytes;
};
constexpr uint64_t kAllocMagic = 0x736e63636c6d656dull;

struct Registration {
  void* buff;
  size_t size;
  ncclComm* comm;
};
}  // namespace

// Host memory: page-aligned and prefaulted (page faults cost ~13 us each on our VMs).
SNCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  if (ptr == nullptr || size == 0) return apiResult(InvalidArgument("ptr is NULL or size is 0"), "ncclMemAlloc");
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t bytes = page + (size + page - 1) / page * page;
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (base == MAP_FAILED) return apiResult(ErrnoError(errno, "mmap of %zu bytes failed", bytes), "ncclMemAlloc");
  auto* h = static_cast<AllocHeader*>(base);
  h->magic = kAllocMagic;
  h->bytes = bytes;
  *ptr = static_cast<char*>(base) + page;
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  if (reinterpret_cast<uintptr_t>(ptr) % page != 0)
    return apiResult(InvalidArgument("%p was not returned by ncclMemAlloc", ptr), "ncclMemFree");
  auto* h = reinterpret_cast<AllocHeader*>(static_cast<char*>(ptr) - page);
  if (h->magic != kAllocMagic)
    return apiResult(InvalidArgument("%p was not returned by ncclMemAlloc", ptr), "ncclMemFree");
  h->magic = 0;
  munmap(h, h->bytes);
  return ncclSuccess;
}

// Host buffers need no registration for the shm and local transports; the handle
// records the range so deregistration can be checked.
SNCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) {
  Status st = checkComm(comm, false);
  if (st.ok() && (handle == nullptr || (buff == nullptr && size > 0)))
    st = InvalidArgument("handle is NULL or buff is NULL");
  if (!st.ok()) return apiResult(st, "ncclCommRegister");
  *handle = new Registration{buff, size, comm};
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  Status st = checkComm(comm, false);
  auto* reg = static_cast<Registration*>(handle);
  if (st.ok() && (reg == nullptr || reg->comm != comm))
    st = InvalidArgument("handle %p was not registered on this communicator", handle);
  if (!st.ok()) return apiResult(st, "ncclCommDeregister");
  delete reg;
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
  std::lock_guard<std::mutex> lock(comm->redOpMutex);
  size_t idx = 0;
  while (idx < comm->preMulOps.size() && comm->preMulOps[idx].live) ++idx;
  if (idx == comm->preMulOps.size()) comm->preMulOps.push_back(p);
  else comm->preMulOps[idx] = p;
  *op = static_cast<ncclRedOp_t>(ncclNumOps + int(idx));
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  Status st = checkComm(comm, false);
  if (st.ok() && op < ncclNumOps) st = InvalidArgument("operation %d is built in and cannot be destroyed", int(op));
  if (!st.ok()) return apiResult(st, "ncclRedOpDestroy");
  std::lock_guard<std::mutex> lock(comm->redOpMutex);
  size_t idx = size_t(op) - ncclNumOps;
  if (idx >= comm->preMulOps.size() || !comm->preMulOps[idx].live)
    return apiResult(InvalidArgument("operation %d was not created on this communicator", int(op)),
                     "ncclRedOpDestroy");
  comm->preMulOps[idx].live = false;
  return ncclSuccess;
}
