// Status constructors and string formatting helpers.
#include "common/status.h"

#include <cstdio>
#include <cstring>

namespace snccl {

std::string vformat(const char* fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::string out(static_cast<size_t>(n), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, ap);
  return out;
}

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

#define SNCCL_DEFINE_ERROR_CTOR(Name, Code) \
  Status Name(const char* fmt, ...) {       \
    va_list ap;                             \
    va_start(ap, fmt);                      \
    std::string s = vformat(fmt, ap);       \
    va_end(ap);                             \
    return Status(Code, std::move(s));      \
  }

SNCCL_DEFINE_ERROR_CTOR(InvalidArgument, ncclInvalidArgument)
SNCCL_DEFINE_ERROR_CTOR(InvalidUsage, ncclInvalidUsage)
SNCCL_DEFINE_ERROR_CTOR(SystemError, ncclSystemError)
SNCCL_DEFINE_ERROR_CTOR(InternalError, ncclInternalError)
SNCCL_DEFINE_ERROR_CTOR(RemoteError, ncclRemoteError)
#undef SNCCL_DEFINE_ERROR_CTOR

Status Error(ncclResult_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return Status(code, std::move(s));
}

Status ErrnoError(int err, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  char buf[128];
  const char* msg = strerror_r(err, buf, sizeof buf);
  s += format(": %s (errno %d)", msg, err);
  return Status(ncclSystemError, std::move(s));
}

}  // namespace snccl
