// Accepting greeted connections: concurrent handshakes, per-connection deadlines, a cap
// on strangers and surviving EMFILE without spinning.
#include "common/greeter.h"

#include <errno.h>

#include <algorithm>
#include <cstring>

namespace snccl::sock {

Greeter::Greeter(Options o, size_t firstBytes, Framer framer)
    : opt_(std::move(o)), firstBytes_(firstBytes), framer_(std::move(framer)),
      cap_(std::max<size_t>(1, opt_.maxPending)) {}

void Greeter::pollFds(const Socket& listener, std::vector<pollfd>* fds, Clock::time_point now) const {
  if (listener.valid() && now >= restUntil_) fds->push_back(pollfd{listener.fd(), POLLIN, 0});
  for (const Pending& p : pending_) fds->push_back(pollfd{p.sock.fd(), POLLIN, 0});
}

int Greeter::sliceMs(int maxMs, Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  if (restUntil_ > now) next = restUntil_;
  for (const Pending& p : pending_) next = std::min(next, p.deadline);
  if (next == Clock::time_point::max()) return maxMs;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
  return static_cast<int>(std::clamp<int64_t>(ms, 0, maxMs));
}

std::vector<Greeter::Greeted> Greeter::service(const Socket& listener, std::span<const pollfd> polled,
                                               Clock::time_point now) {
  std::vector<Greeted> out;
  // Same order as pollFds: the listener first when it was polled, then pending_.
  bool listenerPolled = !polled.empty() && listener.valid() && polled[0].fd == listener.fd();
  size_t first = listenerPolled ? 1 : 0;
  bool tryAll = polled.empty() || polled.size() != first + pending_.size();
  for (size_t k = 0, i = 0; k < pending_.size(); ++i) {
    bool ready = tryAll || polled[first + i].revents != 0;
    if (ready && readSome(pending_[k], &out)) {
      pending_.erase(pending_.begin() + static_cast<long>(k));
      continue;
    }
    ++k;
  }
  for (size_t k = 0; k < pending_.size();) {
    Pending& p = pending_[k];
    if (now < p.deadline) {
      ++k;
      continue;
    }
    ++stats_.expired;
    if (dropWarn_.allow(now))
      SN_WARN("%s: dropped the connection from %s: no complete greeting within %s (%zu of %zu bytes)%s",
              opt_.who.c_str(), p.sock.peer().toString().c_str(),
              describeMs(opt_.deadline.count()).c_str(), p.got,
              p.buf.size(), dropWarn_.suppressedNote().c_str());
    pending_.erase(pending_.begin() + static_cast<long>(k));
  }
  if (listener.valid() && now >= restUntil_ && (tryAll || !listenerPolled || polled[0].revents != 0))
    acceptAll(listener, now, &out);
  return out;
}

void Greeter::acceptAll(const Socket& listener, Clock::time_point now, std::vector<Greeted>* out) {
  // Bounded so a flood of connections cannot keep this call from returning.
  for (size_t n = 0; n < 4 * cap_ + 64; ++n) {
    int err = 0;
    Result<Socket> r = listener.tryAccept(&err);
    if (!r.ok()) {
      onAcceptError(err, r.status().message(), now);
      return;
    }
    if (!r->valid()) return;
    ++stats_.accepted;
    Pending p;
    p.sock = std::move(*r);
    p.buf.resize(firstBytes_);
    p.deadline = now + opt_.deadline;
    // A real client sent its greeting right after connecting: it is usually here already.
    if (readSome(p, out)) continue;
    pending_.push_back(std::move(p));
    while (pending_.size() > cap_) evictOldest("too many connections that have not greeted");
  }
}

void Greeter::onAcceptError(int err, const std::string& why, Clock::time_point now) {
  ++stats_.acceptErrors;
  restUntil_ = now + opt_.restAfterAcceptError;
  size_t freed = 0;
  if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
    // Out of descriptors: what fits is fewer than are pending; make room for newcomers
    // (a real client completes at once, so it needs a descriptor only briefly).
    size_t keep = pending_.size() / 2;
    cap_ = std::max<size_t>(1, std::min(cap_, keep));
    while (pending_.size() > keep) {
      evictOldest("out of descriptors");
      ++freed;
    }
  }
  if (acceptWarn_.allow(now))
    SN_WARN("%s: %s; not accepting for %lld ms%s%s", opt_.who.c_str(), why.c_str(),
            static_cast<long long>(opt_.restAfterAcceptError.count()),
            freed ? format(", dropped %zu connections that had not greeted", freed).c_str() : "",
            acceptWarn_.suppressedNote().c_str());
}

void Greeter::evictOldest(const char* why) {
  if (pending_.empty()) return;
  ++stats_.evicted;
  if (dropWarn_.allow())
    SN_WARN("%s: %s; dropped the oldest, from %s%s", opt_.who.c_str(), why,
            pending_.front().sock.peer().toString().c_str(), dropWarn_.suppressedNote().c_str());
  pending_.pop_front();
}

bool Greeter::readSome(Pending& p, std::vector<Greeted>* out) {
  for (;;) {
    if (p.got == p.buf.size()) {
      Result<size_t> want = framer_(std::span<const std::byte>(p.buf.data(), p.got));
      if (want.ok() && *want < p.got) want = InternalError("greeting framer went back to %zu bytes", *want);
      if (!want.ok()) {
        ++stats_.rejected;
        if (dropWarn_.allow())
          SN_WARN("%s: rejected connection from %s: %s%s", opt_.who.c_str(), p.sock.peer().toString().c_str(),
                  want.status().message().c_str(), dropWarn_.suppressedNote().c_str());
        return true;
      }
      if (*want == p.got) {
        ++stats_.greeted;
        p.buf.resize(p.got);
        out->push_back(Greeted{std::move(p.sock), std::move(p.buf)});
        return true;
      }
      p.buf.resize(*want);
    }
    bool eof = false;
    Result<size_t> k = p.sock.recvSome(p.buf.data() + p.got, p.buf.size() - p.got, &eof);
    if (!k.ok() || eof) {
      ++stats_.closed;
      if (dropWarn_.allow())
        SN_WARN("%s: rejected connection from %s: %s before its greeting was complete (%zu of %zu bytes)%s",
                opt_.who.c_str(), p.sock.peer().toString().c_str(),
                k.ok() ? "it closed the connection" : k.status().message().c_str(), p.got, p.buf.size(),
                dropWarn_.suppressedNote().c_str());
      return true;
    }
    if (*k == 0) return false;
    p.got += *k;
  }
}

}  // namespace snccl::sock
