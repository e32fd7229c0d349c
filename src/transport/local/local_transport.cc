// The local transport: both ends are threads of one process. The receiver puts the ring
// in an anonymous memory file (memfd) and passes its descriptor number; the sender opens
// its own descriptor to the same file through /proc/self/fd and maps it a second time.
// Each end then owns exactly its own mapping, so neither end's lifetime depends on the
// other: a sender that never connects (its comm was aborted mid-setup) leaves nothing
// behind, and a receiver that is gone before the sender attaches is an error, not a
// use-after-free. The inode number in the blob guards against the descriptor number
// having been closed and reused for another file in between.
#include "transport/local/local_transport.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "common/prefault.h"

namespace snccl {

namespace {

class Mapping : public ConnMemory {
 public:
  Mapping(void* base, size_t bytes, int fd) : base_(base), bytes_(bytes), fd_(fd) {}
  ~Mapping() override {
    munmap(base_, bytes_);
    if (fd_ >= 0) close(fd_);
  }

 private:
  void* base_;
  size_t bytes_;
  int fd_;  // the receiver keeps the file open so a late sender can still attach
};

bool canConnect(const PeerInfo& self, const PeerInfo& peer) { return self.processToken == peer.processToken; }

size_t ringBytes(const ConnRequest& req) { return connCtrlBytes() + size_t(req.nsteps) * req.slotBytes; }

// Both ends are executors polling the same memory.
RingConfig ringConfig(const ConnRequest& req) { return {.inlineMessages = true, .lightPublish = lightPublish(req)}; }

Result<std::unique_ptr<Connection>> createRecv(const ConnRequest& req, ConnBlob* blob) {
  size_t bytes = ringBytes(req);
  int fd = memfd_create("snccl-local", MFD_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "local transport: memfd_create failed");
  // fallocate reserves the pages now: a full memory cgroup is an error here, not a SIGBUS.
  int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  struct stat st {};
  if (err == 0 && fstat(fd, &st) != 0) err = errno;
  if (err != 0) {
    close(fd);
    return ErrnoError(err, "local transport: cannot reserve %zu bytes for a ring", bytes);
  }
  // MAP_POPULATE and a touch of each page: first accesses cost ~5-13 us per page here
  // (common/prefault.h); take them once, now.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    int e = errno;
    close(fd);
    return ErrnoError(e, "local transport: mmap of %zu bytes failed", bytes);
  }
  auto ctrl = static_cast<ConnCtrl*>(base);
  initConnCtrl(ctrl, req.nsteps, req.slotBytes);
  *blob = ConnBlob{};
  std::strncpy(blob->transport, "local", sizeof blob->transport - 1);
  blob->words[0] = static_cast<uint64_t>(fd);
  blob->words[1] = static_cast<uint64_t>(st.st_ino);
  blob->words[2] = static_cast<uint64_t>(st.st_dev);
  blob->words[3] = bytes;
  char* slots = static_cast<char*>(base) + connCtrlBytes();
  touchPagesForRead(slots, bytes - connCtrlBytes());  // this end only reads the slots
  return std::make_unique<Connection>(ctrl, slots, std::make_unique<Mapping>(base, bytes, fd), req.peer, 0, "local",
                                      ringConfig(req));
}

Result<std::unique_ptr<Connection>> connectSend(const ConnRequest& req, const ConnBlob& blob) {
  size_t bytes = ringBytes(req);
  if (blob.words[3] != bytes)
    return InvalidUsage("rank %d and rank %d disagree on connection geometry (%zu vs %zu ring bytes): "
                        "set SNCCL_STEPS/SNCCL_BUFFSIZE identically on all ranks",
                        req.rank, req.peer, bytes, static_cast<size_t>(blob.words[3]));
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", static_cast<int>(blob.words[0]));
  int fd = open(path, O_RDWR | O_CLOEXEC);
  struct stat st {};
  bool same = fd >= 0 && fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_ino) == blob.words[1] &&
              static_cast<uint64_t>(st.st_dev) == blob.words[2];
  if (!same) {
    if (fd >= 0) close(fd);
    return RemoteError("local transport: rank %d released its ring before rank %d attached (was it aborted?)",
                       req.peer, req.rank);
  }
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return ErrnoError(errno, "local transport: mmap of %zu bytes failed", bytes);
  auto ctrl = static_cast<ConnCtrl*>(base);
  touchPagesForWrite(static_cast<char*>(base) + connCtrlBytes(), bytes - connCtrlBytes());  // nothing in flight yet
  return std::make_unique<Connection>(ctrl, static_cast<char*>(base) + connCtrlBytes(),
                                      std::make_unique<Mapping>(base, bytes, -1), req.peer, 0, "local",
                                      ringConfig(req));
}

}  // namespace

TransportDef localTransport() {
  return {"local", "ranks in one process: a memory file per ring, mapped by each end", canConnect, createRecv,
          connectSend};
}

}  // namespace snccl
