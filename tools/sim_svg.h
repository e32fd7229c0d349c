// sn_sim's picture: busbw vs message size (log-log), one colour per algorithm; solid lines
// are simulated points, dashed lines the cost model's predictions. Plain SVG text.
#pragma once

#include <string>
#include <vector>

namespace snccl::sim {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> sim, model;  // (bytes, busbw GB/s), bw > 0
};

std::string busbwSvg(const std::string& title, const std::vector<Series>& series);

}  // namespace snccl::sim
