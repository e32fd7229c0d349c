#include "transport/net/routing.h"

#include <string>

#include "common/params.h"

namespace snccl::net {

Result<Routing> routingFromParams() {
  const std::string routing = params::getString(params::Id::Routing);
  if (routing == "adaptive") return Routing::kAdaptive;
  if (routing == "static") return Routing::kStatic;
  if (routing == "auto" || routing.empty()) return Routing::kAuto;
  return InvalidArgument("SNCCL_ROUTING=%s: expected adaptive, static or auto", routing.c_str());
}

}  // namespace snccl::net
