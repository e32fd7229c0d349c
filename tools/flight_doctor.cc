// Reading flight recorder dumps and reasoning over them (see flight_doctor.h).
#include "flight_doctor.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "common/status.h"
#include "dir_files.h"

namespace snccl::doctor {

namespace {

// One line's record type and its key=value fields (quoted values unescaped).
struct Fields {
  std::string kind;
  std::map<std::string, std::string> kv;
  const std::string* find(const char* k) const {
    auto it = kv.find(k);
    return it == kv.end() ? nullptr : &it->second;
  }
  std::string str(const char* k) const {
    const std::string* v = find(k);
    return v ? *v : std::string();
  }
  int64_t num(const char* k, int64_t def = 0) const {
    const std::string* v = find(k);
    if (v == nullptr || v->empty()) return def;
    return int64_t(std::strtoll(v->c_str(), nullptr, 0));
  }
  uint64_t unum(const char* k) const {
    const std::string* v = find(k);
    return v == nullptr ? 0 : std::strtoull(v->c_str(), nullptr, 0);
  }
};

bool splitLine(const std::string& line, Fields* f, std::string* err) {
  size_t i = 0, n = line.size();
  while (i < n && line[i] != ' ') f->kind += line[i++];
  while (i < n) {
    while (i < n && line[i] == ' ') ++i;
    if (i >= n) break;
    std::string key;
    while (i < n && line[i] != '=' && line[i] != ' ') key += line[i++];
    if (i >= n || line[i] != '=') {
      *err = "field '" + key + "' has no value";
      return false;
    }
    ++i;
    std::string value;
    if (i < n && line[i] == '"') {
      ++i;
      bool closed = false;
      while (i < n) {
        char c = line[i++];
        if (c == '\\' && i < n) {
          value += line[i++];
        } else if (c == '"') {
          closed = true;
          break;
        } else {
          value += c;
        }
      }
      if (!closed) {
        *err = "unterminated string in field '" + key + "'";
        return false;
      }
    } else {
      while (i < n && line[i] != ' ') value += line[i++];
    }
    f->kv[key] = value;
  }
  return true;
}

// More ranks than any communicator has: a dump claiming more is refused, so that a
// corrupt file cannot make the doctor list billions of missing ranks.
constexpr int kMaxRanks = 1 << 20;

std::string ranksText(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

std::string callText(const Op& o) {
  std::string s = format("%s count %llu %s", o.coll.c_str(), (unsigned long long)o.count, o.type.c_str());
  if (o.op != "none" && (o.coll == "AllReduce" || o.coll == "Reduce" || o.coll == "ReduceScatter")) s += " " + o.op;
  if (o.root >= 0) s += format(" root %d", o.root);
  return s;
}

// Everything the ranks know about each other, merged.
struct View {
  int nranks = 0;
  std::map<int, const Dump*> byRank;
  std::map<int, Peer> peers;
  std::string name(int r) const {
    auto it = peers.find(r);
    if (it == peers.end()) return format("rank %d", r);
    return format("rank %d (pid %d, host %s)", r, it->second.pid, it->second.host.c_str());
  }
  // The last collective a rank recorded (nullptr: none).
  static const Op* lastCollective(const Dump& d) {
    for (auto it = d.ops.rbegin(); it != d.ops.rend(); ++it)
      if (it->collective()) return &*it;
    return nullptr;
  }
  static const Op* collectiveAt(const Dump& d, uint64_t seq) {
    for (auto it = d.ops.rbegin(); it != d.ops.rend(); ++it)
      if (it->collective() && it->seq == seq) return &*it;
    return nullptr;
  }
};

std::string rankLine(const View& v, const Dump& d) {
  std::string s = v.name(d.rank) + ": ";
  if (d.ops.empty()) {
    s += "no operation recorded";
  } else {
    const Op& o = d.ops.back();
    s += o.collective() ? format("%s #%llu", callText(o).c_str(), (unsigned long long)o.seq)
                        : format("send/recv group (%u sends, %u receives) after collective #%llu", o.nsend, o.nrecv,
                                 (unsigned long long)o.seq);
    s += format(" [%s, algo %s", o.state.c_str(), o.algo.c_str());
    if (o.stepsTotal > 0) s += format(", steps %u/%u", o.stepsDone, o.stepsTotal);
    if (o.waitPeer >= 0 && o.state != "done")
      s += format(", waiting for %s from rank %d at message %llu", o.wait == "credit" ? "a credit" : "data", o.waitPeer,
                  (unsigned long long)o.waitMsg);
    s += "]";
  }
  if (d.hasError) s += format("; error (%s, peer %d): %s", d.cause.c_str(), d.causePeer, d.errorText.c_str());
  return s;
}

bool findMismatch(const View& v, Diagnosis* out) {
  std::set<uint64_t> seqs;
  for (const auto& [r, d] : v.byRank)
    for (const Op& o : d->ops)
      if (o.collective()) seqs.insert(o.seq);
  for (uint64_t seq : seqs) {
    std::map<std::string, std::vector<int>> calls;
    for (const auto& [r, d] : v.byRank)
      if (const Op* o = View::collectiveAt(*d, seq)) calls[callText(*o)].push_back(r);
    if (calls.size() < 2) continue;
    // The smallest group is the odd one out (ties: the one without the lowest rank).
    const std::vector<int>* odd = nullptr;
    for (const auto& [text, ranks] : calls)
      if (odd == nullptr || ranks.size() < odd->size() || (ranks.size() == odd->size() && ranks[0] > (*odd)[0]))
        odd = &ranks;
    out->verdict = Verdict::kMismatch;
    out->rank = (*odd)[0];
    out->seq = int64_t(seq);
    std::string parts;
    for (const auto& [text, ranks] : calls) parts += format("; %s called %s", ranksText(ranks).c_str(), text.c_str());
    out->summary = format("mismatched call at collective #%llu%s", (unsigned long long)seq, parts.c_str());
    return true;
  }
  return false;
}

// Survivors' evidence about the missing ranks: which one they name, and how.
bool explainMissing(const View& v, const std::vector<int>& missing, Diagnosis* out) {
  if (missing.empty()) return false;
  std::map<int, int> votes;  // missing rank -> how many survivors name or wait on it
  int exited = -1, stopped = -1;
  for (const auto& [r, d] : v.byRank) {
    auto isMissing = [&](int x) { return std::find(missing.begin(), missing.end(), x) != missing.end(); };
    if (d->hasError && isMissing(d->causePeer)) {
      ++votes[d->causePeer];
      if (d->cause == "peer-exited") exited = d->causePeer;
      if (d->cause == "peer-stopped") stopped = d->causePeer;
    }
    if (d->hasError && isMissing(d->culprit)) ++votes[d->culprit];
    if (!d->ops.empty() && isMissing(d->ops.back().waitPeer)) ++votes[d->ops.back().waitPeer];
  }
  int who = missing[0];
  for (const auto& [r, n] : votes)
    if (n > votes[who]) who = r;
  if (stopped >= 0) who = stopped;
  if (exited >= 0) who = exited;
  // Where the survivors were: the latest collective any of them recorded.
  int64_t seq = -1;
  std::string where;
  for (const auto& [r, d] : v.byRank)
    if (const Op* o = View::lastCollective(*d); o != nullptr && int64_t(o->seq) > seq) {
      seq = int64_t(o->seq);
      where = format(" during %s #%llu", o->coll.c_str(), (unsigned long long)o->seq);
    }
  out->rank = who;
  out->seq = seq;
  std::string others = missing.size() > 1 ? format(" (%s left no record either)", ranksText(missing).c_str()) : "";
  if (exited >= 0) {
    out->verdict = Verdict::kRankDied;
    out->summary = format("%s died%s: a survivor saw its process exit; it left no record%s", v.name(who).c_str(),
                          where.c_str(), others.c_str());
  } else if (stopped >= 0) {
    out->verdict = Verdict::kRankStopped;
    out->summary = format("%s was stopped (SIGSTOP or a debugger)%s and the others timed out waiting for it%s",
                          v.name(who).c_str(), where.c_str(), others.c_str());
  } else {
    out->verdict = Verdict::kRankMissing;
    out->summary = format(
        "%s left no record%s: it exited, was killed or hangs (or its dump was not collected); "
        "the others failed waiting for it%s",
        v.name(who).c_str(), where.c_str(), others.c_str());
  }
  return true;
}

// Every rank dumped: the one that reached the others' latest collective late, or never.
bool findSlow(const View& v, Diagnosis* out) {
  int64_t front = -1;
  for (const auto& [r, d] : v.byRank)
    if (const Op* o = View::lastCollective(*d)) front = std::max(front, int64_t(o->seq));
  if (front < 0) return false;
  // Behind: never started collective `front`, and was not inside the library either (its
  // last collective completed). A rank whose previous collective failed was still in it
  // when the failure came, which ranks one collective apart are in the normal course: a
  // rank may finish a collective and start the next before its peers finish theirs.
  std::vector<int> behind;
  for (const auto& [r, d] : v.byRank) {
    if (View::collectiveAt(*d, uint64_t(front)) != nullptr) continue;
    const Op* last = View::lastCollective(*d);
    if (last == nullptr || last->state == "done") behind.push_back(r);
  }
  bool anyFailed = false;
  for (const auto& [r, d] : v.byRank) anyFailed |= d->hasError;
  if (!behind.empty() && behind.size() < v.byRank.size() && anyFailed) {
    // The furthest behind.
    int who = behind[0];
    int64_t whoSeq = INT64_MAX;
    for (int r : behind) {
      const Op* o = View::lastCollective(*v.byRank.at(r));
      const int64_t s = o ? int64_t(o->seq) : -1;
      if (s < whoSeq) whoSeq = s, who = r;
    }
    out->verdict = Verdict::kSlowRank;
    out->rank = who;
    out->seq = front;
    out->summary = format(
        "%s never started collective #%lld, which the others were in (its last: %s): it was slow "
        "or stuck outside the library",
        v.name(who).c_str(), (long long)front, whoSeq >= 0 ? format("#%lld", (long long)whoSeq).c_str() : "none");
    return true;
  }
  if (!behind.empty() || !anyFailed) return false;
  for (const auto& [r, d] : v.byRank)
    if (View::collectiveAt(*d, uint64_t(front)) == nullptr) return false;  // no common collective
  // Everyone started it: one much later than the others?
  std::vector<std::pair<int64_t, int>> starts;
  for (const auto& [r, d] : v.byRank) starts.push_back({View::collectiveAt(*d, uint64_t(front))->startNs, r});
  if (starts.size() < 2) return false;
  std::sort(starts.begin(), starts.end());
  const int64_t gap = starts.back().first - starts[starts.size() - 2].first;
  constexpr int64_t kLateNs = 500000000;  // far above the clock's few ms and ordinary skew
  if (gap < kLateNs) return false;
  out->verdict = Verdict::kSlowRank;
  out->rank = starts.back().second;
  out->seq = front;
  out->summary = format(
      "%s started collective #%lld %.1f s after every other rank: it was slow, and the others "
      "failed waiting for it",
      v.name(out->rank).c_str(), (long long)front, double(gap) * 1e-9);
  return true;
}

bool findLink(const View& v, Diagnosis* out) {
  // Network failures between two ranks that both dumped. A rank whose own side failed
  // (its culprit is itself: its link went down) is the better witness.
  const Dump* best = nullptr;
  for (const auto& [r, d] : v.byRank) {
    if (!d->hasError || d->cause != "network" || d->causePeer < 0 || !v.byRank.count(d->causePeer)) continue;
    if (best == nullptr || (d->culprit == d->rank && best->culprit != best->rank)) best = d;
  }
  if (best == nullptr) return false;
  out->verdict = Verdict::kLinkFailed;
  out->rank = best->rank;
  out->peer = best->causePeer;
  if (const Op* o = View::lastCollective(*best)) out->seq = int64_t(o->seq);
  out->summary =
      format("the network connection between %s and %s failed while both ranks were alive%s: %s",
             v.name(best->rank).c_str(), v.name(best->causePeer).c_str(),
             best->culprit == best->rank ? " (it failed on the first rank's side)" : "", best->errorText.c_str());
  return true;
}

}  // namespace

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::kNoFault:
      return "no-fault";
    case Verdict::kMismatch:
      return "mismatch";
    case Verdict::kRankDied:
      return "rank-died";
    case Verdict::kRankStopped:
      return "rank-stopped";
    case Verdict::kRankMissing:
      return "rank-missing";
    case Verdict::kSlowRank:
      return "slow-rank";
    case Verdict::kLinkFailed:
      return "link-failed";
    case Verdict::kFailed:
      return "failed";
  }
  return "?";
}

