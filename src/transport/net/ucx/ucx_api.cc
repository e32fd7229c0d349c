// libucp.so.0 and libucs.so.0 through dlopen: the real Ucp table.
#include "transport/net/ucx/ucx_api.h"

#include <dlfcn.h>

#include <mutex>

namespace snccl::net::ucx {

namespace {

template <typename Fn>
bool load(void* lib, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  return *out != nullptr;
}

Result<Ucp> loadUcp() {
  void* ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_GLOBAL);
  if (ucs == nullptr) return SystemError("libucs.so.0 cannot be loaded (%s); install UCX (libucx0)", dlerror());
  void* ucp = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
  if (ucp == nullptr) return SystemError("libucp.so.0 cannot be loaded (%s); install UCX (libucx0)", dlerror());
  Ucp u{};
  const char* missing = nullptr;
  auto need = [&](void* lib, const char* name, auto* out) {
    if (missing == nullptr && !load(lib, name, out)) missing = name;
  };
  need(ucp, "ucp_config_read", &u.configRead);
  need(ucp, "ucp_config_release", &u.configRelease);
  need(ucp, "ucp_init_version", &u.initVersion);
  need(ucp, "ucp_cleanup", &u.cleanup);
  need(ucp, "ucp_get_version", &u.getVersion);
  need(ucp, "ucp_worker_create", &u.workerCreate);
  need(ucp, "ucp_worker_destroy", &u.workerDestroy);
  need(ucp, "ucp_worker_get_address", &u.workerGetAddress);
  need(ucp, "ucp_worker_release_address", &u.workerReleaseAddress);
  need(ucp, "ucp_worker_progress", &u.workerProgress);
  need(ucp, "ucp_worker_get_efd", &u.workerGetEfd);
  need(ucp, "ucp_worker_arm", &u.workerArm);
  need(ucp, "ucp_worker_set_am_recv_handler", &u.workerSetAmRecvHandler);
  need(ucp, "ucp_ep_create", &u.epCreate);
  need(ucp, "ucp_ep_close_nbx", &u.epCloseNbx);
  need(ucp, "ucp_ep_flush_nbx", &u.epFlushNbx);
  need(ucp, "ucp_listener_create", &u.listenerCreate);
  need(ucp, "ucp_listener_destroy", &u.listenerDestroy);
  need(ucp, "ucp_listener_query", &u.listenerQuery);
  need(ucp, "ucp_listener_reject", &u.listenerReject);
  need(ucp, "ucp_am_send_nbx", &u.amSendNbx);
  need(ucp, "ucp_tag_send_nbx", &u.tagSendNbx);
  need(ucp, "ucp_tag_recv_nbx", &u.tagRecvNbx);
  need(ucp, "ucp_tag_recv_request_test", &u.tagRecvRequestTest);
  need(ucp, "ucp_request_check_status", &u.requestCheckStatus);
  need(ucp, "ucp_request_cancel", &u.requestCancel);
  need(ucp, "ucp_request_free", &u.requestFree);
  need(ucs, "ucs_status_string", &u.statusString);
  if (missing != nullptr)
    return SystemError("UCX lacks %s (snccl needs UCX 1.10 or later, for the nbx calls and active messages)", missing);
  return u;
}

}  // namespace

Result<const Ucp*> systemUcp() {
  static std::once_flag once;
  static Result<Ucp> loaded = Status(ncclInternalError, "unset");
  std::call_once(once, [] { loaded = loadUcp(); });
  if (!loaded.ok()) return loaded.status();
  return &loaded.value();
}

}  // namespace snccl::net::ucx
