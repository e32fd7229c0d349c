// The UCP calls the UCX net makes, as a table of function pointers from libucp.so.0 and
// libucs.so.0, opened with dlopen at run time: a build of snccl runs where UCX is not
// installed, and says why the UCX net is off. ucp_init is an inline wrapper in ucp.h; the
// table holds the exported ucp_init_version it calls, with the API version of the headers
// snccl was built with.
#pragma once

#include <ucp/api/ucp.h>

#include "common/status.h"

namespace snccl::net::ucx {

struct Ucp {
  ucs_status_t (*configRead)(const char* envPrefix, const char* filename, ucp_config_t** config);
  void (*configRelease)(ucp_config_t* config);
  ucs_status_t (*initVersion)(unsigned major, unsigned minor, const ucp_params_t* params, const ucp_config_t* config,
                              ucp_context_h* context);
  void (*cleanup)(ucp_context_h context);
  void (*getVersion)(unsigned* major, unsigned* minor, unsigned* release);

  ucs_status_t (*workerCreate)(ucp_context_h context, const ucp_worker_params_t* params, ucp_worker_h* worker);
  void (*workerDestroy)(ucp_worker_h worker);
  ucs_status_t (*workerGetAddress)(ucp_worker_h worker, ucp_address_t** address, size_t* length);
  void (*workerReleaseAddress)(ucp_worker_h worker, ucp_address_t* address);
  unsigned (*workerProgress)(ucp_worker_h worker);
  ucs_status_t (*workerGetEfd)(ucp_worker_h worker, int* fd);
  ucs_status_t (*workerArm)(ucp_worker_h worker);
  ucs_status_t (*workerSetAmRecvHandler)(ucp_worker_h worker, const ucp_am_handler_param_t* param);

  ucs_status_t (*epCreate)(ucp_worker_h worker, const ucp_ep_params_t* params, ucp_ep_h* ep);
  ucs_status_ptr_t (*epCloseNbx)(ucp_ep_h ep, const ucp_request_param_t* param);
  ucs_status_ptr_t (*epFlushNbx)(ucp_ep_h ep, const ucp_request_param_t* param);

  ucs_status_t (*listenerCreate)(ucp_worker_h worker, const ucp_listener_params_t* params, ucp_listener_h* listener);
  void (*listenerDestroy)(ucp_listener_h listener);
  ucs_status_t (*listenerQuery)(ucp_listener_h listener, ucp_listener_attr_t* attr);
  ucs_status_t (*listenerReject)(ucp_listener_h listener, ucp_conn_request_h request);

  ucs_status_ptr_t (*amSendNbx)(ucp_ep_h ep, unsigned id, const void* header, size_t headerLength, const void* buffer,
                                size_t count, const ucp_request_param_t* param);
  ucs_status_ptr_t (*tagSendNbx)(ucp_ep_h ep, const void* buffer, size_t count, ucp_tag_t tag,
                                 const ucp_request_param_t* param);
  ucs_status_ptr_t (*tagRecvNbx)(ucp_worker_h worker, void* buffer, size_t count, ucp_tag_t tag, ucp_tag_t tagMask,
                                 const ucp_request_param_t* param);
  ucs_status_t (*tagRecvRequestTest)(void* request, ucp_tag_recv_info_t* info);
  ucs_status_t (*requestCheckStatus)(void* request);
  void (*requestCancel)(ucp_worker_h worker, void* request);
  void (*requestFree)(void* request);

  const char* (*statusString)(ucs_status_t status);  // libucs
};

// The libraries, loaded once per process; the error says why they are unusable.
Result<const Ucp*> systemUcp();

}  // namespace snccl::net::ucx
