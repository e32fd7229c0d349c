// nccl-tests 2.19.6 output (see sn_perf_report.h).
#include "sn_perf_report.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "sn_perf_data.h"
#include "snccl/snccl.h"

namespace snperf {

namespace {

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += format("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// JSON has no NaN or infinity.
std::string jsonNumber(double v) { return std::isfinite(v) ? format("%.9g", v) : "null"; }

std::string jsonHalf(const HalfResult& h) {
  return format("{\"time\": %s, \"alg_bw\": %s, \"bus_bw\": %s, \"wrong\": %s}", jsonNumber(h.timeUs).c_str(),
                jsonNumber(h.algBw).c_str(), jsonNumber(h.busBw).c_str(),
                h.checked ? format("%llu", (unsigned long long)h.wrong).c_str() : "null");
}

std::string jsonConfig(const Options& o, const RunInfo& info) {
  std::string types, ops;
  for (ncclDataType_t t : o.types) types += (types.empty() ? "" : ", ") + jsonString(typeDesc(t).name);
  for (int op : o.ops) ops += (ops.empty() ? "" : ", ") + jsonString(opKindName(op));
  std::string s = "{";
  s += "\"program\": " + jsonString(info.prog) + ", \"nccl_tests_version\": \"2.19.6\", ";
  s += "\"library\": " + jsonString(sncclVersionString()) + ", \"launch\": " + jsonString(info.mode) + ", ";
  s += format("\"nprocs\": %d, \"nthreads\": %d, \"ngpus\": %d, \"nranks\": %d, ", info.nProcs, o.nThreads,
              o.nGpus, info.nRanks);
  s += format("\"minbytes\": %zu, \"maxbytes\": %zu, \"step\": %zu, \"step_type\": \"%s\", ", o.minBytes,
              info.maxBytes, o.stepFactor > 1 ? size_t(o.stepFactor) : o.stepBytes,
              o.stepFactor > 1 ? "factor" : "bytes");
  s += format("\"warmup_iters\": %d, \"iters\": %d, \"agg_iters\": %d, \"run_cycles\": %d, \"validation\": %d, ",
              o.warmup, o.iters, o.aggIters, o.cycles, o.check);
  s += format("\"graph\": 0, \"unalign\": %d, \"blocking\": %d, \"average\": %d, \"timeout\": %d, ", o.unalign,
              o.blocking, o.average, o.timeoutSec);
  s += format("\"local_register\": %d, \"alloc\": \"%s\", \"root\": ", o.localRegister, bufAllocName(o.alloc));
  s += o.root < 0 ? std::string("\"all\"") : format("%d", o.root);
  return s + ", \"datatypes\": [" + types + "], \"ops\": [" + ops + "]}";
}

}  // namespace

std::string fitNumber(double v, int width) {
  char buf[64];
  for (const char* f : {"%.2f", "%.1f", "%.0f"}) {
    std::snprintf(buf, sizeof buf, f, v);
    if (int(std::strlen(buf)) <= width) return buf;
  }
  for (int prec = 2; prec >= 0; --prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec, v);
    if (int(std::strlen(buf)) <= width) break;
  }
  return buf;
}

// The time column keeps about five significant digits: %.2f below 100 us, %.1f below
// 10 ms, %.0f above (nccl-tests prints 1377.7 where a plain fit to 7 characters would
// print 1377.70); past 7 characters it falls back to the exponent form.
std::string formatTime(double us) {
  char buf[64];
  std::snprintf(buf, sizeof buf, us < 100.0 ? "%.2f" : (us < 10000.0 ? "%.1f" : "%.0f"), us);
  return std::strlen(buf) <= 7 ? std::string(buf) : fitNumber(us, 7);
}

std::string formatDevice(const DevRec& d) {
  return format("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s", d.rank, 0, d.pid, d.host,
                d.dev, 0, 0, 0, "host memory (CPU)");
}

// The column headers align with the row format below: size %12, count %12, type %8,
// redop %6, root %6, then per half time %7, algbw %6, busbw %6, #wrong %5 (the sample
// table of nccl-tests 2.19.6 puts #wrong's last digit 7 columns after busbw).
std::vector<std::string> tableHeader(bool cpuTime) {
  const char* t = cpuTime ? "cputime" : "time";
  return {
      format("# %10s  %12s  %8s  %6s  %6s%11s%s%23s%s", "", "", "", "", "", "", "out-of-place", "", "in-place"),
      format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s", "size", "count", "type", "redop",
             "root", t, "algbw", "busbw", "#wrong", t, "algbw", "busbw", "#wrong"),
      format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s", "(B)", "(elements)", "", "", "",
             "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)"),
  };
}

std::string formatRowStart(size_t size, size_t count, const std::string& type, const std::string& redop, int root) {
  return format("%12zu  %12zu  %8s  %6s  %6s", size, count, type.c_str(), redop.c_str(),
                format("%d", root).c_str());
}

std::string formatHalf(const HalfResult& h) {
  std::string t = formatTime(h.timeUs), a = fitNumber(h.algBw, 6), b = fitNumber(h.busBw, 6);
  if (!h.checked) return format("  %7s  %6s  %6s    N/A", t.c_str(), a.c_str(), b.c_str());
  return format("  %7s  %6s  %6s  %5g", t.c_str(), a.c_str(), b.c_str(), double(h.wrong));
}

