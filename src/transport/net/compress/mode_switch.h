// Whether compressing pays on one connection (compress_net.h): a compressed message is
// smaller on the wire but costs CPU time at both ends, so on a link faster than the codec
// sending the message as it is wins. ModeSwitch measures instead of guessing: the
// connection's sending throughput, in original bytes per second of the time it was busy
// (a message waiting to go or in flight), over windows of `windowBytes`, for each mode;
// after one window of each (and a first, compressing, that only warms up) it keeps the
// faster mode, and now and then (every `exploreEvery` windows, less often the larger the
// difference) it tries the other for one window, so a link or data that changes is followed.
//
// The clock runs while a message waits to go or is in flight, and through idle gaps shorter
// than `maxGapNs` (20 ms): a sender is often idle only because its next message depends on
// data still crossing the link from its peer (a ring's next step), and those gaps are the
// link's time. Longer gaps are the application's (computing between calls) and do not
// count. Waiting for the receiver's credit counts too: a slow receiver (decompressing) is a
// cost of the mode.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snccl::net::compress {

class ModeSwitch {
 public:
  explicit ModeSwitch(uint64_t windowBytes = uint64_t(32) << 20, int exploreEvery = 16, int64_t maxGapNs = 20'000'000)
      : window_(windowBytes), exploreEvery_(exploreEvery), maxGap_(maxGapNs) {}

  bool compress() const { return mode_ == kCompress; }
  // A message is waiting to go at time `now` (ns): the connection is busy from then on.
  void pending(int64_t now) {
    if (activeSince_ != 0) return;
    if (idleSince_ != 0 && now - idleSince_ < maxGap_) activeNs_ += now - idleSince_;
    activeSince_ = now;
  }
  // A message of `rawBytes` started.
  void started(size_t rawBytes) { windowBytes_ += rawBytes; }
  // A send completed at `now`; `idle` when nothing is waiting or in flight anymore.
  void completed(int64_t now, bool idle);
  // The measured throughput of a mode (bytes/s), 0 before its first window.
  double rate(bool compressMode) const { return rate_[compressMode ? kCompress : kRaw]; }
  int windows() const { return windows_; }

 private:
  enum Mode { kCompress = 0, kRaw = 1 };
  void closeWindow();

  uint64_t window_;
  int exploreEvery_;
  int64_t maxGap_;
  Mode mode_ = kCompress;
  double rate_[2] = {0, 0};
  int windows_ = 0;
  int64_t sinceExplore_ = 0;  // windows since the last one in the slower mode
  uint64_t windowBytes_ = 0;
  int64_t activeNs_ = 0;     // busy time of the current window, closed intervals
  int64_t activeSince_ = 0;  // start of the open busy interval (0: idle)
  int64_t idleSince_ = 0;    // when the connection last became idle
};

}  // namespace snccl::net::compress
