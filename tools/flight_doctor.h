// sn_doctor's library: reads the flight recorder dumps of a communicator's ranks
// (src/core/flight_dump.h gives the format) and names what went wrong first: the call that
// differs between ranks, the rank that died, stopped or fell behind, or the network link
// that failed between two live ranks.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace snccl::doctor {

struct Op {
  uint64_t id = 0, seq = 0, count = 0, waitMsg = 0;
  std::string coll, type, op, algo, state, wait;
  int root = -1, waitPeer = -1, sendPeer = -1, recvPeer = -1;
  int64_t startNs = 0, endNs = 0;
  uint32_t stepsDone = 0, stepsTotal = 0, nsend = 0, nrecv = 0;
  bool collective() const { return coll != "SendRecv"; }
};

struct Peer {
  int rank = -1, pid = 0;
  std::string host;
};

struct Dump {
  std::string file;
  uint64_t hash = 0;
  int rank = -1, nranks = 0, pid = 0;
  std::string host, reason;
  int64_t timeNs = 0;
  std::vector<Peer> peers;
  bool hasError = false;
  int errorCode = 0, culprit = -1, causePeer = -1;
  std::string cause, errorText;
  std::vector<Op> ops;  // oldest first
};

// Parses one dump; false with *err set when `text` is not one.
bool parseDump(const std::string& text, Dump* out, std::string* err);
// Reads and parses the file at `path` (Dump::file set).
bool readDump(const std::string& path, Dump* out, std::string* err);
// The dumps a directory holds (snccl-flight-*.txt), sorted; a path that is not a
// directory is returned as it is.
std::vector<std::string> dumpFiles(const std::string& path);

enum class Verdict {
  kNoFault,      // every rank present, nothing failed
  kMismatch,     // ranks made different calls at the same sequence number
  kRankDied,     // a rank left no dump and a survivor saw its process exit
  kRankStopped,  // a rank left no dump and a survivor saw it stopped (SIGSTOP, a debugger)
  kRankMissing,  // a rank left no dump; the others timed out or failed waiting for it
  kSlowRank,     // every rank dumped; one reached the operation the others were in late or never
  kLinkFailed,   // the network connection between two live ranks failed
  kFailed,       // some other failure, attributed to the culprit the ranks agree on
};
const char* verdictName(Verdict v);  // "mismatch", "rank-died", ...

struct Diagnosis {
  Verdict verdict = Verdict::kNoFault;
  int rank = -1;                     // the rank to look at first (-1: none)
  int peer = -1;                     // kLinkFailed: the other end
  int64_t seq = -1;                  // the collective where it happened (-1: unknown)
  std::string summary;               // one line
  std::vector<std::string> details;  // one line per rank, and evidence
};

// Diagnoses the dumps of one communicator (same hash; at most one per rank).
Diagnosis diagnose(const std::vector<Dump>& dumps);

// Groups dumps by communicator hash.
std::map<uint64_t, std::vector<Dump>> byComm(const std::vector<Dump>& dumps);

}  // namespace snccl::doctor
