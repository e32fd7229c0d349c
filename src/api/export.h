// How every public function is defined: the implementation is the strong pncclX, and
// ncclX is a weak alias of it at the same address (NCCL's scheme), so a PMPI-style
// profiler can define its own ncclX and call pncclX.
#pragma once

#include "common/log.h"
#include "common/status.h"
#include "snccl/nccl.h"

#define SNCCL_EXPORT __attribute__((visibility("default")))

// SNCCL_API(ncclResult_t, ncclFoo, int a, int b) { ...body... }
#define SNCCL_API(ret, name, ...)                                                   \
  extern "C" SNCCL_EXPORT ret p##name(__VA_ARGS__);                                 \
  extern "C" SNCCL_EXPORT __attribute__((weak, alias("p" #name))) ret name(__VA_ARGS__); \
  ret p##name(__VA_ARGS__)

namespace snccl {

// Maps a Status to the C API: logs a WARN (which also becomes ncclGetLastError's text)
// naming the call, and returns the code. ncclInProgress is returned silently.
inline ncclResult_t apiResult(const Status& st, const char* call) {
  if (st.ok() || st.code() == ncclInProgress) return st.code();
  SN_WARN("%s: %s", call, st.message().c_str());
  return st.code();
}

}  // namespace snccl
