// One sn_<collective>_perf executable: perf/CMakeLists.txt compiles this file once per
// collective with SN_PERF_COLL set to its name, and with SN_PERF_MPI for the *_perf_mpi
// twins that run under mpirun.
#include "sn_perf.h"

#ifndef SN_PERF_COLL
#error "SN_PERF_COLL must name the collective"
#endif

int main(int argc, char** argv) {
#ifdef SN_PERF_MPI
  return snperf::toolMain(argc, argv, SN_PERF_COLL, &snperf::makeMpiCoordinator);
#else
  return snperf::toolMain(argc, argv, SN_PERF_COLL, &snperf::makeLaunchCoordinator);
#endif
}
