// hwloc -> SystemBuilder. Never asks hwloc for common ancestors of I/O objects (they have
// no cpusets; hwloc_get_common_ancestor_obj misbehaves on them): PCIe shape is derived by
// walking ->parent chains.
#include "topology/hwloc_import.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "topology/bandwidth.h"
#include "topology/hwloc_check.h"
#include "topology/limits.h"
#include "topology/xml.h"

#if SNCCL_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace snccl::topo {

int smFromGpuModel(const std::string& model) {
  // Longer names first where one is a prefix of another (A100 before A10, H200 before H20).
  static constexpr std::pair<const char*, int> kModels[] = {
      {"GB300", 103}, {"B300", 103}, {"GB200", 100}, {"B200", 100}, {"B100", 100}, {"GH200", 90},
      {"H100", 90},   {"H200", 90},  {"H800", 90},   {"H20", 90},   {"L40", 89},   {"L4", 89},
      {"RTX 40", 89}, {"A100", 80},  {"A800", 80},   {"A30", 80},   {"A10", 86},   {"A40", 86},
      {"RTX 30", 86}, {"T4", 75},    {"V100", 70},   {"P100", 60},  {"K80", 37},   {"K40", 35},
      {"M2075", 20},  {"M2090", 20}};
  for (const auto& [name, sm] : kModels)
    if (model.find(name) != std::string::npos) return sm;
  return 0;
}

#if SNCCL_HAVE_HWLOC

bool hwlocAvailable() { return true; }

std::string hwlocDescription() {
  unsigned v = hwloc_get_api_version();
  return format("hwloc (API %u.%u)", v >> 16, (v >> 8) & 0xff);
}

namespace {

constexpr int64_t kClassGpu = 0x030200;
constexpr int64_t kClassNvs = 0x068000;
constexpr int64_t kClassCpu = 0x068001;

std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& p) {
  return format("%04x:%02x:%02x.%x", static_cast<unsigned>(p.domain), p.bus, p.dev, p.func);
}

bool isPciBridge(hwloc_obj_t o) {
  return o != nullptr && o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI &&
         o->attr->bridge.downstream_type == HWLOC_OBJ_BRIDGE_PCI;
}

bool isHostBridge(hwloc_obj_t o) {
  return o != nullptr && o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
}

// hwloc reports lanes x per-lane GB/s after encoding; recover NCCL's (GT/s, width).
void linkFromHwloc(float gbs, PciAttrs* p) {
  static constexpr std::pair<double, double> kPerLane[] = {
      {2.5, 0.25}, {5.0, 0.5}, {8.0, 8.0 * 128 / 130 / 8}, {16.0, 16.0 * 128 / 130 / 8},
      {32.0, 32.0 * 128 / 130 / 8}, {64.0, 64.0 * 128 / 130 / 8}};
  static constexpr int kWidths[] = {16, 8, 4, 2, 1, 32, 12};
  if (gbs <= 0) return;
  for (int w : kWidths) {
    for (const auto& [gts, lane] : kPerLane) {
      if (std::fabs(w * lane - gbs) < 0.002 * gbs + 0.005) {
        p->linkGts = gts;
        p->linkWidth = w;
        return;
      }
    }
  }
  // Old kernels report odd figures (0.2, 0.4 GB/s): approximate with Gen1 lanes rather
  // than leave it unknown, which NCCL's rules would read as a fast Gen3 x16 link.
  p->linkGts = 2.5;
  p->linkWidth = std::max(1, static_cast<int>(std::lround(gbs / 0.25)));
}

PciAttrs pciAttrsOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& a) {
  PciAttrs p;
  p.busId = busIdOf(a);
  p.classCode = static_cast<int64_t>(a.class_id) << 8;
  p.vendor = a.vendor_id;
  p.device = a.device_id;
  p.subsystemVendor = a.subvendor_id;
  p.subsystemDevice = a.subdevice_id;
  linkFromHwloc(a.linkspeed, &p);
  return p;
}

std::string info(hwloc_obj_t o, const char* name) {
  const char* v = o == nullptr ? nullptr : hwloc_obj_get_info_by_name(o, name);
  return v == nullptr ? std::string() : std::string(v);
}

