// SVG picture of a System: the PCIe tree top-down (CPUs at the top, one column per leaf),
// the NVSwitch as a bar below the GPUs, NVLinks in green, the CPU interconnect dashed red,
// and the ring as numbered orange arrows between its endpoints.
#include <algorithm>
#include <map>

#include "topology/render.h"
#include "topology/xml.h"

namespace snccl::topo {
namespace {

constexpr double kColW = 132, kRowH = 78, kBoxW = 118, kBoxH = 44, kMargin = 24;

struct Box {
  double x = 0, y = 0;  // centre
};

class Svg {
 public:
  explicit Svg(const System& sys) : sys_(sys), box_(static_cast<size_t>(sys.size())) {}

  std::string render(std::span<const int> ring) {
    double leaves = 0;
    int depth = 0;
    for (int c : sys_.cpus()) place(c, 0, &leaves, &depth);
    double width = std::max(leaves, 1.0) * kColW + 2 * kMargin;
    double nvsY = kMargin + (depth + 1) * kRowH + kBoxH / 2;
    double height = nvsY + (sys_.nvs() >= 0 ? kRowH : 0) + kMargin + 20;
    if (sys_.nvs() >= 0) box_[static_cast<size_t>(sys_.nvs())] = {width / 2, nvsY};
    out_ = format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
                  "font-size=\"11\">\n",
                  width, height);
    out_ += "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" markerWidth=\"6\" markerHeight=\"6\" "
            "orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 z\" fill=\"#e8590c\"/></marker></defs>\n";
    out_ += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    links();
    for (int i = 0; i < sys_.size(); ++i)
      if (sys_.node(i).type != NodeType::kNvs) node(i);
    if (sys_.nvs() >= 0) nvs(width);
    drawRing(ring);
    out_ += format("<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">%zu GPUs, %zu NICs, %zu CPU nodes%s</text>\n", kMargin,
                   height - 8, sys_.gpus().size(), sys_.nics().size(), sys_.cpus().size(),
                   ring.empty() ? "" : "; orange: ring order");
    out_ += "</svg>\n";
    return std::move(out_);
  }

 private:
  // Post-order: a parent sits above the middle of its children.
  void place(int id, int d, double* leaves, int* depth) {
    *depth = std::max(*depth, d);
    const Node& n = sys_.node(id);
    double y = kMargin + d * kRowH + kBoxH / 2;
    if (n.children.empty()) {
      box_[static_cast<size_t>(id)] = {kMargin + (*leaves + 0.5) * kColW, y};
      *leaves += 1;
      return;
    }
    for (int c : n.children) place(c, d + 1, leaves, depth);
    double x0 = box_[static_cast<size_t>(n.children.front())].x, x1 = box_[static_cast<size_t>(n.children.back())].x;
    box_[static_cast<size_t>(id)] = {(x0 + x1) / 2, y};
  }

  const Box& at(int id) const { return box_[static_cast<size_t>(id)]; }

  void line(int a, int b, const char* color, double w, const char* extra, double bw) {
    out_ += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\" %s/>\n", at(a).x,
                   at(a).y, at(b).x, at(b).y, color, w, extra);
    if (bw > 0) {
      out_ += format("<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" font-size=\"9\">%.0f</text>\n", (at(a).x + at(b).x) / 2 + 3,
                     (at(a).y + at(b).y) / 2, color, bw);
    }
  }

  void links() {
    std::map<std::pair<int, int>, bool> done;
    for (int a = 0; a < sys_.size(); ++a) {
      for (const Link& l : sys_.links(a)) {
        if (!done.emplace(std::minmax(a, l.to), true).second) continue;
        switch (l.type) {
          case LinkType::kPci: line(a, l.to, "#888", 1.5, "", 0); break;
          case LinkType::kSys: line(a, l.to, "#c92a2a", 2, "stroke-dasharray=\"6,4\"", l.bw); break;
          case LinkType::kNvl:
          case LinkType::kC2c:
            if (sys_.node(a).type == NodeType::kGpu && sys_.node(l.to).type == NodeType::kGpu) {
              arc(a, l.to, "#2b8a3e", l.bw);
            } else if (a == sys_.nvs() || l.to == sys_.nvs()) {
              drop(a == sys_.nvs() ? l.to : a, l.bw);
            } else {
              line(a, l.to, "#2b8a3e", 2.5, "stroke-opacity=\"0.6\"", 0);
            }
            break;
          case LinkType::kLoc: line(a, l.to, "#888", 1, "stroke-dasharray=\"2,2\"", 0); break;
        }
      }
    }
  }

