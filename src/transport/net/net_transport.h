// "net": ranks in different processes that shm cannot join (other nodes, or
// SNCCL_SHM_DISABLE=1) talk through a net plugin, progressed by the proxy thread.
#pragma once
#include "transport/transport.h"

namespace snccl {
TransportDef netTransport();
}