bool startsWith(const char* s, const char* prefix) {
  return s != nullptr && std::strncmp(s, prefix, std::strlen(prefix)) == 0;
}

enum class DevKind { kNone, kGpu, kNic, kNvSwitch, kEthNoOs };

DevKind classify(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  bool nvSwitch = (pci->subtype != nullptr && std::strcmp(pci->subtype, "NVSwitch") == 0) ||
                  (a.vendor_id == 0x10de && a.class_id == 0x0680);
  if (nvSwitch) return DevKind::kNvSwitch;
  bool anyOs = false;
  for (hwloc_obj_t o = pci->io_first_child; o != nullptr; o = o->next_sibling) {
    if (o->type != HWLOC_OBJ_OS_DEVICE) continue;
    anyOs = true;
    auto t = o->attr->osdev.type;
    bool cudaLike = startsWith(o->name, "cuda") || startsWith(o->name, "nvml") ||
                    (o->subtype && (!std::strcmp(o->subtype, "CUDA") || !std::strcmp(o->subtype, "NVML")));
    if ((t == HWLOC_OBJ_OSDEV_COPROC || t == HWLOC_OBJ_OSDEV_GPU) && cudaLike) return DevKind::kGpu;
    if (t == HWLOC_OBJ_OSDEV_OPENFABRICS || t == HWLOC_OBJ_OSDEV_NETWORK) return DevKind::kNic;
  }
  // Files without OS devices: NVIDIA display/3D controllers are GPUs, IB functions NICs.
  if (a.vendor_id == 0x10de && (a.class_id == 0x0300 || a.class_id == 0x0302)) return DevKind::kGpu;
  if (a.class_id == 0x0207 || a.class_id == 0x0c06) return DevKind::kNic;
  // An Ethernet function without a netdev (SR-IOV VF, no driver) cannot carry traffic.
  if (a.class_id == 0x0200 && !anyOs) return DevKind::kEthNoOs;
  return DevKind::kNone;
}

std::string mapArch(const std::string& a) {
  if (a == "aarch64" || a == "arm64") return "arm64";
  if (a.rfind("ppc64", 0) == 0) return "ppc64";
  return a;
}

int64_t readSysfsInt(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[64] = {};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  if (n == 0) return -1;
  return std::strtoll(buf, nullptr, 10);
}

// Live machines only: the port speed in Mb/s from sysfs (-1 when unknown or link down).
int64_t liveSpeedMbps(const std::string& name, bool rdma) {
  if (rdma) {
    int64_t gbs = readSysfsInt("/sys/class/infiniband/" + name + "/ports/1/rate");  // "100 Gb/sec (4X EDR)"
    return gbs > 0 ? gbs * 1000 : -1;
  }
  int64_t mbs = readSysfsInt("/sys/class/net/" + name + "/speed");
  return mbs > 0 ? mbs : -1;
}

class Importer {
 public:
  Importer(hwloc_topology_t t, bool live) : t_(t), live_(live) {}

