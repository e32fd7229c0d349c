#include "transport/net/ib/ib_device.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace snccl::net::ib {

namespace {

constexpr size_t kPage = 4096;

const char* portStateName(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
  }
}

bool fatalQpEvent(ibv_event_type t) {
  return t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR ||
         t == IBV_EVENT_PATH_MIG_ERR;
}

}  // namespace

int portSpeedMbps(uint8_t width, uint8_t speed) {
  int lanes = 1;
  switch (width) {
    case 1: lanes = 1; break;
    case 2: lanes = 4; break;
    case 4: lanes = 8; break;
    case 8: lanes = 12; break;
    case 16: lanes = 2; break;
    default: lanes = 1; break;
  }
  int perLane = 2500;
  switch (speed) {
    case 1: perLane = 2500; break;     // SDR
    case 2: perLane = 5000; break;     // DDR
    case 4: case 8: perLane = 10000; break;  // QDR, FDR10
    case 16: perLane = 14000; break;   // FDR
    case 32: perLane = 25000; break;   // EDR
    case 64: perLane = 50000; break;   // HDR
    case 128: perLane = 100000; break; // NDR
    default: perLane = 2500; break;
  }
  return lanes * perLane;
}

int mtuBytes(ibv_mtu mtu) { return 128 << int(mtu); }  // IBV_MTU_256 = 1

std::string IbPort::label() const { return hca->name() + ":" + std::to_string(port); }

Hca::Hca(const Verbs* v, ibv_context* ctx, ibv_pd* pd, std::string name, int maxQp, bool relaxedOrdering)
    : v_(v), ctx_(ctx), pd_(pd), name_(std::move(name)), maxQp_(maxQp), relaxed_(relaxedOrdering) {}

Hca::~Hca() {
  if (events_.joinable()) {
    uint64_t one = 1;
    ssize_t w = ::write(stopFd_, &one, sizeof one);
    (void)w;
    events_.join();
  }
  if (stopFd_ >= 0) ::close(stopFd_);
  for (auto& [start, r] : regs_) v_->deregMr(r.mr);
  if (pd_ != nullptr) v_->deallocPd(pd_);
  if (ctx_ != nullptr) v_->closeDevice(ctx_);
}

Result<ibv_mr*> Hca::acquireMr(void* addr, size_t len, bool control) {
  uintptr_t start = reinterpret_cast<uintptr_t>(addr) & ~(kPage - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + (len == 0 ? 1 : len) + kPage - 1) & ~(kPage - 1);
  std::lock_guard<std::mutex> lock(mrMu_);
  // Any registration that starts at or below `start` may cover the range (they can
  // overlap: a covering one is reused, never merged). Registrations are few (a ring's
  // slots per connection, the user's registered buffers): a scan is cheap, and regMr
  // is not on the data path.
  for (auto it = regs_.upper_bound(start); it != regs_.begin() && !control;) {
    --it;
    if (it->second.end >= end) {
      ++it->second.refs;
      return it->second.mr;
    }
  }
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mr* mr = nullptr;
  void* base = reinterpret_cast<void*>(start);
  if (relaxed_ && !control && v_->regMrIova2 != nullptr) {
    mr = v_->regMrIova2(pd_, base, end - start, start, unsigned(access | IBV_ACCESS_RELAXED_ORDERING));
  } else {
    mr = v_->regMr(pd_, base, end - start, access);
  }
  if (mr == nullptr)
    return ErrnoError(errno, "NET/IB: %s: cannot register %zu bytes at %p (ibv_reg_mr; is the locked-memory limit, "
                      "ulimit -l, too low?)", name_.c_str(), size_t(end - start), base);
  if (control) {
    orphans_.push_back(Reg{end, mr, 1});
    return mr;
  }
  auto [pos, inserted] = regs_.emplace(start, Reg{end, mr, 1});
  if (!inserted) {
    // Same start, shorter registration: keep the longer one in the map; the old entry
    // stays alive through its references (released by mr pointer below).
    orphans_.push_back(pos->second);
    pos->second = Reg{end, mr, 1};
  }
  return mr;
}

void Hca::forgetMrs(const void* addr, size_t len) {
  const auto start = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t end = start + len;
  std::lock_guard<std::mutex> lock(mrMu_);
  for (auto it = regs_.begin(); it != regs_.end();) {
    if (it->first < end && start < it->second.end) {
      orphans_.push_back(it->second);
      it = regs_.erase(it);
    } else {
      ++it;
    }
  }
}

