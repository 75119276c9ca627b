// The per-batch work of a fitting pass (docs/design.md section 2): for rows [row_begin, row_end)
// of the strict upper triangle, every angle at once, the Gram matrix of [J | e] per angle, where
//   J = d c2 / d(physical..., contrast_k, offset_k)   (M = P_phys + 2 columns)
//   e = data - c2                                      (0 where the data point is not finite)
// so that J^T J, J^T e and e^T e of the angle come out of one symmetric rank update.
//
// A thin wrapper around the mode's pass body (ModePass, mode_point.h): the homodyne modes'
// (homodyne/homodyne_pass_variant.cc) and the two-component mode's
// (two_component/two_component_pass_variant.cc). How they are made cheap (docs/design.md section
// 2): the angle-independent factors are computed once per point and reused for every angle;
// points are processed in tiles of one row segment, each tile's loops vectorised with the
// branch-free exp / sin / cos of vector_math.h, or per-row separable factors where the precision
// allows (the transport exps: separable_exp.h; sin / cos of the phases and sinc: the bodies;
// docs/design.md section 2); the Gram update is a lane Gram
// (gram_block.h; 4 x 4 register-blocked products per tile under a robust loss). Values agree
// with ModelEvaluation (the libm
// reference) to a few ulp; tests/model/pass_kernel_test.cc and two_component_test.cc check c2,
// the Jacobian and chi2 against it.
//
// Deterministic: the same theta, rows, data and instruction-set level give bitwise the same
// output (the tile split depends only on the rows). The bodies are compiled once per
// instruction-set level of the build; a kernel runs one level, by default the process's
// (isa_level.h). Levels may differ in the last bits (FMA contraction, vector width).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/model.h"
#include "model/isa_level.h"
#include "model/mode_point.h"
#include "model/tile.h"

namespace homodyne {

class PassKernel {
 public:
  // Points per tile (one row segment); the vector loops run over a tile.
  static constexpr int kTilePoints = pass_kernel::kTilePoints;

  // Per-thread scratch for tiles; create one per thread and reuse it across batches and passes:
  // no value in it that a call has not written itself enters that call's results.
  class Workspace {
   public:
    explicit Workspace(int gram_size) : scratch_(gram_size) {}
    int gram_size() const { return scratch_.gram_size; }

   private:
    friend class PassKernel;
    PassScratch scratch_;
    // AccumulateRows' finite counts while it runs, on a cache line of this workspace's own.
    std::vector<int64_t, CacheLineAllocator<int64_t>> finite_points_;
  };

  // evaluation: the model at the physical parameters (outlives the kernel). phi_degrees,
  // contrast, offset: one value per angle. level: the instruction-set level that computes (one
  // of BuiltIsaLevels() that the CPU supports; by default the process's, which throws InputError
  // when HOMODYNE_ISA is invalid: isa_level.h).
  // loss: robust_loss.h; linear (the default) gives [J | e] and e^2 as documented below, another
  // loss the rescaled [J | e] with the loss sum s^2 sum rho(z) in the (e, e) entry, and the loss
  // sum instead of e^2 in SumSquaredResiduals (docs/design.md section 4c).
  PassKernel(const ModelEvaluation& evaluation, std::span<const double> phi_degrees,
             std::span<const double> contrast, std::span<const double> offset,
             IsaLevel level = ActiveIsaLevel(), PassLoss loss = PassLoss());

  int num_angles() const { return num_angles_; }
  // M + 1: the side of each angle's Gram matrix ([J | e]).
  int gram_size() const { return gram_size_; }
  IsaLevel isa_level() const { return level_; }
  // ModePass::PerFrameGram: J^T J from per-frame sums (the static mode's full pass).
  bool per_frame_gram() const { return pass_->PerFrameGram(); }

  // Adds, for every angle k, [J | e]^T [J | e] over rows row_begin, row_begin + row_stride, ...
  // (below row_end) to grams[k] (lower triangle and diagonal updated; the upper triangle is left
  // as is) and the number of finite data points to finite_points[k]. data[k]: angle k's values
  // of these rows, one row after the other (dataset.h order; at stride 1
  // UpperTriangleRowOffset(N, row_end) - UpperTriangleRowOffset(N, row_begin) values).
  void AccumulateRows(int row_begin, int row_end, std::span<const float* const> data,
                      std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points,
                      Workspace& workspace, int row_stride = 1) const;

  // AccumulateRows with the physical block summed over the angles (PassColumns::kSummedPhysical,
  // src/objective/batched_objective.h; ModePass::AccumulateSummedPhysicalRows): the sum over k of
  // grams[k]'s physical blocks equals AccumulateRows' to rounding, wherever the mode's body puts
  // it (the two-component body under the linear loss: in grams[0], the others' left as they
  // are); every other entry is AccumulateRows'.
  void AccumulateSummedPhysicalRows(int row_begin, int row_end, std::span<const float* const> data,
                                    std::span<Eigen::MatrixXd> grams,
                                    std::span<int64_t> finite_points, Workspace& workspace,
                                    int row_stride = 1) const;

  // The scaling pass (PassColumns::kScaling, src/objective/pass_backend.h): adds, for every
  // angle k, the 3 x 3 Gram matrix of [d c2 / d contrast_k, d c2 / d offset_k, e] over rows
  // of AccumulateRows to grams[k] (3 x 3; lower triangle and diagonal updated) and the number
  // of finite data points to finite_points[k]; data as AccumulateRows. The entries equal those
  // of AccumulateRows' Gram at the contrast, offset and e columns up to the order of the
  // additions (a few ulp), the counts exactly; the work is about a cost pass's. The kernel's loss
  // must be linear.
  void AccumulateScalingRows(int row_begin, int row_end, std::span<const float* const> data,
                             std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points,
                             Workspace& workspace, int row_stride = 1) const;

  // sum over angles and rows (those of AccumulateRows) of e^2 (finite data points only).
  double SumSquaredResiduals(int row_begin, int row_end, std::span<const float* const> data,
                             Workspace& workspace, int row_stride = 1) const;

  // c2 of angle k at row i, columns [j_begin, j_end) with i < j_begin <= j_end <= N (the strict
  // upper triangle), into c2_out (j_end - j_begin values): the model as the passes compute it,
  // within a few ulp of ModelEvaluation::ComputeC2RowSegment's and at a fraction of its cost.
  void EvaluateUpperSegment(int k, int i, int j_begin, int j_end, std::span<double> c2_out,
                            Workspace& workspace) const;

 private:
  void AccumulateFullRows(int row_begin, int row_end, std::span<const float* const> data,
                          std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points,
                          Workspace& workspace, int row_stride, bool summed_physical) const;

  int num_times_;
  int gram_size_;
  IsaLevel level_;
  bool linear_loss_;
  std::unique_ptr<const ModePass> pass_;  // the mode's body at the point, for these angles
  int num_angles_;
};

}  // namespace homodyne
