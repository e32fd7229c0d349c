// `nvidia-smi topo -m` matrices, as a bug-report aid: users paste this table far more
// often than an XML dump. The parser reads the matrix (tabs or spaces, with or without the
// legends, '#' comment lines skipped, missing NIC rows filled from the GPU columns); the
// synthesizer builds a System whose path classes reproduce the matrix, so sn_topo and the
// planner can run on it.
//
// The synthesized System invents what the table does not say: bus ids (domain fffe for
// devices, fffd for switches), one host bridge per PHB group, one switch per PIX group and
// per PXB group. NVLink cells NV<n> become n links between the two GPUs, or n links to an
// NVSwitch when a GPU's NV cells add up to more links than any GPU has (18), which is how
// an NVSwitch machine looks in this table. The GPU architecture is unknown (sm 0).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "topology/system.h"

namespace snccl::topo {

struct SmiMatrix {
  std::vector<std::string> devices;             // "GPU0", ..., "NIC0", ...
  std::vector<std::vector<std::string>> cells;  // [row][col]; "" where the table had none
  std::vector<std::string> cpuAffinity;         // per device, "" unknown ("0-35,72-107")
  std::vector<int> numa;                        // per device, -1 unknown
  std::vector<std::string> nicNames;            // per device, from the NIC legend ("" none)
};

Result<SmiMatrix> parseSmiMatrix(std::string_view text, const std::string& source);
Result<System> systemFromSmi(const SmiMatrix& m);
Result<System> readSmiFile(const std::string& path);

// Same cell code nvidia-smi prints for a path ("X", "NV12", "PIX", ..., "SYS").
std::string smiCell(const System& sys, int a, int b);

}  // namespace snccl::topo
