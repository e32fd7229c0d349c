// The XML reader and the error paths of every topology reader: well-formed input parses,
// malformed input gives "<file>:<line>: <reason>", truncations and garbage of the real
// files never crash.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "topo_test_util.h"
#include "topology/hwloc_import.h"
#include "topology/nccl_xml.h"
#include "topology/smi.h"
#include "topology/xml.h"

namespace snccl::topo {
namespace {

using testing::topoFiles;

TEST(Xml, ParsesElementsAttributesAndEntities) {
  const char* text =
      "\xEF\xBB\xBF<?xml version=\"1.0\"?>\n<!DOCTYPE x [ <!ELEMENT a ANY> ]>\n<!-- c -->\n"
      "<a k='v' q=\"&lt;&amp;&#65;&#x42;\">\n  <b/>\n  text &gt; <![CDATA[<raw>]]>\n  <c x=\"1\"><d/></c>\n</a>\n<!-- tail -->";
  Result<XmlElement> r = parseXml(text, "t.xml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const XmlElement& a = r.value();
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.line, 4);
  ASSERT_NE(a.attr("q"), nullptr);
  EXPECT_EQ(*a.attr("q"), "<&AB");
  EXPECT_EQ(*a.attr("k"), "v");
  ASSERT_EQ(a.children.size(), 2u);
  EXPECT_EQ(a.children[1].name, "c");
  EXPECT_EQ(a.children[1].line, 7);
  EXPECT_NE(a.text.find("text > <raw>"), std::string::npos);
}

TEST(Xml, ErrorsCarryFileLineAndReason) {
  struct Case {
    const char* text;
    int line;
    const char* reason;
  };
  const Case cases[] = {
      {"", 1, "no root element"},
      {"<a>\n<b>\n</a>", 3, "</a> closes <b> opened at line 2"},
      {"<a x=\"1\" x=\"2\"/>", 1, "duplicate attribute 'x'"},
      {"<a\n x=\"1/>", 2, "unterminated attribute value"},
      {"<a x=1/>", 1, "attribute value must be quoted"},
      {"<a>\n\n&bogus;</a>", 3, "unknown entity '&bogus;'"},
      {"<a/><b/>", 1, "a second root element"},
      {"<a/>junk", 1, "text after the root element"},
      {"<a>\n<!-- never closed\n</a>", 2, "unterminated comment"},
      {"<a>\n<b>\n", 3, "<b> opened at line 2 is not closed"},
      {"<a x=\"<\"/>", 1, "'<' inside an attribute value"},
      {"<1a/>", 1, "expected a name"},
      {"<a b></a>", 1, "attribute 'b' without '='"},
      {"<a\0b/>", 1, "NUL byte"},
  };
  for (const Case& c : cases) {
    std::string text(c.text, std::char_traits<char>::length(c.text) + (std::string(c.reason) == "NUL byte" ? 3 : 0));
    Result<XmlElement> r = parseXml(text, "bad.xml");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find("bad.xml:" + std::to_string(c.line) + ": "), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find(c.reason), std::string::npos) << r.status().message();
  }
}

TEST(Xml, DeepNestingIsAnErrorNotACrash) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += "<a>";
  Result<XmlElement> r = parseXml(text, "deep.xml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nested deeper"), std::string::npos);
}

