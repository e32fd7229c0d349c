// The nccl-tests 2.19.6 output of the perf tools: header, the two-half table, footer, and
// the -J JSON report. Formatting is split into pure functions so tests can pin it down.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sn_perf.h"

namespace snperf {

// One "# Using devices" line, gathered from every process (plain data for allGather).
struct DevRec {
  int32_t rank;
  int32_t pid;
  int32_t dev;
  int32_t pad;
  char host[64];
};

struct HalfResult {
  double timeUs = 0;
  double algBw = 0;
  double busBw = 0;
  uint64_t wrong = 0;
  bool checked = false;
};

struct RowResult {
  size_t size = 0;
  size_t count = 0;
  std::string type;
  std::string redop;
  int root = -1;
  HalfResult half[2];  // out-of-place, in-place
};

// nccl-tests' number fitting: %.2f, else %.1f, else %.0f, else an exponent form.
std::string fitNumber(double v, int width);
std::string formatTime(double us);
std::string formatDevice(const DevRec& d);
std::vector<std::string> tableHeader(bool cpuTime);
std::string formatRowStart(size_t size, size_t count, const std::string& type, const std::string& redop, int root);
std::string formatHalf(const HalfResult& h);
// The exit code a finished run ends with: wrong data, or too little bandwidth.
int finalExitCode(uint64_t errorResults, bool bwOk);

struct RunInfo {
  std::string prog;
  std::string mode;  // launch mode, for the JSON config
  int nProcs = 1;
  int nRanks = 1;
  size_t maxBytes = 0;  // after any reduction for memory
};

class Report {
 public:
  Report(const Options& o, RunInfo info, bool printer);
  // `notes` are extra "# ..." lines (e.g. -M's memory report) printed after the devices.
  void header(const std::vector<DevRec>& devs, bool maxReduced, const std::vector<std::string>& notes);
  void startRow(const RowResult& r);
  void addHalf(int placement, const HalfResult& h);
  void endRow();
  // Prints the footer; errorResults is the job-wide count of results with wrong data.
  int finish(uint64_t errorResults);
  bool writeJson(const std::string& path, uint64_t errorResults) const;
  size_t rowsDone() const { return rowsDone_; }

 private:
  void print(const std::string& s) const;

  const Options& opt_;
  RunInfo info_;
  bool printer_;
  std::vector<DevRec> devs_;
  std::vector<RowResult> rows_;
  RowResult cur_;
  size_t rowsDone_ = 0;
  double bwSum_ = 0;
  long bwCount_ = 0;
  bool haveMinBw_ = false;
  double minBw_ = 0;
  bool bwOk_ = true;
};

}  // namespace snperf
