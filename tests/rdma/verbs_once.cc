// Does the RDMA device deliver each RC write exactly once? A check of the device and its
// driver, not of snccl: plain libibverbs, one reliable-connected queue pair between two
// guests (rxe_vm.sh pair), with the ACK timeout short enough that the sender retransmits.
//
//   RANK=0|1 MASTER_ADDR=a MASTER_PORT=p verbs_once [--dev rxe0] [--gid 1] [--timeout 8]
//            [--messages 4000] [--bytes 16384] [--window 8]
//
// Rank 1 writes message i as an RDMA write of --bytes (whose first 8 bytes hold i) into
// slot i % 1024 of rank 0's buffer, then an RDMA write with immediate i; at most --window
// messages are unacknowledged. Rank 0 takes one receive completion per message and checks
// that the immediates come in order, each once, and that the slot holds i; it then marks
// the slot and checks, at every later completion, that no write landed again in the slots
// the sender cannot have reused yet (it is at most one receive queue ahead).
// Exit 0 when every message arrived exactly once.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int kSlots = 1024;
constexpr int kRecvs = 256;
constexpr uint64_t kMark = ~uint64_t(0);

struct Wire {
  uint32_t qpn, psn;
  uint8_t gid[16];
  uint64_t addr;
  uint32_t rkey;
};

struct Options {
  std::string dev = "rxe0";
  int gid = 1, timeout = 8, messages = 4000, bytes = 16384, window = 8;
};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

bool fullIo(int fd, void* p, size_t n, bool out) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = out ? ::write(fd, c, n) : ::read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

// Rank 0 listens on MASTER_PORT, rank 1 connects to MASTER_ADDR; both send their Wire.
bool exchange(int rank, const Wire& mine, Wire* theirs) {
  const char* host = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (host == nullptr || port == nullptr) return false;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(std::atoi(port)));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (rank == 0) {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sa.sin_addr.s_addr = INADDR_ANY;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 1) != 0) return false;
    const int c = ::accept(fd, nullptr, nullptr);
    ::close(fd);
    fd = c;
  } else {
    ::inet_pton(AF_INET, host, &sa.sin_addr);
    const double end = now() + 60;
    while (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      if (now() > end) return false;
      ::close(fd);
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      ::usleep(100000);
    }
  }
  const bool ok =
      fd >= 0 && fullIo(fd, const_cast<Wire*>(&mine), sizeof mine, true) && fullIo(fd, theirs, sizeof *theirs, false);
  // Hold the socket until the peer has read ours too, then part.
  char done = 0;
  if (ok) (void)(fullIo(fd, &done, 1, true) && fullIo(fd, &done, 1, false));
  ::close(fd);
  return ok;
}

bool connectQp(ibv_qp* qp, const Options& o, ibv_port_attr& port, const Wire& mine, const Wire& peer) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = port.active_mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = uint8_t(o.gid);
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = uint8_t(o.timeout);
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = mine.psn;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

int receive(ibv_qp* qp, ibv_cq* cq, char* buf, const Options& o) {
  auto slot = [&](int i) { return reinterpret_cast<uint64_t*>(buf + size_t(i % kSlots) * size_t(o.bytes)); };
  auto postRecv = [&] {
    ibv_recv_wr wr{}, *bad = nullptr;
    return ibv_post_recv(qp, &wr, &bad) == 0;
  };
  int errors = 0, next = 0;
  // Slots behind the newest completion that the sender cannot have reused yet: a message
  // takes one of the kRecvs receives, so after completion j the sender may be writing
  // up to j + kRecvs + 1 (the slot of j + kRecvs + 1 - kSlots).
  const int guard = kSlots - kRecvs - 2;
  double quietUntil = 0;
  const double end = now() + 300;
  while (now() < end) {
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) return std::printf("[rank 0] ibv_poll_cq failed\n"), 1;
    if (n == 0 && next >= o.messages && now() > quietUntil) break;
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS)
        return std::printf("[rank 0] receive completion status '%s'\n", ibv_wc_status_str(wc[k].status)), 1;
      if (!postRecv()) return std::printf("[rank 0] ibv_post_recv failed\n"), 1;
      const int i = int(ntohl(wc[k].imm_data));
      if (i != next) {
        ++errors;
        std::printf("[rank 0] %s completion for message %d (next expected %d)\n", i < next ? "SECOND" : "SKIPPED", i,
                    next);
        continue;
      }
      if (*slot(i) != uint64_t(i)) {
        ++errors;
        std::printf("[rank 0] message %d: slot holds %llu\n", i, static_cast<unsigned long long>(*slot(i)));
      }
      *slot(i) = kMark;
      for (int j = std::max(0, i - guard); j < i; ++j)
        if (*slot(j) != kMark) {
          ++errors;
          std::printf("[rank 0] at message %d: the data of message %llu landed again in slot %d\n", i,
                      static_cast<unsigned long long>(*slot(j)), j % kSlots);
          *slot(j) = kMark;
        }
      if (++next == o.messages) quietUntil = now() + 2;  // a late duplicate still counts
    }
  }
  std::printf("[rank 0] %d of %d messages, %d errors: %s\n", next, o.messages, errors,
              errors == 0 && next == o.messages ? "each delivered exactly once" : "NOT exactly once");
  return errors == 0 && next == o.messages ? 0 : 1;
}

