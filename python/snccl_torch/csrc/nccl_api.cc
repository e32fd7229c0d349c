// dlopen loader for the NCCL C ABI: one load per process, required symbols fail by name.
#include "nccl_api.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#ifndef SNCCL_TORCH_DEFAULT_LIB
#define SNCCL_TORCH_DEFAULT_LIB "libsnccl.so.0"
#endif

namespace snccl_torch {
namespace {

struct Loaded {
  NcclApi api{};
  std::string error;
  bool ok = false;
};

template <typename F>
bool sym(void* h, const char* name, F* out, bool required, std::string* error) {
  *out = reinterpret_cast<F>(dlsym(h, name));
  if (!*out && required) {
    *error = std::string("symbol ") + name + " not found";
    return false;
  }
  return true;
}

// "$ORIGIN/..." names a file relative to the directory of this extension module (the
// library a wheel carries next to it); other names are passed to dlopen as they are.
std::string resolveOrigin(const std::string& name) {
  static const std::string kOrigin = "$ORIGIN/";
  if (name.rfind(kOrigin, 0) != 0) return name;
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&resolveOrigin), &info) || !info.dli_fname) return name;
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1);
  return dir + name.substr(kOrigin.size());
}

void* openFirst(const std::vector<std::string>& names, std::string* error) {
  std::string tried;
  for (const auto& n : names) {
    if (void* h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    tried += "\n  " + n + ": " + (e ? e : "unknown error");
  }
  *error = "cannot load an NCCL-compatible library (set " + std::string(kLibEnv) + "):" + tried;
  return nullptr;
}

Loaded doLoad() {
  Loaded l;
  std::vector<std::string> names;
  const char* env = std::getenv(kLibEnv);
  if (env && *env) {
    names.emplace_back(env);  // chosen explicitly: no fallback
  } else {
    names = {resolveOrigin(SNCCL_TORCH_DEFAULT_LIB), "libsnccl.so.0", "libnccl.so.2"};
  }
  void* h = openFirst(names, &l.error);
  if (!h) return l;
  NcclApi& a = l.api;
  std::string* e = &l.error;
  bool ok = sym(h, "ncclGetVersion", &a.GetVersion, true, e) &&
            sym(h, "ncclGetUniqueId", &a.GetUniqueId, true, e) &&
            sym(h, "ncclCommInitRank", &a.CommInitRank, true, e) &&
            sym(h, "ncclCommDestroy", &a.CommDestroy, true, e) &&
            sym(h, "ncclCommAbort", &a.CommAbort, false, e) &&
            sym(h, "ncclCommSplit", &a.CommSplit, false, e) &&
            sym(h, "ncclGetErrorString", &a.GetErrorString, true, e) &&
            sym(h, "ncclGetLastError", &a.GetLastError, false, e) &&
            sym(h, "ncclGroupStart", &a.GroupStart, true, e) &&
            sym(h, "ncclGroupEnd", &a.GroupEnd, true, e) &&
            sym(h, "ncclAllReduce", &a.AllReduce, true, e) &&
            sym(h, "ncclBroadcast", &a.Broadcast, true, e) &&
            sym(h, "ncclReduce", &a.Reduce, true, e) &&
            sym(h, "ncclAllGather", &a.AllGather, true, e) &&
            sym(h, "ncclReduceScatter", &a.ReduceScatter, true, e) &&
            sym(h, "ncclAlltoAll", &a.AlltoAll, false, e) &&
            sym(h, "ncclSend", &a.Send, true, e) && sym(h, "ncclRecv", &a.Recv, true, e) &&
            sym(h, "ncclRedOpCreatePreMulSum", &a.RedOpCreatePreMulSum, false, e) &&
            sym(h, "ncclRedOpDestroy", &a.RedOpDestroy, false, e) &&
            sym(h, "ncclCommRegister", &a.CommRegister, false, e) &&
            sym(h, "ncclCommDeregister", &a.CommDeregister, false, e) &&
            sym(h, "sncclAllReduceQuantized", &a.AllReduceQuantized, false, e) &&
            sym(h, "sncclStreamCreate", &a.StreamCreate, false, e) &&
            sym(h, "sncclStreamSynchronize", &a.StreamSynchronize, false, e) &&
            sym(h, "sncclStreamQuery", &a.StreamQuery, false, e) &&
            sym(h, "sncclStreamDestroy", &a.StreamDestroy, false, e);
  if (!ok) return l;
  if (!a.StreamCreate || !a.StreamSynchronize || !a.StreamQuery || !a.StreamDestroy)
    a.StreamCreate = nullptr;  // host streams: all or none
  if (a.GetVersion(&a.version) != ncclSuccess) a.version = 0;
  link_map* lm = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) a.path = lm->l_name;
  l.ok = true;
  return l;
}

}  // namespace

const NcclApi* loadNcclApi(std::string* error) {
  static std::once_flag once;
  static Loaded* loaded = nullptr;  // set once, never mutated after
  std::call_once(once, [] { loaded = new Loaded(doLoad()); });
  if (!loaded->ok) {
    *error = loaded->error;
    return nullptr;
  }
  return &loaded->api;
}

}  // namespace snccl_torch
