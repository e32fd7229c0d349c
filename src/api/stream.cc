// C API: snccl host streams.
#include "api/export.h"
#include "core/stream.h"
#include "snccl/snccl.h"

using namespace snccl;

extern "C" SNCCL_EXPORT ncclResult_t sncclStreamCreate(sncclStream_t* stream) {
  if (stream == nullptr) return apiResult(InvalidArgument("stream is NULL"), "sncclStreamCreate");
  *stream = registerStream(new HostStream());
  return ncclSuccess;
}

extern "C" SNCCL_EXPORT ncclResult_t sncclStreamSynchronize(sncclStream_t stream) {
  HostStream* s = lookupStream(stream);
  if (s == nullptr) return apiResult(InvalidArgument("%p is not a host stream", (void*)stream), "sncclStreamSynchronize");
  return apiResult(s->synchronize(), "sncclStreamSynchronize");
}

extern "C" SNCCL_EXPORT ncclResult_t sncclStreamQuery(sncclStream_t stream) {
  HostStream* s = lookupStream(stream);
  if (s == nullptr) return apiResult(InvalidArgument("%p is not a host stream", (void*)stream), "sncclStreamQuery");
  Status st = s->query();
  return st.code();
}

extern "C" SNCCL_EXPORT ncclResult_t sncclStreamDestroy(sncclStream_t stream) {
  HostStream* s = unregisterStream(stream);
  if (s == nullptr) return apiResult(InvalidArgument("%p is not a host stream", (void*)stream), "sncclStreamDestroy");
  delete s;
  return ncclSuccess;
}

extern "C" SNCCL_EXPORT const char* sncclVersionString(void) {
  return "snccl " SNCCL_VERSION_STRING " (NCCL API 2.28.9)";
}