int send(ibv_qp* qp, ibv_cq* cq, ibv_mr* mr, char* buf, const Options& o, const Wire& peer) {
  int posted = 0, done = 0;
  const double end = now() + 300;
  while (done < o.messages && now() < end) {
    while (posted < o.messages && posted - done < o.window) {
      const int i = posted++;
      char* src = buf + size_t(i % kSlots) * size_t(o.bytes);
      const uint64_t v = uint64_t(i);
      std::memcpy(src, &v, sizeof v);
      ibv_sge sge{reinterpret_cast<uintptr_t>(src), uint32_t(o.bytes), mr->lkey};
      ibv_send_wr wrs[2]{}, *bad = nullptr;
      wrs[0].opcode = IBV_WR_RDMA_WRITE;
      wrs[0].sg_list = &sge;
      wrs[0].num_sge = 1;
      wrs[0].wr.rdma.remote_addr = peer.addr + uint64_t(i % kSlots) * uint64_t(o.bytes);
      wrs[0].wr.rdma.rkey = peer.rkey;
      wrs[0].next = &wrs[1];
      wrs[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wrs[1].send_flags = IBV_SEND_SIGNALED;
      wrs[1].imm_data = htonl(uint32_t(i));
      wrs[1].wr.rdma.remote_addr = peer.addr;  // zero bytes: no address is read
      wrs[1].wr.rdma.rkey = peer.rkey;
      if (ibv_post_send(qp, wrs, &bad) != 0) return std::printf("[rank 1] ibv_post_send failed\n"), 1;
    }
    ibv_wc wc[16];
    const int n = ibv_poll_cq(cq, 16, wc);
    if (n < 0) return std::printf("[rank 1] ibv_poll_cq failed\n"), 1;
    for (int k = 0; k < n; ++k) {
      if (wc[k].status != IBV_WC_SUCCESS)
        return std::printf("[rank 1] send completion status '%s'\n", ibv_wc_status_str(wc[k].status)), 1;
      ++done;
    }
  }
  std::printf("[rank 1] %d of %d messages acknowledged\n", done, o.messages);
  return done == o.messages ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--dev")
      o.dev = v;
    else if (k == "--gid")
      o.gid = std::atoi(v);
    else if (k == "--timeout")
      o.timeout = std::atoi(v);
    else if (k == "--messages")
      o.messages = std::atoi(v);
    else if (k == "--bytes")
      o.bytes = std::atoi(v);
    else if (k == "--window")
      o.window = std::atoi(v);
    else
      return std::fprintf(stderr, "unknown option %s\n", k.c_str()), 2;
  }
  const char* r = std::getenv("RANK");
  const int rank = r != nullptr ? std::atoi(r) : -1;
  if ((rank != 0 && rank != 1) || o.bytes < 8 || o.window < 1 || o.window > kSlots / 2 || o.messages < 1)
    return std::fprintf(stderr, "usage: RANK=0|1 MASTER_ADDR=a MASTER_PORT=p %s [options]\n", argv[0]), 2;

  int ndev = 0;
  ibv_device** list = ibv_get_device_list(&ndev);
  ibv_context* ctx = nullptr;
  for (int i = 0; i < ndev && ctx == nullptr; ++i)
    if (o.dev == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
  if (list != nullptr) ibv_free_device_list(list);
  if (ctx == nullptr) return std::printf("[rank %d] no device %s\n", rank, o.dev.c_str()), 1;
  ibv_port_attr port{};
  ibv_gid gid{};
  if (ibv_query_port(ctx, 1, &port) != 0 || ibv_query_gid(ctx, 1, o.gid, &gid) != 0)
    return std::printf("[rank %d] cannot query port 1 / GID %d\n", rank, o.gid), 1;
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ibv_cq* cq = pd != nullptr ? ibv_create_cq(ctx, 4 * kRecvs, nullptr, nullptr, 0) : nullptr;
  std::vector<char> mem(size_t(kSlots) * size_t(o.bytes));
  ibv_mr* mr = cq != nullptr ? ibv_reg_mr(pd, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
                             : nullptr;
  ibv_qp_init_attr qa{};
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {uint32_t(4 * kSlots), uint32_t(kRecvs), 1, 1, 0};
  ibv_qp* qp = mr != nullptr ? ibv_create_qp(pd, &qa) : nullptr;
  if (qp == nullptr) return std::printf("[rank %d] cannot set up a queue pair on %s\n", rank, o.dev.c_str()), 1;
  Wire mine{qp->qp_num, uint32_t(rank * 1000 + 7), {}, reinterpret_cast<uintptr_t>(mem.data()), mr->rkey}, peer{};
  std::memcpy(mine.gid, gid.raw, 16);
  if (!exchange(rank, mine, &peer)) return std::printf("[rank %d] cannot exchange queue pair numbers\n", rank), 1;
  if (!connectQp(qp, o, port, mine, peer)) return std::printf("[rank %d] cannot connect the queue pair\n", rank), 1;
  for (int i = 0; i < kRecvs && rank == 0; ++i) {
    ibv_recv_wr wr{}, *bad = nullptr;
    if (ibv_post_recv(qp, &wr, &bad) != 0) return std::printf("[rank 0] ibv_post_recv failed\n"), 1;
  }
  // The receiver must be ready before the first write: a second exchange is the barrier.
  if (!exchange(rank, mine, &peer)) return std::printf("[rank %d] barrier failed\n", rank), 1;
  const int rc = rank == 0 ? receive(qp, cq, mem.data(), o) : send(qp, cq, mr, mem.data(), o, peer);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return rc;
}
