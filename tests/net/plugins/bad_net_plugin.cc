// Plugin libraries that snccl must skip, each with its reason, and fall back to its own
// nets: SN_BAD_KIND is
//   1  an ncclNetPlugin_v8 whose init fails,
//   2  an ncclNetPlugin_v8 that initialises and reports no device,
//   3  a library with no ncclNetPlugin_vN symbol,
//   4  a library exporting only ncclNetPlugin_v5, older than snccl loads,
//   5  an ncclNetPlugin_v8 with a GPU-only device 0 and a host device 1 ("hostdev"): only
//      device 1 may be reported.
#include "transport/net/ext/nccl_net_abi.h"

namespace {

using snccl::net::abi::Logger;

[[maybe_unused]] ncclResult_t failingInit(Logger log) {
  if (log != nullptr) log(snccl::net::abi::kLogWarn, 0x10, __FILE__, __LINE__, "bad plugin: init fails on purpose");
  return ncclSystemError;
}
[[maybe_unused]] ncclResult_t quietInit(Logger) { return ncclSuccess; }
[[maybe_unused]] ncclResult_t noDevices(int* n) {
  *n = 0;
  return ncclSuccess;
}

[[maybe_unused]] ncclResult_t twoDevices(int* n) {
  *n = 2;
  return ncclSuccess;
}
[[maybe_unused]] ncclResult_t mixedProperties(int dev, snccl::net::abi::PropsV8* p) {
  *p = {};
  p->name = const_cast<char*>(dev == 0 ? "gpudev" : "hostdev");
  p->ptrSupport = dev == 0 ? snccl::net::abi::kPtrCuda : snccl::net::abi::kPtrHost;
  p->maxRecvs = 1;
  return ncclSuccess;
}

// A table with only the calls the loader makes before it gives up on the plugin.
template <typename Table>
[[maybe_unused]] Table table(const char* name, ncclResult_t (*init)(Logger)) {
  Table t{};
  t.name = name;
  t.init = init;
  t.devices = noDevices;
  return t;
}

}  // namespace

extern "C" {
#if SN_BAD_KIND == 1
[[gnu::visibility("default")]] snccl::net::abi::NetV8 ncclNetPlugin_v8 =
    table<snccl::net::abi::NetV8>("BadInit", failingInit);
#elif SN_BAD_KIND == 2
[[gnu::visibility("default")]] snccl::net::abi::NetV8 ncclNetPlugin_v8 =
    table<snccl::net::abi::NetV8>("NoDevice", quietInit);
#elif SN_BAD_KIND == 3
[[gnu::visibility("default")]] int ncclNetPluginIsNotHere = 0;
#elif SN_BAD_KIND == 5
[[gnu::visibility("default")]] snccl::net::abi::NetV8 ncclNetPlugin_v8 = [] {
  auto t = table<snccl::net::abi::NetV8>("Mixed", quietInit);
  t.devices = twoDevices;
  t.getProperties = mixedProperties;
  return t;
}();
#elif SN_BAD_KIND == 4
// Version 5's table began like version 6's; only its name matters here.
[[gnu::visibility("default")]] snccl::net::abi::NetV6 ncclNetPlugin_v5 =
    table<snccl::net::abi::NetV6>("TooOld", quietInit);
#endif
}
