// An NCCL network plugin's table (nccl_net_abi.h), seen as a snccl Net.
//
// The adapter keeps the contract NCCL gives plugins, so a plugin written for NCCL behaves
// here as it does there:
//  - every call returns at once; a null request from isend/irecv means "retry later";
//  - a comm never has more requests in flight than the version allows (8 for v6, 32
//    after): past that, isend/irecv answer "retry later" without calling the plugin;
//  - memory is registered before use: Net::usesUnregisteredHostMemory() is false, so the
//    net transport registers its slots and the user's ranges (as NCCL_PTR_HOST) and
//    passes their handles;
//  - messages stay within what the version can carry (int sizes before v9: 1 GiB, as NCCL
//    sends them; v9 on: the plugin's maxP2pBytes);
//  - connect/accept are called again until they return a comm, with the same handle
//    memory, and never ask for device offload;
//  - v11 and v12 get one context for the process (commId 0), created by init;
//  - only devices that take host memory as it is are reported (ptrSupport has
//    NCCL_PTR_HOST and, from v7, netDeviceType is host): a GPU-only device, or one whose
//    data a device kernel unpacks, is left out with an INFO line.
// What ncclNet cannot carry, the adapter says in its answers: no imm (Properties::imm is
// false, so the transport prefixes the operation's digest to each message), no abort
// code and no clean-close signal from the peer, no descriptors to poll (the proxy polls
// on a timer), and connect cannot be cancelled (a half-made send comm is left to the
// plugin).
#pragma once

#include <memory>
#include <string>

#include "transport/net/net.h"

namespace snccl::net::ext {

// The Net over `table`, a plugin's ncclNetPlugin_v<version> (abi::kOldestVersion ..
// abi::kNewestVersion), which must stay mapped while the Net lives. `lib` names the
// library in messages. Null for a version outside that range.
std::unique_ptr<Net> wrapTable(int version, const void* table, const std::string& lib);

}  // namespace snccl::net::ext
