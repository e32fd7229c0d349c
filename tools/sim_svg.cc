// SVG writer for sn_sim (sim_svg.h); the layout follows perf/compare's plots.
#include "sim_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "collectives/tuning/selector.h"

namespace snccl::sim {

namespace {
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}
}  // namespace

std::string busbwSvg(const std::string& title, const std::vector<Series>& series) {
  const double W = 720, H = 420, L = 70, R = 160, T = 40, B = 50;
  double xmin = 1e300, xmax = 0, ymin = 1e300, ymax = 0;
  for (const Series& s : series)
    for (const auto* v : {&s.sim, &s.model})
      for (auto [x, y] : *v) {
        xmin = std::min(xmin, x), xmax = std::max(xmax, x);
        ymin = std::min(ymin, y), ymax = std::max(ymax, y);
      }
  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"720\" height=\"420\" font-family=\"sans-serif\" "
       "font-size=\"12\">\n<rect width=\"720\" height=\"420\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(W / 2 - R / 2) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" + title + "</text>\n";
  if (xmax <= 0) return o + "</svg>\n";
  const double x0 = std::log2(xmin), x1 = std::log2(xmax);
  const double y0 = std::floor(std::log10(ymin)), y1 = std::max(std::ceil(std::log10(ymax)), y0 + 1);
  auto X = [&](double b) { return L + (std::log2(b) - x0) / std::max(x1 - x0, 1.0) * (W - L - R); };
  auto Y = [&](double bw) { return H - B - (std::log10(bw) - y0) / (y1 - y0) * (H - T - B); };
  for (double e = y0; e <= y1; ++e) {
    const double y = Y(std::pow(10, e));
    char lab[32];
    std::snprintf(lab, sizeof lab, "%g", std::pow(10, e));
    o += "<line x1=\"" + num(L) + "\" y1=\"" + num(y) + "\" x2=\"" + num(W - R) + "\" y2=\"" + num(y) +
         "\" stroke=\"#ddd\"/>\n<text x=\"" + num(L - 6) + "\" y=\"" + num(y + 4) + "\" text-anchor=\"end\">" + lab +
         "</text>\n";
  }
  for (double lg = std::ceil(x0); lg <= x1; lg += 4)
    o += "<text x=\"" + num(X(std::pow(2, lg))) + "\" y=\"" + num(H - B + 16) + "\" text-anchor=\"middle\">" +
         tuning::sizeLabel(size_t(std::pow(2, lg))) + "</text>\n";
  o += "<text x=\"" + num((L + W - R) / 2) + "\" y=\"" + num(H - 10) + "\" text-anchor=\"middle\">message size (B)</text>\n";
  o += "<text x=\"16\" y=\"" + num(H / 2) + "\" transform=\"rotate(-90 16 " + num(H / 2) +
       ")\" text-anchor=\"middle\">busbw (GB/s)</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const std::string c = kColors[i % (sizeof kColors / sizeof kColors[0])];
    for (int model = 0; model < 2; ++model) {
      const auto& pts = model ? series[i].model : series[i].sim;
      if (pts.empty()) continue;
      std::string d;
      for (auto [x, y] : pts) d += num(X(x)) + "," + num(Y(y)) + " ";
      o += "<polyline fill=\"none\" stroke=\"" + c + "\" stroke-width=\"2\"" +
           (model ? " stroke-dasharray=\"5,4\" stroke-opacity=\"0.6\"" : "") + " points=\"" + d + "\"/>\n";
    }
    const double ly = T + 20 * double(i);
    o += "<line x1=\"" + num(W - R + 10) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(W - R + 30) + "\" y2=\"" + num(ly) +
         "\" stroke=\"" + c + "\" stroke-width=\"2\"/><text x=\"" + num(W - R + 36) + "\" y=\"" + num(ly + 4) + "\">" +
         series[i].name + "</text>\n";
  }
  const double ly = T + 20 * double(series.size());
  o += "<text x=\"" + num(W - R + 10) + "\" y=\"" + num(ly + 4) + "\">solid: sim, dashed: model</text>\n";
  return o + "</svg>\n";
}

}  // namespace snccl::sim
