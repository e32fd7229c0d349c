// The communicator's traffic counters: the file in SNCCL_STATS_DIR, or private memory.
#include "core/comm_stats.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace snccl::stats {

CommStats::~CommStats() {
  // The file stays: sn_top --svg draws a run after it ended.
  if (base_ != nullptr) munmap(base_, bytes_);
}

Status CommStats::open(uint64_t commHash, int rank, int nranks, const std::string& dir) {
  bytes_ = sizeof(StatsHeader) + sizeof(PeerStats) * size_t(nranks);
  int fd = -1;
  path_.clear();
  if (!dir.empty()) {
    path_ = format("%s/snccl-stats-%016llx-r%d.bin", dir.c_str(), (unsigned long long)commHash, rank);
    // A file left by an earlier run of the same communicator is replaced, not reused: a
    // reader that has it mapped keeps the old one.
    unlink(path_.c_str());
    fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || ftruncate(fd, off_t(bytes_)) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      return SystemError("SNCCL_STATS_DIR: cannot create %s: %s", path_.c_str(), std::strerror(err));
    }
  }
  void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, fd >= 0 ? MAP_SHARED : (MAP_PRIVATE | MAP_ANONYMOUS), fd, 0);
  const int err = errno;
  if (fd >= 0) close(fd);
  if (p == MAP_FAILED) return SystemError("traffic counters: mmap of %zu bytes: %s", bytes_, std::strerror(err));
  base_ = p;
  auto* h = new (p) StatsHeader{};
  std::memcpy(h->magic, kMagic, sizeof kMagic);
  h->headerBytes = sizeof(StatsHeader);
  h->peerBytes = sizeof(PeerStats);
  h->rank = rank;
  h->nranks = nranks;
  h->pid = int32_t(getpid());
  h->commHash = commHash;
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  h->startNs = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  gethostname(h->host, sizeof h->host - 1);
  peers_ = reinterpret_cast<PeerStats*>(static_cast<char*>(p) + sizeof(StatsHeader));
  for (int r = 0; r < nranks; ++r) new (&peers_[r]) PeerStats{};
  return OkStatus();
}

void CommStats::setLink(int peer, const std::string& link) {
  if (peers_ == nullptr) return;
  char* out = peers_[peer].link;
  const size_t n = std::min(link.size(), sizeof peers_[peer].link - 1);
  std::memcpy(out, link.data(), n);
  out[n] = '\0';
}

}  // namespace snccl::stats
