// NVML through dlopen with self-declared types (signatures of NVML API 13; structure
// layouts are part of NVML's ABI and have not changed for the calls used here).
#include "topology/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>

namespace snccl::topo {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct NvmlDeviceOpaque*;
using nvmlEnableState_t = int;

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct nvmlFieldValue_t {
  unsigned fieldId;
  unsigned scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  union {
    double d;
    int si;
    unsigned ui;
    unsigned long ul;
    unsigned long long ull;
    long long sll;
    unsigned short us;
  } value;
};

constexpr int kNvlinkCapP2pSupported = 0;
constexpr unsigned kFieldNvlinkState = 165;  // NVML_FI_DEV_NVLINK_GET_STATE
constexpr int kRemoteGpu = 0, kRemoteIbmNpu = 1, kRemoteSwitch = 2;
constexpr int kP2pRead = 0, kP2pWrite = 1;
constexpr int64_t kClassGpu = 0x030200, kClassNvs = 0x068000, kClassCpu = 0x068001;
constexpr const char* kSentinel = "fffffff:ffff:ff";

struct Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*errorString)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driverVersion)(char*, unsigned) = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*pciInfo)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*cc)(nvmlDevice_t, int*, int*) = nullptr;
  nvmlReturn_t (*linkCap)(nvmlDevice_t, unsigned, int, unsigned*) = nullptr;
  nvmlReturn_t (*linkState)(nvmlDevice_t, unsigned, nvmlEnableState_t*) = nullptr;
  nvmlReturn_t (*fields)(nvmlDevice_t, int, nvmlFieldValue_t*) = nullptr;
  nvmlReturn_t (*remoteType)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*remotePci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*p2pStatus)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;
};

template <class F>
void sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
}

void loadApi(void* lib, Api* a) {
  sym(lib, "nvmlInit_v2", &a->init);
  sym(lib, "nvmlShutdown", &a->shutdown);
  sym(lib, "nvmlErrorString", &a->errorString);
  sym(lib, "nvmlSystemGetDriverVersion", &a->driverVersion);
  sym(lib, "nvmlDeviceGetCount_v2", &a->count);
  sym(lib, "nvmlDeviceGetHandleByIndex_v2", &a->handle);
  sym(lib, "nvmlDeviceGetPciInfo_v3", &a->pciInfo);
  sym(lib, "nvmlDeviceGetName", &a->name);
  sym(lib, "nvmlDeviceGetCudaComputeCapability", &a->cc);
  sym(lib, "nvmlDeviceGetNvLinkCapability", &a->linkCap);
  sym(lib, "nvmlDeviceGetNvLinkState", &a->linkState);
  sym(lib, "nvmlDeviceGetFieldValues", &a->fields);
  sym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &a->remoteType);
  sym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &a->remotePci);
  sym(lib, "nvmlDeviceGetP2PStatus", &a->p2pStatus);
}

int maxLinks(int sm) {
  if (sm < 60) return 0;
  if (sm < 70) return 4;
  if (sm < 80) return 6;
  if (sm < 90) return 12;
  return 18;
}

bool printable(const char* s) {
  if (*s == '\0') return false;
  for (; *s; ++s)
    if (!std::isprint(static_cast<unsigned char>(*s))) return false;
  return true;
}

class Prober {
 public:
  Prober(const Api& api, NvmlProbe* out) : a_(api), out_(out) {}

  std::string err(nvmlReturn_t r) const {
    const char* s = a_.errorString != nullptr ? a_.errorString(r) : nullptr;
    return s != nullptr ? format("%s (%d)", s, r) : format("NVML error %d", r);
  }

  void run(unsigned count) {
    std::vector<nvmlDevice_t> handles;
    for (unsigned i = 0; i < count; ++i) {
      nvmlDevice_t d = nullptr;
      nvmlPciInfo_t pci{};
      nvmlReturn_t r = a_.handle(i, &d);
      if (r == 0) r = a_.pciInfo(d, &pci);
      if (r != 0) {
        out_->notes.push_back(format("NVML device %u: %s; skipped", i, err(r).c_str()));
        continue;
      }
      NvmlGpu g;
      g.index = static_cast<int>(i);
      g.busId = normalizeBusId(pci.busId);
      char name[96] = {};
      if (a_.name != nullptr && a_.name(d, name, sizeof name) == 0) g.name = name;
      int major = 0, minor = 0;
      if (a_.cc != nullptr && a_.cc(d, &major, &minor) == 0) g.sm = major * 10 + minor;
      links(d, &g);
      out_->gpus.push_back(std::move(g));
      handles.push_back(d);
    }
    classifyUnknownTargets();
    p2p(handles);
  }

 private:
  bool linkActive(nvmlDevice_t d, const NvmlGpu& g, unsigned l, bool* active) {
    nvmlEnableState_t st = 0;
    nvmlReturn_t r = a_.linkState != nullptr ? a_.linkState(d, l, &st) : -1;
    if (r != 0 && a_.fields != nullptr) {  // newer GPUs report link state as a field value
      nvmlFieldValue_t f{};
      f.fieldId = kFieldNvlinkState;
      f.scopeId = l;
      r = a_.fields(d, 1, &f);
      if (r == 0) r = f.nvmlReturn;
      st = static_cast<nvmlEnableState_t>(f.value.ui);
    }
    if (r != 0) {
      out_->notes.push_back(format("GPU %s NVLink %u: state query failed: %s; link not used", g.busId.c_str(), l,
                                   err(r).c_str()));
      return false;
    }
    *active = st != 0;
    return true;
  }