  Result<SystemBuilder> run() {
    cpus();
    int ethSkipped = 0;
    for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(t_, pci)) != nullptr;) {
      switch (classify(pci)) {
        case DevKind::kGpu: gpu(pci); break;
        case DevKind::kNic: nic(pci); break;
        case DevKind::kNvSwitch: b_.addNvSwitch(busIdOf(pci->attr->pcidev)); break;
        case DevKind::kEthNoOs: ++ethSkipped; break;
        case DevKind::kNone: break;
      }
    }
    if (ethSkipped > 0) {
      b_.addNote(format("hwloc: %d Ethernet functions without a network device (SR-IOV VFs?) left out", ethSkipped));
    }
    nvlinks();
    return std::move(b_);
  }

 private:
  void cpus() {
    std::string arch = mapArch(info(hwloc_get_root_obj(t_), "Architecture"));
    hwloc_obj_t firstPkg = hwloc_get_obj_by_type(t_, HWLOC_OBJ_PACKAGE, 0);
    std::vector<hwloc_obj_t> numas;  // by OS index, so CPU i is NUMA node i where possible
    for (hwloc_obj_t n = nullptr; (n = hwloc_get_next_obj_by_type(t_, HWLOC_OBJ_NUMANODE, n)) != nullptr;) numas.push_back(n);
    std::sort(numas.begin(), numas.end(), [](hwloc_obj_t a, hwloc_obj_t b) { return a->os_index < b->os_index; });
    for (hwloc_obj_t numa : numas) {
      hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t_, HWLOC_OBJ_PACKAGE, numa);
      if (pkg == nullptr) pkg = firstPkg;
      CpuAttrs c;
      c.numaId = static_cast<int>(numa->os_index);
      std::vector<int> list;
      // A cpuset beyond kMaxCpuId (or infinite) would expand bit by bit; leave it unknown.
      if (numa->cpuset != nullptr && hwloc_bitmap_weight(numa->cpuset) >= 0 &&
          hwloc_bitmap_last(numa->cpuset) <= kMaxCpuId) {
        int i;
        hwloc_bitmap_foreach_begin(i, numa->cpuset) list.push_back(i);
        hwloc_bitmap_foreach_end();
      }
      c.affinity = formatAffinity(list);
      c.arch = arch;
      c.vendor = info(pkg, "CPUVendor");
      std::string fam = info(pkg, "CPUFamilyNumber"), model = info(pkg, "CPUModelNumber");
      if (!fam.empty()) c.familyId = std::atoi(fam.c_str());
      if (!model.empty()) c.modelId = std::atoi(model.c_str());
      cpuByNuma_[numa->os_index] = b_.addCpu(std::move(c));
    }
    if (cpuByNuma_.empty()) {
      CpuAttrs c;
      c.numaId = 0;
      c.arch = arch;
      cpuByNuma_[0] = b_.addCpu(std::move(c));
    }
  }

  int cpuFor(hwloc_obj_t dev) {
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(t_, dev);
    int fallback = cpuByNuma_.begin()->second;
    if (anc == nullptr || anc->nodeset == nullptr || hwloc_bitmap_iszero(anc->nodeset)) return fallback;
    int first = hwloc_bitmap_first(anc->nodeset);
    if (hwloc_bitmap_weight(anc->nodeset) > 1) {
      char set[256];
      hwloc_bitmap_list_snprintf(set, sizeof set, anc->nodeset);
      b_.addNote(format("hwloc: %s is local to NUMA nodes %s; placed under NUMA node %d",
                        busIdOf(dev->attr->pcidev).c_str(), set, first));
    }
    auto it = cpuByNuma_.find(static_cast<unsigned>(first));
    return it == cpuByNuma_.end() ? fallback : it->second;
  }

  int made(hwloc_obj_t o, int parent, PciKind kind, PciAttrs attrs) {
    auto it = made_.find(o);
    if (it != made_.end()) return it->second;
    int id = b_.addPci(parent, kind, std::move(attrs));
    made_[o] = id;
    return id;
  }

  // Creates the host bridge and switch nodes above a device; returns its parent node.
  int ancestors(hwloc_obj_t dev) {
    std::vector<hwloc_obj_t> switches;  // nearest first
    hwloc_obj_t cur = dev;
    for (;;) {
      hwloc_obj_t p1 = cur->parent, p2 = p1 != nullptr ? p1->parent : nullptr;
      if (!isPciBridge(p1) || !isPciBridge(p2)) break;
      switches.push_back(p2);
      cur = p2;
    }
    hwloc_obj_t hb = nullptr;
    for (hwloc_obj_t o = cur->parent; o != nullptr && hwloc_obj_type_is_io(o->type); o = o->parent)
      if (isHostBridge(o)) hb = o;
    int parent = cpuFor(dev);
    if (hb != nullptr) {
      PciAttrs a;
      a.busId = format("%04x:%02x", static_cast<unsigned>(hb->attr->bridge.downstream.pci.domain),
                       hb->attr->bridge.downstream.pci.secondary_bus);
      parent = made(hb, parent, PciKind::kHostBridge, std::move(a));
    }
    for (auto it = switches.rbegin(); it != switches.rend(); ++it)
      parent = made(*it, parent, PciKind::kSwitch, pciAttrsOf((*it)->attr->bridge.upstream.pci));
    return parent;
  }

  void gpu(hwloc_obj_t pci) {
    GpuAttrs g;
    std::string model;
    for (hwloc_obj_t o = pci->io_first_child; o != nullptr; o = o->next_sibling) {
      if (o->type != HWLOC_OBJ_OS_DEVICE || o->name == nullptr) continue;
      bool nvml = startsWith(o->name, "nvml"), cuda = startsWith(o->name, "cuda");
      if (!nvml && !cuda) continue;
      g.present = true;
      if (nvml || g.dev < 0) g.dev = std::atoi(o->name + 4);  // NVML's index wins over CUDA's
      if (model.empty()) model = info(o, "GPUModel");
    }
    g.sm = smFromGpuModel(model);
    int id = b_.addGpu(ancestors(pci), pciAttrsOf(pci->attr->pcidev), std::move(g));
    gpuByObj_[pci] = id;
  }

  void nic(hwloc_obj_t pci) {
    NicAttrs n;
    for (int pass = 0; pass < 2 && n.nets.empty(); ++pass) {
      // RDMA devices first (what the IB transport opens); netdevs when there are none.
      auto want = pass == 0 ? HWLOC_OBJ_OSDEV_OPENFABRICS : HWLOC_OBJ_OSDEV_NETWORK;
      for (hwloc_obj_t o = pci->io_first_child; o != nullptr; o = o->next_sibling) {
        if (o->type != HWLOC_OBJ_OS_DEVICE || o->attr->osdev.type != want || o->name == nullptr) continue;
        NetPort p;
        p.name = o->name;
        p.dev = netDev_++;
        p.port = pass == 0 ? 1 : 0;
        std::string guid = info(o, "NodeGUID");
        guid.erase(std::remove(guid.begin(), guid.end(), ':'), guid.end());
        if (!guid.empty()) {
          p.guid = std::strtoull(guid.c_str(), nullptr, 16);
          p.hasGuid = true;
        }
        if (live_) p.speedMbps = liveSpeedMbps(p.name, pass == 0);
        n.nets.push_back(std::move(p));
      }
    }
    n.present = !n.nets.empty();
    b_.addNic(ancestors(pci), pciAttrsOf(pci->attr->pcidev), std::move(n));
  }

  int gpuOf(hwloc_obj_t o) {
    if (o != nullptr && o->type == HWLOC_OBJ_OS_DEVICE) o = o->parent;
    auto it = gpuByObj_.find(o);
    return it == gpuByObj_.end() ? -1 : it->second;
  }

  // hwloc's NVML backend: per-peer MB/s, peers are GPUs, NVSwitch PCI devices or Packages.
  void nvlinks() {
    unsigned nr = 0;
    if (hwloc_distances_get_by_name(t_, "NVLinkBandwidth", &nr, nullptr, 0) != 0 || nr == 0) return;
    std::vector<hwloc_distances_s*> ds(nr);
    if (hwloc_distances_get_by_name(t_, "NVLinkBandwidth", &nr, ds.data(), 0) != 0) return;
    for (unsigned k = 0; k < nr; ++k) {
      const hwloc_distances_s* d = ds[k];
      for (unsigned i = 0; i < d->nbobjs; ++i) {
        int g = gpuOf(d->objs[i]);
        if (g < 0) continue;
        for (unsigned j = 0; j < d->nbobjs; ++j) {
          uint64_t v = d->values[i * d->nbobjs + j];
          if (i != j && v > 0) addNvlink(g, d->objs[j], v);
        }
      }
      hwloc_distances_release(t_, ds[k]);
    }
  }

  void addNvlink(int g, hwloc_obj_t peer, uint64_t mbs) {
    NvLinkSpec s;
    if (int pg = gpuOf(peer); pg >= 0) {
      s.target = b_.node(pg).pci.busId;
      s.tclass = kClassGpu;
    } else if (peer->type == HWLOC_OBJ_PCI_DEVICE && classify(peer) == DevKind::kNvSwitch) {
      s.target = busIdOf(peer->attr->pcidev);
      s.tclass = kClassNvs;
    } else if (peer->type == HWLOC_OBJ_PACKAGE || peer->type == HWLOC_OBJ_NUMANODE) {
      s.tclass = kClassCpu;  // GPU <-> CPU NVLink (IBM NPU): NCCL links it to the local CPU
    } else {
      b_.addNote(format("hwloc: NVLink peer of type %s ignored", hwloc_obj_type_string(peer->type)));
      return;
    }
    uint64_t per = static_cast<uint64_t>(bw::hwlocNvlinkMBs(b_.node(g).gpu.sm));
    s.count = static_cast<int>(std::max<uint64_t>(1, (mbs + per / 2) / per));
    b_.node(g).gpu.nvlinks.push_back(std::move(s));
    b_.node(g).gpu.present = true;
  }

  hwloc_topology_t t_;
  bool live_;
  SystemBuilder b_;
  std::map<unsigned, int> cpuByNuma_;
  std::map<hwloc_obj_t, int> made_;
  std::map<hwloc_obj_t, int> gpuByObj_;
  int netDev_ = 0;
};

