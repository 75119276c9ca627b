// The CPU backend (include/homodyne/backend.h): the batches of a call over the worker pool's
// threads (worker_pool.h; as many as OpenMP's thread count, omp_get_max_threads, which
// performance.cpu_threads sets), the vectorised PassKernel (pass_kernel.h) per batch, one kernel
// workspace per thread.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "homodyne/errors.h"
#include "model/pass_kernel.h"
#include "objective/pass_backend.h"
#include "objective/worker_pool.h"

namespace homodyne {
namespace {

// A call with fewer points than this is computed on the calling thread: starting a parallel
// region costs more than the work. Since a worker that has not woken by the time the caller has
// taken the last batch no longer takes part (worker_pool.h), a region costs the caller a wake-up
// call even on a loaded machine, not a wait for the scheduler (before, this was 1 << 16, and a
// 1e4-point pass at load 7 on 2 cores was 80x slower in parallel). The global phase's coarse
// level (about 5e4 points, docs/design.md section 4b) is above it: its passes use every thread
// (docs/history/performance-notebook.md, Every thread on the coarse level). Each batch's sums are
// the same either way.
constexpr int64_t kMinParallelChunkPoints = 1 << 13;

// True when the batches are worth a parallel region.
bool ParallelWorthIt(std::span<const RowBatch> batches, int num_angles) {
  if (batches.size() < 2) return false;
  int64_t points = 0;
  for (const RowBatch& batch : batches) points += batch.points;
  return points * num_angles >= kMinParallelChunkPoints;
}

// The kernel workspaces of a backend, kept from one pass to the next: a workspace is one
// thread's scratch (PassScratch, mode_point.h: 50 to 80 KB, zeroed when made), and a pass of the
// global phase's coarse level takes well under a millisecond. A pass takes one per thread (Take)
// and gives them back at its end (Give), by the thread's slot (worker_pool.h: the same thread
// every loop), so that a thread gets back the scratch that is in its own caches. The kernel takes
// nothing from a workspace that the same call has not written (pass_kernel.h), so a reused one
// gives the same sums. Safe to use from several threads.
class WorkspacePool {
 public:
  // A workspace of this Gram side for the thread of `slot`: the one it gave back, else a new one.
  std::unique_ptr<PassKernel::Workspace> Take(int slot, int gram_size) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (slot < static_cast<int>(kept_.size())) {
        std::vector<std::unique_ptr<PassKernel::Workspace>>& kept =
            kept_[static_cast<size_t>(slot)];
        for (auto it = kept.begin(); it != kept.end(); ++it) {
          if ((*it)->gram_size() == gram_size) {
            std::unique_ptr<PassKernel::Workspace> workspace = std::move(*it);
            kept.erase(it);
            return workspace;
          }
        }
      }
    }
    return std::make_unique<PassKernel::Workspace>(gram_size);
  }

  // Keeps the workspace for the slot's next Take (at most kMaxKeptPerSlot Gram sides a slot).
  void Give(int slot, std::unique_ptr<PassKernel::Workspace> workspace) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (slot >= kMaxSlots) return;
    if (slot >= static_cast<int>(kept_.size())) kept_.resize(static_cast<size_t>(slot) + 1);
    std::vector<std::unique_ptr<PassKernel::Workspace>>& kept = kept_[static_cast<size_t>(slot)];
    if (kept.size() < kMaxKeptPerSlot) kept.push_back(std::move(workspace));
  }

 private:
  static constexpr int kMaxSlots = 256;
  static constexpr size_t kMaxKeptPerSlot = 4;
  std::mutex mutex_;
  std::vector<std::vector<std::unique_ptr<PassKernel::Workspace>>> kept_;  // by slot
};

// Calls body(b, workspace) for every batch b, over the pool's threads when ParallelWorthIt (each
// thread with its own kernel workspace of gram_size, taken from `workspaces`), else on the calling
// thread. body writes only the outputs of batch b, so the results do not depend on the thread
// count or schedule.
template <typename Body>
void ForEachBatch(std::span<const RowBatch> batches, int num_angles, int gram_size,
                  WorkspacePool& workspaces, Body body) {
  const int num_batches = static_cast<int>(batches.size());
  const int threads = ParallelWorthIt(batches, num_angles) ? omp_get_max_threads() : 1;
  std::vector<std::unique_ptr<PassKernel::Workspace>> taken(
      static_cast<size_t>(std::max(1, threads)));
  ParallelFor(num_batches, threads, [&](int b, int slot) {
    std::unique_ptr<PassKernel::Workspace>& workspace = taken[static_cast<size_t>(slot)];
    if (!workspace) workspace = workspaces.Take(slot, gram_size);
    body(b, *workspace);
  });
  for (size_t slot = 0; slot < taken.size(); ++slot) {
    if (taken[slot]) workspaces.Give(static_cast<int>(slot), std::move(taken[slot]));
  }
}

