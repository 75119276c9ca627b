// The processes that run one fit together (docs/design.md section 5b, Distributed passes): one
// process, or the ranks of an MPI job (`mpirun -n K homodyne ...`, `srun homodyne ...`). Every
// rank runs the same fit in lock step; a pass splits each chunk's batches over the ranks, gathers
// their per-batch sums and reduces them in batch order on every rank, so every rank holds the same
// normal equations and the result is bitwise the single process's for any rank count. Rank 0
// alone prints and writes files (results, performance log, checkpoints).
//
// The fit sees only this interface: the single-process group, or the MPI one of a build with
// HOMODYNE_MPI (src/distributed/mpi_process_group.cc); the core has no #ifdef MPI.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

namespace homodyne {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;  // 0 .. size() - 1
  virtual int size() const = 0;  // >= 1
  bool is_root() const { return rank() == 0; }

  // The calls below are collective: every rank of the group makes the same calls in the same
  // order (the fit's lock step), else the job hangs.

  // counts[r] (the same list on every rank) values from rank r: this rank gives `mine`
  // (counts[rank()] values); `all` (sum of counts) receives every rank's block, in rank order.
  virtual void AllGather(std::span<const double> mine, std::span<const int> counts,
                         std::span<double> all) = 0;
  // The largest of the ranks' values.
  virtual int64_t MaxOverRanks(int64_t value) = 0;
  // Rank 0's value, on every rank.
  virtual int64_t BroadcastFromRoot(int64_t value) = 0;

  // Ends every rank of the job now with exit_code (a failure that only this rank saw: the others
  // would wait for it forever). Not collective.
  [[noreturn]] virtual void Abort(int exit_code) = 0;

  // Bytes this rank received from the other ranks in collective calls so far (0 for one process).
  virtual int64_t bytes_received() const = 0;
};

// The group of one process (rank 0 of 1): every collective returns at once.
std::shared_ptr<ProcessGroup> SingleProcessGroup();

// True in a build with MPI (HOMODYNE_MPI).
bool BuiltWithMpi();

// For programs, once, before anything else: the MPI world when this build has MPI and the process
// was started by an MPI launcher (mpirun, mpiexec or srun with PMI/PMIx: their environment
// variables say so), else the single-process group. Initialises MPI then (funneled threads: only
// the calling thread communicates).
std::shared_ptr<ProcessGroup> JoinProcessGroup(int* argc, char*** argv);
// Ends MPI if JoinProcessGroup started it (at the end of main; idempotent).
void LeaveProcessGroup();

// The group the fits of this process run on (Fit, RunFitJob): the single process unless a
// program set another (the CLI sets JoinProcessGroup's). Not thread-safe: set it before fitting.
void SetProcessGroup(std::shared_ptr<ProcessGroup> group);
const std::shared_ptr<ProcessGroup>& CurrentProcessGroup();

}  // namespace homodyne
