// Flight recorder dumps: the text format, the configured directory, the signal.
#include "core/flight_dump.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/kernels/reduce.h"
#include "common/log.h"
#include "common/params.h"
#include "core/comm.h"

namespace snccl {

const char* failureCauseName(FailureCause c) {
  switch (c) {
    case FailureCause::kNone:
      return "none";
    case FailureCause::kPeerExited:
      return "peer-exited";
    case FailureCause::kPeerStopped:
      return "peer-stopped";
    case FailureCause::kPeerAborted:
      return "peer-aborted";
    case FailureCause::kPeerFailed:
      return "peer-failed";
    case FailureCause::kNetwork:
      return "network";
    case FailureCause::kTimeout:
      return "timeout";
    case FailureCause::kAborted:
      return "aborted";
  }
  return "none";
}

namespace flight {

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

const char* stateName(OpState s) {
  switch (s) {
    case OpState::kStarted:
      return "started";
    case OpState::kDone:
      return "done";
    case OpState::kFailed:
      return "failed";
  }
  return "started";
}

std::string opLine(const OpRecord& r) {
  const CollKind coll = static_cast<CollKind>(r.coll);
  const bool p2p = coll == CollKind::kSendRecv;
  return format(
      "op id=%llu seq=%llu coll=%s count=%llu type=%s op=%s root=%d algo=%s state=%s start_ns=%lld end_ns=%lld "
      "steps=%u/%u wait_peer=%d wait=%s wait_msg=%llu send_peer=%d recv_peer=%d nsend=%u nrecv=%u\n",
      (unsigned long long)r.id, (unsigned long long)r.seq, collName(coll), (unsigned long long)r.count,
      p2p ? "uint8" : kernels::typeName(static_cast<ncclDataType_t>(r.dt)),
      p2p ? "none" : kernels::opName(static_cast<ncclRedOp_t>(r.redop)), r.root, r.algo[0] ? r.algo : "-",
      stateName(r.state), (long long)r.startNs, (long long)r.endNs, r.stepsDone, r.stepsTotal, r.waitPeer,
      r.waitSend ? "credit" : "data", (unsigned long long)r.waitMsg, r.sendPeer, r.recvPeer, unsigned(r.nsend),
      unsigned(r.nrecv));
}

std::string render(ncclComm* comm, const char* reason) {
  std::string out = "snccl-flight 1\n";
  const std::vector<PeerInfo>& info = comm->peers.info;
  const bool havePeers = int(info.size()) == comm->nranks;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  out += format("comm hash=0x%016llx rank=%d nranks=%d pid=%d host=%s reason=%s time_ns=%lld recorded=%llu\n",
                (unsigned long long)comm->peers.commHash, comm->rank, comm->nranks, int(getpid()), quoted(host).c_str(),
                quoted(reason).c_str(), (long long)Recorder::nowNs(), (unsigned long long)comm->flight.recorded());
  if (havePeers)
    for (const PeerInfo& p : info)
      out += format("peer rank=%d pid=%d host=%s\n", p.rank, p.pid, quoted(p.hostname).c_str());
  const int code = comm->errors.asyncError.load();
  if (code != ncclSuccess)
    out += format("error code=%d culprit=%d cause=%s cause_peer=%d text=%s\n", code, comm->errors.culprit.load(),
                  failureCauseName(static_cast<FailureCause>(comm->errors.cause.load())), comm->errors.causePeer.load(),
                  quoted(comm->errors.text()).c_str());
  for (const OpRecord& r : comm->flight.snapshot()) out += opLine(r);
  return out + "end\n";
}

// The process's live communicators. Never destroyed: the signal watcher thread may use it
// until the process exits.
struct Registry {
  std::mutex mu;
  std::vector<ncclComm*> comms;  // guarded by mu
  bool signalInstalled = false;  // guarded by mu
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// The write end of the signal watcher's pipe. A signal handler can reach nothing but a
// global, and may call nothing but async-signal-safe functions: it writes one byte here.
std::atomic<int> signalPipeWrite{-1};

extern "C" void onFlightSignal(int) {
  const int saved = errno;
  const int fd = signalPipeWrite.load(std::memory_order_relaxed);
  if (fd >= 0) {
    const char b = 1;
    ssize_t n = write(fd, &b, 1);  // a full pipe already holds a wake-up
    (void)n;
  }
  errno = saved;
}

void watchSignal(int readFd) {
  char buf[64];
  for (;;) {
    ssize_t n = read(readFd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    for (ncclComm* c : reg.comms) dumpToConfiguredDir(c, "signal");
  }
}

// Called with the registry's lock held, at the first registration.
void installSignal(Registry& reg) {
  reg.signalInstalled = true;
  const int sig = int(params::getInt(params::Id::FlightSignal));
  if (sig == 0) return;
  if (params::getString(params::Id::FlightDir).empty()) {
    SN_WARN("SNCCL_FLIGHT_SIGNAL=%d is ignored: SNCCL_FLIGHT_DIR names no directory to write the dumps to", sig);
    return;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    SN_WARN("SNCCL_FLIGHT_SIGNAL: pipe: %s", std::strerror(errno));
    return;
  }
  fcntl(fds[1], F_SETFL, O_NONBLOCK);
  signalPipeWrite.store(fds[1]);
  struct sigaction sa = {};
  sa.sa_handler = onFlightSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(sig, &sa, nullptr) != 0) {
    SN_WARN("SNCCL_FLIGHT_SIGNAL=%d: sigaction: %s", sig, std::strerror(errno));
    return;
  }
  std::thread(watchSignal, fds[0]).detach();
  SN_INFO(log::kInit, "flight recorder: signal %d writes every communicator's recorder into %s", sig,
          params::getString(params::Id::FlightDir).c_str());
}

}  // namespace

std::string dumpPath(const std::string& dir, const ncclComm& comm) {
  return format("%s/snccl-flight-%016llx-r%d.txt", dir.c_str(), (unsigned long long)comm.peers.commHash, comm.rank);
}

Status dumpTo(ncclComm* comm, const std::string& path, const char* reason) {
  const std::string text = render(comm, reason);
  const std::string tmp = format("%s.%d.tmp", path.c_str(), int(getpid()));
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return SystemError("flight recorder: cannot create %s: %s", tmp.c_str(), std::strerror(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return SystemError("flight recorder: cannot write %s: %s", path.c_str(), std::strerror(err));
  }
  return OkStatus();
}

void dumpToConfiguredDir(ncclComm* comm, const char* reason) {
  const std::string& dir = params::getString(params::Id::FlightDir);
  if (dir.empty()) return;
  const std::string path = dumpPath(dir, *comm);
  Status st = dumpTo(comm, path, reason);
  if (!st.ok()) {
    SN_WARN("%s", st.message().c_str());
    return;
  }
  SN_INFO(log::kInit, "rank %d: flight recorder written to %s (%s)", comm->rank, path.c_str(), reason);
}

void registerComm(ncclComm* comm) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  if (!reg.signalInstalled) installSignal(reg);
  reg.comms.push_back(comm);
}

void unregisterComm(ncclComm* comm) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  reg.comms.erase(std::remove(reg.comms.begin(), reg.comms.end(), comm), reg.comms.end());
}

}  // namespace flight
}  // namespace snccl
