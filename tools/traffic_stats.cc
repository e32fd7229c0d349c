// Reading the traffic counter files, and the table and picture of them.
#include "traffic_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "common/status.h"
#include "core/comm_stats.h"
#include "dir_files.h"

namespace snccl::traffic {

namespace {

constexpr int kMaxRanks = 1 << 20;  // more than any communicator: a larger count is corrupt

std::string human(double v, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (v >= 1000 && i < 4) v /= 1000, ++i;
  return format(v < 10 && i > 0 ? "%.2f %s%s" : "%.1f %s%s", v, prefixes[i], unit);
}

std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// One row of the picture at height y: a label, then from x0 a red bar for `out` over a blue
// one for `in` (`max` fills `width`), each titled with its value, then a note.
std::string twoBars(int y, int x0, int width, double max, const std::string& label, uint64_t out,
                    const std::string& outTitle, uint64_t in, const std::string& inTitle, const std::string& note) {
  std::string s = format("<text x=\"10\" y=\"%d\">%s</text>\n", y + 12, xml(label).c_str());
  const struct {
    int dy;
    const char* fill;
    uint64_t v;
    const std::string& title;
  } bars[] = {{2, "#c0392b", out, outTitle}, {9, "#2c7fb8", in, inTitle}};
  for (const auto& b : bars)
    s += format("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"7\" fill=\"%s\"><title>%s: %s</title></rect>\n", x0,
                y + b.dy, std::max(int(double(width) * double(b.v) / max), 1), b.fill, xml(b.title).c_str(),
                xml(human(double(b.v), "B")).c_str());
  return s + format("<text x=\"%d\" y=\"%d\">%s</text>\n", x0 + 10 + width, y + 12, xml(note).c_str());
}

}  // namespace

bool parseCounters(const void* data, size_t size, RankCounters* out, std::string* err) {
  stats::StatsHeader h;
  if (size < sizeof h) {
    *err = "shorter than a counter file's header";
    return false;
  }
  std::memcpy(static_cast<void*>(&h), data, sizeof h);
  if (std::memcmp(h.magic, stats::kMagic, sizeof h.magic) != 0 || h.headerBytes != sizeof h ||
      h.peerBytes != sizeof(stats::PeerStats) || h.nranks <= 0 || h.nranks > kMaxRanks || h.rank < 0 ||
      h.rank >= h.nranks) {
    *err = "not a traffic counter file of this layout";
    return false;
  }
  if (size < sizeof h + size_t(h.nranks) * sizeof(stats::PeerStats)) {
    *err = "the file is shorter than its rank count says";
    return false;
  }
  h.host[sizeof h.host - 1] = '\0';
  out->hash = h.commHash;
  out->rank = h.rank;
  out->nranks = h.nranks;
  out->pid = h.pid;
  out->host = h.host;
  out->startNs = h.startNs;
  out->peers.assign(size_t(h.nranks), PeerCounters{});
  // A PeerStats as bytes: the link's name, its 64-bit counters in declaration order, then
  // the rail slots (a name, bytes sent, bytes received).
  constexpr size_t kLink = sizeof(stats::PeerStats::link);
  constexpr size_t kRails = kLink + 7 * 8;
  constexpr size_t kRailName = sizeof(RailCounters::name);
  static_assert(offsetof(stats::PeerStats, sendBytes) == kLink && offsetof(stats::PeerStats, rails) == kRails &&
                sizeof(RailCounters) == kRailName + 2 * 8 &&
                sizeof(stats::PeerStats) == kRails + kRailSlots * sizeof(RailCounters));
  const char* p = static_cast<const char*>(data) + sizeof h;
  for (PeerCounters& c : out->peers) {
    c.link.assign(p, strnlen(p, kLink));
    uint64_t v[7];
    std::memcpy(v, p + kLink, sizeof v);
    c.sendBytes = v[0], c.recvBytes = v[1], c.sendMsgs = v[2], c.recvMsgs = v[3];
    c.sendWaitNs = v[4], c.recvWaitNs = v[5], c.directBytes = v[6];
    for (int k = 0; k < kRailSlots; ++k) {
      const char* slot = p + kRails + size_t(k) * sizeof(RailCounters);
      RailCount rc;
      rc.name.assign(slot, strnlen(slot, kRailName - 1));  // the writer ends it within the slot
      std::memcpy(&rc.sendBytes, slot + kRailName, 8);
      std::memcpy(&rc.recvBytes, slot + kRailName + 8, 8);
      if (!rc.name.empty()) c.rails.push_back(std::move(rc));
    }
    p += sizeof(stats::PeerStats);
  }
  return true;
}

bool readCounters(const std::string& path, RankCounters* out, std::string* err) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    *err = format("cannot open: %s", std::strerror(errno));
    return false;
  }
  // The largest file a valid header allows; the writer stores each counter as a whole
  // aligned word, which a read copies whole.
  const size_t cap = sizeof(stats::StatsHeader) + size_t(kMaxRanks) * sizeof(stats::PeerStats);
  std::vector<char> buf(sizeof(stats::StatsHeader));
  size_t got = 0;
  for (;;) {
    if (got == buf.size()) {
      if (buf.size() >= cap) break;
      buf.resize(std::min(cap, buf.size() * 4));
    }
    const ssize_t n = pread(fd, buf.data() + got, buf.size() - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fd);
  if (!parseCounters(buf.data(), got, out, err)) return false;
  out->file = path;
  return true;
}

