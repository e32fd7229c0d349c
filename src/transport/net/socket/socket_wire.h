// Wire format of the socket net: handle, per-socket hello, control frames, and the rule
// that splits a message over the data streams.
//
// A connection is one control socket plus `nstreams` data sockets, all opened by the
// sender. Each socket starts with a Hello that proves the opener read the listen handle
// (random nonce) and says which socket it is. Control frames go both ways: the receiver
// sends CTS (a posted receive: the sender's only credit; some may be held back and sent
// in a batch, socket_conn.h), the sender sends MSG (size, tag, imm; small payloads
// inline); either end sends BYE on a clean close or ABORT with an error code. Message
// payloads go on the data streams; both ends compute the same split from (message
// sequence number, size, nstreams), so data carries no headers, and each stream carries
// its parts in message order. All integers are little-endian (the only
// byte order snccl builds for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/socket.h"

namespace snccl::net::sockwire {

constexpr uint32_t kMagic = 0x736e4e54;  // "sNNT"
constexpr uint16_t kVersion = 5;         // 2: kInlineMax 256 -> 4096; 3: -> 65536; 4: 32-bit imm; 5: rails
constexpr int kMaxStreams = 64;          // NCCL's limit on threads x sockets per thread
constexpr int kMaxRails = 4;             // interfaces one connection spreads over
// Payloads up to this size ride in the MSG frame: one write and one read per message
// instead of a frame plus a stream part, each waited for. Over TCP between namespaces a
// 512 B AllReduce took 50-60 us with 256, against 30 us for 64 B; with 4096, sendrecv of
// 8-64 KiB took 40-60 us against 25-45 us with 65536 (copying the payload through the
// control buffers costs less than a second socket's system calls and TCP segments).
constexpr size_t kInlineMax = 65536;
constexpr size_t kMinPart = 32 * 1024;   // smaller parts cost more in syscalls than they gain
constexpr size_t kPartAlign = 64;

// Socket i (0: the control socket, or the first path) goes to rail i % nrails: rail 0 is
// `addr`, rail k > 0 has railAddr[k - 1] (same family and port as `addr`).
struct HandleWire {
  uint32_t magic;
  uint16_t version;
  uint16_t nstreams;
  uint64_t nonce;
  sock::Address::Wire addr;
  uint8_t nrails;
  uint8_t adaptive;     // 1: every socket is a path of a MultipathConn; 0: Conn
  uint16_t reserved;
  uint32_t chunkBytes;  // adaptive: the chunk size both ends use
  uint8_t railAddr[kMaxRails - 1][16];
};
static_assert(sizeof(HandleWire) == 96);

// Bytes of a socket listen handle (net::Handle), as NCCL_NET_HANDLE_MAXSIZE: HandleWire
// and the connect stage (socket_net.cc).
constexpr size_t kHandleBytes = 128;

struct Hello {
  uint32_t magic;
  uint16_t version;
  uint16_t index;  // 0: control socket, 1..nstreams: data stream index-1
  uint64_t nonce;
  uint16_t nstreams;
  uint16_t reserved[3];
};
static_assert(sizeof(Hello) == 24);

enum FrameType : uint32_t { kCts = 1, kMsg = 2, kBye = 3, kAbort = 4 };

struct Frame {
  uint32_t type;
  int32_t tag;
  uint64_t size;  // CTS: posted bytes; MSG: message bytes
  uint32_t imm;   // MSG: the message's imm (Net::isend); ABORT: the sender's abort code
  uint32_t reserved;  // 0
};
static_assert(sizeof(Frame) == 24);

// A record of the adaptive multipath connection (multipath_conn.h), in either direction.
enum MpType : uint16_t {
  kMpChunk = 1,  // sender: a chunk of message `seq` at `offset`; `len` payload bytes follow
  kMpCts = 2,    // receiver: receive number `seq` is posted for `total` bytes with `tag`
  kMpAck = 3,    // receiver: this path delivered `seq` chunks so far; `total`: its steady clock (ns)
  kMpPing = 4,   // sender: answer on this path
  kMpPong = 5,   // receiver: the answer
  kMpDrop = 6,   // either end: path `path` is dead; stop using it
  kMpBye = 7,    // either end: clean close
  kMpAbort = 8,  // either end: failed with code `imm`
};

struct MpRecord {
  uint16_t type;
  uint16_t path;
  uint32_t imm;     // CHUNK: the message's imm; ABORT: the code
  uint64_t seq;
  uint64_t total;   // CHUNK: message bytes; CTS: posted bytes; ACK: the receiver's clock
  uint64_t offset;  // CHUNK: where the payload goes
  int32_t tag;
  uint32_t len;     // CHUNK: payload bytes that follow
};
static_assert(sizeof(MpRecord) == 40);

struct Part {
  int stream;
  size_t offset;
  size_t len;
};

// The checks of what a peer presents, which the other end cannot trust (socket_wire.cc).
// A listen handle (its first sizeof(HandleWire) bytes): "" when a connector can use it (this
// version, at most kMaxStreams streams, 1..kMaxRails rails, an adaptive chunk of 4 KiB to
// 16 MiB); else what is wrong.
std::string handleProblem(const HandleWire& w);
// Whether a socket's greeting is this version's and carries the listener's nonce: what
// tells a peer from a stranger.
inline bool helloHasKey(const Hello& h, uint64_t nonce) {
  return h.magic == kMagic && h.nonce == nonce && h.version == kVersion;
}
// A socket's greeting at a listener of `nonce` and `nstreams` streams: "" when it has the
// key and names one of the nstreams + 1 sockets; else what is wrong.
std::string helloProblem(const Hello& h, uint64_t nonce, int nstreams);

// Splits message number `seq` of `size` bytes over nstreams; writes at most nstreams
// parts and returns their count (0: the payload travels inline). Parts are at least
// kMinPart (but the last), aligned, and start on stream seq % nstreams so that small
// messages spread over all streams.
int splitMessage(uint64_t seq, size_t size, int nstreams, Part* parts);

}  // namespace snccl::net::sockwire
