// The network plugin interface, shaped like NCCL's ncclNet_t (v11), and its registry.
//
// A Net moves whole messages between two processes over one connection pair: the
// receiver listens and hands the listen handle to the sender out of band (the bootstrap);
// the sender connects, the receiver accepts. Both calls are non-blocking: they return
// success with a null comm until the connection is ready. Flow control is receiver
// driven, as in NCCL: a message may only travel into a receive the receiver has posted,
// so isend returns a null request ("no credit yet, retry") until the receiver's irecv is
// known to the sender, and nothing ever arrives unexpected. Messages complete in the
// order they were posted on a comm.
//
// Differences from ncclNet_t, all additive:
//  - `imm`: 32 bits of out-of-band data carried with each message and returned by test()
//    on the receiver, as a verbs RDMA_WRITE_WITH_IMM carries its immediate data (snccl
//    sends the operation signature's digest in it: common/signature_digest.h). A plugin
//    that cannot carry it (an ncclNet_v8+ adapter) says so in Properties::imm, and the
//    net transport then prefixes it to the payload itself (net_entry.h).
//  - pollFds(): descriptors whose readiness means progress may be possible, so the proxy
//    sleeps in poll() instead of spinning over test() as NCCL's proxy does. A plugin with
//    nothing to offer returns false and the proxy polls it on a short timer.
//  - cancelConnect(): frees a half-done connect the caller gives up on.
//  - The listen Handle has as many bytes as the plugin needs, not NCCL's fixed 128 (an
//    adapter copies an ncclNet handle into it).
// Every call returns a Status; nothing throws. A comm is used by one thread at a time.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace snccl::net {

// The slot geometry a net asks for on communicators whose ranks span nodes, in place of
// the parameter table's SNCCL_NET_STEPS and SNCCL_NET_BUFFSIZE defaults (values the user
// set still win). Zero: the table's.
struct SlotDefaults {
  uint32_t steps = 0;
  uint64_t buffBytes = 0;
};

// Pointer kinds a device can send from / receive into (ncclNetProperties_t::ptrSupport).
enum PtrSupport : int { kPtrHost = 0x1, kPtrCuda = 0x2, kPtrDmaBuf = 0x4 };

struct Properties {
  std::string name;        // interface or HCA name
  std::string pciPath;
  // RoCE: the Ethernet interface the port's traffic leaves through (its GID's), so that a
  // topology that knows the interface but not the RDMA device still finds it. "" else.
  std::string netdev;
  uint64_t guid = 0;
  int ptrSupport = kPtrHost;
  int speedMbps = 0;
  int port = 0;
  float latencyUs = 0;
  int maxComms = 0;
  int maxRecvs = 1;        // receives that irecv may group in one request
  size_t maxP2pBytes = 0;  // largest single message
  // Whether isend's imm reaches the receiver's test(). False: the plugin ignores it, and
  // the net transport sends it as the first kImmPrefixBytes of each message instead.
  bool imm = true;
};

// The prefix the net transport puts in front of each message on a plugin without imm:
// the 32-bit imm, then a 32-bit word that keeps the payload 8-byte aligned: 0, or
// kPrefixGoodbye on the message with no payload that a sender closing in order sends
// last, so that the receiver can tell the peer's clean close from a loss on a plugin that
// cannot (Net::peerClosed).
constexpr size_t kImmPrefixBytes = 8;
constexpr uint32_t kPrefixGoodbye = 0x45594221;  // "!BYE"

// The listen handle: opaque bytes that travel from receiver to sender (ConnBlob::payload),
// as many as the plugin needs (ncclNet's are at most 128; a UCX worker address is more):
// listen() sizes and fills them. While connect() is in progress the plugin may keep its
// state in the handle, so the caller keeps it alive and unchanged until connect()
// finishes, fails or is cancelled.
struct Handle {
  std::vector<unsigned char> bytes;
};

// What a plugin's comms derive from; the plugin creates and deletes them (close*).
class Comm {
 public:
  virtual ~Comm() = default;
};
class ListenComm : public Comm {};
class SendComm : public Comm {};
class RecvComm : public Comm {};
class Request {
 public:
  virtual ~Request() = default;
};
class MemHandle {
 public:
  virtual ~MemHandle() = default;
};

