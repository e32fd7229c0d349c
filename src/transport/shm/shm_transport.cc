// The shm transport. The receiver creates a POSIX shared-memory segment per connection,
// reserves its pages up front (posix_fallocate, so a full /dev/shm is an error at setup
// with the sizes in the message, not a SIGBUS later) and maps it prefaulted. The sender
// maps it and immediately unlinks the name: from then on the segment lives exactly as
// long as the two mappings. Names hold the communicator hash, so ranks in different
// network namespaces of one host (which share /dev/shm) still meet.
//
// Between creating the file and the sender's unlink there is a window: a receiver killed
// in it (before its peer learned the name) leaves the file behind. Names therefore carry
// their owner (PID namespace, pid, start time), and every receiver first removes the
// files of owners of its own PID namespace that no longer run (sweepStaleSegments): the
// next job on the host cleans up after a killed one. The start time tells a reused pid
// from the owner; files of other PID namespaces are left alone (their pids mean nothing
// here).
#include "transport/shm/shm_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/log.h"
#include "common/params.h"
#include "common/prefault.h"
#include "common/process.h"

namespace snccl {

namespace {

class ShmMapping : public ConnMemory {
 public:
  ShmMapping(void* base, size_t bytes, std::string name) : base_(base), bytes_(bytes), name_(std::move(name)) {}
  ~ShmMapping() override {
    munmap(base_, bytes_);
    // The sender normally unlinked it already; this covers a sender that never attached.
    if (!name_.empty()) shm_unlink(name_.c_str());
  }

 private:
  void* base_;
  size_t bytes_;
  std::string name_;
};

// Both ends are executors polling the same memory.
RingConfig ringConfig(const ConnRequest& req) { return {.inlineMessages = true, .lightPublish = lightPublish(req)}; }

bool canConnect(const PeerInfo& self, const PeerInfo& peer) {
  if (params::getInt(params::Id::ShmDisable) != 0) return false;
  return self.hostHash == peer.hostHash;
}

// This process as a segment owner: "<pidns hex>-<pid>-<start time hex>".
std::string ownerTag() {
  return format("%" PRIx64 "-%d-%" PRIx64, pidNamespaceId(), static_cast<int>(getpid()),
                processStartTime(getpid()));
}

Result<std::string> segmentName(const ConnRequest& req) {
  // A per-process counter keeps names unique when a pair reconnects (e.g. a new channel).
  static std::atomic<uint64_t> counter{0};
  std::string name = format("/snccl-%016" PRIx64 "-%d-%d-%s-%" PRIu64, req.commHash, req.peer, req.rank,
                            ownerTag().c_str(), counter.fetch_add(1));
  if (name.size() >= sizeof(ConnBlob{}.name)) return InternalError("shm transport: segment name %s too long", name.c_str());
  return name;
}

// "snccl-<hash>-<peer>-<rank>-<pidns>-<pid>-<start>-<n>": whether its owner is a process
// of our PID namespace that no longer runs. Names of another form are never judged.
bool ownerIsDead(const char* entry, uint64_t ourNs) {
  unsigned long long hash = 0, ns = 0, start = 0, n = 0;
  int peer = 0, rank = 0, pid = 0, used = 0;
  if (std::sscanf(entry, "snccl-%16llx-%d-%d-%llx-%d-%llx-%llu%n", &hash, &peer, &rank, &ns, &pid, &start, &n,
                  &used) != 7 ||
      entry[used] != '\0') {
    return false;
  }
  if (ns != ourNs || ourNs == 0 || pid <= 0 || pid == getpid()) return false;
  uint64_t now = processStartTime(pid);
  return now == 0 || now != start || processGone(pid);
}

// Removes /dev/shm files of dead owners (see the header comment).
void sweepStaleSegments() {
  uint64_t ourNs = pidNamespaceId();
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, "snccl-", 6) != 0 || !ownerIsDead(e->d_name, ourNs)) continue;
    if (shm_unlink((std::string("/") + e->d_name).c_str()) == 0)
      SN_INFO(log::kShm, "shm: removed /dev/shm/%s, left by a process that no longer runs", e->d_name);
  }
  closedir(d);
}

