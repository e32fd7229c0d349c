// Launch modes (a) one process and (c) RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT.
//
// Mode (c) is a star over TCP: rank 0 listens on MASTER_PORT, every other process connects
// to MASTER_ADDR:MASTER_PORT and says who it is; rank 0 then hands out the unique id and,
// later, relays the small result records. Only bootstrap and bookkeeping travel here: the
// measured traffic is snccl's.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "sn_perf.h"

namespace snperf {

namespace {

constexpr uint32_t kMagic = 0x534e5046;  // "SNPF"
constexpr int kConnectTimeoutSec = 120;

struct Hello {
  uint32_t magic;
  int32_t rank;
  int32_t size;
};

class SingleCoordinator final : public Coordinator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool broadcastId(ncclUniqueId*) override { return true; }
  bool allGather(const void* mine, size_t bytes, void* all) override {
    std::memcpy(all, mine, bytes);
    return true;
  }
  std::string mode() const override { return "threads of one process"; }
};

bool writeAll(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool readAll(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

// Waits for fd to become readable; false after `ms` milliseconds.
bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

void noDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

class TcpCoordinator final : public Coordinator {
 public:
  TcpCoordinator(int rank, int size, std::string where) : rank_(rank), size_(size), where_(std::move(where)) {}
  ~TcpCoordinator() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string mode() const override { return "RANK/WORLD_SIZE (tcp " + where_ + ")"; }

  bool serve(int port, std::string* err);
  bool join(const std::string& addr, int port, std::string* err);
  bool broadcastId(ncclUniqueId* id) override;
  bool allGather(const void* mine, size_t bytes, void* all) override;

 private:
  int listenOn(int port, std::string* err);
  bool admit(int fd);

  int rank_, size_;
  std::string where_;
  std::vector<int> fds_;  // rank 0: one per rank (fds_[0] unused); others: fds_[0] is rank 0
};

int TcpCoordinator::listenOn(int port, std::string* err) {
  // Dual-stack where IPv6 exists, so MASTER_ADDR may name either family.
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1, zero = 0;
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 128) == 0) return fd;
    ::close(fd);
  }
  fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(uint16_t(port));
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd, 128) == 0) return fd;
  *err = "cannot listen on port " + std::to_string(port) + ": " + std::strerror(errno);
  if (fd >= 0) ::close(fd);
  return -1;
}

// Accepts a connection that introduces itself as a rank of this job; strays are dropped.
bool TcpCoordinator::admit(int fd) {
  Hello h{};
  if (!readable(fd, 10000) || !readAll(fd, &h, sizeof h)) return false;
  if (h.magic != kMagic || h.size != size_ || h.rank <= 0 || h.rank >= size_ || fds_[h.rank] >= 0) return false;
  const uint32_t ack = kMagic;
  if (!writeAll(fd, &ack, sizeof ack)) return false;
  fds_[h.rank] = fd;
  return true;
}

bool TcpCoordinator::serve(int port, std::string* err) {
  int lfd = listenOn(port, err);
  if (lfd < 0) return false;
  fds_.assign(size_, -1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kConnectTimeoutSec);
  int joined = 0;
  while (joined < size_ - 1) {
    if (std::chrono::steady_clock::now() > deadline) {
      *err = "only " + std::to_string(joined) + " of " + std::to_string(size_ - 1) + " ranks connected to port " +
             std::to_string(port) + " within " + std::to_string(kConnectTimeoutSec) + " s";
      ::close(lfd);
      return false;
    }
    if (!readable(lfd, 200)) continue;
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    noDelay(fd);
    if (admit(fd)) {
      ++joined;
    } else {
      ::close(fd);
    }
  }
  ::close(lfd);
  return true;
}

bool TcpCoordinator::join(const std::string& addr, int port, std::string* err) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *err = "cannot resolve MASTER_ADDR '" + addr + "': " + gai_strerror(rc);
    return false;
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kConnectTimeoutSec);
  int fd = -1;
  // Rank 0 may not be listening yet: retry until the deadline.
  while (fd < 0 && std::chrono::steady_clock::now() < deadline) {
    for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
      fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd >= 0 && ::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        ::close(fd);
        fd = -1;
      }
    }
    if (fd < 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  freeaddrinfo(res);
  uint32_t ack = 0;
  Hello h{kMagic, rank_, size_};
  if (fd >= 0) noDelay(fd);
  if (fd < 0 || !writeAll(fd, &h, sizeof h) || !readAll(fd, &ack, sizeof ack) || ack != kMagic) {
    *err = "cannot reach rank 0 at " + where_ + " within " + std::to_string(kConnectTimeoutSec) + " s";
    if (fd >= 0) ::close(fd);
    return false;
  }
  fds_.assign(1, fd);
  return true;
}

