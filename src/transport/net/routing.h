// SNCCL_ROUTING: how the nets spread one connection's messages over its paths (the socket
// net's sockets, the IB net's queue pairs). Read in one place for both.
#pragma once

#include <cstddef>

#include "common/status.h"

namespace snccl::net {

enum class Routing { kAuto, kAdaptive, kStatic };

// The variable's value; an unknown name is an error that lists the ones there are.
Result<Routing> routingFromParams();

// Whether a connection over `paths` paths routes adaptively: always under kAdaptive,
// never under kStatic, with several paths under kAuto.
inline bool routesAdaptively(Routing r, size_t paths) {
  return r == Routing::kAdaptive || (r == Routing::kAuto && paths > 1);
}

}  // namespace snccl::net
