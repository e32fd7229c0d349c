// hwloc XML exports (NCCL_TOPO_FILE, sn_topo) up to the point where libhwloc would get
// them: parseXml, then checkHwlocXml. The hwloc load itself is not run: its entry point
// takes a path, and the check exists so that libhwloc only sees what passes here.
// A parse that succeeds stays within the depth and element caps; a document that passes
// the check has exactly what hwloc_check.h promises (one Machine/System root object with
// its four sets, and a NUMANode).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "topology/hwloc_check.h"
#include "topology/limits.h"
#include "topology/xml.h"

namespace {

using snccl::topo::XmlElement;

// Elements in the tree, and whether it is nested deeper than kXmlMaxDepth.
void walk(const XmlElement& el, int depth, size_t* count, int* numaNodes) {
  FUZZ_CHECK(depth < snccl::topo::kXmlMaxDepth, "element <%s> at depth %d", el.name.c_str(), depth);
  FUZZ_CHECK(!el.name.empty() && el.line >= 1, "element '%s' at line %d", el.name.c_str(), el.line);
  ++*count;
  const std::string* type = el.attr("type");
  if (el.name == "object" && type != nullptr && *type == "NUMANode") ++*numaNodes;
  for (const XmlElement& c : el.children) {
    FUZZ_CHECK(c.line >= el.line, "child at line %d of an element at line %d", c.line, el.line);
    walk(c, depth + 1, count, numaNodes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  snccl::Result<XmlElement> root = snccl::topo::parseXml(text, "fuzz.xml");
  if (!root.ok()) {
    FUZZ_CHECK(root.status().message().starts_with("fuzz.xml"), "error without the source: %s",
               root.status().message().c_str());
    return 0;
  }
  size_t elements = 0;
  int numaNodes = 0;
  walk(root.value(), 0, &elements, &numaNodes);
  FUZZ_CHECK(elements <= snccl::topo::kMaxXmlElements, "%zu elements", elements);

  if (!snccl::topo::checkHwlocXml(root.value(), "fuzz.xml").ok()) return 0;
  const XmlElement* top = nullptr;
  for (const XmlElement& c : root->children) {
    if (c.name != "object") continue;
    FUZZ_CHECK(top == nullptr, "a second root <object> passed the check");
    top = &c;
  }
  FUZZ_CHECK(top != nullptr, "no root <object> passed the check");
  const std::string* type = top->attr("type");
  FUZZ_CHECK(type != nullptr && (*type == "Machine" || *type == "System"), "root object of type %s",
             type == nullptr ? "(none)" : type->c_str());
  for (const char* key : {"cpuset", "complete_cpuset", "nodeset", "complete_nodeset"})
    FUZZ_CHECK(top->attr(key) != nullptr, "root object without %s", key);
  FUZZ_CHECK(numaNodes > 0, "no NUMANode passed the check");
  return 0;
}
