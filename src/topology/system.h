// The System: an immutable graph of one machine (CPUs = NUMA nodes, PCIe host bridges and
// switches, GPUs, NVSwitches, NICs) with typed, bandwidth-annotated links and the path
// class between every pair of endpoints, classified like NCCL.
//
// Shape. The PCIe hierarchy is a tree rooted at the CPU nodes (one per NUMA node, as in
// NCCL's topology XML): CPU -> [host bridge] -> switch* -> GPU/NIC. A switch is one node
// (its upstream port), as NCCL collapses it. Host bridges only exist when the source knows
// them (hwloc); they are what separates PHB (same host bridge) from NODE (two host bridges
// of one NUMA node). NVLink, C2C and the CPU interconnect are extra links beside the tree.
// All NVSwitches of a machine are merged into one NVS node, as NCCL does.
//
// Nodes keep the raw attributes of their source (the NCCL XML attributes, with unknown
// values as -1/0/""), so a System written as NCCL XML and read back compares equal.
// Builders (NCCL XML, hwloc, nvidia-smi, NVML) fill a SystemBuilder; build() derives the
// links, bandwidths and paths once and the result never changes afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"

namespace snccl::topo {

enum class NodeType : uint8_t { kCpu, kPci, kGpu, kNic, kNvs };
// What a kPci node is. kOther: unknown class (partial files), treated like a switch when
// it has children, as NCCL does.
enum class PciKind : uint8_t { kSwitch, kHostBridge, kOther };
enum class LinkType : uint8_t { kPci, kNvl, kC2c, kSys, kLoc };

// Path classes in increasing distance. Same order and meaning as NCCL's PATH_* except that
// NODE (nvidia-smi's term: two host bridges of one NUMA node) sits between PHB and SYS;
// NCCL reports NODE as PHB (see toNcclPathType). P2C and PXN are not produced.
enum class PathType : uint8_t { kLoc, kNvl, kNvb, kC2c, kPix, kPxb, kPhb, kNode, kSys, kNet, kDis };

const char* nodeTypeName(NodeType t);
const char* linkTypeName(LinkType t);
const char* pathTypeName(PathType t);  // "LOC", "NVL", ..., "DIS"
// NCCL's numeric path type (PATH_LOC 0 ... PATH_DIS 11); NODE maps to PATH_PHB.
int toNcclPathType(PathType t);

using Attrs = std::vector<std::pair<std::string, std::string>>;

// Attributes of a <pci> element. class/vendor/... are -1 and link speed/width 0 when
// unknown (minimal files carry only busid).
struct PciAttrs {
  std::string busId;  // "dddd:bb:dd.f", lower case; "" for nodes without one
  int64_t classCode = -1;  // 24 bits as NCCL writes it: 0x030200
  int vendor = -1, device = -1, subsystemVendor = -1, subsystemDevice = -1;
  double linkGts = 0;  // GT/s per lane
  bool linkSpeedPcieSuffix = false;  // written "16.0 GT/s PCIe" (kernels <= 5.6) vs "16 GT/s"
  int linkWidth = 0;
  Attrs extra;  // attributes snccl does not interpret, kept for the round trip
  bool operator==(const PciAttrs&) const = default;
};

struct CpuAttrs {
  int numaId = -1;
  std::string affinity;  // NCCL format: 32-bit hex words, most significant first
  std::string arch, vendor;
  int familyId = -1, modelId = -1;
  Attrs extra;
  bool operator==(const CpuAttrs&) const = default;
};

// One <nvlink> element: `count` links to the device with bus id `target`; tclass is the
// target's PCI class (0x068000 NVSwitch, 0x068001 CPU, 0x03.... GPU), -1 unknown.
struct NvLinkSpec {
  std::string target;
  int count = 0;
  int64_t tclass = -1;
  bool operator==(const NvLinkSpec&) const = default;
};

struct C2cSpec {
  int bwMBs = 0;  // per link
  int count = 0;
  bool operator==(const C2cSpec&) const = default;
};

struct GpuAttrs {
  bool present = false;  // a <gpu> element (or live data) exists; false for partial files
  int dev = -1;          // NVML index
  int sm = 0;            // compute capability x 10, 0 unknown
  int rank = -1, gdr = -1;
  std::vector<NvLinkSpec> nvlinks;
  std::vector<C2cSpec> c2c;
  Attrs extra;
  bool operator==(const GpuAttrs&) const = default;
};

// One <net> of a NIC (a port / network device). speed in Mb/s, latency in us.
struct NetPort {
  std::string name;
  int dev = -1;
  int64_t speedMbps = -1;
  int port = -1;
  double latency = -1;
  uint64_t guid = 0;
  bool hasGuid = false;
  int64_t maxConn = -1;
  int gdr = -1, coll = -1;
  Attrs extra;
  bool operator==(const NetPort&) const = default;
};

struct NicAttrs {
  bool present = false;  // a <nic> element exists
  std::vector<NetPort> nets;
  bool operator==(const NicAttrs&) const = default;
};

struct Node {
  NodeType type = NodeType::kPci;
  PciKind pciKind = PciKind::kOther;
  int parent = -1;  // tree parent; -1 for CPUs and the NVS node
  std::vector<int> children;
  PciAttrs pci;     // kPci, kGpu, kNic
  CpuAttrs cpu;     // kCpu
  GpuAttrs gpu;     // kGpu
  NicAttrs nic;     // kNic
  std::vector<std::string> pciLinks;        // kPci: <pcilink target> (Broadcom switch peers)
  std::vector<std::string> nvSwitches;      // kNvs: bus ids of the merged switches ("" unknown)
  std::vector<std::string> p2pBlockedPeers; // kGpu: peers NVML refuses P2P read/write with
  bool operator==(const Node&) const = default;
};

struct Link {
  int to = -1;
  LinkType type = LinkType::kPci;
  double bw = 0;  // GB/s, NCCL's figures
};

struct Path {
  PathType type = PathType::kDis;
  double bw = 0;   // GB/s, the narrowest link on the way
  int hops = 0;    // links traversed
};

class SystemBuilder;
class System;
class LinkIndex;  // paths.cc: links by (a, b, type)
// paths.cc: adds the NVS node, links, paths and NIC pairing to a System of built nodes.
Status deriveGraph(System* sys, const std::vector<std::string>& nvSwitches);

class System {
 public:
  System() = default;

