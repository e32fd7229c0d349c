// C API: version, unique id, communicator creation, teardown and queries.
#include <thread>
#include <vector>

#include "api/export.h"
#include "common/no_throw.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/enqueue.h"

using namespace snccl;

namespace {
Status configFor(const ncclConfig_t* user, CommConfig* cfg) {
  SNCCL_TRY(parseConfig(user, cfg));
  return OkStatus();
}
}  // namespace

SNCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == nullptr) return apiResult(InvalidArgument("version is NULL"), "ncclGetVersion");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return apiResult(InvalidArgument("uniqueId is NULL"), "ncclGetUniqueId");
  return apiResult(Bootstrap::createUniqueId(uniqueId), "ncclGetUniqueId");
}

SNCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
          ncclConfig_t* config) {
  if (comm == nullptr) return apiResult(InvalidArgument("comm is NULL"), "ncclCommInitRankConfig");
  *comm = nullptr;
  CommConfig cfg;
  Status st = configFor(config, &cfg);
  if (st.ok()) st = noThrow("init", [&] { return commInitRank(comm, nranks, commId, rank, cfg); });
  return apiResult(st, "ncclCommInitRankConfig");
}

SNCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr) return apiResult(InvalidArgument("comm is NULL"), "ncclCommInitRank");
  *comm = nullptr;
  CommConfig cfg;
  Status st = configFor(nullptr, &cfg);
  if (st.ok()) st = noThrow("init", [&] { return commInitRank(comm, nranks, commId, rank, cfg); });
  return apiResult(st, "ncclCommInitRank");
}

SNCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank, int nId,
          ncclUniqueId* commIds, ncclConfig_t* config) {
  if (newcomm == nullptr || commIds == nullptr || nId < 1)
    return apiResult(InvalidArgument("newcomm/commIds is NULL or nId %d < 1", nId), "ncclCommInitRankScalable");
  *newcomm = nullptr;
  CommConfig cfg;
  Status st = configFor(config, &cfg);
  // Every rank passes the same id list; the first id's root serves all ranks.
  if (st.ok()) st = noThrow("init", [&] { return commInitRank(newcomm, nranks, commIds[0], myrank, cfg); });
  return apiResult(st, "ncclCommInitRankScalable");
}

// Ranks as threads of this process: one thread per rank joins the communicator.
// ncclCommInitAll initialises each rank on a thread of its own (the ranks' bootstraps
// wait for each other), and every rank keeps connections and scratch memory afterwards:
// past this many ranks in one process it fails instead of starting that many threads.
constexpr int kMaxInitAllRanks = 512;

SNCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1)
    return apiResult(InvalidArgument("comms is NULL or ndev %d < 1", ndev), "ncclCommInitAll");
  if (ndev > kMaxInitAllRanks)
    return apiResult(InvalidArgument("ndev %d is more than the %d ranks ncclCommInitAll creates in one process",
                                     ndev, kMaxInitAllRanks),
                     "ncclCommInitAll");
  ncclUniqueId id;
  Status st = Bootstrap::createUniqueId(&id);
  if (!st.ok()) return apiResult(st, "ncclCommInitAll");
  std::vector<Status> results(ndev);
  std::vector<std::thread> threads;
  for (int i = 0; i < ndev; ++i) {
    threads.emplace_back([&, i] {
      CommConfig cfg;
      cfg.blocking = true;
      cfg.cudaDev = devlist ? devlist[i] : i;
      results[i] = noThrow("init", [&] { return commInitRank(&comms[i], ndev, id, i, cfg); });
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < ndev; ++i) {
    if (!results[i].ok()) {
      for (int j = 0; j < ndev; ++j)
        if (comms[j]) commAbort(comms[j]), comms[j] = nullptr;
      return apiResult(results[i], "ncclCommInitAll");
    }
  }
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
          ncclConfig_t* config) {
  if (newcomm == nullptr) return apiResult(InvalidArgument("newcomm is NULL"), "ncclCommSplit");
  *newcomm = nullptr;
  Status st = checkComm(comm);
  CommConfig cfg;
  if (st.ok()) {
    cfg.blocking = comm->config.blocking;  // a NULL config inherits the parent's
    cfg.cudaDev = comm->config.cudaDev;
    cfg.minChannels = comm->config.minChannels;
    cfg.maxChannels = comm->config.maxChannels;
    if (config != nullptr) st = configFor(config, &cfg);
  }
  if (st.ok()) st = noThrow("split", [&] { return commSplit(comm, color, key, newcomm, cfg); });
  return apiResult(st, "ncclCommSplit");
}

SNCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
          ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  if (newcomm == nullptr || (excludeRanksCount > 0 && excludeRanksList == nullptr) || excludeRanksCount < 0)
    return apiResult(InvalidArgument("newcomm is NULL or bad exclude list"), "ncclCommShrink");
  *newcomm = nullptr;
  Status st = checkComm(comm, false);
  CommConfig cfg;
  if (st.ok()) {
    cfg.blocking = comm->config.blocking;
    cfg.cudaDev = comm->config.cudaDev;
    cfg.minChannels = comm->config.minChannels;
    cfg.maxChannels = comm->config.maxChannels;
    if (config != nullptr) st = configFor(config, &cfg);
  }
  if (st.ok()) {
    st = noThrow("shrink", [&] { return commShrink(comm, excludeRanksList, excludeRanksCount, newcomm, cfg, shrinkFlags); });
  }
  return apiResult(st, "ncclCommShrink");
}

SNCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  Status st = checkComm(comm);
  if (st.ok()) st = commFinalize(comm);
  return apiResult(st, "ncclCommFinalize");
}

SNCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Status st = checkComm(comm, false);
  if (!st.ok()) return apiResult(st, "ncclCommDestroy");
  commFree(comm);
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  Status st = checkComm(comm, false);
  if (!st.ok()) return apiResult(st, "ncclCommAbort");
  commAbort(comm);
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  Status st = checkComm(comm, false);
  if (st.ok() && revokeFlags != NCCL_REVOKE_DEFAULT)
    st = InvalidArgument("revokeFlags must be NCCL_REVOKE_DEFAULT, got %d", revokeFlags);
  if (st.ok()) {
    // In-flight operations stop (their connections are poisoned); the object stays for
    // Destroy/Split/Shrink, whose bootstrap is untouched.
    commSetError(comm, RemoteError("rank %d revoked the communicator", comm->rank));
    comm->errors.state.store(int(CommState::kRevoked));
  }
  return apiResult(st, "ncclCommRevoke");
}

SNCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (asyncError == nullptr) return apiResult(InvalidArgument("asyncError is NULL"), "ncclCommGetAsyncError");
  Status st = checkComm(comm, false);
  if (!st.ok()) return apiResult(st, "ncclCommGetAsyncError");
  if (comm->errors.state.load() == int(CommState::kInitializing)) {
    *asyncError = ncclInProgress;
  } else {
    *asyncError = static_cast<ncclResult_t>(comm->errors.asyncError.load());
  }
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  Status st = checkComm(comm, false);
  if (st.ok() && count == nullptr) st = InvalidArgument("count is NULL");
  if (!st.ok()) return apiResult(st, "ncclCommCount");
  *count = comm->nranks;
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  Status st = checkComm(comm, false);
  if (st.ok() && device == nullptr) st = InvalidArgument("device is NULL");
  if (!st.ok()) return apiResult(st, "ncclCommCuDevice");
  *device = comm->config.cudaDev;
  return ncclSuccess;
}

SNCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  Status st = checkComm(comm, false);
  if (st.ok() && rank == nullptr) st = InvalidArgument("rank is NULL");
  if (!st.ok()) return apiResult(st, "ncclCommUserRank");
  *rank = comm->rank;
  return ncclSuccess;
}

SNCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

SNCCL_API(const char*, ncclGetLastError, ncclComm_t comm) { return log::lastError(); }

SNCCL_API(void, ncclResetDebugInit) { log::resetForTesting(); }
