// CollArgs for one rank's call, shared by the schedule tests (test_schedules*.cc).
#pragma once

#include <cstddef>

#include "collectives/schedule.h"

namespace snccl::testing {

inline CollArgs collArgs(CollKind k, int rank, int n, size_t count, size_t chunk, int root = 0, bool inPlace = false) {
  CollArgs a;
  a.coll = k;
  a.rank = rank;
  a.nranks = n;
  a.count = count;
  a.chunkElems = chunk;
  a.root = root;
  a.inPlace = inPlace;
  return a;
}

}  // namespace snccl::testing