  const std::vector<Node>& nodes() const { return nodes_; }
  const Node& node(int id) const { return nodes_[static_cast<size_t>(id)]; }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Node ids by kind. gpus(): by NVML index (dev), then bus id; nics(): order of the
  // source; cpus(): order of the source.
  std::span<const int> cpus() const { return cpus_; }
  std::span<const int> gpus() const { return gpus_; }
  std::span<const int> nics() const { return nics_; }
  int nvs() const { return nvs_; }  // -1 when the machine has no NVSwitch

  std::span<const Link> links(int id) const { return links_[static_cast<size_t>(id)]; }
  // Between two endpoints (CPU, GPU, NIC, NVS); kDis for anything else. Paths are kept
  // for endpoint pairs only, so memory grows with endpoints squared, never with switches.
  const Path& path(int a, int b) const;
  // The PCIe route alone (PIX ... SYS), ignoring NVLink: what GPUDirect and host memory
  // traffic between the two see.
  Path pciPath(int a, int b) const;

  int findByBusId(std::string_view busId) const;  // -1 when absent
  int cpuOf(int id) const;   // the CPU (NUMA node) the node hangs under; -1 for NVS
  int numaOf(int id) const;  // that CPU's numaid (-1 when unknown)
  // The CPUs of a CPU node's affinity mask (empty when the mask is unknown).
  std::vector<int> cpuList(int cpuNode) const;

