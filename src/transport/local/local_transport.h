// "local": ranks that are threads of one process share the ring by direct pointer.
#pragma once
#include "transport/transport.h"

namespace snccl {
TransportDef localTransport();
}
