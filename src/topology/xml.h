// A small XML reader for the topology formats (NCCL topology XML, and a well-formedness
// pass over hwloc XML before hwloc sees it, so errors carry line numbers).
//
// Supports what those files use: a prolog, comments, DOCTYPE (skipped), elements,
// attributes with the five predefined and numeric entities, character data and CDATA.
// Rejects anything malformed with "<source>:<line>: <reason>"; never crashes on garbage
// (nesting depth, element count and sizes are bounded, topology/limits.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "topology/limits.h"

namespace snccl::topo {

struct XmlElement {
  std::string name;
  int line = 0;
  std::vector<std::pair<std::string, std::string>> attrs;  // in document order
  std::vector<XmlElement> children;
  std::string text;  // character data directly inside this element

  // nullptr when absent.
  const std::string* attr(std::string_view key) const;
};

inline constexpr int kXmlMaxDepth = 128;

// Parses a document and returns its root element.
Result<XmlElement> parseXml(std::string_view text, const std::string& source);

// Reads a whole regular file of at most kMaxTopoFileBytes; FIFOs, devices and directories
// are refused without blocking.
Result<std::string> readTextFile(const std::string& path);
// Writes a whole file (truncating).
Status writeTextFile(const std::string& path, std::string_view text);

// Escapes &, <, >, " for an attribute value.
std::string xmlEscape(std::string_view s);

}  // namespace snccl::topo
