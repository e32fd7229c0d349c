// External network plugin loading (ext_loader.h).
#include "transport/net/ext/ext_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <strings.h>

#include <cstring>

#include "common/log.h"
#include "common/params.h"
#include "transport/net/ext/ext_net.h"
#include "transport/net/ext/nccl_net_abi.h"

namespace snccl::net::ext {

namespace {

constexpr const char* kDefaultLib = "libnccl-net.so";
constexpr const char* kPrefix = "libnccl-net-";

bool endsWith(const std::string& s, const char* tail) {
  size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

std::string openedPath(void* handle, const std::string& fallback) {
  link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr && lm->l_name[0] != '\0')
    return lm->l_name;
  return fallback;
}

// The versions a library exports outside the range snccl loads, for a precise message.
std::string unsupportedSymbols(void* handle) {
  std::string found;
  for (int v = 1; v <= abi::kNewestVersion + 8; ++v) {
    if (v >= abi::kOldestVersion && v <= abi::kNewestVersion) continue;
    std::string sym = "ncclNetPlugin_v" + std::to_string(v);
    if (dlsym(handle, sym.c_str()) != nullptr) found += (found.empty() ? "" : ", ") + sym;
  }
  return found;
}

}  // namespace

std::vector<std::string> candidateNames(const std::string& entry) {
  if (entry.empty()) return {kDefaultLib};
  std::vector<std::string> names = {entry};
  bool isLibName = entry.compare(0, 3, "lib") == 0 && endsWith(entry, ".so");
  if (entry.find('/') == std::string::npos && !isLibName) names.push_back(kPrefix + entry + ".so");
  return names;
}

std::vector<std::string> pluginEntries(const std::string& value) {
  if (value.empty()) return {""};
  if (strcasecmp(value.c_str(), "none") == 0) return {};
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= value.size()) {
    size_t comma = value.find(',', at);
    if (comma == std::string::npos) comma = value.size();
    std::string e = value.substr(at, comma - at);
    if (!e.empty()) out.push_back(e);
    at = comma + 1;
  }
  return out;
}

LoadedPlugin loadPlugin(const std::string& entry) {
  LoadedPlugin p;
  p.entry = entry.empty() ? kDefaultLib : entry;
  std::string notFound, failures;
  void* handle = nullptr;
  std::string opened;
  for (const std::string& name : candidateNames(entry)) {
    dlerror();
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      opened = name;
      break;
    }
    const char* err = dlerror();
    std::string why = err != nullptr ? err : "unknown error";
    if (why.find("No such file or directory") != std::string::npos)
      notFound += (notFound.empty() ? "" : ", ") + name;
    else
      failures += (failures.empty() ? "" : "; ") + why;
  }
  if (handle == nullptr) {
    p.problem = !failures.empty() ? "cannot load it: " + failures : "could not find " + notFound;
    return p;
  }
  p.path = openedPath(handle, opened);
  for (int v = abi::kNewestVersion; v >= abi::kOldestVersion; --v) {
    std::string sym = "ncclNetPlugin_v" + std::to_string(v);
    const void* table = dlsym(handle, sym.c_str());
    if (table == nullptr) continue;
    p.version = v;
    p.net = wrapTable(v, table, p.path);
    return p;  // the library stays loaded: its table is in use
  }
  std::string other = unsupportedSymbols(handle);
  p.problem = other.empty()
                  ? "exports no ncclNetPlugin_vN symbol"
                  : "exports only " + other + ", which snccl does not load (it loads v" +
                        std::to_string(abi::kOldestVersion) + " to v" + std::to_string(abi::kNewestVersion) + ")";
  dlclose(handle);
  return p;
}

const std::vector<LoadedPlugin>& externalPlugins() {
  // Loaded once per process, as NCCL does; nothing in it changes afterwards. Never
  // destroyed, as the built-in nets are not: a communicator still alive at exit (a proxy
  // thread, or a destructor that runs after this one's) would call into a freed net.
  static const std::vector<LoadedPlugin>& plugins = *new std::vector<LoadedPlugin>([] {
    std::vector<LoadedPlugin> out;
    for (const std::string& e : pluginEntries(params::getString(params::Id::NetPlugin))) {
      out.push_back(loadPlugin(e));
      const LoadedPlugin& p = out.back();
      if (p.net != nullptr)
        SN_INFO(log::kNet | log::kInit, "NET/Plugin: loaded %s (%s): ncclNetPlugin_v%d \"%s\"", p.entry.c_str(),
                p.path.c_str(), p.version, p.net->name());
      else
        SN_INFO(log::kNet | log::kInit, "NET/Plugin: %s: %s; skipped", p.entry.c_str(), p.problem.c_str());
    }
    return out;
  }());
  return plugins;
}

}  // namespace snccl::net::ext
