// The CPU backend (include/homodyne/backend.h): the batches of a call over the worker pool's
// threads (worker_pool.h; as many as OpenMP's thread count, omp_get_max_threads, which
// performance.cpu_threads sets), the vectorised PassKernel (pass_kernel.h) per batch, one kernel
// workspace per thread.
#include <omp.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "objective/pass_backend.h"
#include "homodyne/errors.h"
#include "model/pass_kernel.h"
#include "objective/worker_pool.h"

namespace homodyne {
namespace {

// A call with fewer points than this is computed on the calling thread: starting a parallel
// region costs more than the work. Since a worker that has not woken by the time the caller has
// taken the last batch no longer takes part (worker_pool.h), a region costs the caller a wake-up
// call even on a loaded machine, not a wait for the scheduler (before, this was 1 << 16, and a
// 1e4-point pass at load 7 on 2 cores was 80x slower in parallel). The global phase's coarse
// level (about 5e4 points, docs/design.md section 4b) is above it: its passes use every thread
// (docs/performance.md, The global phase). Each batch's sums are the same either way.
constexpr int64_t kMinParallelChunkPoints = 1 << 13;

// True when the batches are worth a parallel region.
bool ParallelWorthIt(std::span<const RowBatch> batches, int num_angles) {
  if (batches.size() < 2) return false;
  int64_t points = 0;
  for (const RowBatch& batch : batches) points += batch.points;
  return points * num_angles >= kMinParallelChunkPoints;
}

// Calls body(b, workspace) for every batch b, over the pool's threads when ParallelWorthIt (each
// thread with its own kernel workspace of gram_size), else on the calling thread. body writes
// only the outputs of batch b, so the results do not depend on the thread count or schedule.
template <typename Body>
void ForEachBatch(std::span<const RowBatch> batches, int num_angles, int gram_size, Body body) {
  const int num_batches = static_cast<int>(batches.size());
  const int threads = ParallelWorthIt(batches, num_angles) ? omp_get_max_threads() : 1;
  std::vector<std::optional<PassKernel::Workspace>> workspaces(
      static_cast<size_t>(std::max(1, threads)));
  ParallelFor(num_batches, threads, [&](int b, int slot) {
    std::optional<PassKernel::Workspace>& workspace = workspaces[static_cast<size_t>(slot)];
    if (!workspace) workspace.emplace(gram_size);
    body(b, *workspace);
  });
}

class CpuPreparedPass : public PreparedPass {
 public:
  explicit CpuPreparedPass(const PassPoint& point)
      : kernel_(*point.evaluation, point.phi_degrees, point.contrast, point.offset,
                ActiveIsaLevel(), point.loss),
        columns_(point.columns) {}

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
    ForEachBatch(batches, n_angles, kernel_.gram_size(),
                 [&](int b, PassKernel::Workspace& workspace) {
                   const size_t slot = static_cast<size_t>(b) * n_angles;
                   const RowBatch& batch = batches[static_cast<size_t>(b)];
                   const size_t count = static_cast<size_t>(n_angles);
                   if (columns_ == PassColumns::kScaling) {
                     kernel_.AccumulateScalingRows(
                         batch.row_begin, batch.row_end, data.subspan(slot, count),
                         grams.subspan(slot, count), finite_points.subspan(slot, count), workspace);
                   } else {
                     kernel_.AccumulateRows(batch.row_begin, batch.row_end,
                                            data.subspan(slot, count), grams.subspan(slot, count),
                                            finite_points.subspan(slot, count), workspace);
                   }
                 });
  }

  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override {
    const int n_angles = kernel_.num_angles();
    HOMODYNE_CHECK(data.size() == batches.size() * static_cast<size_t>(n_angles) &&
                   squared_residuals.size() == batches.size());
    ForEachBatch(batches, n_angles, kernel_.gram_size(),
                 [&](int b, PassKernel::Workspace& workspace) {
                   const RowBatch& batch = batches[static_cast<size_t>(b)];
                   squared_residuals[static_cast<size_t>(b)] = kernel_.SumSquaredResiduals(
                       batch.row_begin, batch.row_end,
                       data.subspan(static_cast<size_t>(b) * n_angles,
                                    static_cast<size_t>(n_angles)),
                       workspace);
                 });
  }

 private:
  const PassKernel kernel_;
  const PassColumns columns_;
};

class CpuPassBackend : public PassBackend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override {
    HOMODYNE_CHECK(point.evaluation != nullptr &&
                   point.contrast.size() == point.phi_degrees.size() &&
                   point.offset.size() == point.phi_degrees.size());
    HOMODYNE_CHECK(point.columns == PassColumns::kAll ||
                   point.loss.function == LossFunction::kLinear);
    return std::make_unique<CpuPreparedPass>(point);
  }
};

}  // namespace

std::shared_ptr<PassBackend> MakeCpuPassBackend() { return std::make_shared<CpuPassBackend>(); }

}  // namespace homodyne
