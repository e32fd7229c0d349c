// The IB net: RDMA verbs (InfiniBand and RoCE) through libibverbs, loaded at run time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/net/ib/ib_device.h"
#include "transport/net/ib/ib_verbs.h"
#include "transport/net/net.h"

namespace snccl::net {

// The process's instance (the plugin table's entry), on libibverbs.so.1.
Net* ibNet();

namespace ib {

// An instance on another verbs table (tests: a fake provider). It owns its devices and
// their event threads until destroyed.
std::unique_ptr<Net> makeIbNet(const Verbs* verbs);

// Every port of every device as the IB net sees it under the current parameters (what
// sn_info prints); an error says why there is nothing to see (no libibverbs, a bad
// parameter).
Result<std::vector<PortReport>> describePorts(const Verbs* verbs);

}  // namespace ib
}  // namespace snccl::net