// What a comm carried over one rail (Net::railBytes).
struct RailBytes {
  const char* name;  // the rail: a local interface or device; owned by the plugin
  uint64_t bytes;    // payload sent (a send comm) or received (a receive comm)
};

class Net {
 public:
  virtual ~Net() = default;
  virtual const char* name() const = 0;

  // Finds devices; a plugin whose init fails or that has no device is not used.
  virtual Status init() = 0;
  virtual int devices() const = 0;
  virtual Status getProperties(int dev, Properties* props) const = 0;

  virtual Status listen(int dev, Handle* handle, ListenComm** listenComm) = 0;
  // Non-blocking: *sendComm / *recvComm stay null until the connection is ready.
  virtual Status connect(int dev, Handle* handle, SendComm** sendComm) = 0;
  virtual Status accept(ListenComm* listenComm, RecvComm** recvComm) = 0;
  virtual void cancelConnect(Handle* handle) = 0;

  // Memory registration (type: a PtrSupport bit). Host memory needs none on sockets. The
  // net transport registers each ring's slot area with its comm once the comm exists,
  // and the ranges of the communicator's RegCache (reg_cache.h) when a message first
  // uses them; it passes a handle covering [data, data + size) to every isend, irecv and
  // retargetRecv, and deregisters everything before it closes the comm.
  virtual Status regMr(Comm* comm, void* data, size_t size, int type, MemHandle** mh) = 0;
  // Whether isend and irecv accept any host memory without a MemHandle (no registration),
  // so that the executor's buffers may be sent from and received into as they are. When
  // false, only registered ranges are (reg_cache.h); other memory goes through slots.
  virtual bool usesUnregisteredHostMemory() const { return false; }
  virtual Status deregMr(Comm* comm, MemHandle* mh) = 0;
  // Not in ncclNet: the memory at [data, data + size) is being given back (the user's
  // ncclCommDeregister, a scratch block unmapped), while some of its registrations may
  // still be held (comms deregister lazily, net_entry.h). A plugin that shares one
  // registration among regMr calls must not hand those to later calls: memory at the
  // same address may then be other pages. Called from any thread.
  virtual void forgetRange(const void* /*data*/, size_t /*size*/) {}

