// A stand-in for libnvidia-ml.so.1 with three canned H100s, loaded by the discovery tests
// through probeNvml(path): 16 links of each GPU go to NVSwitches, GPU0 and GPU1 also
// share a 2-link bridge, GPU2's link 16 fails its state query and link 17 is down, and
// P2P between GPU0 and GPU2 is refused. Only the entry points snccl uses exist.
#include <cstdio>
#include <cstring>

namespace {

struct FakeGpu {
  const char* busId;
};
const FakeGpu kGpus[] = {{"00000000:17:00.0"}, {"00000000:2A:00.0"}, {"00000000:3B:00.0"}};
constexpr unsigned kCount = 3;

struct PciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct FieldValue {
  unsigned fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType, nvmlReturn;
  union {
    unsigned long long ull;
    unsigned ui;
  } value;
};

int indexOf(void* d) {
  for (unsigned i = 0; i < kCount; ++i)
    if (d == &kGpus[i]) return static_cast<int>(i);
  return -1;
}

void fillPci(PciInfo* p, int i) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->busId, sizeof p->busId, "%s", kGpus[i].busId);
}

}  // namespace

extern "C" {

int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int) { return "fake NVML error"; }
int nvmlSystemGetDriverVersion(char* v, unsigned n) {
  std::snprintf(v, n, "999.99-fake");
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = kCount;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (i >= kCount) return 2;
  *d = const_cast<FakeGpu*>(&kGpus[i]);
  return 0;
}
int nvmlDeviceGetPciInfo_v3(void* d, PciInfo* p) {
  int i = indexOf(d);
  if (i < 0) return 2;
  fillPci(p, i);
  return 0;
}
int nvmlDeviceGetName(void*, char* name, unsigned n) {
  std::snprintf(name, n, "NVIDIA H100 80GB HBM3");
  return 0;
}
int nvmlDeviceGetCudaComputeCapability(void*, int* major, int* minor) {
  *major = 9;
  *minor = 0;
  return 0;
}
int nvmlDeviceGetNvLinkCapability(void*, unsigned link, int, unsigned* cap) {
  *cap = link < 18 ? 1 : 0;
  return 0;
}
int nvmlDeviceGetNvLinkState(void* d, unsigned link, int* active) {
  if (indexOf(d) == 2 && link == 16) return 999;
  *active = !(indexOf(d) == 2 && link == 17);
  return 0;
}
int nvmlDeviceGetFieldValues(void* d, int n, FieldValue* v) {
  for (int k = 0; k < n; ++k) v[k].nvmlReturn = 999;  // the fallback fails too
  return 0;
}
int nvmlDeviceGetNvLinkRemoteDeviceType(void* d, unsigned link, int* type) {
  *type = link < 16 ? 2 : 0;  // switch, else GPU
  return 0;
}
int nvmlDeviceGetNvLinkRemotePciInfo_v2(void* d, unsigned link, PciInfo* p) {
  int i = indexOf(d);
  if (i < 0 || link < 16) return 3;  // snccl must not ask for switch links
  fillPci(p, i == 0 ? 1 : 0);
  return 0;
}
int nvmlDeviceGetP2PStatus(void* a, void* b, int, int* status) {
  int i = indexOf(a), j = indexOf(b);
  *status = ((i == 0 && j == 2) || (i == 2 && j == 0)) ? 2 : 0;
  return 0;
}

}  // extern "C"