bool parseDump(const std::string& text, Dump* out, std::string* err) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != "snccl-flight 1") {
    *err = "not a flight recorder dump (its first line is not 'snccl-flight 1')";
    return false;
  }
  bool sawComm = false, sawEnd = false;
  int lineNo = 1;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.empty()) continue;
    Fields f;
    std::string why;
    if (!splitLine(line, &f, &why)) {
      *err = format("line %d: %s", lineNo, why.c_str());
      return false;
    }
    if (f.kind == "comm") {
      sawComm = true;
      out->hash = f.unum("hash");
      out->rank = int(f.num("rank", -1));
      out->nranks = int(f.num("nranks"));
      out->pid = int(f.num("pid"));
      out->host = f.str("host");
      out->reason = f.str("reason");
      out->timeNs = f.num("time_ns");
    } else if (f.kind == "peer") {
      out->peers.push_back({int(f.num("rank", -1)), int(f.num("pid")), f.str("host")});
    } else if (f.kind == "error") {
      out->hasError = true;
      out->errorCode = int(f.num("code"));
      out->culprit = int(f.num("culprit", -1));
      out->cause = f.str("cause");
      out->causePeer = int(f.num("cause_peer", -1));
      out->errorText = f.str("text");
    } else if (f.kind == "op") {
      Op o;
      o.id = f.unum("id");
      o.seq = f.unum("seq");
      o.coll = f.str("coll");
      o.count = f.unum("count");
      o.type = f.str("type");
      o.op = f.str("op");
      o.root = int(f.num("root", -1));
      o.algo = f.str("algo");
      o.state = f.str("state");
      o.startNs = f.num("start_ns");
      o.endNs = f.num("end_ns");
      const std::string steps = f.str("steps");
      std::sscanf(steps.c_str(), "%u/%u", &o.stepsDone, &o.stepsTotal);
      o.waitPeer = int(f.num("wait_peer", -1));
      o.wait = f.str("wait");
      o.waitMsg = f.unum("wait_msg");
      o.sendPeer = int(f.num("send_peer", -1));
      o.recvPeer = int(f.num("recv_peer", -1));
      o.nsend = uint32_t(f.num("nsend"));
      o.nrecv = uint32_t(f.num("nrecv"));
      out->ops.push_back(std::move(o));
    } else if (f.kind == "end") {
      sawEnd = true;
    } else {
      *err = format("line %d: unknown record '%s'", lineNo, f.kind.c_str());
      return false;
    }
  }
  if (!sawComm || !sawEnd || out->rank < 0 || out->nranks <= 0 || out->nranks > kMaxRanks || out->rank >= out->nranks) {
    *err = !sawEnd ? "the dump is cut short (no 'end' line)" : "the dump names no valid communicator and rank";
    return false;
  }
  return true;
}

