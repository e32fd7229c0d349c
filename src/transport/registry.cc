// The one table of transports, in order of preference.
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>

#include "common/params.h"
#include "transport/local/local_transport.h"
#include "transport/net/net_transport.h"
#include "transport/shm/shm_transport.h"
#include "transport/transport.h"

namespace snccl {

namespace {
const TransportDef kTransports[] = {
    localTransport(),
    shmTransport(),
    netTransport(),
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
}  // namespace

std::span<const TransportDef> transports() { return kTransports; }

const TransportDef* findTransport(const char* name) {
  for (const TransportDef& t : kTransports)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}

Result<const TransportDef*> selectTransport(const PeerInfo& self, const PeerInfo& peer) {
  for (const TransportDef& t : kTransports)
    if (t.canConnect(self, peer)) return &t;
  return InvalidUsage(
      "no transport can connect rank %d (host %s) and rank %d (host %s): they are on different nodes "
      "(host hash %016llx vs %016llx) and the net transport declined the pair%s",
      self.rank, self.hostname, peer.rank, peer.hostname, (unsigned long long)self.hostHash,
      (unsigned long long)peer.hostHash,
      params::getInt(params::Id::ShmDisable) ? " (SNCCL_SHM_DISABLE=1 is set)" : "");
}

uint64_t processToken() {
  // Random, not the pid: pids repeat across PID namespaces. Regenerated after fork(), so
  // a forked child never claims its parent's address space.
  static std::mutex mu;
  static pid_t owner = 0;
  static uint64_t token = 0;
  std::lock_guard<std::mutex> lock(mu);
  pid_t pid = getpid();
  if (pid != owner) {
    std::random_device rd;
    token = (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(pid);
    owner = pid;
  }
  return token;
}

uint64_t hostHash() {
  static const uint64_t hash = [] {
    const std::string& id = params::getString(params::Id::HostId);
    if (!id.empty()) return fnv1a(id);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string bootId;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, bootId);
    return fnv1a(std::string(host) + bootId);
  }();
  return hash;
}

int32_t watchablePid(const PeerInfo& self, const PeerInfo& peer) {
  bool comparable = self.hostHash == peer.hostHash && self.pidNs != 0 && self.pidNs == peer.pidNs;
  return comparable ? peer.pid : 0;
}

}  // namespace snccl
