// ModeSwitch (mode_switch.h).
#include "transport/net/compress/mode_switch.h"

#include <algorithm>

namespace snccl::net::compress {

void ModeSwitch::completed(int64_t now, bool idle) {
  const bool full = windowBytes_ >= window_;
  if (activeSince_ != 0 && (idle || full)) {
    activeNs_ += now - activeSince_;
    activeSince_ = idle ? 0 : now;
    if (idle) idleSince_ = now;
  }
  if (full && activeNs_ > 0) closeWindow();
}

void ModeSwitch::closeWindow() {
  const double r = double(windowBytes_) * 1e9 / double(activeNs_);
  windowBytes_ = 0;
  activeNs_ = 0;
  // The first window pays for warming up (staging buffers faulted in at both ends, TCP's
  // slow start): not a measure of its mode.
  if (++windows_ == 1) return;
  rate_[mode_] = rate_[mode_] > 0 ? 0.5 * (rate_[mode_] + r) : r;
  const Mode other = mode_ == kCompress ? kRaw : kCompress;
  // A window in the slower mode costs in proportion to how much slower it is: explore the
  // more rarely the clearer the difference (every exploreEvery x ratio^2 windows, at most
  // 64 times as rarely).
  const double hi = std::max(rate_[kCompress], rate_[kRaw]), lo = std::min(rate_[kCompress], rate_[kRaw]);
  const double ratio = lo > 0 ? hi / lo : 1.0;
  const int64_t interval = int64_t(exploreEvery_) * int64_t(std::min(64.0, ratio * ratio));
  if (rate_[other] == 0 || (exploreEvery_ > 0 && ++sinceExplore_ >= interval)) {
    mode_ = other;  // measure it (again)
    sinceExplore_ = 0;
  } else {
    mode_ = rate_[kCompress] >= rate_[kRaw] ? kCompress : kRaw;
  }
}

}  // namespace snccl::net::compress