bool readDump(const std::string& path, Dump* out, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot read the file";
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (!parseDump(ss.str(), out, err)) return false;
  out->file = path;
  return true;
}

std::vector<std::string> dumpFiles(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return {path};
  return tools::filesIn(path, "snccl-flight-", ".txt");
}

std::map<uint64_t, std::vector<Dump>> byComm(const std::vector<Dump>& dumps) {
  std::map<uint64_t, std::vector<Dump>> out;
  for (const Dump& d : dumps) out[d.hash].push_back(d);
  return out;
}

Diagnosis diagnose(const std::vector<Dump>& dumps) {
  Diagnosis out;
  View v;
  for (const Dump& d : dumps) {
    v.nranks = std::max(v.nranks, d.nranks);
    const Dump*& slot = v.byRank[d.rank];
    if (slot == nullptr || d.timeNs > slot->timeNs) slot = &d;  // a rank's latest dump
    for (const Peer& p : d.peers) v.peers[p.rank] = p;
  }
  if (v.byRank.empty()) {
    out.summary = "no dumps";
    return out;
  }
  std::vector<int> missing;
  for (int r = 0; r < v.nranks; ++r)
    if (!v.byRank.count(r)) missing.push_back(r);
  for (const auto& [r, d] : v.byRank) out.details.push_back(rankLine(v, *d));
  constexpr size_t kListed = 64;  // missing ranks named one per line; the rest counted
  for (size_t i = 0; i < missing.size() && i < kListed; ++i) out.details.push_back(v.name(missing[i]) + ": no dump");
  if (missing.size() > kListed)
    out.details.push_back(format("... and %zu more ranks without a dump", missing.size() - kListed));

  if (findMismatch(v, &out) || explainMissing(v, missing, &out) || findSlow(v, &out) || findLink(v, &out)) return out;
  // Some other failure: the culprit most ranks name.
  std::map<int, int> votes;
  for (const auto& [r, d] : v.byRank)
    if (d->hasError) ++votes[d->culprit >= 0 && d->culprit < v.nranks ? d->culprit : r];
  if (!votes.empty()) {
    auto top =
        std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    out.verdict = Verdict::kFailed;
    out.rank = top->first;
    const Dump* d = v.byRank.count(top->first) ? v.byRank.at(top->first) : v.byRank.begin()->second;
    out.summary = format("the failure started at %s: %s", v.name(top->first).c_str(), d->errorText.c_str());
    return out;
  }
  out.summary = "no fault: every rank dumped and none recorded an error";
  return out;
}

}  // namespace snccl::doctor
