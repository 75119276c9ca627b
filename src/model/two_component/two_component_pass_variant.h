// The two-component mode's pass kernel body (ModePass, mode_point.h) as two plain functions over
// plain arrays, compiled once per instruction-set level like the homodyne body and under the same
// contract (homodyne/homodyne_pass_variant.h): no symbol outside homodyne::pass_kernel::<level>,
// no Eigen or standard-library template across this interface.
#pragma once

#include <cstdint>

#include "model/gram_block.h"
#include "model/pass_variants.h"
#include "model/robust_loss_tile.h"

namespace homodyne::pass_kernel {

// One angle's coefficients: Phi = phase_per_unit (C[v]_j - C[v]_i) (two_component_point.h).
struct TwoComponentAngle {
  double contrast = 0.0;
  double offset = 0.0;
  double phase_per_unit = 0.0;         // q cos((phi + phi0_het) pi/180)
  double dphase_dphi0_per_unit = 0.0;  // d(phase_per_unit) / d phi0_het, phi0_het in degrees
  // sin and cos of phase_per_unit C[v]_j for j in [0, N) (the argument's rounding carried to
  // second order), for Phi in per-row separable form (two_component_pass_variant.cc,
  // ProductTables). Required.
  const double* velocity_sin = nullptr;
  const double* velocity_cos = nullptr;
};

// What a pass reads: the mode's tables at the point (valid for the call) and the angles.
struct TwoComponentInputs {
  int num_times = 0;                                         // N
  int gram_size = 0;                                         // 17: 14 physical, contrast, offset, e
  double transport_prefactor = 0.0;                          // q^2 / 2
  const double* cumulative_reference = nullptr;              // C[J_ref], N
  const double* cumulative_reference_derivatives = nullptr;  // 3 N
  const double* cumulative_sample = nullptr;                 // C[J_sample], N
  const double* cumulative_sample_derivatives = nullptr;     // 3 N
  // BuildSeparableExpFactors of C[J_ref] and C[J_sample] with transport_prefactor
  // (separable_exp.h), for the per-row separable form of H_r and H_s; null: the direct form only.
  const double* reference_factors = nullptr;
  const double* sample_factors = nullptr;
  const double* cumulative_velocity = nullptr;              // C[v], N
  const double* cumulative_velocity_derivatives = nullptr;  // 3 N
  const double* fraction = nullptr;                         // x_s, N
  const double* fraction_derivatives = nullptr;             // 4 N: d x_s / d(f0..f3)
  const TwoComponentAngle* angles = nullptr;
  int num_angles = 0;
  PassLoss loss;  // as the homodyne body's Inputs::loss (homodyne_pass_variant.h)
};

// Factor columns the passes carve from `factors` (two_component_pass_variant.cc): the full pass
// walks tiles of kTilePoints and carves kTwoComponentFactorColumns columns of that many points;
// the cost and scaling passes walk row segments of kCostTilePoints (tile.h) and carve the first
// kTwoComponentCostFactorColumns of them at that length.
inline constexpr int kTwoComponentFactorColumns = 18;
inline constexpr int kTwoComponentCostFactorColumns = 5;

// The entry points of one level; contracts as ModePass (mode_point.h). factors: the scratch's
// factor columns, at least the doubles the passes carve (above); tile: one angle's tile of [J | e]
// (PaddedTileColumns(gram_size) zero-initialised columns of kTilePoints), which the cost and
// scaling passes use for a row segment's per-point values (at most kScalingColumns
// kCostTilePoints doubles, gram_block.h); lane_grams: the angles' lane Grams (gram_block.h;
// LaneGramDoubles(gram_size) per angle).
struct TwoComponentFunctions {
  void (*accumulate_rows)(const TwoComponentInputs& inputs, int row_begin, int row_end,
                          int row_stride, const float* const* data, double* const* grams,
                          int64_t* finite_points, double* factors, double* tile,
                          double* lane_grams);
  // sums: under the linear loss the angles' per-thread sums of e^2 (kCostSumsDoubles each,
  // gram_block.h).
  void (*sum_squared_residuals)(const TwoComponentInputs& inputs, int row_begin, int row_end,
                                int row_stride, const float* const* data, double* squared_residuals,
                                double* factors, double* tile, double* sums);
  // grams[k]: 3 x 3 (ModePass::AccumulateScalingRows; linear loss only); sums: the angles'
  // per-thread scaling sums (kScalingSumsDoubles each, gram_block.h).
  void (*accumulate_scaling_rows)(const TwoComponentInputs& inputs, int row_begin, int row_end,
                                  int row_stride, const float* const* data, double* const* grams,
                                  int64_t* finite_points, double* factors, double* tile,
                                  double* sums);
  // FillVelocityPhaseTables' vector loop (two_component_point.h): sin_table[j] and cos_table[j]
  // for j < n, sin(hi) and cos(hi) from vector_math::SinCos, where every |s velocity[j]| is at
  // most vector_math::kSinCosMaxArgument and s and every velocity[j] are finite and below 1e300
  // in magnitude: returns true. Otherwise writes nothing and returns false (the caller uses libm).
  bool (*fill_velocity_tables)(double s, const double* velocity, int64_t n, double* sin_table,
                               double* cos_table);
  // accumulate_rows' sums with the physical block summed over the angles (ModePass::
  // AccumulateSummedPhysicalRows; linear loss only): grams[0]'s physical block holds the sum
  // over the angles, the other angles' physical blocks are left as they are; every other entry
  // as accumulate_rows'. lane_grams: SummedLaneGramsDoubles(gram_size, num_angles) doubles.
  void (*accumulate_summed_rows)(const TwoComponentInputs& inputs, int row_begin, int row_end,
                                 int row_stride, const float* const* data, double* const* grams,
                                 int64_t* finite_points, double* factors, double* tile,
                                 double* lane_grams);
  // c2 of angle k at row i, columns [j_begin, j_end) with i < j_begin (the strict upper
  // triangle), into c2_out: the cost pass's model, to rounding the scalar model's
  // (PassKernel::EvaluateUpperSegment).
  void (*evaluate_upper_segment)(const TwoComponentInputs& inputs, int k, int i, int j_begin,
                                 int j_end, double* c2_out, double* factors);
};

// The scratch of accumulate_summed_rows: the angles' lanes, the summed physical block's lane Gram
// and kTwoComponentSummedColumns columns of kTilePoints.
inline constexpr int kTwoComponentSummedColumns = 19;
constexpr int64_t SummedLaneGramsDoubles(int gram_size, int num_angles) {
  return static_cast<int64_t>(num_angles) * LaneGramDoubles(gram_size) +
         LaneGramDoubles(gram_size - 3) + kTwoComponentSummedColumns * kTilePoints;
}

// One definition per level the build compiles (src/model/CMakeLists.txt; pass_variants.h).
HOMODYNE_DECLARE_PASS_VARIANTS(TwoComponentFunctions, kTwoComponentFunctions)

}  // namespace homodyne::pass_kernel