  void links(nvmlDevice_t d, NvmlGpu* g) {
    std::map<std::string, NvLinkSpec> byTarget;
    for (unsigned l = 0; l < static_cast<unsigned>(maxLinks(g->sm)); ++l) {
      unsigned cap = 0;
      if (a_.linkCap == nullptr || a_.linkCap(d, l, kNvlinkCapP2pSupported, &cap) != 0 || cap == 0) continue;
      bool active = false;
      if (!linkActive(d, *g, l, &active)) continue;
      if (!active) {
        out_->notes.push_back(format("GPU %s NVLink %u: inactive", g->busId.c_str(), l));
        continue;
      }
      int type = -1;
      if (a_.remoteType != nullptr && a_.remoteType(d, l, &type) != 0) type = -1;
      NvLinkSpec s;
      if (type == kRemoteSwitch) {
        s = {kSentinel, 0, kClassNvs};  // switches: no remote PCI query (NCCL does the same)
      } else {
        nvmlPciInfo_t rp{};
        nvmlReturn_t r = a_.remotePci != nullptr ? a_.remotePci(d, l, &rp) : -1;
        if (r != 0) {
          out_->notes.push_back(format("GPU %s NVLink %u: remote PCI query failed: %s; link not used",
                                       g->busId.c_str(), l, err(r).c_str()));
          continue;
        }
        std::string bus = printable(rp.busId) ? normalizeBusId(rp.busId) : "";
        s.target = bus.empty() ? kSentinel : bus;
        s.tclass = bus.empty() ? kClassNvs : type == kRemoteGpu ? kClassGpu : type == kRemoteIbmNpu ? kClassCpu : -1;
      }
      NvLinkSpec& acc = byTarget[s.target];
      if (acc.count == 0) acc = s;
      ++acc.count;
    }
    for (auto& [t, s] : byTarget) g->nvlinks.push_back(std::move(s));
  }

  // A peer of unknown type is a GPU if NVML listed that bus id, else an NVSwitch (NCCL's
  // default for unknown peers).
  void classifyUnknownTargets() {
    for (NvmlGpu& g : out_->gpus) {
      for (NvLinkSpec& s : g.nvlinks) {
        if (s.tclass != -1) continue;
        bool gpu = std::any_of(out_->gpus.begin(), out_->gpus.end(), [&](const NvmlGpu& o) { return o.busId == s.target; });
        s.tclass = gpu ? kClassGpu : kClassNvs;
      }
    }
  }

  void p2p(const std::vector<nvmlDevice_t>& h) {
    if (a_.p2pStatus == nullptr) return;
    for (size_t i = 0; i < h.size(); ++i) {
      for (size_t j = 0; j < h.size(); ++j) {
        if (i == j) continue;
        int rd = -1, wr = -1;
        nvmlReturn_t r1 = a_.p2pStatus(h[i], h[j], kP2pRead, &rd);
        nvmlReturn_t r2 = a_.p2pStatus(h[i], h[j], kP2pWrite, &wr);
        if (r1 == 0 && r2 == 0 && rd == 0 && wr == 0) continue;
        out_->gpus[i].p2pBlocked.push_back(out_->gpus[j].busId);
      }
    }
  }

  const Api& a_;
  NvmlProbe* out_;
};

}  // namespace

NvmlProbe probeNvml(const char* library) {
  NvmlProbe out;
  void* lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    out.message = format("NVML unavailable: %s", e != nullptr ? e : library);
    return out;
  }
  Api api;
  loadApi(lib, &api);
  if (api.init == nullptr || api.shutdown == nullptr || api.count == nullptr || api.handle == nullptr ||
      api.pciInfo == nullptr) {
    out.message = format("NVML unavailable: %s lacks nvmlInit_v2/nvmlDeviceGetCount_v2/... entry points", library);
    dlclose(lib);
    return out;
  }
  Prober prober(api, &out);
  nvmlReturn_t r = api.init();
  if (r != 0) {
    out.message = format("NVML unavailable: nvmlInit_v2 failed: %s", prober.err(r).c_str());
    dlclose(lib);
    return out;
  }
  unsigned count = 0;
  r = api.count(&count);
  if (r != 0) {
    out.message = format("NVML: nvmlDeviceGetCount_v2 failed: %s", prober.err(r).c_str());
  } else {
    out.available = true;
    char ver[96] = {};
    if (api.driverVersion != nullptr && api.driverVersion(ver, sizeof ver) == 0) {
      out.message = format("NVML driver %s, %u GPUs", ver, count);
    } else {
      out.message = format("NVML: %u GPUs", count);
    }
    prober.run(count);
  }
  api.shutdown();
  dlclose(lib);
  return out;
}

void mergeNvml(const NvmlProbe& probe, SystemBuilder* b) {
  for (const NvmlGpu& g : probe.gpus) {
    int id = b->findByBusId(g.busId);
    if (id < 0) {
      int cpu = -1;
      for (size_t i = 0; i < b->nodes().size() && cpu < 0; ++i)
        if (b->nodes()[i].type == NodeType::kCpu) cpu = static_cast<int>(i);
      if (cpu < 0) cpu = b->addCpu(CpuAttrs{});
      PciAttrs p;
      p.busId = g.busId;
      p.classCode = kClassGpu;
      p.vendor = 0x10de;
      id = b->addGpu(cpu, std::move(p), GpuAttrs{});
      b->addNote(format("GPU %s (NVML %d) not found by hwloc; placed under the first CPU", g.busId.c_str(), g.index));
    }
    Node& n = b->node(id);
    n.type = NodeType::kGpu;
    n.gpu.present = true;
    n.gpu.dev = g.index;
    if (g.sm > 0) n.gpu.sm = g.sm;
    n.gpu.nvlinks = g.nvlinks;
    n.p2pBlockedPeers = g.p2pBlocked;
  }
  for (const std::string& note : probe.notes) b->addNote(note);
}

}  // namespace snccl::topo
