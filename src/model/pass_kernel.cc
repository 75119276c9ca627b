// PassKernel (pass_kernel.h): the checks of every call around the mode's pass body (ModePass,
// mode_point.h), prepared by the mode's ModePoint at the chosen instruction-set level.
//
// Why one source per mode compiled per level with a table of function pointers, and not GCC's
// target_clones (docs/design.md section 2b): the kernel's speed comes from inlining (vector_math.h,
// the Gram blocks) into `omp simd` loops, and each compilation of a variant source inlines
// everything for its own -march; target_clones would have to be put on every helper and gives no
// say over the choice (HOMODYNE_ISA, the level in --version and the log). And the variants keep
// Eigen and other shared templates out (homodyne/homodyne_pass_variant.h), so no code of one level
// is merged into another's.
#include "model/pass_kernel.h"

#include <cmath>
#include <vector>

#include "homodyne/errors.h"

namespace homodyne {

PassScratch::PassScratch(int gram_size_in)
    : gram_size(gram_size_in),
      tile(static_cast<size_t>(pass_kernel::kTilePoints) *
               pass_kernel::PaddedTileColumns(gram_size_in),
           0.0),
      factors(static_cast<size_t>(pass_kernel::kTilePoints) * kFactorColumns, 0.0) {}

PassKernel::PassKernel(const ModelEvaluation& evaluation, std::span<const double> phi_degrees,
                       std::span<const double> contrast, std::span<const double> offset,
                       IsaLevel level, PassLoss loss)
    : num_times_(evaluation.model().num_times()),
      gram_size_(evaluation.model().num_point_derivatives() + 1),
      level_(level),
      linear_loss_(loss.function == LossFunction::kLinear),
      num_angles_(static_cast<int>(phi_degrees.size())) {
  HOMODYNE_CHECK(phi_degrees.size() == contrast.size() && contrast.size() == offset.size());
  HOMODYNE_CHECK(CpuSupportsIsaLevel(level));
  HOMODYNE_CHECK(loss.residual_scale > 0.0 && std::isfinite(loss.residual_scale));
  pass_ = evaluation.point().PreparePass(phi_degrees, contrast, offset, level, loss);
}

void PassKernel::AccumulateRows(int row_begin, int row_end, std::span<const float* const> data,
                                std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points,
                                Workspace& workspace, int row_stride) const {
  AccumulateFullRows(row_begin, row_end, data, grams, finite_points, workspace, row_stride,
                     /*summed_physical=*/false);
}

void PassKernel::AccumulateSummedPhysicalRows(int row_begin, int row_end,
                                              std::span<const float* const> data,
                                              std::span<Eigen::MatrixXd> grams,
                                              std::span<int64_t> finite_points,
                                              Workspace& workspace, int row_stride) const {
  AccumulateFullRows(row_begin, row_end, data, grams, finite_points, workspace, row_stride,
                     /*summed_physical=*/true);
}

void PassKernel::AccumulateFullRows(int row_begin, int row_end, std::span<const float* const> data,
                                    std::span<Eigen::MatrixXd> grams,
                                    std::span<int64_t> finite_points, Workspace& workspace,
                                    int row_stride, bool summed_physical) const {
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= num_times_ &&
                 row_stride >= 1);
  HOMODYNE_CHECK(data.size() == static_cast<size_t>(num_angles_) &&
                 grams.size() == static_cast<size_t>(num_angles_) &&
                 finite_points.size() == static_cast<size_t>(num_angles_));
  HOMODYNE_CHECK(workspace.scratch_.gram_size == gram_size_);
  std::vector<double*> gram_data(static_cast<size_t>(num_angles_));
  for (size_t k = 0; k < gram_data.size(); ++k) {
    HOMODYNE_CHECK(grams[k].rows() == gram_size_ && grams[k].cols() == gram_size_);
    gram_data[k] = grams[k].data();
  }
  // The mode's pass adds to the finite counts tile by tile. The callers' counts of neighbouring
  // batches share cache lines, and threads run neighbouring batches: the pass counts into the
  // workspace's own line instead, added to finite_points once (the same integers).
  std::vector<int64_t, CacheLineAllocator<int64_t>>& finite = workspace.finite_points_;
  finite.assign(static_cast<size_t>(num_angles_), 0);
  if (summed_physical) {
    pass_->AccumulateSummedPhysicalRows(row_begin, row_end, row_stride, data.data(),
                                        gram_data.data(), finite.data(), workspace.scratch_);
  } else {
    pass_->AccumulateRows(row_begin, row_end, row_stride, data.data(), gram_data.data(),
                          finite.data(), workspace.scratch_);
  }
  for (size_t k = 0; k < finite.size(); ++k) finite_points[k] += finite[k];
}

void PassKernel::AccumulateScalingRows(int row_begin, int row_end,
                                       std::span<const float* const> data,
                                       std::span<Eigen::MatrixXd> grams,
                                       std::span<int64_t> finite_points, Workspace& workspace,
                                       int row_stride) const {
  HOMODYNE_CHECK(linear_loss_);
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= num_times_ &&
                 row_stride >= 1);
  HOMODYNE_CHECK(data.size() == static_cast<size_t>(num_angles_) &&
                 grams.size() == static_cast<size_t>(num_angles_) &&
                 finite_points.size() == static_cast<size_t>(num_angles_));
  std::vector<double*> gram_data(static_cast<size_t>(num_angles_));
  for (size_t k = 0; k < gram_data.size(); ++k) {
    HOMODYNE_CHECK(grams[k].rows() == 3 && grams[k].cols() == 3);
    gram_data[k] = grams[k].data();
  }
  pass_->AccumulateScalingRows(row_begin, row_end, row_stride, data.data(), gram_data.data(),
                               finite_points.data(), workspace.scratch_);
}

double PassKernel::SumSquaredResiduals(int row_begin, int row_end,
                                       std::span<const float* const> data, Workspace& workspace,
                                       int row_stride) const {
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= num_times_ &&
                 row_stride >= 1);
  HOMODYNE_CHECK(data.size() == static_cast<size_t>(num_angles_));
  // Per-angle sums, added in angle order at the end: the same order for every split of rows.
  std::vector<double> sums(static_cast<size_t>(num_angles_), 0.0);
  pass_->SumSquaredResiduals(row_begin, row_end, row_stride, data.data(), sums.data(),
                             workspace.scratch_);
  double total = 0.0;
  for (double sum : sums) total += sum;
  return total;
}

void PassKernel::EvaluateUpperSegment(int k, int i, int j_begin, int j_end,
                                      std::span<double> c2_out, Workspace& workspace) const {
  HOMODYNE_CHECK(0 <= k && k < num_angles_);
  HOMODYNE_CHECK(0 <= i && i < j_begin && j_begin <= j_end && j_end <= num_times_);
  HOMODYNE_CHECK(c2_out.size() >= static_cast<size_t>(j_end - j_begin));
  if (j_begin == j_end) return;
  pass_->EvaluateUpperSegment(k, i, j_begin, j_end, c2_out.data(), workspace.scratch_);
}

}  // namespace homodyne