  // *request is null when the message cannot be started yet (no posted receive at the
  // peer, or too many requests in flight): call again later.
  virtual Status isend(SendComm* comm, void* data, size_t size, int tag, uint32_t imm, MemHandle* mh,
                       Request** request) = 0;
  // Posts n receives (n <= maxRecvs); *request is null when none can be posted now.
  virtual Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int* tags, MemHandle** mhs,
                       Request** request) = 0;
  // Not in ncclNet: asks that the message a posted single receive gets land at `data`
  // instead, if it has exactly `size` bytes; a message of any other size still lands
  // where the receive was posted, so the caller tells where it is from the size test()
  // reports. `mh` registers [data, data + size) on the request's comm (null on a plugin
  // that uses unregistered host memory). True when the plugin will do so; false when it
  // cannot (the default) or the message may already have begun to arrive: then it lands
  // where it was posted.
  virtual bool retargetRecv(Request* /*request*/, void* /*data*/, size_t /*size*/, MemHandle* /*mh*/) {
    return false;
  }
  // Not in ncclNet: irecv of one buffer and retargetRecv(offer, offerBytes, offerMh) of the
  // receive at once, for a plugin where the sender chooses where a message goes (the
  // verbs net writes the offer in front of the credit, so the sender sees both).
  // *offered: what retargetRecv would have returned.
  virtual Status irecvWithOffer(RecvComm* comm, void* data, size_t size, int tag, MemHandle* mh, void* offer,
                                size_t offerBytes, MemHandle* offerMh, Request** request, bool* offered) {
    *offered = false;
    SNCCL_TRY(irecv(comm, 1, &data, &size, &tag, &mh, request));
    *offered = *request != nullptr && retargetRecv(*request, offer, offerBytes, offerMh);
    return OkStatus();
  }
  // Makes received data visible to a device (GPUDirect); a completed no-op on hosts.
  virtual Status iflush(RecvComm* comm, int n, void** data, int* sizes, MemHandle** mhs, Request** request) = 0;
  // Progresses the request's comm. Once *done is set (or an error is returned) the
  // request is gone. sizes[i] / imm: what arrived (receives) or was sent.
  virtual Status test(Request* request, bool* done, size_t* sizes, uint32_t* imm) = 0;

  // Appends the descriptors (and events) to wait for before the next test() can make
  // progress. False when the plugin cannot tell (the caller then polls on a timer).
  virtual bool pollFds(const Comm* comm, std::vector<pollfd>* fds) const = 0;
  // Not in ncclNet: true when the comm owes the peer nothing until the caller posts more
  // (no control or data bytes waiting to be written, no message half read), so nobody
  // needs to test() it until then. The default, "cannot tell", keeps the proxy watching.
  virtual bool quiescent(const Comm* /*comm*/) const { return false; }

  // Closing sends a best-effort goodbye so the peer can tell a clean close from a loss.
  // abortCode != 0 tells the peer this end failed instead: an ncclResult_t in the low 8
  // bits; the bits above are the caller's (snccl: 1 + the rank where the failure
  // started) and reach the peer unchanged, so a failure cascades with its root cause.
  virtual Status closeSend(SendComm* comm, uint32_t abortCode) = 0;
  virtual Status closeRecv(RecvComm* comm, uint32_t abortCode) = 0;
  // The abortCode the peer closed with (0: none, or not known yet).
  virtual uint32_t peerAbortCode(const Comm* comm) const = 0;
  // True once the peer closed this connection in order (its goodbye arrived; no abort, no
  // loss): a receive that fails after it is the consequence of the peer's clean close, as
  // when a rank destroys its communicator while ours still has receives posted for a next
  // operation. Nets that cannot tell return false.
  virtual bool peerClosed(const Comm* comm) const {
    (void)comm;
    return false;
  }
  virtual Status closeListen(ListenComm* comm) = 0;

  // Not in ncclNet: the payload bytes the comm carried so far over each rail (a local
  // interface or device its paths leave through), one entry per rail, for the traffic
  // counters' rail view. The names stay valid while the plugin lives. Called by whoever
  // drives the comm. False: the plugin cannot tell (the connection's link then stands
  // for its one rail).
  virtual bool railBytes(const Comm* /*comm*/, std::vector<RailBytes>* /*out*/) const { return false; }

  // Not in ncclNet: see SlotDefaults. The table's values were chosen on TCP, where every
  // message costs a round of system calls; a net whose messages cost something else says
  // what suits it here.
  virtual SlotDefaults slotDefaults() const { return {}; }
  // Not in ncclNet: whether a test() that finds nothing new costs no system call (a verbs
  // net reads its completion queues from memory it shares with the device). An executor
  // whose operation sends over such a net keeps polling its rings through a wait
  // (SNCCL_NET_POLL_US, CommRunner::pollExtensionNs) instead of sleeping on a wake-up; a
  // net whose every pass is a system call (a socket's recv) would only burn the CPU so.
  virtual bool pollsInUserSpace() const { return false; }
};

// One line of the plugin table.
struct NetDef {
  const char* name;  // matched case-insensitively against SNCCL_NET / NCCL_NET
  const char* help;
  Net* (*instance)();  // the process's instance, created on first use
};

std::span<const NetDef> netPlugins();

// Plugins a test binary adds after the table's (a test that links the static layers and
// defines it: a weak reference, so the shared libraries, which never define it, see
// none). SNCCL_NET picks them by name as it does the table's.
[[gnu::weak, gnu::visibility("hidden")]] std::span<const NetDef> testNetPlugins();

// A short name of an ncclResult_t for messages (the transport layer sits below the API
// that owns ncclGetErrorString).
const char* resultName(int code);

// The Net this process uses: SNCCL_NET's choice, else the first plugin that initialises
// and has a device. The result is initialised, shared and lives until exit.
Result<Net*> defaultNet();

}  // namespace snccl::net
