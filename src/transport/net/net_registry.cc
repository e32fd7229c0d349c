// The table of net plugins and the choice of the one this process uses.
#include <strings.h>

#include <mutex>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/params.h"
#include "transport/net/net.h"
#if SNCCL_HAVE_VERBS
#include "transport/net/ib/ib_net.h"
#endif
#include "transport/net/compress/compress_net.h"
#include "transport/net/ext/ext_loader.h"
#include "transport/net/socket/socket_net.h"
#if SNCCL_HAVE_UCX
#include "transport/net/ucx/ucx_net.h"
#endif

namespace snccl::net {

namespace {

// In order of preference.
const NetDef kNets[] = {
#if SNCCL_HAVE_VERBS
    {"IB", "RDMA verbs (InfiniBand, RoCE) through libibverbs.so.1: RC queue pairs, receiver-granted credits", ibNet},
#endif
    {"Socket", "TCP sockets: a control socket plus several data streams per connection", socketNet},
#if SNCCL_HAVE_UCX
    // Last: it is used only when asked for by name (SNCCL_NET=UCX), never instead of Socket.
    {"UCX", "UCX (libucp.so.0): the transports UCX picks (UCX_TLS), tagged messages after receiver-granted credits",
     ucxNet},
#endif
};

// A net the choice may take: an external plugin's (ext_loader.h), the table's, or a test
// binary's (net.h testNetPlugins).
struct Candidate {
  std::string name;
  Net* (*instance)() = nullptr;  // the table's and tests' nets
  Net* external = nullptr;       // an external plugin's
  std::string from;              // for an external plugin: its NCCL_NET_PLUGIN entry
  Net* get() const { return external != nullptr ? external : instance(); }
};

// In order of preference: the external plugins that loaded (as NCCL prefers them to its
// own), the table, then a test binary's plugins.
std::vector<Candidate> candidates() {
  std::vector<Candidate> all;
  for (const ext::LoadedPlugin& p : ext::externalPlugins())
    if (p.net != nullptr) all.push_back({p.net->name(), nullptr, p.net.get(), p.entry});
  for (const NetDef& d : kNets) all.push_back({d.name, d.instance, nullptr, ""});
  if (testNetPlugins != nullptr)
    for (const NetDef& d : testNetPlugins()) all.push_back({d.name, d.instance, nullptr, ""});
  return all;
}

Result<Net*> chooseNet() {
  const std::string& want = params::getString(params::Id::Net);
  const std::vector<Candidate> nets = candidates();
  std::string tried;
  for (const Candidate& c : nets) {
    if (!want.empty() && strcasecmp(want.c_str(), c.name.c_str()) != 0) continue;
    Net* net = c.get();
    Status s = net->init();
    if (s.ok() && net->devices() > 0) {
      SN_INFO(log::kNet | log::kInit, "Using network %s%s%s", c.name.c_str(),
              c.from.empty() ? "" : " from the external plugin ", c.from.c_str());
      return net;
    }
    std::string why = s.ok() ? std::string("no device") : s.message();
    // A plugin someone else wrote that fails is skipped, as NCCL skips it. A parameter
    // the user got wrong for one of snccl's own nets is an error even when that net was
    // not asked for by name: falling back to another network would hide it.
    if (!c.from.empty()) {
      SN_INFO(log::kNet | log::kInit, "NET/Plugin: %s (\"%s\"): %s; skipped", c.from.c_str(), c.name.c_str(),
              why.c_str());
    } else if (s.code() == ncclInvalidArgument) {
      return s;
    }
    tried += (tried.empty() ? "" : "; ") + c.name + ": " + why;
  }
  if (!want.empty() && tried.empty()) {
    std::string names;
    for (const Candidate& c : nets) names += (names.empty() ? "" : ", ") + c.name;
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
