// The homodyne modes' pass kernel body (static and laminar_flow; ModePass, mode_point.h) as two
// plain functions over plain arrays. Its source, homodyne_pass_variant.cc, is compiled once per
// instruction-set level of the build (each time in its own namespace
// homodyne::pass_kernel::<level>), and HomodynePass calls the level chosen for the process
// (isa_level.h; docs/design.md section 2b).
//
// Contract of the variants' objects: they define no symbol outside their own namespace, so that
// the linker never merges code compiled for one level with another's (an AVX-512 copy of an
// inline function picked for the baseline code would stop the program on an older CPU with
// SIGILL). Hence no Eigen and no standard-library template crosses this interface or is
// instantiated behind it; tests/model/pass_kernel_symbols_test.sh checks the objects.
#pragma once

#include <cstdint>

#include "model/gram_block.h"
#include "model/pass_variants.h"
#include "model/robust_loss_tile.h"

namespace homodyne::pass_kernel {

// One angle's coefficients: Phi = phase_per_step * M_G (laminar_flow).
struct AngleCoefficients {
  double contrast = 0.0;
  double offset = 0.0;
  double phase_per_step = 0.0;         // s cos(phi0 - phi)
  double dphase_dphi0_per_step = 0.0;  // d(phase_per_step) / d phi0, phi0 in degrees
  // laminar_flow: sin and cos of phase_per_step C_G[j] for j in [0, N) (the argument's rounding
  // carried to second order: the values of the exact product), for the per-row separable form of
  // the phase's sin and cos (homodyne_pass_variant.cc, ProductSinCos); null: the direct form only.
  const double* shear_sin = nullptr;
  const double* shear_cos = nullptr;
};

// The static mode's per-row sums over the frames of the row (docs/design.md section 2, The static
// full pass through per-frame sums): for row i, over j > i, with G2 = exp(-2 w (C_D[j] - C_D[i]))
// (g1d^2 without smoothing, clip or floor), G4 = G2^2 and D_p = dC_D[j] / d theta_p - dC_D[i] /
// d theta_p (p = D0, alpha, D_offset), kStaticRowSums doubles per row, in this order:
//   sum G4, sum G4 D_p (3), sum G4 D_p D_q (6: pq = 00, 10, 20, 11, 21, 22), sum G2,
//   sum G2 D_p (3).
// The static J^T J of an angle of contrast c over a set of rows is these sums added over the
// rows, scaled by c and w (AccumulateRows).
inline constexpr int kStaticRowSums = 14;
inline constexpr int kStaticG4 = 0;
inline constexpr int kStaticG4D = 1;
inline constexpr int kStaticG4DD = 4;
inline constexpr int kStaticG2 = 10;
inline constexpr int kStaticG2D = 11;

// What a pass reads: the model's tables at the physical parameters (ModelEvaluation, valid for
// the call) and the angles' coefficients.
struct Inputs {
  bool laminar = false;
  int num_times = 0;  // N
  int gram_size = 0;  // M + 1: the side of each angle's Gram matrix ([J | e])
  double diffusion_prefactor = 0.0;
  const double* cumulative_diffusion = nullptr;              // C_D, N values
  const double* cumulative_diffusion_derivatives = nullptr;  // 3 N: d C_D / d(D0, alpha, D_off)
  // BuildSeparableExpFactors of C_D with diffusion_prefactor (separable_exp.h), for the per-row
  // separable form of g1d; null: the direct form only.
  const double* diffusion_factors = nullptr;
  // Static mode under the linear loss, where the per-frame form holds on the whole grid: the
  // per-row sums above, N kStaticRowSums values (row N - 1's zero); the full pass then adds J^T J
  // from them and reads every point only for J^T e and e^T e. Null: the point-by-point Gram.
  const double* static_row_sums = nullptr;
  const double* cumulative_shear = nullptr;              // C_G, N values (laminar_flow)
  const double* cumulative_shear_derivatives = nullptr;  // 3 N (laminar_flow)
  const AngleCoefficients* angles = nullptr;
  int num_angles = 0;
  // The loss (robust_loss.h): linear keeps the plain [J | e] and sum of e^2; another rescales
  // each tile before its Gram update and sums s^2 rho(z) where the linear loss sums e^2.
  PassLoss loss;
};

// Per-thread scratch (carved from PassScratch, mode_point.h): the angle-independent factors of one
// tile and one angle's tile of [J | e] (column c at c kTilePoints, columns padded with zeros to a
// multiple of 4: PaddedTileColumns). The cost and scaling passes' tiles have kCostTilePoints
// (tile.h): their scratch has g1_diffusion, m_shear, inverse_m_shear and smoothing_shear that
// long, no derivative columns (null), and `tile` holds at least kScalingColumns kCostTilePoints
// doubles (gram_block.h: a segment's per-point values).
struct Scratch {
  double* g1_diffusion = nullptr;     // kTilePoints
  double* dlog_g1d = nullptr;         // 3 kTilePoints: d log g1d / d(D0, alpha, D_off)
  double* m_shear = nullptr;          // kTilePoints: M_G
  double* inverse_m_shear = nullptr;  // kTilePoints: 1 / M_G
  double* dm_shear = nullptr;         // 3 kTilePoints: d M_G / d(g0, beta, g_off)
  double* smoothing_shear = nullptr;  // kTilePoints: M_G - |diff_G| = 1e-12 / (M_G + |diff_G|)
  double* tile = nullptr;             // kTilePoints PaddedTileColumns(gram_size), zero-initialised
  // The angles' lane Grams (gram_block.h): LaneGramDoubles(gram_size) per angle, num_angles of
  // them (accumulate_rows; accumulate_scaling_rows keeps its sums there, gram_block.h).
  double* lane_grams = nullptr;
  // The static full pass through per-frame sums (Inputs::static_row_sums): per angle a batch's
  // column sums of e g1^2, StaticColumnSumsStride(N) doubles each, num_angles of them; null in
  // the other passes.
  double* column_sums = nullptr;
};

// Doubles of one angle's column sums in Scratch::column_sums: N and the widest vector's padding
// (a row's last vector step writes up to kMaxGramLanes - 1 columns past N - 1).
constexpr int StaticColumnSumsStride(int num_times) {
  return (num_times + kMaxGramLanes - 1) / kMaxGramLanes * kMaxGramLanes + kMaxGramLanes;
}

// The entry points of one level (their contracts are PassKernel's, pass_kernel.h).
struct Functions {
  // For every angle k, adds [J | e]^T [J | e] over rows [row_begin, row_end) to grams[k] (column
  // major, gram_size x gram_size as Eigen stores it; lower triangle and diagonal) and the number
  // of finite data points to finite_points[k].
  void (*accumulate_rows)(const Inputs& inputs, int row_begin, int row_end, int row_stride,
                          const float* const* data, double* const* grams, int64_t* finite_points,
                          const Scratch& scratch);
  // For every angle k, adds the sum of e^2 over rows [row_begin, row_end) (finite data points
  // only) to squared_residuals[k]. Under the linear loss scratch.lane_grams holds the angles'
  // per-thread sums (kCostSumsDoubles each, gram_block.h).
  void (*sum_squared_residuals)(const Inputs& inputs, int row_begin, int row_end, int row_stride,
                                const float* const* data, double* squared_residuals,
                                const Scratch& scratch);
  // For every angle k, adds the 3 x 3 Gram matrix of [d c2 / d contrast, d c2 / d offset, e]
  // over rows [row_begin, row_end) to grams[k] (column major; lower triangle and diagonal) and
  // the number of finite data points to finite_points[k]: the scaling pass (linear loss only;
  // PassKernel::AccumulateScalingRows). Reads no Jacobian factors; scratch.lane_grams holds the
  // angles' per-thread sums (kScalingSumsDoubles each, gram_block.h).
  void (*accumulate_scaling_rows)(const Inputs& inputs, int row_begin, int row_end, int row_stride,
                                  const float* const* data, double* const* grams,
                                  int64_t* finite_points, const Scratch& scratch);
  // c2 of angle k at row i, columns [j_begin, j_end) with i < j_begin (the strict upper
  // triangle), into c2_out: the cost pass's model, to rounding the scalar model's
  // (PassKernel::EvaluateUpperSegment).
  void (*evaluate_upper_segment)(const Inputs& inputs, int k, int i, int j_begin, int j_end,
                                 double* c2_out, const Scratch& scratch);
};

// One definition per level the build compiles (src/model/CMakeLists.txt); only those are linked
// (pass_variants.h). The two-component body (two_component/two_component_pass_variant.h) lives
// beside each of them in namespace homodyne::pass_kernel::<level>.
HOMODYNE_DECLARE_PASS_VARIANTS(Functions, kFunctions)

}  // namespace homodyne::pass_kernel