struct Topology {
  hwloc_topology_t t = nullptr;
  ~Topology() {
    if (t != nullptr) hwloc_topology_destroy(t);
  }
};

// xml: the checked text of an XML export (`what` names it), or nullptr for this machine.
Result<SystemBuilder> load(const std::string* xml, const std::string& what) {
  Topology topo;
  if (hwloc_topology_init(&topo.t) != 0) return ErrnoError(errno, "hwloc_topology_init failed");
  // hwloc gets the very text snccl checked (hwloc_check.h), never the path again.
  if (xml != nullptr && hwloc_topology_set_xmlbuffer(topo.t, xml->c_str(), static_cast<int>(xml->size() + 1)) != 0) {
    return ErrnoError(errno, "hwloc cannot use %s as XML input", what.c_str());
  }
  // Live: hwloc's linux component reads the PCI tree from sysfs; its "pci" plugin
  // (libpciaccess) finds nothing more here, is slower and leaks on every load.
  if (xml == nullptr) hwloc_topology_set_components(topo.t, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
  // The default I/O filter (KEEP_NONE) would drop every PCI device, even from XML.
  hwloc_topology_set_io_types_filter(topo.t, xml != nullptr ? HWLOC_TYPE_FILTER_KEEP_ALL
                                                            : HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo.t) != 0) {
    return ErrnoError(errno, "hwloc could not load the topology of %s", what.c_str());
  }
  return Importer(topo.t, xml == nullptr).run();
}

}  // namespace

