// Bootstrap internals shared by bootstrap*.cc: the unique id layout, the messages on the
// wire, secret derivation, the root thread and the rank's registration with it.
//
// All ranks of one job run the same build on the same architecture, so structs travel in
// host byte order (addresses and ports stay in network order inside Address::Wire).
// Every connection starts with a Hello that proves knowledge of the secret; the secret is
// random per unique id (or derived from SNCCL_COMM_ID, which is weaker: anyone who knows
// the address can derive it) and, for split children, derived from the parent's.
// The secret is a guard against stray or foreign connections, not cryptography.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/socket.h"
#include "common/status.h"
#include "snccl/nccl.h"

namespace snccl::boot {

using Secret = std::array<uint8_t, 16>;

inline constexpr char kIdMagic[8] = {'S', 'N', 'C', 'C', 'L', 'I', 'D', '1'};
inline constexpr char kHelloMagic[8] = {'S', 'N', 'C', 'C', 'L', 'B', 'T', '1'};

// Sanity limits for sizes read from the network (a corrupt or hostile header must not
// make us allocate gigabytes).
inline constexpr uint32_t kMaxInfoSize = 1u << 20;
inline constexpr int32_t kMaxRanks = 1 << 22;
inline constexpr uint64_t kMaxMessageSize = 1ull << 32;

enum IdFlags : uint32_t {
  kFixedRoot = 1,  // SNCCL_COMM_ID: rank 0 hosts the root at `root` inside init
};

// The 128-byte ncclUniqueId, self-contained (no pointers).
struct IdLayout {
  char magic[8];
  Secret secret;
  uint64_t commHash;  // proves the id in the root handshake
  sock::Address::Wire root;
  uint32_t flags;
};
static_assert(sizeof(IdLayout) <= NCCL_UNIQUE_ID_BYTES);
static_assert(std::is_trivially_copyable_v<IdLayout>);

enum class ConnKind : uint32_t { kRegister = 1, kPeer = 2 };

// First bytes on every connection.
struct Hello {
  char magic[8];
  Secret secret;
  uint64_t commHash;
  int32_t fromRank;
  uint32_t kind;  // ConnKind
};

// Rank -> root, after the Hello; followed by infoSize bytes of info.
struct Registration {
  int32_t rank;
  int32_t nranks;
  uint32_t infoSize;
  uint32_t reserved;
  sock::Address::Wire listen;
};

// Root -> rank: on success followed by nranks x (Address::Wire, info); on failure by
// msgLen bytes of error text.
struct RootReply {
  int32_t code;  // ncclResult_t
  uint32_t msgLen;
  uint64_t commHash;
  int32_t nranks;
  uint32_t infoSize;
};

// Header of every rank-to-rank message.
struct FrameHeader {
  uint32_t tag;
  uint32_t reserved;
  uint64_t size;
};

Status randomBytes(void* out, size_t n);
uint64_t hashBytes(const void* data, size_t n, uint64_t seed);
Secret deriveSecret(const Secret& parent, uint64_t salt);
Secret secretFromString(std::string_view text);

Hello makeHello(const Secret& secret, uint64_t commHash, int fromRank, ConnKind kind);
// Checks a Hello's magic, secret, commHash and kind. A failure message says what was
// wrong; the caller drops the connection and warns with the remote address.
Status checkHello(const Hello& h, const Secret& secret, uint64_t commHash, ConnKind kind);

// How an accepted connection's greeting (a Hello, and for the root the registration) is
// collected (sock::Greeter): concurrently, each within this deadline of its accept, at
// most this many at a time. A real peer sends its greeting right after connecting.
inline constexpr std::chrono::milliseconds kGreetingDeadline{5000};
inline constexpr size_t kMaxPendingRegistrations = 256;  // root
inline constexpr size_t kMaxPendingPeers = 64;           // a rank's listener

// Starts the detached root thread on an already listening socket. It owns its state,
// serves one rendezvous and exits, or gives up after timeoutSec (0: never).
// replyHash is the commHash handed to the ranks.
Status launchRoot(sock::Socket listener, const IdLayout& id, uint64_t replyHash, int timeoutSec);

// What the root hands every rank.
struct RankTable {
  uint64_t commHash = 0;
  std::vector<sock::Address> addrs;
  std::vector<std::byte> infos;  // nranks x infoSize
};

// Connects to the root, registers and waits for the table.
Result<RankTable> registerWithRoot(const IdLayout& id, int rank, int nranks, const sock::Address& listenAddr,
                                   std::span<const std::byte> info, const sock::Waiter& w);

}  // namespace snccl::boot