bool TcpCoordinator::broadcastId(ncclUniqueId* id) {
  if (rank_ != 0) return readAll(fds_[0], id, sizeof *id);
  for (int r = 1; r < size_; ++r)
    if (!writeAll(fds_[r], id, sizeof *id)) return false;
  return true;
}

// Gather at rank 0, then rank 0 sends everyone the whole table. Each message carries its
// length so that a process out of step is detected instead of misread.
bool TcpCoordinator::allGather(const void* mine, size_t bytes, void* all) {
  const uint64_t len = bytes;
  auto* out = static_cast<char*>(all);
  if (rank_ != 0) {
    uint64_t got = 0;
    return writeAll(fds_[0], &len, sizeof len) && writeAll(fds_[0], mine, bytes) &&
           readAll(fds_[0], &got, sizeof got) && got == len * size_ && readAll(fds_[0], all, bytes * size_);
  }
  std::memcpy(out, mine, bytes);
  for (int r = 1; r < size_; ++r) {
    uint64_t got = 0;
    if (!readAll(fds_[r], &got, sizeof got) || got != len || !readAll(fds_[r], out + r * bytes, bytes)) return false;
  }
  const uint64_t total = len * size_;
  for (int r = 1; r < size_; ++r)
    if (!writeAll(fds_[r], &total, sizeof total) || !writeAll(fds_[r], out, bytes * size_)) return false;
  return true;
}

bool envInt(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return false;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0') return false;
  *out = int(x);
  return true;
}

// Set by mpirun (Open MPI, MPICH/Hydra, PMIx launchers): a plain tool would otherwise run
// as n unrelated one-rank jobs and print n tables.
bool launchedByMpi() {
  int n = 0;
  return (envInt("OMPI_COMM_WORLD_SIZE", &n) && n > 1) || (envInt("PMI_SIZE", &n) && n > 1) ||
         (envInt("PMIX_SIZE", &n) && n > 1);
}

}  // namespace

void Coordinator::abortJob(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

std::unique_ptr<Coordinator> makeTcpCoordinator(int rank, int size, const std::string& addr, int port,
                                                std::string* err) {
  auto c = std::make_unique<TcpCoordinator>(rank, size, addr + ":" + std::to_string(port));
  bool ok = rank == 0 ? c->serve(port, err) : c->join(addr, port, err);
  if (!ok) return nullptr;
  return c;
}

std::unique_ptr<Coordinator> makeLaunchCoordinator(int*, char***, std::string* err) {
  int rank = 0, size = 0;
  const bool haveRank = envInt("RANK", &rank), haveSize = envInt("WORLD_SIZE", &size);
  if (!haveRank && !haveSize) {
    if (launchedByMpi()) {
      *err = "started by mpirun, but this executable does not use MPI: run the *_perf_mpi twin (built when MPI is "
             "found), or set RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT";
      return nullptr;
    }
    return std::make_unique<SingleCoordinator>();
  }
  if (!haveRank || !haveSize || size < 1 || rank < 0 || rank >= size) {
    *err = "RANK and WORLD_SIZE must both be set, with 0 <= RANK < WORLD_SIZE";
    return nullptr;
  }
  if (size == 1) return std::make_unique<SingleCoordinator>();
  int port = 0;
  const char* addr = std::getenv("MASTER_ADDR");
  if (addr == nullptr || !envInt("MASTER_PORT", &port) || port <= 0 || port > 65535) {
    *err = "WORLD_SIZE > 1 needs MASTER_ADDR and MASTER_PORT (the address where RANK 0 runs)";
    return nullptr;
  }
  // torchrun's agent already serves its store on MASTER_PORT: take the next port.
  const char* agentStore = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (agentStore != nullptr && std::strcmp(agentStore, "True") == 0) ++port;
  return makeTcpCoordinator(rank, size, addr, port, err);
}

const char* baseName(const char* path) {
  const char* s = std::strrchr(path, '/');
  return s ? s + 1 : path;
}

std::string hostName() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  // nccl-tests prints the short name.
  if (char* dot = std::strchr(h, '.')) *dot = '\0';
  return h;
}

}  // namespace snperf