Result<SystemBuilder> hwlocBuilderLive() { return load(nullptr, "this machine"); }

#else  // !SNCCL_HAVE_HWLOC

bool hwlocAvailable() { return false; }

std::string hwlocDescription() { return "built without hwloc"; }

namespace {
Result<SystemBuilder> load(const std::string*, const std::string& what) {
  return InvalidUsage("%s: this snccl was built without hwloc (libhwloc-dev), it cannot read hwloc XML", what.c_str());
}
}  // namespace

Result<SystemBuilder> hwlocBuilderLive() { return InvalidUsage("this snccl was built without hwloc"); }

#endif

Result<SystemBuilder> hwlocBuilderFromXml(const std::string& path) {
  // Our own parse and checks first: hwloc's errors carry no line numbers and go to
  // stderr, and some malformed files crash it (hwloc_check.h).
  SNCCL_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  SNCCL_ASSIGN_OR_RETURN(XmlElement root, parseXml(text, path));
  if (root.name != "topology") {
    return InvalidArgument("%s:%d: root element is <%s>, expected hwloc's <topology>", path.c_str(), root.line,
                           root.name.c_str());
  }
  SNCCL_TRY(checkHwlocXml(root, path));
  return load(&text, path);
}

Result<System> systemFromHwlocXml(const std::string& path) {
  SNCCL_ASSIGN_OR_RETURN(SystemBuilder b, hwlocBuilderFromXml(path));
  return std::move(b).build();
}

}  // namespace snccl::topo