std::vector<std::string> counterFiles(const std::string& dir) { return tools::filesIn(dir, "snccl-stats-", ".bin"); }

std::map<uint64_t, std::vector<RankCounters>> byComm(const std::vector<RankCounters>& all) {
  std::map<uint64_t, std::vector<RankCounters>> out;
  for (const RankCounters& r : all) out[r.hash].push_back(r);
  for (auto& [hash, v] : out)
    std::sort(v.begin(), v.end(), [](const RankCounters& a, const RankCounters& b) { return a.rank < b.rank; });
  return out;
}

std::string renderTable(const std::vector<RankCounters>& now, const std::vector<RankCounters>* before, double seconds) {
  const bool rates = before != nullptr && seconds > 0;
  std::string out = format("%5s %5s %-14s %14s %14s %10s %10s %14s %12s %12s\n", "rank", "peer", "link",
                           rates ? "send/s" : "sent", rates ? "recv/s" : "received", rates ? "msgs/s" : "msgs out",
                           rates ? "in/s" : "msgs in", rates ? "direct/s" : "direct", "credit wait", "data wait");
  for (const RankCounters& r : now) {
    const RankCounters* old = nullptr;
    if (rates)
      for (const RankCounters& b : *before)
        if (b.rank == r.rank && b.hash == r.hash && b.peers.size() == r.peers.size()) old = &b;
    for (size_t p = 0; p < r.peers.size(); ++p) {
      PeerCounters c = r.peers[p];
      if (c.sendMsgs == 0 && c.recvMsgs == 0 && c.directBytes == 0 && c.link.empty()) continue;
      if (old != nullptr) {
        const PeerCounters& o = old->peers[p];
        c.sendBytes -= std::min(c.sendBytes, o.sendBytes);
        c.recvBytes -= std::min(c.recvBytes, o.recvBytes);
        c.sendMsgs -= std::min(c.sendMsgs, o.sendMsgs);
        c.recvMsgs -= std::min(c.recvMsgs, o.recvMsgs);
        c.sendWaitNs -= std::min(c.sendWaitNs, o.sendWaitNs);
        c.recvWaitNs -= std::min(c.recvWaitNs, o.recvWaitNs);
        c.directBytes -= std::min(c.directBytes, o.directBytes);
      }
      std::vector<RailCount> rails = c.rails;
      if (old != nullptr)
        for (RailCount& rc : rails)
          for (const RailCount& o : old->peers[p].rails)
            if (o.name == rc.name) {
              rc.sendBytes -= std::min(rc.sendBytes, o.sendBytes);
              rc.recvBytes -= std::min(rc.recvBytes, o.recvBytes);
            }
      const double div = rates ? seconds : 1.0;
      // Waits: a share of the interval when showing rates, seconds in total otherwise.
      auto wait = [&](uint64_t ns) {
        return rates ? format("%.1f%%", 100.0 * double(ns) * 1e-9 / seconds) : format("%.3f s", double(ns) * 1e-9);
      };
      const char* unit = rates ? "B/s" : "B";
      out += format("%5d %5zu %-14s %14s %14s %10.0f %10.0f %14s %12s %12s\n", r.rank, p,
                    c.link.empty() ? "-" : c.link.c_str(), human(double(c.sendBytes) / div, unit).c_str(),
                    human(double(c.recvBytes) / div, unit).c_str(), double(c.sendMsgs) / div, double(c.recvMsgs) / div,
                    human(double(c.directBytes) / div, unit).c_str(), wait(c.sendWaitNs).c_str(),
                    wait(c.recvWaitNs).c_str());
      // The rails under their peer: what each interface carried of the bytes above.
      for (const RailCount& rc : rails)
        out += format("%5s %5s %-14s %14s %14s\n", "", "", ("  rail " + rc.name).c_str(),
                      human(double(rc.sendBytes) / div, unit).c_str(), human(double(rc.recvBytes) / div, unit).c_str());
    }
  }
  return out;
}

