// sn_top: a live view of the traffic of every communicator whose ranks keep their counters
// in a directory (SNCCL_STATS_DIR): per rank and peer, the link, the rates each way, the
// share of time spent waiting for data or for credits, and what each rail (interface) of
// a net connection carried. --svg draws a run's totals.
//
//   sn_top DIR                  refresh every second until interrupted
//   sn_top -i 0.5 -n 10 DIR     ten refreshes, half a second apart
//   sn_top --once DIR           totals since each communicator started, once
//   sn_top --svg out.svg DIR    the rank x rank matrix and the links, as SVG
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "traffic_stats.h"

namespace {

namespace tr = snccl::traffic;

void usage() {
  std::printf(
      "usage: sn_top [-i SECONDS] [-n COUNT] [--once] [--svg FILE] DIR\n"
      "Shows the traffic counters snccl communicators keep in DIR (SNCCL_STATS_DIR): per rank and\n"
      "peer, the link, bytes and messages each way, the time waiting for data or credits, and\n"
      "the bytes each rail (interface) of a net connection carried.\n"
      "  -i SECONDS  refresh interval (default 1); rates are over it\n"
      "  -n COUNT    refreshes before exiting (default: until interrupted)\n"
      "  --once      totals since each communicator started, then exit\n"
      "  --svg FILE  write each communicator's totals as a picture (FILE, or FILE-<hash>.svg for\n"
      "              several communicators), then exit\n");
}

std::vector<tr::RankCounters> readAll(const std::string& dir) {
  std::vector<tr::RankCounters> out;
  for (const std::string& f : tr::counterFiles(dir)) {
    tr::RankCounters r;
    std::string err;
    if (tr::readCounters(f, &r, &err)) {
      out.push_back(std::move(r));
    } else {
      std::fprintf(stderr, "sn_top: %s: %s\n", f.c_str(), err.c_str());
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  double interval = 1.0;
  long count = -1;
  bool once = false;
  std::string svg, dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "-i" || a == "-n" || a == "--svg") && i + 1 >= argc) {
      usage();
      return 2;
    }
    if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else if (a == "-i") {
      interval = std::atof(argv[++i]);
    } else if (a == "-n") {
      count = std::atol(argv[++i]);
    } else if (a == "--once") {
      once = true;
    } else if (a == "--svg") {
      svg = argv[++i];
    } else {
      dir = a;
    }
  }
  if (dir.empty() || interval <= 0) {
    usage();
    return 2;
  }
  if (!svg.empty() || once) {
    const auto comms = tr::byComm(readAll(dir));
    if (comms.empty()) {
      std::fprintf(stderr, "sn_top: no counter file in %s\n", dir.c_str());
      return 1;
    }
    for (const auto& [hash, ranks] : comms) {
      if (once) {
        std::printf("communicator %016llx (%zu of %d ranks)\n%s", (unsigned long long)hash, ranks.size(),
                    ranks[0].nranks, tr::renderTable(ranks, nullptr, 0).c_str());
        continue;
      }
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, "-%016llx.svg", (unsigned long long)hash);
      const std::string path = comms.size() == 1 ? svg : svg + suffix;
      FILE* f = std::fopen(path.c_str(), "w");
      const std::string text = tr::renderSvg(ranks);
      if (f == nullptr || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) {
        std::fprintf(stderr, "sn_top: cannot write %s\n", path.c_str());
        return 1;
      }
      std::printf("%s\n", path.c_str());
    }
    return 0;
  }
  const bool tty = isatty(STDOUT_FILENO) != 0;
  std::vector<tr::RankCounters> before = readAll(dir);
  for (long k = 0; count < 0 || k < count; ++k) {
    std::this_thread::sleep_for(std::chrono::duration<double>(interval));
    std::vector<tr::RankCounters> now = readAll(dir);
    if (tty) std::printf("\033[H\033[2J");
    for (const auto& [hash, ranks] : tr::byComm(now)) {
      std::printf("communicator %016llx (%zu of %d ranks), per second over %.1f s\n", (unsigned long long)hash,
                  ranks.size(), ranks[0].nranks, interval);
      std::printf("%s\n", tr::renderTable(ranks, &before, interval).c_str());
    }
    std::fflush(stdout);
    before = std::move(now);
  }
  return 0;
}
