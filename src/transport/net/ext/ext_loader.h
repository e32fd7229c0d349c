// Loading external NCCL network plugins (libnccl-net*.so) the way NCCL does.
//
// NCCL_NET_PLUGIN (SNCCL_NET_PLUGIN) is a comma list; each entry X is opened as X (a path
// when it has a '/', else a library name the dynamic loader searches for) and, when that
// fails and X is a bare name (no '/', not lib*.so), as libnccl-net-X.so. Unset, the list is
// libnccl-net.so; "none" loads nothing. From each library the newest table it exports is
// taken, ncclNetPlugin_v12 down to ncclNetPlugin_v6. A library that cannot be opened or
// exports no table snccl can use is reported and skipped; whether the plugin initialises
// and has devices is decided later, when a network is chosen (net_registry.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "transport/net/net.h"

namespace snccl::net::ext {

struct LoadedPlugin {
  std::string entry;         // the NCCL_NET_PLUGIN entry it came from
  std::string path;          // the file the dynamic loader opened ("" when none)
  int version = 0;           // N of the ncclNetPlugin_vN taken (0: none)
  std::unique_ptr<Net> net;  // null when not usable: then `problem` says why
  std::string problem;
};

// The library names to try for one entry, in order.
std::vector<std::string> candidateNames(const std::string& entry);

// The entries of an NCCL_NET_PLUGIN value (empty: the default library; "none": nothing).
std::vector<std::string> pluginEntries(const std::string& value);

// Opens one entry's library and takes its newest table. Libraries stay loaded until exit.
LoadedPlugin loadPlugin(const std::string& entry);

// The process's external plugins under NCCL_NET_PLUGIN, loaded on first use and kept
// until exit. Each problem is logged once, at INFO under NET.
const std::vector<LoadedPlugin>& externalPlugins();

}  // namespace snccl::net::ext
