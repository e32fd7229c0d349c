// Exceptions become Status values at the boundaries where they could otherwise escape:
// the C API's init entry points and the topology readers. snccl's own code reports errors
// as values, but the standard library throws (std::bad_alloc when a large allocation
// fails, std::length_error, ...), and an exception through extern "C" aborts the user's
// process. noThrow runs f and turns anything it throws into ncclSystemError (out of
// memory) or ncclInternalError, naming `what`.
#pragma once

#include <exception>
#include <new>

#include "common/status.h"

namespace snccl {

template <class F>
auto noThrow(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return SystemError("%s: out of memory", what);
  } catch (const std::exception& e) {
    return InternalError("%s: unexpected exception: %s", what, e.what());
  } catch (...) {
    return InternalError("%s: unexpected exception", what);
  }
}

}  // namespace snccl
