// The IB net's devices: one Net device per active port that NCCL_IB_HCA allows, its GID,
// its memory registrations, and the thread that reports its asynchronous events.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/net/ib/ib_select.h"
#include "transport/net/ib/ib_verbs.h"
#include "transport/net/net.h"

namespace snccl::net::ib {

// Where asynchronous events about a QP or CQ are delivered: the comm that owns it passes
// a sink as the QP's qp_context and the CQ's cq_context. The event thread stores the
// first fatal event; the comm reads it in test(). Destroying a QP or CQ waits until its
// events are acknowledged (libibverbs), so a sink outlives every event that names it.
struct AsyncSink {
  std::atomic<int> event{-1};  // ibv_event_type of the first fatal event, -1 none
};

// A physical device (HCA) opened once: context, protection domain, registration cache
// and event thread. Shared by the Net devices of its ports.
class Hca {
 public:
  Hca(const Verbs* v, ibv_context* ctx, ibv_pd* pd, std::string name, int maxQp, bool relaxedOrdering);
  ~Hca();
  Hca(const Hca&) = delete;
  Hca& operator=(const Hca&) = delete;

  const Verbs* verbs() const { return v_; }
  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const std::string& name() const { return name_; }
  int maxQp() const { return maxQp_; }

  // A registration covering [addr, addr + len), shared with every other caller whose
  // range it covers (page-rounded, reference-counted). Registering pins memory, so a
  // range is registered once per device however many comms use it. `control`: memory
  // whose last written field tells the reader the rest is in place (a connection's
  // Region of grants, offers and records): registered on its own and never with relaxed
  // PCIe ordering, which would let the NIC place that field before the others.
  Result<ibv_mr*> acquireMr(void* addr, size_t len, bool control = false);
  void releaseMr(ibv_mr* mr);
  // Registrations overlapping [addr, addr + len) are no longer handed out by acquireMr
  // (Net::forgetRange); those still referenced live on until released.
  void forgetMrs(const void* addr, size_t len);
  size_t liveMrs() const;

  // Port state as the event thread last saw it (1 = up); device-fatal flag.
  bool portUp(int port) const;
  bool fatal() const { return fatal_.load(std::memory_order_acquire); }

  // Starts the event thread (once the device's ports are known).
  void startEvents();

  // An eventfd the event thread writes 1 to after it recorded an event that fails
  // connections (a port down, a fatal device, QP or CQ event), so that a connection asleep
  // in poll() learns it now and not when its queue pairs' retries run out. Each watch()
  // is undone by one unwatch() of the same descriptor before it is closed.
  void watch(int fd);
  void unwatch(int fd);

 private:
  void eventLoop();
  void handle(const ibv_async_event& e);
  void wakeWatchers();

  const Verbs* v_;
  ibv_context* ctx_;
  ibv_pd* pd_;
  std::string name_;
  int maxQp_;
  bool relaxed_;
  mutable std::mutex mrMu_;
  struct Reg {
    uintptr_t end;
    ibv_mr* mr;
    int refs;
  };
  std::map<uintptr_t, Reg> regs_;  // by page-aligned start
  std::vector<Reg> orphans_;       // not shared: replaced in regs_ by a longer one, forgotten, or control
  std::atomic<uint32_t> portDown_{0};  // bit p: port p reported down
  std::atomic<bool> fatal_{false};
  int stopFd_ = -1;
  std::thread events_;
  std::mutex watchMu_;
  std::vector<int> watchers_;  // watch(): one entry per call
};

// One Net device: a port of an HCA.
struct IbPort {
  std::shared_ptr<Hca> hca;
  int port = 1;
  bool ethernet = false;
  ibv_mtu mtu = IBV_MTU_1024;
  uint16_t lid = 0;
  int gidIndex = 0;
  ibv_gid gid{};
  std::string gidReason;
  int speedMbps = 0;
  std::string pciPath;
  std::string netdev;  // RoCE: the interface of the chosen GID
  int numaNode = -1;
  uint64_t guid = 0;
  std::string label() const;  // "rxe0:1"
};

// What sn_info shows of one port, usable or not.
struct PortReport {
  std::string dev;
  int port = 0;
  std::string state;       // "ACTIVE", "DOWN", ...
  std::string linkLayer;   // "Ethernet", "InfiniBand"
  int speedMbps = 0;
  int mtu = 0;             // bytes
  std::string pciPath;
  std::string netdev;      // RoCE: the interface of the chosen GID
  int numaNode = -1;
  std::vector<std::pair<GidEntry, bool>> gids;  // entry, whether its type was readable
  bool allowed = true;     // by NCCL_IB_HCA
  bool used = false;       // becomes a Net device
  std::string gidChoice;   // "index 1 (...): reason" or the error
};

// Opens every device, keeps the active ports NCCL_IB_HCA allows (each with its GID chosen
// by `policy`), and describes every port in *report (when given).
Result<std::vector<IbPort>> discoverPorts(const Verbs* v, const HcaFilter& filter, const GidPolicy& policy,
                                          bool relaxedOrdering, std::vector<PortReport>* report);

// Mb/s of a port from its active width and speed codes (verbs encoding).
int portSpeedMbps(uint8_t activeWidth, uint8_t activeSpeed);
int mtuBytes(ibv_mtu mtu);

}  // namespace snccl::net::ib
