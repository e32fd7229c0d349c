// "shm": ranks in different processes of one node share the ring through /dev/shm.
#pragma once
#include "transport/transport.h"

namespace snccl {
TransportDef shmTransport();
}
