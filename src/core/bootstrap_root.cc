// The bootstrap root thread, the rank side of registration, and the wire helpers.
#include <poll.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "common/greeter.h"
#include "common/log.h"
#include "core/bootstrap_wire.h"

namespace snccl::boot {

// ---- Wire helpers -------------------------------------------------------------------

Status randomBytes(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t k = getrandom(p, n, 0);
    if (k < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "getrandom");
    }
    p += k;
    n -= static_cast<size_t>(k);
  }
  return OkStatus();
}

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer: spreads every input bit
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t hashBytes(const void* data, size_t n, uint64_t seed) {
  auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = mix64(seed ^ 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < n; ++i) h = mix64(h ^ (uint64_t(p[i]) << ((i % 8) * 8)) ^ i);
  return mix64(h ^ n);
}

Secret deriveSecret(const Secret& parent, uint64_t salt) {
  uint64_t a = hashBytes(parent.data(), parent.size(), salt ^ 0x5eed0001ull);
  uint64_t b = hashBytes(parent.data(), parent.size(), mix64(salt) ^ 0x5eed0002ull);
  Secret out;
  std::memcpy(out.data(), &a, 8);
  std::memcpy(out.data() + 8, &b, 8);
  return out;
}

Secret secretFromString(std::string_view text) {
  Secret zero{};
  return deriveSecret(zero, hashBytes(text.data(), text.size(), 0xc0ffeeull));
}

Hello makeHello(const Secret& secret, uint64_t commHash, int fromRank, ConnKind kind) {
  Hello h{};
  std::memcpy(h.magic, kHelloMagic, sizeof h.magic);
  h.secret = secret;
  h.commHash = commHash;
  h.fromRank = fromRank;
  h.kind = static_cast<uint32_t>(kind);
  return h;
}

Status checkHello(const Hello& h, const Secret& secret, uint64_t commHash, ConnKind kind) {
  if (std::memcmp(h.magic, kHelloMagic, sizeof h.magic) != 0)
    return InvalidUsage("bad magic (not an snccl bootstrap connection)");
  // Compare without an early exit so timing does not reveal how much of a guess matched.
  uint8_t diff = 0;
  for (size_t i = 0; i < secret.size(); ++i) diff |= uint8_t(h.secret[i] ^ secret[i]);
  if (diff != 0) return InvalidUsage("wrong secret (not a member of this communicator)");
  if (h.commHash != commHash)
    return InvalidUsage("communicator hash %016llx, expected %016llx", (unsigned long long)h.commHash,
                        (unsigned long long)commHash);
  if (h.kind != static_cast<uint32_t>(kind))
    return InvalidUsage("connection kind %u, expected %u", h.kind, static_cast<uint32_t>(kind));
  return OkStatus();
}

// ---- Root ---------------------------------------------------------------------------

namespace {

// One rendezvous: collects registrations, validates them, answers everyone, exits.
// Registrations arrive through a Greeter, so they are read concurrently and a stranger
// that connects and stays silent (or sends part of a registration) delays no rank.
class Root {
 public:
  Root(sock::Socket listener, const IdLayout& id, uint64_t replyHash, int timeoutSec)
      : listener_(std::move(listener)), secret_(id.secret), idHash_(id.commHash), replyHash_(replyHash),
        timeoutSec_(timeoutSec),
        greeter_(sock::Greeter::Options{"bootstrap root on " + addr_, kMaxPendingRegistrations, kGreetingDeadline},
                 sizeof(Hello), [this](std::span<const std::byte> got) { return frame(got); }) {}

  void run();

 private:
  struct Reg {
    sock::Socket sock;
    Registration r{};
    std::vector<std::byte> info;
    bool answered = false;
  };

  bool done() const { return expected_ > 0 && static_cast<int>(regs_.size()) >= expected_; }
  // The greeting of a rank: Hello, Registration, info (sock::Greeter::Framer).
  Result<size_t> frame(std::span<const std::byte> got) const;
  void handle(sock::Greeter::Greeted g);
  void validate(const Reg& reg);
  void finish(ncclResult_t code, const std::string& msg);
  void answerPending(const std::vector<std::byte>& reply);
  std::string missingRanks() const;
  const char* where() const { return addr_.c_str(); }