int finalExitCode(uint64_t errorResults, bool bwOk) { return errorResults > 0 || !bwOk ? kWrongResults : kOk; }

Report::Report(const Options& o, RunInfo info, bool printer) : opt_(o), info_(std::move(info)), printer_(printer) {
  // nccl-tests' CI gate: fail when the average bus bandwidth is below 90% of this.
  if (const char* e = std::getenv("NCCL_TESTS_MIN_BW")) {
    haveMinBw_ = true;
    minBw_ = std::strtod(e, nullptr);
  }
}

void Report::print(const std::string& s) const {
  if (printer_) std::fputs(s.c_str(), stdout);
}

void Report::header(const std::vector<DevRec>& devs, bool maxReduced, const std::vector<std::string>& notes) {
  devs_ = devs;
  int version = 0;
  ncclGetVersion(&version);
  print(format("# nccl-tests version 2.19.6 nccl-headers=%d nccl-library=%d\n", NCCL_VERSION_CODE, version));
  print("# Collective test starting: " + info_.prog + "\n");
  print(format("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
               "agg iters: %d validation: %d graph: 0 unalign: %d\n",
               opt_.nThreads, opt_.nGpus, opt_.minBytes, opt_.maxBytes,
               opt_.stepFactor > 1 ? size_t(opt_.stepFactor) : opt_.stepBytes,
               opt_.stepFactor > 1 ? "factor" : "bytes", opt_.warmup, opt_.iters, opt_.aggIters, opt_.check,
               opt_.unalign));
  print("#\n# Using devices\n");
  for (const DevRec& d : devs) print(formatDevice(d) + "\n");
  if (maxReduced) print(format("#\n# Reducing maxBytes to %zu due to memory limitation\n", info_.maxBytes));
  for (const std::string& n : notes) print(n + "\n");
  print("#\n");
  for (const std::string& l : tableHeader(opt_.cpuTime)) print(l + "\n");
  if (printer_) std::fflush(stdout);
}

void Report::startRow(const RowResult& r) {
  cur_ = r;
  print(formatRowStart(r.size, r.count, r.type, r.redop, r.root));
}

void Report::addHalf(int placement, const HalfResult& h) {
  cur_.half[placement] = h;
  bwSum_ += h.busBw;
  ++bwCount_;
  print(formatHalf(h));
}

void Report::endRow() {
  if (opt_.timestamps) {
    char ts[32];
    time_t now = time(nullptr);
    struct tm tmv;
    localtime_r(&now, &tmv);
    std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S", &tmv);
    print(std::string("  ") + ts);
  }
  print("\n");
  if (printer_) {
    std::fflush(stdout);
    rows_.push_back(cur_);
  }
  ++rowsDone_;
}

int Report::finish(uint64_t errorResults) {
  const double avg = bwCount_ ? bwSum_ / double(bwCount_) : 0.0;
  bwOk_ = !haveMinBw_ || avg >= 0.9 * minBw_;
  print(format("# %-20s : %llu %s\n", "Out of bounds values", (unsigned long long)errorResults,
               errorResults ? "FAILED" : "OK"));
  print(format("# %-20s : %g %s\n", "Avg bus bandwidth", avg, haveMinBw_ ? (bwOk_ ? "OK" : "FAILED") : ""));
  print("#\n# Collective test concluded: " + info_.prog + "\n");
  if (printer_) std::fflush(stdout);
  return finalExitCode(errorResults, bwOk_);
}

bool Report::writeJson(const std::string& path, uint64_t errorResults) const {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "{\n  \"config\": %s,\n  \"devices\": [", jsonConfig(opt_, info_).c_str());
  for (size_t i = 0; i < devs_.size(); ++i) {
    const DevRec& d = devs_[i];
    std::fprintf(f, "%s\n    {\"rank\": %d, \"group\": 0, \"pid\": %d, \"host\": %s, \"device\": %d, "
                 "\"bus_id\": \"0000:00:00\", \"name\": \"host memory (CPU)\"}",
                 i ? "," : "", d.rank, d.pid, jsonString(d.host).c_str(), d.dev);
  }
  std::fprintf(f, "\n  ],\n  \"results\": [");
  for (size_t i = 0; i < rows_.size(); ++i) {
    const RowResult& r = rows_[i];
    std::fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": %s, \"redop\": %s, \"root\": %d, "
                 "\"out_of_place\": %s, \"in_place\": %s}",
                 i ? "," : "", r.size, r.count, jsonString(r.type).c_str(), jsonString(r.redop).c_str(), r.root,
                 jsonHalf(r.half[0]).c_str(), jsonHalf(r.half[1]).c_str());
  }
  const double avg = bwCount_ ? bwSum_ / double(bwCount_) : 0.0;
  std::fprintf(f, "\n  ],\n  \"out_of_bounds\": {\"count\": %llu, \"okay\": %s},\n",
               (unsigned long long)errorResults, errorResults ? "false" : "true");
  std::fprintf(f, "  \"average_bus_bandwidth\": {\"bandwidth\": %s, \"min_bw\": %s, \"okay\": %s}\n}\n",
               jsonNumber(avg).c_str(), haveMinBw_ ? jsonNumber(minBw_).c_str() : "null", bwOk_ ? "true" : "false");
  return std::fclose(f) == 0;
}

}  // namespace snperf
