// Net device choice (net_device.h).
#include "transport/net/net_device.h"

#include <algorithm>

namespace snccl::net {

namespace {

// Whether a sysfs PCI path names the device with this bus id as one of its components.
bool pathHasBusId(const std::string& path, const std::string& busId) {
  for (size_t at = path.find(busId); at != std::string::npos; at = path.find(busId, at + 1)) {
    bool startOk = at == 0 || path[at - 1] == '/';
    size_t end = at + busId.size();
    bool endOk = end == path.size() || path[end] == '/';
    if (startOk && endOk) return true;
  }
  return false;
}

}  // namespace

int pickNetDevice(std::span<const Properties> devs, const NicHint& hint, int channel) {
  if (devs.empty()) return 0;
  if (!hint.empty()) {
    for (size_t d = 0; d < devs.size(); ++d) {
      const Properties& p = devs[d];
      for (const std::string* name : {&p.name, &p.netdev})
        if (!name->empty() && std::find(hint.names.begin(), hint.names.end(), *name) != hint.names.end())
          return int(d);
      if (!hint.busId.empty() && !p.pciPath.empty() && pathHasBusId(p.pciPath, hint.busId)) return int(d);
    }
  }
  return int(unsigned(channel) % devs.size());
}

int pickNetDevice(const Net& net, const NicHint* hint, int channel) {
  int n = net.devices();
  if (n <= 1) return 0;
  std::vector<Properties> devs(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d)
    if (!net.getProperties(d, &devs[size_t(d)]).ok()) devs[size_t(d)] = Properties{};
  return pickNetDevice(devs, hint != nullptr ? *hint : NicHint{}, channel);
}

}  // namespace snccl::net