void Hca::releaseMr(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(mrMu_);
  for (auto it = regs_.begin(); it != regs_.end(); ++it) {
    if (it->second.mr != mr) continue;
    if (--it->second.refs == 0) {
      v_->deregMr(mr);
      regs_.erase(it);
    }
    return;
  }
  for (auto it = orphans_.begin(); it != orphans_.end(); ++it) {
    if (it->mr != mr) continue;
    if (--it->refs == 0) {
      v_->deregMr(mr);
      orphans_.erase(it);
    }
    return;
  }
}

size_t Hca::liveMrs() const {
  std::lock_guard<std::mutex> lock(mrMu_);
  return regs_.size() + orphans_.size();
}

bool Hca::portUp(int port) const { return (portDown_.load(std::memory_order_acquire) & (1u << port)) == 0; }

void Hca::startEvents() {
  stopFd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stopFd_ < 0) {
    SN_WARN("NET/IB : %s: no event thread (eventfd: %s); port and QP failures are seen only through completions",
            name_.c_str(), std::strerror(errno));
    return;
  }
  events_ = std::thread([this] { eventLoop(); });
}

void Hca::eventLoop() {
  for (;;) {
    pollfd fds[2] = {{ctx_->async_fd, POLLIN, 0}, {stopFd_, POLLIN, 0}};
    int r = ::poll(fds, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & (POLLIN | POLLERR | POLLHUP)) == 0) continue;
    ibv_async_event e{};
    if (v_->getAsyncEvent(ctx_, &e) != 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      SN_WARN("NET/IB : %s: reading asynchronous events failed: %s", name_.c_str(), std::strerror(errno));
      return;
    }
    handle(e);
    v_->ackAsyncEvent(&e);
  }
}

void Hca::watch(int fd) {
  std::lock_guard<std::mutex> lock(watchMu_);
  watchers_.push_back(fd);
}

void Hca::unwatch(int fd) {
  std::lock_guard<std::mutex> lock(watchMu_);
  auto it = std::find(watchers_.begin(), watchers_.end(), fd);
  if (it != watchers_.end()) watchers_.erase(it);
}

void Hca::wakeWatchers() {
  // After the event's state is stored: a watcher that wakes, or that drained the
  // descriptor before sleeping, sees the state.
  std::lock_guard<std::mutex> lock(watchMu_);
  const uint64_t one = 1;
  for (int fd : watchers_) {
    ssize_t w = ::write(fd, &one, sizeof one);
    (void)w;  // a full counter is already readable
  }
}

void Hca::handle(const ibv_async_event& e) {
  const char* what = v_->eventTypeStr(e.event_type);
  switch (e.event_type) {
    case IBV_EVENT_PORT_ERR:
      portDown_.fetch_or(1u << e.element.port_num, std::memory_order_acq_rel);
      SN_WARN("NET/IB : %s:%d: %s (port down): connections on it fail, or go on over their other rails",
              name_.c_str(), e.element.port_num, what);
      wakeWatchers();
      return;
    case IBV_EVENT_PORT_ACTIVE:
      portDown_.fetch_and(~(1u << e.element.port_num), std::memory_order_acq_rel);
      SN_INFO(log::kNet, "NET/IB : %s:%d: %s", name_.c_str(), e.element.port_num, what);
      return;
    case IBV_EVENT_DEVICE_FATAL:
      fatal_.store(true, std::memory_order_release);
      SN_WARN("NET/IB : %s: %s: every connection on the device fails", name_.c_str(), what);
      wakeWatchers();
      return;
    case IBV_EVENT_CQ_ERR:
      if (e.element.cq != nullptr && e.element.cq->cq_context != nullptr) {
        int none = -1;
        static_cast<AsyncSink*>(e.element.cq->cq_context)->event.compare_exchange_strong(none, int(e.event_type));
      }
      SN_WARN("NET/IB : %s: %s", name_.c_str(), what);
      wakeWatchers();
      return;
    default:
      break;
  }
  if (fatalQpEvent(e.event_type)) {
    if (e.element.qp != nullptr && e.element.qp->qp_context != nullptr) {
      int none = -1;
      static_cast<AsyncSink*>(e.element.qp->qp_context)->event.compare_exchange_strong(none, int(e.event_type));
    }
    SN_WARN("NET/IB : %s: QP 0x%x: %s", name_.c_str(), e.element.qp != nullptr ? e.element.qp->qp_num : 0u, what);
    wakeWatchers();
    return;
  }
  SN_INFO(log::kNet, "NET/IB : %s: asynchronous event %s", name_.c_str(), what);
}

