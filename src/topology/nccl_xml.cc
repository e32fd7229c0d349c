// NCCL topology XML reader and writer.
#include "topology/nccl_xml.h"

#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <utility>

#include "topology/limits.h"
#include "topology/xml.h"

namespace snccl::topo {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Decimal or 0x-hex integer, optional '-'; the whole text must be consumed.
bool parseI64(std::string_view s, int64_t* out) {
  s = trim(s);
  bool neg = !s.empty() && s.front() == '-';
  if (neg) s.remove_prefix(1);
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return false;
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  return true;
}

bool parseU64(std::string_view s, uint64_t* out) {
  s = trim(s);
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

bool parseDouble(std::string_view s, double* out) {
  s = trim(s);
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

// "16 GT/s", "32.0 GT/s PCIe", "" or "Unknown" (0: NCCL then assumes Gen3).
void parseLinkSpeed(std::string_view s, PciAttrs* pci) {
  s = trim(s);
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  pci->linkGts = (ec == std::errc() && v > 0) ? v : 0;
  pci->linkSpeedPcieSuffix = s.find("PCIe") != std::string_view::npos;
}

enum class PciRole { kGpu, kNic, kSwitch, kNvSwitch, kOther };

// NCCL matches the class by prefix (kvDictPciClass); a <gpu>/<nic> child decides first.
PciRole roleOf(int64_t cls, bool hasGpu, bool hasNic) {
  if (hasGpu) return PciRole::kGpu;
  if (hasNic) return PciRole::kNic;
  if (cls < 0) return PciRole::kOther;
  if (cls == 0x068000) return PciRole::kNvSwitch;
  if ((cls >> 8) == 0x0604) return PciRole::kSwitch;
  if ((cls >> 16) == 0x03 || cls == 0x120000 || cls == 0x0b4000) return PciRole::kGpu;
  if ((cls >> 16) == 0x02) return PciRole::kNic;
  return PciRole::kOther;
}

bool hasChild(const XmlElement& el, std::string_view name) {
  for (const XmlElement& c : el.children)
    if (c.name == name) return true;
  return false;
}

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  Result<System> read(const XmlElement& root) {
    if (root.name != "system") {
      return err(root, "root element is <%s>, expected <system>%s", root.name.c_str(),
                 root.name == "topology" ? " (this is an hwloc XML export)" : "");
    }
    const std::string* version = root.attr("version");
    int64_t v = 0;
    if (version == nullptr || !parseI64(*version, &v)) return err(root, "<system> needs a numeric version attribute");
    if (v != 1) return err(root, "topology XML version %lld is not supported (only 1)", static_cast<long long>(v));
    for (const XmlElement& c : root.children) {
      if (c.name == "cpu") {
        SNCCL_TRY(cpu(c));
      } else {
        ignored(c);
      }
    }
    Result<System> sys = std::move(b_).build();
    if (!sys.ok()) return Status(sys.status()).addContext(source_);
    return sys;
  }

 private:
  Status err(const XmlElement& el, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    va_list ap;
    va_start(ap, fmt);
    std::string msg = vformat(fmt, ap);
    va_end(ap);
    return InvalidArgument("%s:%d: %s", source_.c_str(), el.line, msg.c_str());
  }
  Status badAttr(const XmlElement& el, const std::string& key, const std::string& value, const char* what) {
    return err(el, "<%s %s=\"%s\">: %s", el.name.c_str(), key.c_str(), value.c_str(), what);
  }
  void ignored(const XmlElement& el) {
    b_.addNote(format("%s:%d: ignored unknown element <%s>", source_.c_str(), el.line, el.name.c_str()));
  }

  // Integer attribute; empty text leaves *out unchanged (NCCL treats "" as unset). A value
  // *out cannot hold is refused, not truncated.
  template <class T>
  Status intValue(const XmlElement& el, const std::string& key, const std::string& value, T* out) {
    if (trim(value).empty()) return OkStatus();
    int64_t v = 0;
    if (!parseI64(value, &v)) return badAttr(el, key, value, "not an integer");
    if (!std::in_range<T>(v)) return badAttr(el, key, value, "out of range");
    *out = static_cast<T>(v);
    return OkStatus();
  }
  // PCI classes and ids: unsigned, written back in hex; -1 (unknown) is the absent attribute.
  template <class T>
  Status pciId(const XmlElement& el, const std::string& key, const std::string& value, T* out) {
    SNCCL_TRY(intValue(el, key, value, out));
    if (*out < -1) return badAttr(el, key, value, "not a PCI class or id (negative)");
    return OkStatus();
  }

  Status cpu(const XmlElement& el) {
    CpuAttrs c;
    for (const auto& [k, v] : el.attrs) {
      if (k == "numaid") {
        SNCCL_TRY(intValue(el, k, v, &c.numaId));
      } else if (k == "affinity") {
        if (!parseAffinity(v).ok()) return badAttr(el, k, v, "not a cpu mask of comma-separated hex words");
        c.affinity = v;
      } else if (k == "arch") {
        c.arch = v;
      } else if (k == "vendor") {
        c.vendor = v;
      } else if (k == "familyid") {
        SNCCL_TRY(intValue(el, k, v, &c.familyId));
      } else if (k == "modelid") {
        SNCCL_TRY(intValue(el, k, v, &c.modelId));
      } else if (k != "host_hash") {  // host_hash is recomputed on load, as in NCCL
        c.extra.emplace_back(k, v);
      }
    }
    int id = b_.addCpu(std::move(c));
    int directNic = -1;  // NCCL merges all <nic> directly under a <cpu> into one NIC
    for (const XmlElement& ch : el.children) {
      if (ch.name == "pci") {
        SNCCL_TRY(pci(ch, id));
      } else if (ch.name == "nic") {
        if (directNic < 0) directNic = b_.addNic(id, PciAttrs{}, NicAttrs{});
        SNCCL_TRY(nic(ch, &b_.node(directNic).nic));
      } else {
        ignored(ch);
      }
    }
    return OkStatus();
  }

  Status pciAttrs(const XmlElement& el, PciAttrs* p) {
    for (const auto& [k, v] : el.attrs) {
      if (k == "busid") {
        p->busId = normalizeBusId(trim(v));
        if (p->busId.empty()) return badAttr(el, k, v, "not a PCI bus id (dddd:bb:dd.f)");
      } else if (k == "class") {
        SNCCL_TRY(pciId(el, k, v, &p->classCode));
      } else if (k == "vendor") {
        SNCCL_TRY(pciId(el, k, v, &p->vendor));
      } else if (k == "device") {
        SNCCL_TRY(pciId(el, k, v, &p->device));
      } else if (k == "subsystem_vendor") {
        SNCCL_TRY(pciId(el, k, v, &p->subsystemVendor));
      } else if (k == "subsystem_device") {
        SNCCL_TRY(pciId(el, k, v, &p->subsystemDevice));
      } else if (k == "link_speed") {
        parseLinkSpeed(v, p);
      } else if (k == "link_width") {
        SNCCL_TRY(intValue(el, k, v, &p->linkWidth));
        if (p->linkWidth < 0 || p->linkWidth > 64) return badAttr(el, k, v, "not a PCIe link width");
      } else {
        p->extra.emplace_back(k, v);
      }
    }
    if (p->busId.empty()) return err(el, "<pci> without a busid attribute");
    auto [it, fresh] = busLines_.emplace(p->busId, el.line);
    if (!fresh) return err(el, "bus id %s already used at line %d", p->busId.c_str(), it->second);
    return OkStatus();
  }

  Status pci(const XmlElement& el, int parent) {
    PciAttrs p;
    SNCCL_TRY(pciAttrs(el, &p));
    PciRole role = roleOf(p.classCode, hasChild(el, "gpu"), hasChild(el, "nic"));
    int id = -1;
    switch (role) {
      case PciRole::kGpu: id = b_.addGpu(parent, std::move(p), GpuAttrs{}); break;
      case PciRole::kNic: id = b_.addNic(parent, std::move(p), NicAttrs{}); break;
      case PciRole::kSwitch: id = b_.addPci(parent, PciKind::kSwitch, std::move(p)); break;
      case PciRole::kOther: id = b_.addPci(parent, PciKind::kOther, std::move(p)); break;
      case PciRole::kNvSwitch:
        // An NVSwitch listed in the PCI tree: its links come from the GPUs' <nvlink>s.
        b_.addNvSwitch(p.busId);
        if (!el.children.empty()) ignored(el.children.front());
        return OkStatus();
    }
    for (const XmlElement& ch : el.children) SNCCL_TRY(pciChild(ch, id));
    return OkStatus();
  }

  Status pciChild(const XmlElement& ch, int id) {
    Node& n = b_.node(id);
    if (ch.name == "pci") return pci(ch, id);
    if (ch.name == "gpu" && n.type == NodeType::kGpu) {
      if (n.gpu.present) return err(ch, "a second <gpu> in one <pci>");
      return gpu(ch, &b_.node(id).gpu);
    }
    if (ch.name == "nic" && n.type == NodeType::kNic) return nic(ch, &b_.node(id).nic);
    if (ch.name == "pcilink") {
      const std::string* t = ch.attr("target");
      if (t == nullptr || normalizeBusId(*t).empty()) return err(ch, "<pcilink> needs a target bus id");
      b_.node(id).pciLinks.push_back(normalizeBusId(*t));
      return OkStatus();
    }
    ignored(ch);
    return OkStatus();
  }

  Status gpu(const XmlElement& el, GpuAttrs* g) {
    g->present = true;
    for (const auto& [k, v] : el.attrs) {
      if (k == "dev") {
        SNCCL_TRY(intValue(el, k, v, &g->dev));
      } else if (k == "sm") {
        SNCCL_TRY(intValue(el, k, v, &g->sm));
      } else if (k == "rank") {
        SNCCL_TRY(intValue(el, k, v, &g->rank));
      } else if (k == "gdr") {
        SNCCL_TRY(intValue(el, k, v, &g->gdr));
      } else {
        g->extra.emplace_back(k, v);
      }
    }
    for (const XmlElement& ch : el.children) {
      if (ch.name == "nvlink") {
        NvLinkSpec s;
        const std::string* t = ch.attr("target");
        if (t == nullptr) return err(ch, "<nvlink> without a target");
        s.target = std::string(trim(*t));
        if (const std::string* c = ch.attr("count")) SNCCL_TRY(intValue(ch, "count", *c, &s.count));
        if (const std::string* c = ch.attr("tclass")) SNCCL_TRY(pciId(ch, "tclass", *c, &s.tclass));
        if (s.count < 0 || s.count > kMaxLinkCount) return err(ch, "<nvlink count=\"%d\">: not a link count", s.count);
        g->nvlinks.push_back(std::move(s));
      } else if (ch.name == "c2c") {
        C2cSpec c;
        if (const std::string* v = ch.attr("bw")) SNCCL_TRY(intValue(ch, "bw", *v, &c.bwMBs));
        if (const std::string* v = ch.attr("count")) SNCCL_TRY(intValue(ch, "count", *v, &c.count));
        g->c2c.push_back(c);
      } else {
        ignored(ch);
      }
    }
    return OkStatus();
  }

  Status net(const XmlElement& el, NetPort* p) {
    for (const auto& [k, v] : el.attrs) {
      if (k == "name") {
        p->name = v;
      } else if (k == "dev") {
        SNCCL_TRY(intValue(el, k, v, &p->dev));
      } else if (k == "speed") {
        SNCCL_TRY(intValue(el, k, v, &p->speedMbps));
      } else if (k == "port") {
        SNCCL_TRY(intValue(el, k, v, &p->port));
      } else if (k == "latency") {
        if (!trim(v).empty() && !parseDouble(v, &p->latency)) return badAttr(el, k, v, "not a number");
      } else if (k == "guid") {
        if (!parseU64(v, &p->guid)) return badAttr(el, k, v, "not an integer");
        p->hasGuid = true;
      } else if (k == "maxconn") {
        SNCCL_TRY(intValue(el, k, v, &p->maxConn));
      } else if (k == "gdr") {
        SNCCL_TRY(intValue(el, k, v, &p->gdr));
      } else if (k == "coll") {
        SNCCL_TRY(intValue(el, k, v, &p->coll));
      } else {
        p->extra.emplace_back(k, v);
      }
    }
    return OkStatus();
  }

  Status nic(const XmlElement& el, NicAttrs* n) {
    n->present = true;
    for (const XmlElement& ch : el.children) {
      if (ch.name != "net") {
        ignored(ch);
        continue;
      }
      NetPort p;
      SNCCL_TRY(net(ch, &p));
      n->nets.push_back(std::move(p));
    }
    return OkStatus();
  }

  const std::string& source_;
  SystemBuilder b_;
  std::map<std::string, int> busLines_;
};

// ---- writer ----

std::string hex(int64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

std::string shortest(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, p) : std::string("0");
}

std::string linkSpeedText(const PciAttrs& p) {
  char buf[32];
  if (p.linkSpeedPcieSuffix) {
    std::snprintf(buf, sizeof buf, "%.1f GT/s PCIe", p.linkGts);
  } else {
    std::snprintf(buf, sizeof buf, "%s GT/s", shortest(p.linkGts).c_str());
  }
  return buf;
}

class Writer {
 public:
  explicit Writer(const System& sys) : sys_(sys) {}

  std::string write() {
    out_ = "<system version=\"1\">\n";
    for (int cpu : sys_.cpus()) {
      const CpuAttrs& c = sys_.node(cpu).cpu;
      std::string a;
      if (c.numaId != -1) attr(&a, "numaid", std::to_string(c.numaId));
      if (!c.affinity.empty()) attr(&a, "affinity", c.affinity);
      if (!c.arch.empty()) attr(&a, "arch", c.arch);
      if (!c.vendor.empty()) attr(&a, "vendor", c.vendor);
      if (c.familyId != -1) attr(&a, "familyid", std::to_string(c.familyId));
      if (c.modelId != -1) attr(&a, "modelid", std::to_string(c.modelId));
      extras(&a, c.extra);
      open(1, "cpu", a, sys_.node(cpu).children.empty());
      for (int ch : sys_.node(cpu).children) child(ch, 2);
      if (!sys_.node(cpu).children.empty()) close(1, "cpu");
    }
    out_ += "</system>\n";
    return std::move(out_);
  }

 private:
  static void attr(std::string* a, const char* key, const std::string& value) {
    *a += ' ';
    *a += key;
    *a += "=\"";
    *a += xmlEscape(value);
    *a += '"';
  }
  static void extras(std::string* a, const Attrs& extra) {
    for (const auto& [k, v] : extra) attr(a, k.c_str(), v);
  }
  void open(int depth, const char* tag, const std::string& a, bool empty) {
    out_.append(static_cast<size_t>(depth) * 2, ' ');
    out_ += '<';
    out_ += tag;
    out_ += a;
    out_ += empty ? "/>\n" : ">\n";
  }
  void close(int depth, const char* tag) {
    out_.append(static_cast<size_t>(depth) * 2, ' ');
    out_ += "</";
    out_ += tag;
    out_ += ">\n";
  }

  static std::string pciAttrText(const PciAttrs& p) {
    std::string a;
    attr(&a, "busid", p.busId);
    if (p.classCode != -1) attr(&a, "class", hex(p.classCode, 6));
    if (p.vendor != -1) attr(&a, "vendor", hex(p.vendor, 4));
    if (p.device != -1) attr(&a, "device", hex(p.device, 4));
    if (p.subsystemVendor != -1) attr(&a, "subsystem_vendor", hex(p.subsystemVendor, 4));
    if (p.subsystemDevice != -1) attr(&a, "subsystem_device", hex(p.subsystemDevice, 4));
    if (p.linkGts > 0) attr(&a, "link_speed", linkSpeedText(p));
    if (p.linkWidth != 0) attr(&a, "link_width", std::to_string(p.linkWidth));
    extras(&a, p.extra);
    return a;
  }

  void child(int id, int depth) {
    const Node& n = sys_.node(id);
    if (n.type == NodeType::kPci && n.pciKind == PciKind::kHostBridge) {
      for (int ch : n.children) child(ch, depth);  // NCCL's format has no host bridges
      return;
    }
    if (n.type == NodeType::kNic && n.pci.busId.empty()) {
      nicBody(n.nic, depth);
      return;
    }
    bool body = !n.children.empty() || !n.pciLinks.empty() || (n.type == NodeType::kGpu && n.gpu.present) ||
                (n.type == NodeType::kNic && n.nic.present);
    open(depth, "pci", pciAttrText(n.pci), !body);
    if (!body) return;
    if (n.type == NodeType::kGpu && n.gpu.present) gpu(n.gpu, depth + 1);
    if (n.type == NodeType::kNic && n.nic.present) nicBody(n.nic, depth + 1);
    for (int ch : n.children) child(ch, depth + 1);
    for (const std::string& t : n.pciLinks) {
      std::string a;
      attr(&a, "target", t);
      open(depth + 1, "pcilink", a, true);
    }
    close(depth, "pci");
  }

  void gpu(const GpuAttrs& g, int depth) {
    std::string a;
    if (g.dev != -1) attr(&a, "dev", std::to_string(g.dev));
    if (g.sm != 0) attr(&a, "sm", std::to_string(g.sm));
    if (g.rank != -1) attr(&a, "rank", std::to_string(g.rank));
    if (g.gdr != -1) attr(&a, "gdr", std::to_string(g.gdr));
    extras(&a, g.extra);
    bool empty = g.nvlinks.empty() && g.c2c.empty();
    open(depth, "gpu", a, empty);
    for (const NvLinkSpec& s : g.nvlinks) {
      std::string l;
      attr(&l, "target", s.target);
      attr(&l, "count", std::to_string(s.count));
      if (s.tclass != -1) attr(&l, "tclass", hex(s.tclass, 6));
      open(depth + 1, "nvlink", l, true);
    }
    for (const C2cSpec& c : g.c2c) {
      std::string l;
      attr(&l, "bw", std::to_string(c.bwMBs));
      attr(&l, "count", std::to_string(c.count));
      open(depth + 1, "c2c", l, true);
    }
    if (!empty) close(depth, "gpu");
  }

  void nicBody(const NicAttrs& nic, int depth) {
    open(depth, "nic", "", nic.nets.empty());
    for (const NetPort& p : nic.nets) {
      std::string a;
      if (!p.name.empty()) attr(&a, "name", p.name);
      if (p.dev != -1) attr(&a, "dev", std::to_string(p.dev));
      if (p.speedMbps != -1) attr(&a, "speed", std::to_string(p.speedMbps));
      if (p.port != -1) attr(&a, "port", std::to_string(p.port));
      if (p.latency != -1) attr(&a, "latency", shortest(p.latency));
      if (p.hasGuid) attr(&a, "guid", hex(static_cast<int64_t>(p.guid), 1));
      if (p.maxConn != -1) attr(&a, "maxconn", std::to_string(p.maxConn));
      if (p.gdr != -1) attr(&a, "gdr", std::to_string(p.gdr));
      if (p.coll != -1) attr(&a, "coll", std::to_string(p.coll));
      extras(&a, p.extra);
      open(depth + 1, "net", a, true);
    }
    if (!nic.nets.empty()) close(depth, "nic");
  }

  const System& sys_;
  std::string out_;
};

}  // namespace

Result<System> readNcclXml(std::string_view text, const std::string& source) {
  SNCCL_ASSIGN_OR_RETURN(XmlElement root, parseXml(text, source));
  return Reader(source).read(root);
}

Result<System> readNcclXmlFile(const std::string& path) {
  SNCCL_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  return readNcclXml(text, path);
}

std::string writeNcclXml(const System& sys) { return Writer(sys).write(); }

Status writeNcclXmlFile(const System& sys, const std::string& path) {
  return writeTextFile(path, writeNcclXml(sys));
}

}  // namespace snccl::topo
