// The ranks of an MPI job as the fit's process group (include/homodyne/process_group.h): MPI's C
// bindings on a duplicate of MPI_COMM_WORLD, called from the fitting thread only (funneled).
#include <mpi.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "homodyne/process_group.h"

namespace homodyne {
namespace {

// Whether an MPI launcher started this process: the variables Open MPI's mpirun, MPICH's Hydra
// and PMI/PMIx launchers (srun --mpi=pmix or pmi2) give every rank.
bool StartedByMpiLauncher() {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

void Check(int status, const char* call) {
  if (status != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + call + " failed");
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() {
    Check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    Check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    Check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  }
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void AllGather(std::span<const double> mine, std::span<const int> counts,
                 std::span<double> all) override {
    displacements_.resize(counts.size());
    int offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      displacements_[r] = offset;
      offset += counts[r];
      if (static_cast<int>(r) != rank_) {
        bytes_received_ += static_cast<int64_t>(counts[r]) * static_cast<int64_t>(sizeof(double));
      }
    }
    Check(MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                         counts.data(), displacements_.data(), MPI_DOUBLE, comm_),
          "MPI_Allgatherv");
  }

  int64_t MaxOverRanks(int64_t value) override {
    int64_t result = 0;
    Check(MPI_Allreduce(&value, &result, 1, MPI_INT64_T, MPI_MAX, comm_), "MPI_Allreduce");
    bytes_received_ += static_cast<int64_t>(sizeof(int64_t)) * (size_ - 1);
    return result;
  }

  int64_t BroadcastFromRoot(int64_t value) override {
    Check(MPI_Bcast(&value, 1, MPI_INT64_T, 0, comm_), "MPI_Bcast");
    if (rank_ != 0) bytes_received_ += static_cast<int64_t>(sizeof(int64_t));
    return value;
  }

  [[noreturn]] void Abort(int exit_code) override {
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; should it, this rank still ends
  }

  int64_t bytes_received() const override { return bytes_received_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> displacements_;
  int64_t bytes_received_ = 0;
};

bool g_initialized_here = false;

}  // namespace

bool BuiltWithMpi() { return true; }

std::shared_ptr<ProcessGroup> JoinProcessGroup(int* argc, char*** argv) {
  if (!StartedByMpiLauncher()) return SingleProcessGroup();
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0) {
    int provided = 0;
    Check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    g_initialized_here = true;
  }
  return std::make_shared<MpiProcessGroup>();
}

void LeaveProcessGroup() {
  if (!g_initialized_here) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized == 0) MPI_Finalize();
  g_initialized_here = false;
}

}  // namespace homodyne
