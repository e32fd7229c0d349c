// The table of net plugins and the choice of the one this process uses.
#include <strings.h>

#include <mutex>
#include <iterator>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/params.h"
#include "transport/net/net.h"
#if SNCCL_HAVE_VERBS
#include "transport/net/ib/ib_net.h"
#endif
#include "transport/net/compress/compress_net.h"
#include "transport/net/socket/socket_net.h"

namespace snccl::net {

namespace {

// In order of preference.
const NetDef kNets[] = {
#if SNCCL_HAVE_VERBS
    {"IB", "RDMA verbs (InfiniBand, RoCE) through libibverbs.so.1: RC queue pairs, receiver-granted credits", ibNet},
#endif
    {"Socket", "TCP sockets: a control socket plus several data streams per connection", socketNet},
};

// The table, then a test binary's plugins (net.h testNetPlugins).
std::vector<NetDef> allNets() {
  std::vector<NetDef> all(std::begin(kNets), std::end(kNets));
  if (testNetPlugins != nullptr) {
    std::span<const NetDef> extra = testNetPlugins();
    all.insert(all.end(), extra.begin(), extra.end());
  }
  return all;
}

Result<Net*> chooseNet() {
  const std::string& want = params::getString(params::Id::Net);
  const std::vector<NetDef> nets = allNets();
  std::string tried;
  for (const NetDef& d : nets) {
    if (!want.empty() && strcasecmp(want.c_str(), d.name) != 0) continue;
    Net* net = d.instance();
    Status s = net->init();
    if (s.ok() && net->devices() > 0) {
      SN_INFO(log::kNet | log::kInit, "Using network %s", d.name);
      return net;
    }
    // A parameter the user got wrong is an error even when the plugin was not asked for
    // by name: falling back to another network would hide it.
    if (s.code() == ncclInvalidArgument) return s;
    tried += std::string(tried.empty() ? "" : "; ") + d.name + ": " +
             (s.ok() ? std::string("no device") : s.message());
  }
  if (!want.empty() && tried.empty()) {
    std::string names;
    for (const NetDef& d : nets) names += std::string(names.empty() ? "" : ", ") + d.name;
    return InvalidArgument("SNCCL_NET=%s names no network plugin (available: %s)", want.c_str(), names.c_str());
  }
  return SystemError("no network plugin is usable (%s)", tried.c_str());
}

// The chosen plugin, wrapped in the compressing net when SNCCL_NET_COMPRESS asks for it.
Result<Net*> chooseAndWrap() {
  SNCCL_ASSIGN_OR_RETURN(Net * net, chooseNet());
  SNCCL_ASSIGN_OR_RETURN(compress::CodecConfig cfg,
                         compress::parseCodec(params::getString(params::Id::NetCompress)));
  if (cfg.codec == compress::Codec::kRaw) return net;
  Net* wrapped = compressNet(net, cfg);
  SN_INFO(log::kNet | log::kInit, "Using network %s: messages compressed with %s where they compress", wrapped->name(),
          compress::codecName(cfg.codec));
  return wrapped;
}

}  // namespace

const char* resultName(int code) {
  switch (code) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "unknown error";
  }
}

std::span<const NetDef> netPlugins() { return kNets; }

Result<Net*> defaultNet() {
  // Chosen once per process; a failure is remembered so every connection reports it.
  static std::once_flag once;
  static Result<Net*> chosen = Status(ncclInternalError, "unset");
  std::call_once(once, [] { chosen = chooseAndWrap(); });
  return chosen;
}

}  // namespace snccl::net
