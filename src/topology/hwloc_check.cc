// Structural checks of an hwloc XML export (see hwloc_check.h for why).
#include "topology/hwloc_check.h"

#include <string_view>
#include <vector>

#include "topology/limits.h"

namespace snccl::topo {
namespace {

// An hwloc bitmap "0x000000ff,0xffffffff" (hwloc 2) or "0x3" : finite and no wider than
// kMaxCpuId + 1 bits. hwloc writes an infinite set as "0xf...f,...".
bool boundedSet(std::string_view v) {
  if (v.find("f...f") != std::string_view::npos) return false;
  size_t words = 1;
  for (char c : v) words += c == ',';
  // Each word is 32 bits; the leading word may be partial.
  return words <= static_cast<size_t>(kMaxCpuId + 1) / 32;
}

class Checker {
 public:
  explicit Checker(const std::string& source) : source_(source) {}

  Status run(const XmlElement& root) {
    std::vector<const XmlElement*> objects;
    for (const XmlElement& c : root.children)
      if (c.name == "object") objects.push_back(&c);
    if (objects.size() != 1) {
      return InvalidArgument("%s:%d: hwloc XML needs exactly one root <object>, found %zu", source_.c_str(),
                             root.line, objects.size());
    }
    const XmlElement& top = *objects[0];
    const std::string* type = top.attr("type");
    if (type == nullptr || (*type != "Machine" && *type != "System")) {
      return InvalidArgument("%s:%d: the root <object> must be of type Machine, not %s", source_.c_str(), top.line,
                             type == nullptr ? "(none)" : type->c_str());
    }
    for (const char* key : {"cpuset", "complete_cpuset", "nodeset", "complete_nodeset"}) {
      if (top.attr(key) == nullptr) {
        return InvalidArgument("%s:%d: the root <object type=\"%s\"> has no %s (hwloc exports always carry it)",
                               source_.c_str(), top.line, type->c_str(), key);
      }
    }
    SNCCL_TRY(object(top));
    if (numaNodes_ == 0) {
      return InvalidArgument("%s: hwloc XML without any NUMANode object (every hwloc export has at least one)",
                             source_.c_str());
    }
    return OkStatus();
  }

 private:
  Status pair(const XmlElement& el, const char* a, const char* b) {
    if ((el.attr(a) == nullptr) != (el.attr(b) == nullptr)) {
      return InvalidArgument("%s:%d: <object> has %s without %s", source_.c_str(), el.line,
                             el.attr(a) != nullptr ? a : b, el.attr(a) != nullptr ? b : a);
    }
    return OkStatus();
  }

  Status object(const XmlElement& el) {
    SNCCL_TRY(pair(el, "cpuset", "complete_cpuset"));
    SNCCL_TRY(pair(el, "nodeset", "complete_nodeset"));
    for (const auto& [k, v] : el.attrs) {
      bool isSet = std::string_view(k).ends_with("cpuset") || std::string_view(k).ends_with("nodeset");
      if (isSet && !boundedSet(v)) {
        return InvalidArgument("%s:%d: %s=\"%.40s\" is infinite or names ids above %d", source_.c_str(), el.line,
                               k.c_str(), v.c_str(), kMaxCpuId);
      }
    }
    if (const std::string* t = el.attr("type"); t != nullptr && *t == "NUMANode") ++numaNodes_;
    for (const XmlElement& c : el.children)
      if (c.name == "object") SNCCL_TRY(object(c));
    return OkStatus();
  }

  const std::string& source_;
  size_t numaNodes_ = 0;
};

}  // namespace

Status checkHwlocXml(const XmlElement& root, const std::string& source) { return Checker(source).run(root); }

}  // namespace snccl::topo
