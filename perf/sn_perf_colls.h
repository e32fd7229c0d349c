// The table of collectives behind the sn_*_perf tools: per collective, the element counts
// for a size, the bandwidth factors, how to issue one operation on one communicator, and
// which output each rank must hold afterwards.
#pragma once

#include <vector>

#include "sn_perf.h"
#include "sn_perf_data.h"

namespace snperf {

// Element counts for one size. In place, both pointers lie in the receive buffer: send at
// sendInplaceOff * rank elements, receive at recvInplaceOff * rank (nccl-tests' layout).
struct Counts {
  size_t send = 0;   // elements in the send buffer
  size_t recv = 0;   // elements in the receive buffer
  size_t param = 0;  // the count passed to the API and printed in the "count" column
  size_t sendInplaceOff = 0;
  size_t recvInplaceOff = 0;
};

// The arguments of one call on one communicator.
struct IssueArgs {
  const void* send;
  void* recv;
  size_t count;  // Counts::param
  ncclDataType_t dt;
  ncclRedOp_t op;
  int root;
  int rank;
  int nranks;
  int step;  // 0 .. steps(nranks)-1, each step in its own group
  ncclComm_t comm;
  cudaStream_t stream;  // nullptr, or the rank's CUDA stream (-A device)
};

struct CollDesc {
  const char* name;      // "allreduce": the tool is sn_allreduce_perf
  bool reduces;          // takes a reduction operator (-o)
  bool rooted;           // takes a root (-r)
  bool powerOfTwoRanks;  // hypercube
  Counts (*counts)(size_t bytes, size_t typeSize, int nranks);
  // algbw = param * typeSize * algFactor / time; busbw = algbw * busFactor.
  double (*algFactor)(int nranks);
  double (*busFactor)(int nranks);
  // Operations that must complete one after the other (hypercube's dimensions).
  int (*steps)(int nranks);
  ncclResult_t (*issue)(const IssueArgs& a);
  // What rank `rank` must hold in its receive buffer; nothing for non-roots of Reduce/Gather.
  void (*outputs)(int rank, int nranks, int root, const Counts& c, std::vector<OutBlock>* out);
};

const CollDesc* findColl(const char* name);
const std::vector<const CollDesc*>& allColls();

}  // namespace snperf
