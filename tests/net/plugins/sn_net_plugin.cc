// One of snccl's own nets built as an external NCCL plugin library exporting one table,
// ncclNetPlugin_v<SN_PLUGIN_VERSION> (ext_export.h): the socket net as "SnSocket", or with
// SN_PLUGIN_IB the verbs net as "SnIB". The tests load these through NCCL_NET_PLUGIN and run
// the multi-rank suites over them.
#include "transport/net/ext/ext_export.h"
#include "transport/net/socket/socket_net.h"
#if SN_PLUGIN_IB
#include "transport/net/ib/ib_net.h"
#endif

namespace snccl::net::ext {

Net* exportedNet() {
#if SN_PLUGIN_IB
  return ibNet();
#else
  return socketNet();
#endif
}

}  // namespace snccl::net::ext

#define SN_SYMBOL_(v) ncclNetPlugin_v##v
#define SN_SYMBOL(v) SN_SYMBOL_(v)

extern "C" {
[[gnu::visibility("default")]] snccl::net::abi::Version<SN_PLUGIN_VERSION>::Net SN_SYMBOL(SN_PLUGIN_VERSION) =
    snccl::net::ext::exportTable<SN_PLUGIN_VERSION>(SN_PLUGIN_IB ? "SnIB" : "SnSocket");
}