class CpuPreparedPass : public PreparedPass {
 public:
  CpuPreparedPass(const PassPoint& point, std::shared_ptr<WorkspacePool> workspaces)
      : kernel_(*point.evaluation, point.phi_degrees, point.contrast, point.offset,
                ActiveIsaLevel(), point.loss),
        columns_(point.columns),
        workspaces_(std::move(workspaces)) {}

  int gram_size() const override { return GramSizeOf(columns_, kernel_.gram_size()); }

  void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                    std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
    const int n_angles = kernel_.num_angles();
    const size_t entries = batches.size() * static_cast<size_t>(n_angles);
    HOMODYNE_CHECK(data.size() == entries && grams.size() == entries &&
                   finite_points.size() == entries);
    for (Eigen::MatrixXd& gram : grams) gram.setZero();
    std::fill(finite_points.begin(), finite_points.end(), 0);
    // Workspaces of the kernel's full side for either columns (the scaling pass uses their
    // factor columns only).
    ForEachBatch(batches, n_angles, kernel_.gram_size(), *workspaces_,
                 [&](int b, PassKernel::Workspace& workspace) {
                   const size_t slot = static_cast<size_t>(b) * n_angles;
                   const RowBatch& batch = batches[static_cast<size_t>(b)];
                   const size_t count = static_cast<size_t>(n_angles);
                   if (columns_ == PassColumns::kScaling) {
                     kernel_.AccumulateScalingRows(
                         batch.row_begin, batch.row_end, data.subspan(slot, count),
                         grams.subspan(slot, count), finite_points.subspan(slot, count), workspace,
                         batch.row_stride);
                   } else if (columns_ == PassColumns::kSummedPhysical) {
                     kernel_.AccumulateSummedPhysicalRows(
                         batch.row_begin, batch.row_end, data.subspan(slot, count),
                         grams.subspan(slot, count), finite_points.subspan(slot, count), workspace,
                         batch.row_stride);
                   } else {
                     kernel_.AccumulateRows(batch.row_begin, batch.row_end,
                                            data.subspan(slot, count), grams.subspan(slot, count),
                                            finite_points.subspan(slot, count), workspace,
                                            batch.row_stride);
                   }
                 });
  }

  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override {
    const int n_angles = kernel_.num_angles();
    HOMODYNE_CHECK(data.size() == batches.size() * static_cast<size_t>(n_angles) &&
                   squared_residuals.size() == batches.size());
    ForEachBatch(
        batches, n_angles, kernel_.gram_size(), *workspaces_,
        [&](int b, PassKernel::Workspace& workspace) {
          const RowBatch& batch = batches[static_cast<size_t>(b)];
          squared_residuals[static_cast<size_t>(b)] = kernel_.SumSquaredResiduals(
              batch.row_begin, batch.row_end,
              data.subspan(static_cast<size_t>(b) * n_angles, static_cast<size_t>(n_angles)),
              workspace, batch.row_stride);
        });
  }

 private:
  const PassKernel kernel_;
  const PassColumns columns_;
  const std::shared_ptr<WorkspacePool> workspaces_;  // the backend's
};

class CpuPassBackend : public PassBackend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }
  bool SupportsRowStride() const override { return true; }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override {
    HOMODYNE_CHECK(point.evaluation != nullptr &&
                   point.contrast.size() == point.phi_degrees.size() &&
                   point.offset.size() == point.phi_degrees.size());
    HOMODYNE_CHECK(point.columns != PassColumns::kScaling ||
                   point.loss.function == LossFunction::kLinear);
    return std::make_unique<CpuPreparedPass>(point, workspaces_);
  }

 private:
  const std::shared_ptr<WorkspacePool> workspaces_ = std::make_shared<WorkspacePool>();
};

}  // namespace

std::shared_ptr<PassBackend> MakeCpuPassBackend() { return std::make_shared<CpuPassBackend>(); }

}  // namespace homodyne