TEST(NcclXml, MalformedFilesNameFileLineAndReason) {
  struct Case {
    const char* text;
    const char* expect;
  };
  const Case cases[] = {
      {"<system version=\"2\">\n</system>", "m.xml:1: topology XML version 2 is not supported"},
      {"<system>\n</system>", "m.xml:1: <system> needs a numeric version"},
      {"<topology version=\"2.0\"/>", "m.xml:1: root element is <topology>, expected <system> (this is an hwloc"},
      {"<system version=\"1\">\n  <cpu numaid=\"abc\"/>\n</system>", "m.xml:2: <cpu numaid=\"abc\">: not an integer"},
      {"<system version=\"1\">\n <cpu>\n  <pci busid=\"zz\"/>\n </cpu>\n</system>", "m.xml:3: <pci busid=\"zz\">: not a PCI bus id"},
      {"<system version=\"1\">\n <cpu>\n  <pci class=\"0x060400\"/>\n </cpu>\n</system>", "m.xml:3: <pci> without a busid"},
      {"<system version=\"1\">\n <cpu>\n  <pci busid=\"0000:01:00.0\"/>\n  <pci busid=\"0000:01:00.0\"/>\n </cpu>\n</system>",
       "m.xml:4: bus id 0000:01:00.0 already used at line 3"},
      {"<system version=\"1\">\n <cpu affinity=\"0000000g\"/>\n</system>", "m.xml:2: <cpu affinity=\"0000000g\">: not a cpu mask"},
      {"<system version=\"1\">\n <cpu>\n  <pci busid=\"0000:01:00.0\" class=\"0x030200\">\n   <gpu dev=\"0\" sm=\"80\">\n"
       "    <nvlink count=\"2\"/>\n   </gpu>\n  </pci>\n </cpu>\n</system>",
       "m.xml:5: <nvlink> without a target"},
      {"<system version=\"1\">\n <cpu>\n  <pci busid=\"0000:01:00.0\" link_width=\"-3\"/>\n </cpu>\n</system>",
       "m.xml:3: <pci link_width=\"-3\">: not a PCIe link width"},
      {"<system version=\"1\">\n <cpu>\n  <pci busid=\"0000:01:00.0\" class=\"0x020000\">\n   <nic><net name=\"x\" speed=\"fast\"/></nic>\n"
       "  </pci>\n </cpu>\n</system>",
       "m.xml:4: <net speed=\"fast\">: not an integer"},
      // Written back as 64-bit hex, which would not read back.
      {"<system version=\"1\">\n <cpu>\n  <pci busid=\"0000:01:00.0\" vendor=\"-0x10de\"/>\n </cpu>\n</system>",
       "m.xml:3: <pci vendor=\"-0x10de\">: not a PCI class or id"},
      {"<system version=\"1\">\n <cpu numaid=\"4294967296\"/>\n</system>", "m.xml:2: <cpu numaid=\"4294967296\">: out of range"},
  };
  for (const Case& c : cases) {
    Result<System> r = readNcclXml(c.text, "m.xml");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
}

TEST(NcclXml, UnknownElementsAreNotedNotFatal) {
  Result<System> r = readNcclXml("<system version=\"1\"><cpu numaid=\"0\"><widget/></cpu><gadget/></system>", "u.xml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->notes().size(), 2u);
  EXPECT_NE(r->notes()[0].find("ignored unknown element <widget>"), std::string::npos);
}

// Every error a reader returns for a damaged file names the file and a line.
void expectCleanError(const Status& st, const std::string& path) {
  const std::string& m = st.message();
  size_t at = m.find(path + ":");
  ASSERT_NE(at, std::string::npos) << m;
  size_t i = at + path.size() + 1, j = i;
  while (j < m.size() && m[j] >= '0' && m[j] <= '9') ++j;
  EXPECT_GT(j, i) << m;
  EXPECT_EQ(m.compare(j, 2, ": "), 0) << m;
}

// Truncations at many offsets and random byte damage: readers return errors (or, for
// damage that keeps the file valid, a System), never crash or hang.
TEST(Fuzz, TruncatedAndDamagedFilesNeverCrash) {
  std::vector<std::string> files = topoFiles("nccl");
  for (const std::string& f : topoFiles("hwloc")) files.push_back(f);
  for (const std::string& f : topoFiles("nvidia-smi")) files.push_back(f);
  if (files.empty()) GTEST_SKIP() << "shared topology data missing under " << SNCCL_TOPO_DIR;
  std::mt19937 rng(12345);
  int errors = 0, oks = 0;
  for (const std::string& path : files) {
    Result<std::string> text = readTextFile(path);
    ASSERT_TRUE(text.ok());
    const std::string& t = text.value();
    bool smi = path.find("nvidia-smi") != std::string::npos;
    std::string suffix = smi ? ".txt" : ".xml";
    std::vector<std::string> variants;
    size_t step = std::max<size_t>(1, t.size() / 12);
    for (size_t cut = 1; cut + 1 < t.size(); cut += step) variants.push_back(t.substr(0, cut));
    static const char kGarbage[] = "<>&\"'=/\n\0x9#";
    for (int k = 0; k < 12; ++k) {
      std::string d = t;
      for (int j = 0; j < 4; ++j) d[rng() % d.size()] = kGarbage[rng() % (sizeof kGarbage - 1)];
      variants.push_back(d);
    }
    for (size_t v = 0; v < variants.size(); ++v) {
      std::string p = testing::tempPath("fuzz" + suffix);
      ASSERT_TRUE(writeTextFile(p, variants[v]).ok());
      Result<System> r = loadTopologyFile(p);
      if (r.ok()) {
        ++oks;
        continue;
      }
      ++errors;
      // hwloc itself may refuse a file our parser accepted (no line then), and builds
      // without hwloc refuse any well-formed hwloc XML; our readers always name a line.
      const std::string& m = r.status().message();
      if (m.find("hwloc could not") == std::string::npos && m.find("hwloc cannot") == std::string::npos &&
          m.find("without hwloc") == std::string::npos) {
        expectCleanError(r.status(), p);
      }
    }
  }
  std::remove(testing::tempPath("fuzz.xml").c_str());
  std::remove(testing::tempPath("fuzz.txt").c_str());
  EXPECT_GT(errors, 50);
  std::printf("fuzz: %d variants rejected with file:line errors, %d still valid\n", errors, oks);
}

TEST(Format, SniffsEveryKind) {
  EXPECT_EQ(sniffFormat("<!-- c -->\n<system version=\"1\"/>"), FileFormat::kNcclXml);
  EXPECT_EQ(sniffFormat("<?xml version=\"1.0\"?><!DOCTYPE topology SYSTEM \"hwloc2.dtd\"><topology/>"), FileFormat::kHwlocXml);
  EXPECT_EQ(sniffFormat("\tGPU0\tGPU1\n"), FileFormat::kNvidiaSmi);
  EXPECT_EQ(sniffFormat("hello"), FileFormat::kUnknown);
  std::string p = testing::tempPath("not_topo.txt");
  ASSERT_TRUE(writeTextFile(p, "hello\n").ok());
  Result<System> r = loadTopologyFile(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(p + ":1: not a topology file"), std::string::npos) << r.status().message();
  std::remove(p.c_str());
  Result<System> missing = loadTopologyFile("/nonexistent/topo.xml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/topo.xml"), std::string::npos);
}

TEST(BusId, Normalizes) {
  EXPECT_EQ(normalizeBusId("0000:0C:00.0"), "0000:0c:00.0");
  EXPECT_EQ(normalizeBusId("00000000:34:00.0"), "0000:34:00.0");  // NVML's 8-digit domain
  EXPECT_EQ(normalizeBusId("34:00.1"), "0000:34:00.1");
  EXPECT_EQ(normalizeBusId("10000:e0:00.0"), "10000:e0:00.0");  // VMD domains
  EXPECT_EQ(normalizeBusId("ffff:ff:01.0"), "ffff:ff:01.0");
  EXPECT_EQ(normalizeBusId("fffffff:ff:ff.0"), "");  // the sentinel is not a device (dev > 0x1f)
  EXPECT_TRUE(isNvsSentinel("fffffff:ff:ff.0"));
  EXPECT_TRUE(isNvsSentinel("fffffff:ffff:ff"));
  for (const char* bad : {"", "zz", "0000:00:00", "0000:100:00.0", "0000:00:20.0", "0000:00:00.8", "0000:00:00.0x"})
    EXPECT_EQ(normalizeBusId(bad), "") << bad;
}

TEST(Affinity, ParsesAndFormatsNcclMasks) {
  Result<std::vector<int>> r = parseAffinity("00000000,ffffffff,00000000,0000000f");
  ASSERT_TRUE(r.ok());
  std::vector<int> expect = {0, 1, 2, 3};
  for (int c = 64; c < 96; ++c) expect.push_back(c);
  EXPECT_EQ(r.value(), expect);
  EXPECT_EQ(formatAffinity(expect), "ffffffff,00000000,0000000f");
  EXPECT_EQ(formatAffinity(std::vector<int>{}), "");
  EXPECT_TRUE(parseAffinity("0x00ff00ff").ok());
  EXPECT_FALSE(parseAffinity("123456789").ok());
  EXPECT_FALSE(parseAffinity("ab,cd,zz").ok());
}

}  // namespace
}  // namespace snccl::topo