Status noSpaceError(int err, size_t bytes) {
  struct statvfs vfs {};
  unsigned long long freeBytes = 0;
  if (statvfs("/dev/shm", &vfs) == 0) freeBytes = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
  return ErrnoError(err,
                    "shm transport: cannot reserve %zu bytes in /dev/shm (%llu bytes free there); enlarge it "
                    "(docker: --shm-size or --ipc=host), lower SNCCL_BUFFSIZE, or set SNCCL_SHM_DISABLE=1",
                    bytes, freeBytes);
}

Result<std::unique_ptr<Connection>> createRecv(const ConnRequest& req, ConnBlob* blob) {
  size_t bytes = connCtrlBytes() + size_t(req.nsteps) * req.slotBytes;
  sweepStaleSegments();
  SNCCL_ASSIGN_OR_RETURN(std::string name, segmentName(req));
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError(errno, "shm transport: shm_open(%s) failed", name.c_str());
  if (params::getInt(params::Id::FaultShmKill) == req.rank + 1) raise(SIGKILL);  // tests only
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return noSpaceError(err, bytes);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    int e = errno;
    shm_unlink(name.c_str());
    return ErrnoError(e, "shm transport: mmap of %s (%zu bytes) failed", name.c_str(), bytes);
  }
  auto ctrl = static_cast<ConnCtrl*>(base);
  initConnCtrl(ctrl, req.nsteps, req.slotBytes);
  *blob = ConnBlob{};
  std::strncpy(blob->transport, "shm", sizeof blob->transport - 1);
  blob->words[0] = bytes;
  std::strncpy(blob->name, name.c_str(), sizeof blob->name - 1);
  SN_INFO(log::kShm, "shm: rank %d receives from rank %d through %s (%u x %u bytes)", req.rank, req.peer,
          name.c_str(), req.nsteps, req.slotBytes);
  char* slots = static_cast<char*>(base) + connCtrlBytes();
  touchPagesForRead(slots, bytes - connCtrlBytes());  // this end only reads the slots
  return std::make_unique<Connection>(ctrl, slots, std::make_unique<ShmMapping>(base, bytes, name), req.peer,
                                      watchablePid(*req.self, *req.remote), "shm", ringConfig(req));
}

Result<std::unique_ptr<Connection>> connectSend(const ConnRequest& req, const ConnBlob& blob) {
  size_t bytes = blob.words[0];
  int fd = shm_open(blob.name, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError(errno, "shm transport: rank %d cannot open %s created by rank %d", req.rank,
                                blob.name, req.peer);
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return SystemError("shm transport: %s has %lld bytes, expected %zu", blob.name, (long long)st.st_size, bytes);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return ErrnoError(errno, "shm transport: mmap of %s failed", blob.name);
  // Both ends are mapped now: drop the name so a crash cannot leak the segment.
  shm_unlink(blob.name);
  auto ctrl = static_cast<ConnCtrl*>(base);
  if (ctrl->nsteps != req.nsteps || ctrl->slotBytes != req.slotBytes) {
    munmap(base, bytes);
    return InvalidUsage("rank %d and rank %d disagree on connection geometry (%u x %u vs %u x %u bytes): "
                        "set SNCCL_STEPS/SNCCL_BUFFSIZE identically on all ranks",
                        req.rank, req.peer, req.nsteps, req.slotBytes, ctrl->nsteps, ctrl->slotBytes);
  }
  // No message is in flight yet; touching keeps every byte as it is anyway.
  touchPagesForWrite(static_cast<char*>(base) + connCtrlBytes(), bytes - connCtrlBytes());
  return std::make_unique<Connection>(ctrl, static_cast<char*>(base) + connCtrlBytes(),
                                      std::make_unique<ShmMapping>(base, bytes, std::string()), req.peer,
                                      watchablePid(*req.self, *req.remote), "shm", ringConfig(req));
}

}  // namespace

TransportDef shmTransport() {
  return {"shm", "processes on one node: rings in /dev/shm, prefaulted, unlinked once both ends map them",
          canConnect, createRecv, connectSend};
}

}  // namespace snccl
