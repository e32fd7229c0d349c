// Launch mode (b): processes under mpirun. MPI carries only the unique id and the small
// result records; the benchmarked traffic is snccl's. Only the first thread of a process
// calls MPI (MPI_THREAD_FUNNELED), and it is the main thread.
#include <mpi.h>

#include <cstdio>

#include "sn_perf.h"

namespace snperf {

namespace {

class MpiCoordinator final : public Coordinator {
 public:
  MpiCoordinator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiCoordinator() override { MPI_Finalize(); }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string mode() const override { return "mpirun"; }
  bool broadcastId(ncclUniqueId* id) override {
    return MPI_Bcast(id, int(sizeof *id), MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS;
  }
  bool allGather(const void* mine, size_t bytes, void* all) override {
    return MPI_Allgather(mine, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS;
  }
  [[noreturn]] void abortJob(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    Coordinator::abortJob(code);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Coordinator> makeMpiCoordinator(int* argc, char*** argv, std::string* err) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    *err = "MPI_Init_thread failed";
    return nullptr;
  }
  return std::make_unique<MpiCoordinator>();
}

}  // namespace snperf