Result<std::vector<IbPort>> discoverPorts(const Verbs* v, const HcaFilter& filter, const GidPolicy& policy,
                                          bool relaxedOrdering, std::vector<PortReport>* report) {
  int n = 0;
  ibv_device** list = v->getDeviceList(&n);
  if (list == nullptr) {
    // No kernel support (no uverbs) reads as "no devices", not as a failure.
    if (errno == ENOSYS || errno == ENOENT || errno == 0) return std::vector<IbPort>();
    return ErrnoError(errno, "NET/IB: ibv_get_device_list failed");
  }
  std::vector<IbPort> ports;
  Status firstError;
  for (int d = 0; d < n; ++d) {
    const char* name = v->getDeviceName(list[d]);
    ibv_context* ctx = v->openDevice(list[d]);
    if (ctx == nullptr) {
      SN_WARN("NET/IB : cannot open %s: %s", name, std::strerror(errno));
      continue;
    }
    ibv_device_attr da{};
    if (v->queryDevice(ctx, &da) != 0) {
      SN_WARN("NET/IB : cannot query %s: %s", name, std::strerror(errno));
      v->closeDevice(ctx);
      continue;
    }
    std::shared_ptr<Hca> hca;
    const std::string pci = v->pciPath(name);
    const int numa = v->numaNode(name);
    for (int p = 1; p <= da.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (v->queryPort(ctx, uint8_t(p), &pa) != 0) {
        SN_WARN("NET/IB : cannot query %s:%d: %s", name, p, std::strerror(errno));
        continue;
      }
      PortReport rep;
      rep.dev = name;
      rep.port = p;
      rep.state = portStateName(pa.state);
      const bool eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      rep.linkLayer = eth ? "Ethernet" : (pa.link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "unknown");
      rep.speedMbps = portSpeedMbps(pa.active_width, pa.active_speed);
      rep.mtu = mtuBytes(pa.active_mtu);
      rep.pciPath = pci;
      rep.numaNode = numa;
      rep.allowed = filter.allows(name, p);
      std::vector<GidEntry> table;
      for (int i = 0; i < pa.gid_tbl_len; ++i) {
        ibv_gid g{};
        if (v->queryGid(ctx, uint8_t(p), i, &g) != 0) continue;  // unmapped in a container
        GidEntry e;
        e.index = i;
        std::memcpy(e.raw.data(), g.raw, 16);
        if (gidIsZero(e.raw)) continue;
        std::optional<std::string> type = v->readGidType(name, p, i);
        e.type = type ? parseGidType(*type) : GidType::kUnknown;
        if (!eth && !type) e.type = GidType::kIb;
        table.push_back(e);
        rep.gids.emplace_back(e, type.has_value());
      }
      const bool usable = pa.state == IBV_PORT_ACTIVE &&
                          (eth || pa.link_layer == IBV_LINK_LAYER_INFINIBAND || pa.link_layer == 0);
      Result<GidChoice> gid = chooseGid(table, pa.gid_tbl_len, eth, policy);
      rep.gidChoice = gid.ok() ? gid.value().reason : gid.status().message();
      if (gid.ok() && eth && v->gidNetdev != nullptr) rep.netdev = v->gidNetdev(name, p, gid.value().index);
      if (usable && rep.allowed && gid.ok()) {
        if (!hca) {
          ibv_pd* pd = v->allocPd(ctx);
          if (pd == nullptr) {
            SN_WARN("NET/IB : %s: ibv_alloc_pd failed: %s", name, std::strerror(errno));
            if (report != nullptr) report->push_back(rep);
            continue;
          }
          hca = std::make_shared<Hca>(v, ctx, pd, name, da.max_qp, relaxedOrdering);
        }
        IbPort port;
        port.hca = hca;
        port.port = p;
        port.ethernet = eth;
        port.mtu = pa.active_mtu;
        port.lid = pa.lid;
        port.gidIndex = gid.value().index;
        for (const GidEntry& e : table)
          if (e.index == port.gidIndex) std::memcpy(port.gid.raw, e.raw.data(), 16);
        port.gidReason = gid.value().reason;
        port.speedMbps = rep.speedMbps;
        port.pciPath = pci;
        port.netdev = rep.netdev;
        port.numaNode = numa;
        port.guid = da.node_guid;
        SN_INFO(log::kNet | log::kInit, "NET/IB : %s:%d %s, %d Mb/s, GID %s", name, p, rep.linkLayer.c_str(),
                rep.speedMbps, port.gidReason.c_str());
        ports.push_back(std::move(port));
        rep.used = true;
      } else if (usable && rep.allowed && firstError.ok()) {
        firstError = Status(gid.status()).addContext(std::string("NET/IB: ") + name + ":" + std::to_string(p));
      }
      if (report != nullptr) report->push_back(rep);
    }
    if (hca) {
      hca->startEvents();
    } else {
      v->closeDevice(ctx);
    }
  }
  v->freeDeviceList(list);
  // A forced GID index that no port has is the user's error, not "no device".
  if (ports.empty() && !firstError.ok() && policy.forcedIndex >= 0) return firstError;
  return ports;
}

}  // namespace snccl::net::ib
