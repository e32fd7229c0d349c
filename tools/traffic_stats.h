// sn_top's library: reads the traffic counter files communicators keep in SNCCL_STATS_DIR
// (src/core/comm_stats.h gives the layout), and renders them as a table of rates and as
// an SVG picture (a rank x rank matrix of bytes sent, and the links between ranks).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace snccl::traffic {

// A rail (local interface or device) the net connections to a peer used, and what it carried.
struct RailCount {
  std::string name;
  uint64_t sendBytes = 0, recvBytes = 0;
};

struct PeerCounters {
  std::string link;  // transport of the connections to the peer ("" none)
  std::vector<RailCount> rails;  // net connections only; empty for others
  uint64_t sendBytes = 0, recvBytes = 0, sendMsgs = 0, recvMsgs = 0, sendWaitNs = 0, recvWaitNs = 0;
  uint64_t directBytes = 0;  // written straight into the peer's memory (single-copy AllReduce)
};

struct RankCounters {
  std::string file;
  uint64_t hash = 0;
  int rank = -1, nranks = 0, pid = 0;
  std::string host;
  int64_t startNs = 0;
  std::vector<PeerCounters> peers;  // by peer rank
};

// Parses the bytes of a counter file; false with *err set when they are not one.
bool parseCounters(const void* data, size_t size, RankCounters* out, std::string* err);
// Reads and parses one file (RankCounters::file set).
bool readCounters(const std::string& path, RankCounters* out, std::string* err);
// The counter files in a directory (snccl-stats-*.bin), sorted.
std::vector<std::string> counterFiles(const std::string& dir);
// Groups by communicator hash, each group ordered by rank.
std::map<uint64_t, std::vector<RankCounters>> byComm(const std::vector<RankCounters>& all);

// The table sn_top prints for one communicator: per rank and peer, its link, bytes each
// way and the time asleep waiting on the peer, then a line per rail its net connections
// used; with `before` (the same ranks, read `seconds` earlier), rates over that interval
// instead of totals.
std::string renderTable(const std::vector<RankCounters>& now, const std::vector<RankCounters>* before, double seconds);
// A picture of one communicator's traffic: the rank x rank matrix of bytes sent (row
// sends to column, through rings or written straight into the peer's memory), and per
// pair of ranks the bytes both ways, the link and the waits, and per rank and rail the
// bytes its net connections moved over that rail.
std::string renderSvg(const std::vector<RankCounters>& ranks);

}  // namespace snccl::traffic