  sock::Socket listener_;
  Secret secret_;
  uint64_t idHash_;
  uint64_t replyHash_;
  int timeoutSec_;
  std::string addr_ = listener_.peer().toString();
  sock::Greeter greeter_;  // accepted, not yet registered
  std::vector<Reg> regs_;
  int expected_ = 0;   // largest nranks any registration announced
  std::string error_;  // first validation failure; every rank gets it
};

void Root::run() {
  sock::Waiter w = sock::Waiter::after(timeoutSec_);
  SN_INFO(log::kBootstrap, "bootstrap root listening on %s", where());
  while (!done()) {
    if (w.expired() && !error_.empty()) return;  // everyone who came was told already
    if (w.expired()) {
      std::string msg = format("bootstrap root on %s timed out after %d s with %zu of %d ranks registered%s",
                               where(), timeoutSec_, regs_.size(), expected_, missingRanks().c_str());
      if (!regs_.empty()) SN_WARN("%s", msg.c_str());
      else SN_INFO(log::kBootstrap, "%s", msg.c_str());
      finish(ncclRemoteError, msg);
      return;
    }
    std::vector<pollfd> fds;
    greeter_.pollFds(listener_, &fds);
    int rc = ::poll(fds.data(), fds.size(), greeter_.sliceMs(w.sliceMs()));
    if (rc < 0 && errno != EINTR) {
      SN_WARN("bootstrap root on %s: poll: %s", where(), strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (rc < 0) continue;
    for (auto& g : greeter_.service(listener_, fds)) {
      handle(std::move(g));
      if (done()) break;
    }
  }
  if (error_.empty()) finish(ncclSuccess, "");
}

Result<size_t> Root::frame(std::span<const std::byte> got) const {
  constexpr size_t kHead = sizeof(Hello) + sizeof(Registration);
  if (got.size() == sizeof(Hello)) {
    Hello h;
    std::memcpy(&h, got.data(), sizeof h);
    SNCCL_TRY(checkHello(h, secret_, idHash_, ConnKind::kRegister));
    return kHead;
  }
  if (got.size() == kHead) {
    Registration r;
    std::memcpy(&r, got.data() + sizeof(Hello), sizeof r);
    if (r.infoSize > kMaxInfoSize)
      return InvalidUsage("bad registration: info size %u exceeds the limit %u", r.infoSize, kMaxInfoSize);
    return kHead + r.infoSize;
  }
  return got.size();
}

void Root::handle(sock::Greeter::Greeted g) {
  Reg reg;
  std::memcpy(&reg.r, g.bytes.data() + sizeof(Hello), sizeof reg.r);
  reg.info.assign(g.bytes.begin() + static_cast<long>(sizeof(Hello) + sizeof(Registration)), g.bytes.end());
  reg.sock = std::move(g.sock);
  validate(reg);
  expected_ = std::max(expected_, std::clamp(reg.r.nranks, 1, kMaxRanks));
  regs_.push_back(std::move(reg));
  // Once the rendezvous is known to fail, tell everyone now, including latecomers, rather
  // than letting them wait for ranks that may never come.
  if (!error_.empty()) finish(ncclInvalidUsage, error_);
}

void Root::validate(const Reg& reg) {
  if (!error_.empty()) return;
  const Registration& r = reg.r;
  if (r.nranks < 1 || r.nranks > kMaxRanks || r.rank < 0 || r.rank >= r.nranks) {
    error_ = format("%s registered as rank %d of %d", reg.sock.peer().toString().c_str(), r.rank, r.nranks);
    return;
  }
  for (const Reg& o : regs_) {
    if (o.r.nranks != r.nranks) {
      error_ = format("nranks mismatch: rank %d passed nranks=%d but rank %d passed nranks=%d", r.rank, r.nranks,
                      o.r.rank, o.r.nranks);
    } else if (o.r.infoSize != r.infoSize) {
      error_ = format("info size mismatch: rank %d passed %u bytes but rank %d passed %u", r.rank, r.infoSize,
                      o.r.rank, o.r.infoSize);
    } else if (o.r.rank == r.rank) {
      error_ = format("rank %d registered twice (from %s and from %s)", r.rank, o.sock.peer().toString().c_str(),
                      reg.sock.peer().toString().c_str());
    }
    if (!error_.empty()) return;
  }
}

std::string Root::missingRanks() const {
  if (expected_ == 0) return "";
  std::vector<bool> seen(static_cast<size_t>(expected_), false);
  for (const Reg& r : regs_)
    if (r.r.rank >= 0 && r.r.rank < expected_) seen[static_cast<size_t>(r.r.rank)] = true;
  std::string s;
  int listed = 0;
  for (int k = 0; k < expected_ && listed < 16; ++k)
    if (!seen[static_cast<size_t>(k)]) s += (listed++ ? ", " : "") + std::to_string(k);
  return s.empty() ? "" : " (missing ranks: " + s + (listed >= 16 ? ", ..." : "") + ")";
}

void Root::finish(ncclResult_t code, const std::string& msg) {
  std::vector<std::byte> buf;
  RootReply rep{static_cast<int32_t>(code), 0, replyHash_, expected_, 0};
  if (code == ncclSuccess) {
    listener_.close();  // later connections fail fast instead of waiting for us
    greeter_.clear();
    std::sort(regs_.begin(), regs_.end(), [](const Reg& a, const Reg& b) { return a.r.rank < b.r.rank; });
    rep.infoSize = regs_.empty() ? 0 : regs_[0].r.infoSize;
    size_t entry = sizeof(sock::Address::Wire) + rep.infoSize;
    buf.resize(sizeof rep + entry * regs_.size());
    for (size_t k = 0; k < regs_.size(); ++k) {
      std::byte* e = buf.data() + sizeof rep + entry * k;
      std::memcpy(e, &regs_[k].r.listen, sizeof(sock::Address::Wire));
      if (rep.infoSize) std::memcpy(e + sizeof(sock::Address::Wire), regs_[k].info.data(), rep.infoSize);
    }
  } else {
    rep.msgLen = static_cast<uint32_t>(msg.size());
    buf.resize(sizeof rep + msg.size());
    std::memcpy(buf.data() + sizeof rep, msg.data(), msg.size());
  }
  std::memcpy(buf.data(), &rep, sizeof rep);
  answerPending(buf);
  SN_INFO(log::kBootstrap, "bootstrap root on %s: answered %zu ranks%s%s", where(), regs_.size(),
          code == ncclSuccess ? "" : ", failed: ", msg.c_str());
}

void Root::answerPending(const std::vector<std::byte>& reply) {
  // The ranks are all blocked reading this reply, so a fresh deadline is ample.
  sock::Waiter w = sock::Waiter::after(timeoutSec_);
  for (Reg& r : regs_) {
    if (r.answered) continue;
    Status st = r.sock.sendAll(reply.data(), reply.size(), w, "the rank table");
    if (!st.ok()) SN_WARN("bootstrap root on %s: rank %d: %s", where(), r.r.rank, st.message().c_str());
    r.answered = true;
    r.sock.close();
  }
}

}  // namespace

Status launchRoot(sock::Socket listener, const IdLayout& id, uint64_t replyHash, int timeoutSec) {
  auto root = std::make_unique<Root>(std::move(listener), id, replyHash, timeoutSec);
  try {
    std::thread([r = std::move(root)] { r->run(); }).detach();
  } catch (const std::system_error& e) {
    return SystemError("cannot start the bootstrap root thread: %s", e.what());
  }
  return OkStatus();
}

// ---- Rank side ----------------------------------------------------------------------

Result<RankTable> registerWithRoot(const IdLayout& id, int rank, int nranks, const sock::Address& listenAddr,
                                   std::span<const std::byte> info, const sock::Waiter& w) {
  SNCCL_ASSIGN_OR_RETURN(sock::Address rootAddr, sock::Address::fromWire(id.root));
  std::string ctx = format("rank %d: bootstrap root %s", rank, rootAddr.toString().c_str());
  Result<sock::Socket> conn = sock::Socket::connect(rootAddr, w);
  if (!conn.ok()) return Status(conn.status()).addContext(ctx);
  const sock::Socket& s = *conn;

  Hello h = makeHello(id.secret, id.commHash, rank, ConnKind::kRegister);
  Registration reg{rank, nranks, static_cast<uint32_t>(info.size()), 0, listenAddr.toWire()};
  std::vector<std::byte> out(sizeof h + sizeof reg + info.size());
  std::memcpy(out.data(), &h, sizeof h);
  std::memcpy(out.data() + sizeof h, &reg, sizeof reg);
  if (!info.empty()) std::memcpy(out.data() + sizeof h + sizeof reg, info.data(), info.size());
  Status st = s.sendAll(out.data(), out.size(), w, "our registration");
  if (!st.ok()) return st.addContext(ctx);

  // The root started its clock no later than we did and knows which ranks are missing, so
  // it should be the one to time out: its reply names them. We wait a grace period past
  // our own deadline for that reply; a dead root still ends the wait at once (EOF).
  RootReply rep{};
  sock::Waiter replyWait = w.extended(std::chrono::seconds(std::clamp(w.timeoutSec / 4, 2, 30)));
  st = s.recvAll(&rep, sizeof rep, replyWait, "the rank table (waiting for all ranks to register)");
  if (!st.ok()) return st.addContext(ctx);
  if (rep.code != ncclSuccess) {
    std::string msg(std::min<uint32_t>(rep.msgLen, 1 << 16), '\0');
    (void)s.recvAll(msg.data(), msg.size(), w, "the root's error text");
    return Status(static_cast<ncclResult_t>(rep.code), ctx + ": " + msg);
  }
  if (rep.nranks != nranks || rep.infoSize != info.size())
    return InternalError("%s: table has %d ranks and %u-byte infos, expected %d and %zu", ctx.c_str(), rep.nranks,
                         rep.infoSize, nranks, info.size());
  RankTable t;
  t.commHash = rep.commHash;
  size_t entry = sizeof(sock::Address::Wire) + info.size();
  std::vector<std::byte> table(entry * static_cast<size_t>(nranks));
  st = s.recvAll(table.data(), table.size(), w, "the rank table");
  if (!st.ok()) return st.addContext(ctx);
  t.infos.resize(info.size() * static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    const std::byte* e = table.data() + entry * static_cast<size_t>(r);
    sock::Address::Wire wire;
    std::memcpy(&wire, e, sizeof wire);
    SNCCL_ASSIGN_OR_RETURN(sock::Address a, sock::Address::fromWire(wire));
    t.addrs.push_back(a);
    if (!info.empty()) std::memcpy(t.infos.data() + info.size() * static_cast<size_t>(r), e + sizeof wire, info.size());
  }
  return t;
}

}  // namespace snccl::boot