  // "GPU3", "NIC1", "CPU0", "NVS", "PCI 0000:0c:00.0", "HB 0000:2b".
  std::string label(int id) const;
  // For a NIC: its net names joined by '/', or its bus id.
  std::string nicName(int id) const;

  // The nearest NIC of every GPU (indexed like gpus(); -1 when there is no NIC): smallest
  // path class, then highest bandwidth, then fewest hops, then the NIC with the fewest
  // GPUs so far (spreads GPUs over equivalent NICs), then source order.
  const std::vector<int>& gpuNics() const { return gpuNics_; }
  // Nearest NIC of any endpoint (same order of criteria, without the spreading).
  int nearestNic(int id) const;

  // Things the builder could not use (unresolved NVLink targets, ...), for INFO lines.
  const std::vector<std::string>& notes() const { return notes_; }

  // Same nodes and attributes (links and paths derive from them).
  bool operator==(const System& o) const { return nodes_ == o.nodes_; }

 private:
  friend class SystemBuilder;
  friend Status deriveGraph(System* sys, const std::vector<std::string>& nvSwitches);
  std::vector<Node> nodes_;
  std::vector<int> cpus_, gpus_, nics_;
  int nvs_ = -1;
  std::vector<std::vector<Link>> links_;
  std::vector<int> endpoint_;  // per node: its index among endpoints, -1 for PCI nodes
  size_t nEndpoints_ = 0;
  std::vector<Path> paths_;    // nEndpoints_ x nEndpoints_
  std::vector<int> ordinal_;   // per node: its position in cpus_, gpus_ or nics_
  std::unordered_map<std::string, int> busIndex_;
  std::shared_ptr<const LinkIndex> linkIndex_;  // immutable, shared by copies
  std::vector<int> gpuNics_;
  std::vector<std::string> notes_;
};

// Collects nodes in tree order, then derives everything else in build().
class SystemBuilder {
 public:
  int addCpu(CpuAttrs cpu);
  int addPci(int parent, PciKind kind, PciAttrs pci);
  int addGpu(int parent, PciAttrs pci, GpuAttrs gpu);
  int addNic(int parent, PciAttrs pci, NicAttrs nic);
  // An NVSwitch known by bus id (a PCI device in hwloc / <pci class 0x068000>); its NVLinks
  // come from the GPUs' nvlink specs.
  void addNvSwitch(std::string busId);
  // Any prepared node (merges copy nodes between systems); children are rebuilt here.
  int addNode(Node n, int parent);
  void addNote(std::string note) { notes_.push_back(std::move(note)); }

  Node& node(int id) { return nodes_[static_cast<size_t>(id)]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  int findByBusId(std::string_view busId) const;

  // Validates the tree (parents exist, GPUs/NICs not roots, unique bus ids, the counts of
  // topology/limits.h) and computes links, paths and the NIC pairing.
  Result<System> build() &&;

 private:
  std::vector<Node> nodes_;
  std::vector<std::string> nvSwitches_;
  std::vector<std::string> notes_;
};

// Bus ids: lower case "dddd:bb:dd.f". Accepts NVML's 8-digit domain and upper case.
// nullopt-like: returns "" when the text is not a bus id.
std::string normalizeBusId(std::string_view text);
// True for NCCL's NVSwitch sentinel target (fffffff:ff:ff.0 / fffffff:ffff:ff ...).
bool isNvsSentinel(std::string_view target);

// NCCL affinity masks <-> cpu lists. formatAffinity({0,1,33}) = "00000002,00000003".
// Masks naming CPUs above kMaxCpuId are refused.
Result<std::vector<int>> parseAffinity(std::string_view mask);
// Linux CPU lists "0-35,72-107" -> sorted, distinct ids; refused when malformed or naming
// an id above kMaxCpuId. Linear in the text: a range repeated many times costs nothing.
Result<std::vector<int>> parseCpuRanges(std::string_view list);
std::string formatAffinity(std::span<const int> cpus);

}  // namespace snccl::topo
