// The per-batch work of a fitting pass (docs/design.md section 2): for rows [row_begin, row_end)
// of the strict upper triangle, every angle at once, the Gram matrix of [J | e] per angle, where
//   J = d c2 / d(physical..., contrast_k, offset_k)   (M = P_phys + 2 columns)
//   e = data - c2                                      (0 where the data point is not finite)
// so that J^T J, J^T e and e^T e of the angle come out of one symmetric rank update.
//
// How it is made cheap (docs/design.md section 2): the angle-independent factors (M_D,
// g1_diffusion and its derivatives, M_G and its derivatives) are computed once per point and
// reused for every angle; points are processed in tiles of one row segment, each tile's loops
// vectorised with the branch-free exp / sin / cos of vector_math.h; the Gram update is a set of
// 4 x 4 register-blocked products per tile. Values agree with ModelEvaluation (the libm reference)
// to a few ulp; tests/model/pass_kernel_test.cc checks c2, the Jacobian and chi2 against it, large
// phases included.
//
// Deterministic: the same theta, rows, data and instruction-set level give bitwise the same
// output (the tile split depends only on the rows). The body is compiled once per instruction-set
// level of the build (pass_kernel_variant.{h,cc}); a kernel runs one level, by default the
// process's (isa_level.h). Levels may differ in the last bits (FMA contraction, vector width).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/model.h"
#include "model/isa_level.h"
#include "model/pass_kernel_variant.h"

namespace homodyne {

class PassKernel {
 public:
  // Points per tile (one row segment); the vector loops run over a tile.
  static constexpr int kTilePoints = pass_kernel::kTilePoints;

  // Per-thread scratch for tiles; create one per thread and reuse it across batches.
  class Workspace {
   public:
    explicit Workspace(int gram_size);

   private:
    friend class PassKernel;
    // The buffers below, as the kernel's body takes them.
    pass_kernel::Scratch Pointers();
    // Angle-independent per-point factors of one tile (column t of each block).
    std::vector<double> g1_diffusion_;  // kTilePoints
    std::vector<double> dlog_g1d_;      // 3 kTilePoints: d log g1d / d(D0, alpha, D_off)
    std::vector<double> m_shear_;       // kTilePoints: M_G
    std::vector<double> dm_shear_;      // 3 kTilePoints: d M_G / d(g0, beta, g_off)
    // [J | e] of one angle: column c at [c kTilePoints, (c + 1) kTilePoints), columns padded with
    // zeros to a multiple of 4.
    std::vector<double> tile_;
    int gram_size_;
  };

  // evaluation: the model at the physical parameters (outlives the kernel). phi_degrees,
  // contrast, offset: one value per angle. level: the instruction-set level that computes (one
  // of BuiltIsaLevels() that the CPU supports; by default the process's, which throws InputError
  // when HOMODYNE_ISA is invalid: isa_level.h).
  PassKernel(const ModelEvaluation& evaluation, std::span<const double> phi_degrees,
             std::span<const double> contrast, std::span<const double> offset,
             IsaLevel level = ActiveIsaLevel());

  int num_angles() const { return static_cast<int>(angles_.size()); }
  // M + 1: the side of each angle's Gram matrix ([J | e]).
  int gram_size() const { return gram_size_; }
  IsaLevel isa_level() const { return level_; }

  // Adds, for every angle k, [J | e]^T [J | e] over rows [row_begin, row_end) to grams[k] (lower
  // triangle and diagonal updated; the upper triangle is left as is) and the number of finite
  // data points to finite_points[k]. data[k]: angle k's packed values of these rows (dataset.h
  // order, UpperTriangleRowOffset(N, row_end) - UpperTriangleRowOffset(N, row_begin) values).
  void AccumulateRows(int row_begin, int row_end, std::span<const float* const> data,
                      std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points,
                      Workspace& workspace) const;

  // sum over angles and rows of e^2 (finite data points only).
  double SumSquaredResiduals(int row_begin, int row_end, std::span<const float* const> data,
                             Workspace& workspace) const;

 private:
  pass_kernel::Inputs KernelInputs() const;

  const ModelEvaluation& evaluation_;
  bool laminar_;
  int num_times_;
  int gram_size_;
  IsaLevel level_;
  const pass_kernel::Functions* functions_;  // the level's variant
  std::vector<pass_kernel::AngleCoefficients> angles_;
};

}  // namespace homodyne