  // A GPU's NVLinks to the NVSwitch bar: straight down from the box.
  void drop(int gpu, double bw) {
    const Box& g = at(gpu);
    double y0 = g.y + kBoxH / 2, y1 = at(sys_.nvs()).y - kBoxH / 2;
    out_ += format("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#2b8a3e\" stroke-width=\"3\"/>\n", g.x, y0,
                   g.x, y1);
    out_ += format("<text x=\"%.1f\" y=\"%.1f\" fill=\"#2b8a3e\" font-size=\"9\">%.0f</text>\n", g.x + 3, (y0 + y1) / 2, bw);
  }

  void arc(int a, int b, const char* color, double bw) {
    double mx = (at(a).x + at(b).x) / 2, my = std::max(at(a).y, at(b).y) + kBoxH / 2 + 12 + std::abs(at(a).x - at(b).x) / 8;
    out_ += format("<path d=\"M%.1f,%.1f Q%.1f,%.1f %.1f,%.1f\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\"/>\n",
                   at(a).x, at(a).y + kBoxH / 2, mx, my, at(b).x, at(b).y + kBoxH / 2, color);
    out_ += format("<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\" font-size=\"9\">%.0f</text>\n", mx, my - 2, color, bw);
  }

  void node(int id) {
    const Node& n = sys_.node(id);
    const char* fill = "#f1f3f5";
    std::string title = sys_.label(id), sub;
    switch (n.type) {
      case NodeType::kCpu: fill = "#d0ebff"; sub = format("NUMA %d", n.cpu.numaId); break;
      case NodeType::kGpu: fill = "#d3f9d8"; sub = n.pci.busId; break;
      case NodeType::kNic: fill = "#fff3bf"; sub = sys_.nicName(id); break;
      case NodeType::kPci:
        title = n.pciKind == PciKind::kHostBridge ? "host bridge" : n.pciKind == PciKind::kSwitch ? "PCIe switch" : "PCI";
        sub = n.pci.busId;
        break;
      case NodeType::kNvs: break;
    }
    const Box& b = at(id);
    out_ += format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" rx=\"6\" fill=\"%s\" stroke=\"#495057\"/>\n",
                   b.x - kBoxW / 2, b.y - kBoxH / 2, kBoxW, kBoxH, fill);
    out_ += format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>\n", b.x, b.y - 4,
                   xmlEscape(title).c_str());
    out_ += format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"9\">%s</text>\n", b.x, b.y + 11,
                   xmlEscape(sub.substr(0, 22)).c_str());
  }

  void nvs(double width) {
    const Node& n = sys_.node(sys_.nvs());
    const Box& b = at(sys_.nvs());
    out_ += format("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.0f\" height=\"%.0f\" rx=\"6\" fill=\"#b2f2bb\" stroke=\"#2b8a3e\"/>\n",
                   kMargin, b.y - kBoxH / 2, width - 2 * kMargin, kBoxH);
    out_ += format("<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">NVSwitch (%zu chips)</text>\n",
                   b.x, b.y + 4, n.nvSwitches.size());
  }

  void drawRing(std::span<const int> ring) {
    if (ring.size() < 2) return;
    for (size_t i = 0; i < ring.size(); ++i) {
      const Box& a = at(ring[i]);
      const Box& b = at(ring[(i + 1) % ring.size()]);
      // Bend every hop above the boxes so the ring does not hide the tree's links.
      double mx = (a.x + b.x) / 2, my = std::min(a.y, b.y) - kBoxH / 2 - 10 - std::abs(a.x - b.x) / 10;
      out_ += format("<path d=\"M%.1f,%.1f Q%.1f,%.1f %.1f,%.1f\" fill=\"none\" stroke=\"#e8590c\" stroke-width=\"3\" "
                     "stroke-opacity=\"0.85\" marker-end=\"url(#arrow)\"/>\n",
                     a.x, a.y - kBoxH / 2, mx, my, b.x, b.y - kBoxH / 2);
      out_ += format("<text x=\"%.1f\" y=\"%.1f\" fill=\"#e8590c\" font-weight=\"bold\">%zu</text>\n", a.x + kBoxW / 2 - 12,
                     a.y - kBoxH / 2 + 12, i);
    }
  }

  const System& sys_;
  std::vector<Box> box_;
  std::string out_;
};

}  // namespace

std::string renderSvg(const System& sys, std::span<const int> ring) { return Svg(sys).render(ring); }

}  // namespace snccl::topo