std::string renderSvg(const std::vector<RankCounters>& ranks) {
  int n = 0;
  for (const RankCounters& r : ranks) n = std::max(n, r.nranks);
  // The matrix up to kMatrixMax ranks (a cell each); beyond, only the busiest links.
  constexpr int kMatrixMax = 256;
  const bool drawMatrix = n <= kMatrixMax;
  const int cell = n <= 16 ? 28 : n <= 64 ? 10 : 4;
  const int left = 60, top = 60;
  const int matrix = drawMatrix ? cell * n : 0;
  std::vector<const RankCounters*> byRank(size_t(n), nullptr);
  for (const RankCounters& r : ranks) byRank[size_t(r.rank)] = &r;
  auto sentBy = [&](int from, int to) -> uint64_t {
    const RankCounters* r = byRank[size_t(from)];
    if (r == nullptr || size_t(to) >= r->peers.size()) return 0;
    const PeerCounters& c = r->peers[size_t(to)];
    return c.sendBytes + c.directBytes;
  };
  // Per pair (a < b) of ranks that exchanged anything: bytes each way, link, waits.
  struct Pair {
    int a, b;
    uint64_t ab, ba, waitNs;
    std::string link;
  };
  std::vector<Pair> pairs;
  uint64_t maxSent = 1;
  for (const RankCounters& r : ranks)
    for (size_t p = 0; p < r.peers.size() && int(p) < n; ++p) maxSent = std::max(maxSent, sentBy(r.rank, int(p)));
  for (const RankCounters& r : ranks)
    for (size_t p = size_t(r.rank) + 1; p < r.peers.size() && int(p) < n; ++p) {
      const PeerCounters& c = r.peers[p];
      const uint64_t ab = sentBy(r.rank, int(p)), ba = std::max(sentBy(int(p), r.rank), c.recvBytes);
      if (ab == 0 && ba == 0) continue;
      pairs.push_back({r.rank, int(p), ab, ba, c.sendWaitNs + c.recvWaitNs, c.link});
    }
  constexpr size_t kPairsShown = 64;  // the busiest; a large job has too many to list
  // Sums as doubles: counters from a corrupt file may be near 2^64.
  auto total = [](const Pair& x) { return double(x.ab) + double(x.ba); };
  std::sort(pairs.begin(), pairs.end(), [&](const Pair& x, const Pair& y) { return total(x) > total(y); });
  if (pairs.size() > kPairsShown) pairs.resize(kPairsShown);
  double maxPair = 1;
  for (const Pair& p : pairs) maxPair = std::max(maxPair, total(p));
  // Per rank and rail: the bytes its net connections moved over that rail, both ways.
  struct RailRow {
    int rank;
    std::string name;
    uint64_t sent, received;
  };
  std::vector<RailRow> railRows;
  for (const RankCounters& r : ranks) {
    const size_t first = railRows.size();
    for (const PeerCounters& c : r.peers)
      for (const RailCount& rc : c.rails) {
        auto it = std::find_if(railRows.begin() + std::ptrdiff_t(first), railRows.end(),
                               [&](const RailRow& x) { return x.name == rc.name; });
        if (it == railRows.end()) {
          railRows.push_back({r.rank, rc.name, rc.sendBytes, rc.recvBytes});
        } else {
          it->sent += rc.sendBytes;  // wraps only on a corrupt file; the bar is then wrong, not the picture
          it->received += rc.recvBytes;
        }
      }
  }
  constexpr size_t kRailRowsShown = 128;
  if (railRows.size() > kRailRowsShown) railRows.resize(kRailRowsShown);
  double maxRail = 1;
  for (const RailRow& x : railRows) maxRail = std::max(maxRail, std::max(double(x.sent), double(x.received)));
  const int barTop = top + matrix + 50, barRow = 18, barWidth = 360;
  const int railTop = barTop + barRow * int(pairs.size()) + (railRows.empty() ? 0 : 50);
  const int width = std::max(left + matrix + 40, 620);
  const int height = railTop + barRow * int(railRows.size()) + 30;
  std::string s = format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
      "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height);
  const uint64_t hash = ranks.empty() ? 0 : ranks[0].hash;
  s += format(
      "<text x=\"10\" y=\"18\" font-size=\"14\">communicator %016llx: bytes sent, row rank to column rank "
      "(max %s)</text>\n",
      (unsigned long long)hash, xml(human(double(maxSent), "B")).c_str());
  if (!drawMatrix)
    s += format("<text x=\"10\" y=\"40\">%d ranks: the matrix is drawn up to %d; the busiest links follow</text>\n", n,
                kMatrixMax);
  for (int i = 0; drawMatrix && i < n && cell >= 10; ++i) {
    s += format("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%d</text>\n", left + i * cell + cell / 2, top - 6, i);
    s += format("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%d</text>\n", left - 6, top + i * cell + cell / 2 + 4, i);
  }
  for (int i = 0; drawMatrix && i < n; ++i)
    for (int j = 0; j < n; ++j) {
      const uint64_t v = sentBy(i, j);
      const int shade = 255 - int(220.0 * double(v) / double(maxSent));
      s += format(
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"rgb(255,%d,%d)\" stroke=\"#ddd\">"
          "<title>%d to %d: %s</title></rect>\n",
          left + j * cell, top + i * cell, cell, cell, shade, shade, i, j, xml(human(double(v), "B")).c_str());
    }
  s += format(
      "<text x=\"10\" y=\"%d\" font-size=\"14\">links: bytes both ways (busiest %zu), transport, time "
      "waiting</text>\n",
      barTop - 14, pairs.size());
  for (size_t k = 0; k < pairs.size(); ++k) {
    const Pair& p = pairs[k];
    s += twoBars(barTop + int(k) * barRow, 70, barWidth, maxPair, format("%d - %d", p.a, p.b), p.ab,
                 format("%d to %d", p.a, p.b), p.ba, format("%d to %d", p.b, p.a),
                 format("%s, %.3f s waiting", p.link.empty() ? "-" : p.link.c_str(), double(p.waitNs) * 1e-9));
  }
  if (!railRows.empty())
    s += format(
        "<text x=\"10\" y=\"%d\" font-size=\"14\">rails: bytes each rank's net connections sent (red) and "
        "received (blue) per interface</text>\n",
        railTop - 14);
  for (size_t k = 0; k < railRows.size(); ++k) {
    const RailRow& x = railRows[k];
    s += twoBars(railTop + int(k) * barRow, 110, barWidth, maxRail, format("%d %s", x.rank, x.name.c_str()), x.sent,
                 format("rank %d sent over %s", x.rank, x.name.c_str()), x.received,
                 format("rank %d received over %s", x.rank, x.name.c_str()),
                 human(double(x.sent), "B") + " out, " + human(double(x.received), "B") + " in");
  }
  return s + "</svg>\n";
}

}  // namespace snccl::traffic
