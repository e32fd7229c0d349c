// Writing a communicator's flight recorder (core/flight_recorder.h) out as text, and the
// moments it happens: the communicator's first error (which an abort also is), a signal
// (SNCCL_FLIGHT_SIGNAL), or sncclCommDumpFlightRecorder.
//
// The format, one record per line, "key=value" fields, strings in double quotes with a
// backslash before an embedded quote or backslash (sn_doctor's reader,
// tools/flight_doctor.h, parses it; docs/operations.md describes it):
//   snccl-flight 1
//   comm hash=0x... rank=R nranks=N pid=P host="h" reason="..." time_ns=T recorded=K
//   peer rank=R pid=P host="h"                     (one per rank)
//   error code=C culprit=R cause=peer-exited cause_peer=R text="..."   (if any)
//   op id=.. seq=.. coll=AllReduce count=.. type=float op=sum root=-1 algo=ring
//      state=done start_ns=.. end_ns=.. steps=D/T wait_peer=-1 wait=data wait_msg=..
//      send_peer=-1 recv_peer=-1 nsend=0 nrecv=0   (one line per operation, oldest first)
//   end
#pragma once

#include <string>

#include "common/status.h"

struct ncclComm;

namespace snccl::flight {

// Writes `comm`'s dump to `path` (through a temporary file renamed into place, so a
// reader never sees half of one).
Status dumpTo(ncclComm* comm, const std::string& path, const char* reason);
// The file a dump of `comm` goes to in directory `dir`: snccl-flight-<hash>-r<rank>.txt.
std::string dumpPath(const std::string& dir, const ncclComm& comm);
// Dumps into SNCCL_FLIGHT_DIR, if it is set (a failure to write is logged, not returned).
void dumpToConfiguredDir(ncclComm* comm, const char* reason);

// Live communicators, for SNCCL_FLIGHT_SIGNAL: a signal names none, so the process keeps
// a list. The first registration installs the handler when the variable asks for one.
void registerComm(ncclComm* comm);
void unregisterComm(ncclComm* comm);

}  // namespace snccl::flight
