// The two-component pass body for one instruction-set level (two_component_pass_variant.h),
// compiled once per level like homodyne/homodyne_pass_variant.cc. Formulas and guards are those
// of TwoComponentPoint::EvaluateSegment (two_component_point.cc; docs/model.md, Two-component
// mode), rearranged so that the angle-independent factors (H_r, H_s, C[v] differences, fractions
// and their derivatives) are computed once per point and shared by the angles.
//
// Only plain C++ here, helpers in an unnamed namespace (homodyne/homodyne_pass_variant.h).
#include "model/two_component/two_component_pass_variant.h"

#include <cmath>

#include "model/separable_exp.h"
#include "model/two_component/two_component_point.h"
#include "model/vector_math.h"

#ifndef HOMODYNE_PASS_KERNEL_LEVEL
#error "HOMODYNE_PASS_KERNEL_LEVEL (baseline, avx2, avx512 or native) must name the level"
#endif

namespace homodyne::pass_kernel::HOMODYNE_PASS_KERNEL_LEVEL {
namespace {

namespace tc = ::homodyne::two_component;

// Points per tile of the full pass (its tile of [J | e] and factor columns) and per row segment of
// the cost and scaling passes, which build no tile of [J | e] and read kNumCostFactors columns
// (tile.h).
constexpr int kTile = kTilePoints;
constexpr int kCostTile = kCostTilePoints;
static_assert(kTile <= kSeparableExpBlock && kCostTile <= kSeparableExpBlock,
              "a row segment lies in at most two blocks (separable_exp.h)");

// Factor columns of one tile. The first kNumCostFactors, which every pass reads, lie at
// factors + c ColumnPoints (the full pass's tile or the cost and scaling passes' row segment); the
// derivative columns, which the full pass alone fills and reads, at factors + c kTile.
enum FactorColumn : int {
  kHr = 0,          // H_ref
  kHs = 1,          // H_sample
  kA = 2,           // x_r,i x_r,j
  kB = 3,           // x_s,i x_s,j
  kInverseDen = 4,  // 1 / den, den = max(N_i N_j, 1e-10) (one division per point, not per angle)
  kNumCostFactors = 5,
  kDHr = 5,      // 3 columns: d H_ref / d(D0_ref, alpha_ref, D_offset_ref)
  kDHs = 8,      // 3 columns: d H_sample / d(sample parameters)
  kDv = 11,      // C[v]_j - C[v]_i
  kDDv = 12,     // 3 columns: d (C[v]_j - C[v]_i) / d(v0, v_beta, v_offset)
  kDDenDu = 15,  // d den / d x_s,i (0 where the floor binds)
  kDDenDw = 16,  // d den / d x_s,j
  kW = 17,       // x_s,j
  kNumFactors = 18,
};
static_assert(kNumFactors == kTwoComponentFactorColumns &&
              kNumCostFactors == kTwoComponentCostFactorColumns);

// Points per tile of the pass that fills the factor columns with or without derivatives (the full
// pass; the cost and scaling passes).
template <bool kWithDerivatives>
inline constexpr int ColumnPoints = kWithDerivatives ? kTile : kCostTile;

// The angle-independent factors of row i, columns [j_begin, j_begin + count), count at most
// ColumnPoints<kWithDerivatives>; the derivative columns only kWithDerivatives.
//
// H_r and H_s in per-row separable form where it applies (separable_exp.h): one
// product per point, and diff / M = 1 (C[J_c] does not decrease: J_c >= 0).
// row_caches: one per component, kept over a batch's tiles.
template <bool kWithDerivatives>
void SharedFactors(const TwoComponentInputs& in, int i, int j_begin, int count,
                   SeparableExpRowCache* row_caches, double* factors) {
  constexpr int kPoints = ColumnPoints<kWithDerivatives>;
  const int n = in.num_times;
  const double w_q = in.transport_prefactor;
  for (int c = 0; c < 2; ++c) {
    const double* cum = c == 0 ? in.cumulative_reference : in.cumulative_sample;
    const double* dcum =
        c == 0 ? in.cumulative_reference_derivatives : in.cumulative_sample_derivatives;
    const double* cj = cum + j_begin;
    const double ci = cum[i];
    const double di0 = dcum[i], di1 = dcum[n + i], di2 = dcum[2 * n + i];
    const double* dj = dcum + j_begin;
    double* h = factors + (c == 0 ? kHr : kHs) * kPoints;
    double* dh0 = factors + (c == 0 ? kDHr : kDHs) * kTile;
    double* dh1 = dh0 + kTile;
    double* dh2 = dh1 + kTile;
    SeparableExpTile separable;
    if (SeparableExpApplies(cum, c == 0 ? in.reference_factors : in.sample_factors, w_q,
                            tc::kSmoothAbsEpsilon, i, j_begin, count, &row_caches[c], &separable)) {
      const double* factors_j = separable.factors_j;
      const double factor_low = separable.factor_low, factor_high = separable.factor_high;
      const int split = separable.split;
#pragma omp simd
      for (int t = 0; t < count; ++t) {
        const double value = factors_j[t] * (t < split ? factor_low : factor_high);
        h[t] = value;
        if constexpr (kWithDerivatives) {
          const double factor = -w_q * value;
          dh0[t] = factor * (dj[t] - di0);
          dh1[t] = factor * (dj[n + t] - di1);
          dh2[t] = factor * (dj[2 * n + t] - di2);
        }
      }
      continue;
    }
#pragma omp simd
    for (int t = 0; t < count; ++t) {
      const double diff = cj[t] - ci;
      const double m = std::sqrt(diff * diff + tc::kSmoothAbsEpsilon);
      const double log_h = -w_q * m;
      const bool clipped = log_h < tc::kLogTransportMin;
      const double value = vector_math::Exp(clipped ? tc::kLogTransportMin : log_h);
      h[t] = value;
      if constexpr (kWithDerivatives) {
        const double factor = clipped ? 0.0 : value * (-w_q) * (diff / m);
        dh0[t] = factor * (dj[t] - di0);
        dh1[t] = factor * (dj[n + t] - di1);
        dh2[t] = factor * (dj[2 * n + t] - di2);
      }
    }
  }
  if constexpr (kWithDerivatives) {  // the phase differences enter the Jacobian only
    const double* vj = in.cumulative_velocity + j_begin;
    const double vi = in.cumulative_velocity[i];
    const double* dvj = in.cumulative_velocity_derivatives + j_begin;
    const double* dv_all = in.cumulative_velocity_derivatives;
    const double dvi0 = dv_all[i], dvi1 = dv_all[n + i], dvi2 = dv_all[2 * n + i];
    double* dv = factors + kDv * kTile;
    double* ddv0 = factors + kDDv * kTile;
    double* ddv1 = ddv0 + kTile;
    double* ddv2 = ddv1 + kTile;
#pragma omp simd
    for (int t = 0; t < count; ++t) {
      dv[t] = vj[t] - vi;
      ddv0[t] = dvj[t] - dvi0;
      ddv1[t] = dvj[n + t] - dvi1;
      ddv2[t] = dvj[2 * n + t] - dvi2;
    }
  }
  {
    const double u = in.fraction[i], ur = 1.0 - u;
    const double norm_i = u * u + ur * ur;
    const double* xj = in.fraction + j_begin;
    double* a = factors + kA * kPoints;
    double* b = factors + kB * kPoints;
    double* dden_du = factors + kDDenDu * kTile;
    double* dden_dw = factors + kDDenDw * kTile;
    double* w_out = factors + kW * kTile;
    double* inverse_den = factors + kInverseDen * kPoints;
#pragma omp simd
    for (int t = 0; t < count; ++t) {
      const double w = xj[t], wr = 1.0 - w;
      a[t] = ur * wr;
      b[t] = u * w;
      const double norm_j = w * w + wr * wr;
      const double den_raw = norm_i * norm_j;
      const bool floored = !(den_raw > tc::kNormalizationFloor);
      inverse_den[t] = 1.0 / (floored ? tc::kNormalizationFloor : den_raw);
      if constexpr (kWithDerivatives) {
        dden_du[t] = floored ? 0.0 : (4.0 * u - 2.0) * norm_j;
        dden_dw[t] = floored ? 0.0 : (4.0 * w - 2.0) * norm_i;
        w_out[t] = w;
      }
    }
  }
}

// sin and cos of the phase Phi = s (C[v]_j - C[v]_i) in per-row separable form (separable_exp.h):
//   sin Phi = S[j] K[i] - K[j] S[i],  cos Phi = K[j] K[i] + S[j] S[i]
// (S, K: TwoComponentAngle::velocity_sin, velocity_cos), within a few units of 1e-16 absolute at
// any phase size. Phi enters c2 and the Jacobian only through sin and cos (no sinc), so absolute
// errors of that size stay at that size; no per-point sin or cos, and no libm fallback for large
// phases.
struct ProductTables {
  const double* sin_j = nullptr;  // S[j_begin + t]
  const double* cos_j = nullptr;  // K[j_begin + t]
  double sin_i = 0.0;             // S[i]
  double cos_i = 0.0;             // K[i]
};

ProductTables TablesOf(const TwoComponentAngle& angle, int i, int j_begin) {
  return {angle.velocity_sin + j_begin, angle.velocity_cos + j_begin, angle.velocity_sin[i],
          angle.velocity_cos[i]};
}

// One angle of one tile: [J | e] (as TwoComponentPoint::EvaluateSegment), zero rows for non-finite
// data, then gram += tile^T tile.
// kLinear (in.loss is linear): the tile leaves out d c2 / d offset (1 at every finite point, 0
// elsewhere), [J_phys, d c2 / d contrast, e] in its 16 columns, and goes into the angle's lane
// Gram (lanes; AddTileToLastRowApartOffsetLaneGram adds the offset column's Gram row from the
// column sums and the finite count); else the tile holds all gram_size columns and goes straight
// into gram (AddRobustTileGram).
template <bool kLinear>
void AccumulateTile(const TwoComponentInputs& in, const TwoComponentAngle& angle,
                    const ProductTables& tables, int i, int j_begin, const float* data, int count,
                    const double* factors, double* tile, double* lanes, double* gram,
                    int64_t& finite_points) {
  // AddTileToLastRowApartOffsetLaneGram: the linear loss's tile columns are a multiple of 4.
  static_assert((tc::kNumPhysical + 2) % 4 == 0);
  const int n = in.num_times;
  const double* hr_col = factors + kHr * kTile;
  const double* hs_col = factors + kHs * kTile;
  const double* dhr = factors + kDHr * kTile;
  const double* dhs = factors + kDHs * kTile;
  const double* dv_col = factors + kDv * kTile;
  const double* ddv = factors + kDDv * kTile;
  const double* a_col = factors + kA * kTile;
  const double* b_col = factors + kB * kTile;
  const double* inverse_den_col = factors + kInverseDen * kTile;
  const double* dden_du_col = factors + kDDenDu * kTile;
  const double* dden_dw_col = factors + kDDenDw * kTile;
  const double* w_col = factors + kW * kTile;
  const double* dx = in.fraction_derivatives;
  const double dxi0 = dx[i], dxi1 = dx[n + i], dxi2 = dx[2 * n + i], dxi3 = dx[3 * n + i];
  const double* dxj = dx + j_begin;
  const double u = in.fraction[i], ur = 1.0 - u;
  const double contrast = angle.contrast;
  const double offset = angle.offset;
  const double s = angle.phase_per_unit;
  const double* sin_j = tables.sin_j;
  const double* cos_j = tables.cos_j;
  const double sin_i = tables.sin_i, cos_i = tables.cos_i;
  const double ds = angle.dphase_dphi0_per_unit;
  int64_t finite = 0;
#pragma omp simd reduction(+ : finite)
  for (int t = 0; t < count; ++t) {
    const double d = static_cast<double>(data[t]);
    const double weight = (d - d) == 0.0 ? 1.0 : 0.0;  // 0 for NaN and +-inf
    const double dv = dv_col[t];
    const double sin_phase = sin_j[t] * cos_i - cos_j[t] * sin_i;
    const double cos_phase = cos_j[t] * cos_i + sin_j[t] * sin_i;
    const double hr = hr_col[t], hs = hs_col[t], a = a_col[t], b = b_col[t];
    const double inverse_den = inverse_den_col[t];
    const double w = w_col[t], wr = 1.0 - w;
    const double num = a * a * hr * hr + b * b * hs * hs + 2.0 * (a * b) * hr * hs * cos_phase;
    const double g = num * inverse_den;
    const double c2 = offset + contrast * g;
    const double cw = contrast * weight;
    const double dg_dhr = 2.0 * (a * a * hr + a * b * hs * cos_phase) * inverse_den;
    const double dg_dhs = 2.0 * (b * b * hs + a * b * hr * cos_phase) * inverse_den;
    const double dg_dphase = -2.0 * a * b * hr * hs * sin_phase * inverse_den;
    const double n_a = 2.0 * a * hr * hr + 2.0 * b * hr * hs * cos_phase;
    const double n_b = 2.0 * b * hs * hs + 2.0 * a * hr * hs * cos_phase;
    const double dg_du = ((n_a * (-wr) + n_b * w) - g * dden_du_col[t]) * inverse_den;
    const double dg_dw = ((n_a * (-ur) + n_b * u) - g * dden_dw_col[t]) * inverse_den;
    const double c_hr = cw * dg_dhr, c_hs = cw * dg_dhs, c_phase = cw * dg_dphase;
    tile[(tc::kD0Ref + 0) * kTile + t] = c_hr * dhr[0 * kTile + t];
    tile[(tc::kD0Ref + 1) * kTile + t] = c_hr * dhr[1 * kTile + t];
    tile[(tc::kD0Ref + 2) * kTile + t] = c_hr * dhr[2 * kTile + t];
    tile[(tc::kD0Sample + 0) * kTile + t] = c_hs * dhs[0 * kTile + t];
    tile[(tc::kD0Sample + 1) * kTile + t] = c_hs * dhs[1 * kTile + t];
    tile[(tc::kD0Sample + 2) * kTile + t] = c_hs * dhs[2 * kTile + t];
    tile[(tc::kV0 + 0) * kTile + t] = c_phase * s * ddv[0 * kTile + t];
    tile[(tc::kV0 + 1) * kTile + t] = c_phase * s * ddv[1 * kTile + t];
    tile[(tc::kV0 + 2) * kTile + t] = c_phase * s * ddv[2 * kTile + t];
    const double c_du = cw * dg_du, c_dw = cw * dg_dw;
    tile[(tc::kF0 + 0) * kTile + t] = c_du * dxi0 + c_dw * dxj[t];
    tile[(tc::kF0 + 1) * kTile + t] = c_du * dxi1 + c_dw * dxj[n + t];
    tile[(tc::kF0 + 2) * kTile + t] = c_du * dxi2 + c_dw * dxj[2 * n + t];
    tile[(tc::kF0 + 3) * kTile + t] = c_du * dxi3 + c_dw * dxj[3 * n + t];
    tile[tc::kPhi0Het * kTile + t] = c_phase * ds * dv;
    tile[tc::kNumPhysical * kTile + t] = weight * g;  // d c2 / d contrast
    // weight * (d - c2) would be NaN for non-finite d.
    const double e = weight > 0.0 ? d - c2 : 0.0;
    if constexpr (kLinear) {
      // d c2 / d offset (= weight) is not stored: AddTileToLastRowApartOffsetLaneGram sums its
      // Gram row.
      tile[(tc::kNumPhysical + 1) * kTile + t] = e;
    } else {
      tile[(tc::kNumPhysical + 1) * kTile + t] = weight;  // d c2 / d offset
      tile[(tc::kNumPhysical + 2) * kTile + t] = e;
    }
    finite += weight > 0.0 ? 1 : 0;
  }
  finite_points += finite;
  if constexpr (kLinear) {
    AddTileToLastRowApartOffsetLaneGram(tile, count, finite, in.gram_size, lanes);
  } else {
    AddRobustTileGram(in.loss, tile, count, in.gram_size, gram);
  }
}

// The per-point model of a cost or scaling pass's row segment (kCostTile points, no derivatives):
// the factor columns and the angle's tables as the loops of TileSquaredResiduals and
// TileScalingSums read them.
struct TileModel {
  const double* hr_col;
  const double* hs_col;
  const double* a_col;
  const double* b_col;
  const double* inverse_den_col;
  const double* sin_j;
  const double* cos_j;
  double sin_i;
  double cos_i;
};

TileModel TileModelOf(const ProductTables& tables, const double* factors) {
  return {factors + kHr * kCostTile,
          factors + kHs * kCostTile,
          factors + kA * kCostTile,
          factors + kB * kCostTile,
          factors + kInverseDen * kCostTile,
          tables.sin_j,
          tables.cos_j,
          tables.sin_i,
          tables.cos_i};
}

// g = num / den at point t of the tile: d c2 / d contrast (c2 = offset + contrast g). Inline into
// the callers' simd loops.
inline double TileG(const TileModel& tile, int t) {
  const double cos_phase = tile.cos_j[t] * tile.cos_i + tile.sin_j[t] * tile.sin_i;
  const double hr = tile.hr_col[t], hs = tile.hs_col[t], a = tile.a_col[t], b = tile.b_col[t];
  const double num = a * a * hr * hr + b * b * hs * hs + 2.0 * (a * b) * hr * hs * cos_phase;
  return num * tile.inverse_den_col[t];
}

// Stores e (0 at non-finite points) in residuals[0, count): the cost pass's sum of e^2
// (AddSquaresToLanes) or a robust loss's sum of rho (LossSum) reads them.
void StoreTileResiduals(const TwoComponentAngle& angle, const ProductTables& tables,
                        const float* data, int count, const double* factors, double* residuals) {
  const TileModel tile = TileModelOf(tables, factors);
  const double contrast = angle.contrast;
  const double offset = angle.offset;
#pragma omp simd
  for (int t = 0; t < count; ++t) {
    const double d = static_cast<double>(data[t]);
    const bool is_finite = (d - d) == 0.0;
    const double e = d - (offset + contrast * TileG(tile, t));
    residuals[t] = is_finite ? e : 0.0;
  }
}

// The tile's terms of a scaling pass (ModePass::AccumulateScalingRows): adds the 3 x 3 Gram of
// [g, 1, e] over its finite points and their count to the angle's lane sums (gram_block.h), the
// values of the tile's columns in AccumulateTile, stored in `columns` on the way.
void TileScalingSums(const TwoComponentAngle& angle, const ProductTables& tables, const float* data,
                     int count, const double* factors, double* columns, double* sums) {
  const TileModel tile = TileModelOf(tables, factors);
  StoreScalingColumns(
      data, 0, count, angle.contrast, angle.offset, [tile](int t) { return TileG(tile, t); },
      columns);
  AddScalingColumns(columns, count, sums);
}

// The tile's term of a cost pass: the linear loss adds e^2 to the angle's lane sums (sums,
// kCostSumsDoubles; AddSquaresToLanes) and returns 0, a robust loss returns s^2 sum rho(z).
double TileCost(const TwoComponentAngle& angle, const ProductTables& tables, const float* data,
                int count, const PassLoss& loss, const double* factors, double* tile,
                double* sums) {
  StoreTileResiduals(angle, tables, data, count, factors, tile);
  if (loss.function == LossFunction::kLinear) {
    AddSquaresToLanes(tile, count, sums);
    return 0.0;
  }
  return LossSum(loss, tile, count);
}

void AccumulateRows(const TwoComponentInputs& in, int row_begin, int row_end, int row_stride,
                    const float* const* data, double* const* grams, int64_t* finite_points,
                    double* factors, double* tile, double* lane_grams) {
  const int lane_gram_doubles = LaneGramDoubles(in.gram_size);
  for (int k = 0; k < in.num_angles; ++k) {
    ClearLaneGram(in.gram_size, lane_grams + k * lane_gram_doubles);
  }
  SeparableExpRowCache row_caches[2];
  ForEachTile(
      in.num_times, row_begin, row_end, row_stride, [&](int i, int j, int count, int64_t point) {
        SharedFactors<true>(in, i, j, count, row_caches, factors);
        for (int k = 0; k < in.num_angles; ++k) {
          const TwoComponentAngle& angle = in.angles[k];
          PrefetchNextTile(data[k] + point + count);
          if (in.loss.function == LossFunction::kLinear) {
            AccumulateTile<true>(in, angle, TablesOf(angle, i, j), i, j, data[k] + point, count,
                                 factors, tile, lane_grams + k * lane_gram_doubles, grams[k],
                                 finite_points[k]);
          } else {
            AccumulateTile<false>(in, angle, TablesOf(angle, i, j), i, j, data[k] + point, count,
                                  factors, tile, nullptr, grams[k], finite_points[k]);
          }
        }
      });
  if (in.loss.function == LossFunction::kLinear) {
    for (int k = 0; k < in.num_angles; ++k) {
      FlushLastRowApartOffsetLaneGram(lane_grams + k * lane_gram_doubles, in.gram_size, grams[k]);
    }
  }
}

// The full pass with the physical block summed over the angles (PassColumns::kSummedPhysical;
// docs/design.md section 2, The two-component physical block summed over the angles); linear loss.
// Every physical column of angle k at a point is the same combination of four angle-independent
// row vectors,
//   J_k = f_k c_k (P + cos Phi_k Q + s_k sin Phi_k R_v + ds_k sin Phi_k R_phi)
// (f_k: 1 at a finite data point, else 0; P and Q: the transports' and the fractions' terms of
// g = g0 + g1 cos Phi, R_v and R_phi: the velocity's and phi0's, -g1 times their phase
// derivatives), so sum_k J_k J_k^T = B W B^T with B = [P Q R_v R_phi] and W the 4 x 4 matrix
// sum_k f_k c_k^2 x_k x_k^T, x_k = (1, cos Phi_k, s_k sin Phi_k, ds_k sin Phi_k): 10 sums per
// point and angle. Per point, W's Cholesky factor L (W = L L^T; a pivot that rounding left at or
// below 0 gives a zero column) turns B W B^T into the Gram of the four rows B L, added to one lane
// Gram of the 14 physical columns: about 250 multiply-adds per point for all the angles, where
// each angle's physical block took 105. Each angle keeps its own rows of d c2 / d contrast and e
// against every column, and the offset column's row (the column sums and the count).
//
// Columns of the summed pass's own scratch (kTile points each), after the lane Grams: the per-point
// factors of P and Q (transports: times the columns d H / d theta; fractions: times d x_s), -g1,
// and W (overwritten by L once the angles are done).
enum SummedColumn : int {
  kPr = 0,  // P and Q of the reference transport: 2 a^2 H_r / den, 2 a b H_s / den
  kQr = 1,
  kPs = 2,  // of the sample transport: 2 b^2 H_s / den, 2 a b H_r / den
  kQs = 3,
  kPu = 4,  // d g / d x_s,i = Pu + cos Phi Qu
  kQu = 5,
  kPw = 6,  // d g / d x_s,j = Pw + cos Phi Qw
  kQw = 7,
  kMinusG1 = 8,  // -2 a b H_r H_s / den: d g / d Phi = -g1 sin Phi
  kW00 = 9,      // W (lower triangle), then L
  kW10 = 10,
  kW11 = 11,
  kW20 = 12,
  kW21 = 13,
  kW22 = 14,
  kW30 = 15,
  kW31 = 16,
  kW32 = 17,
  kW33 = 18,
  kNumSummedColumns = 19,
};
static_assert(kNumSummedColumns == kTwoComponentSummedColumns);

// The summed lane Gram's columns: the physical parameters in this order, so that the rows
// B L's third and fourth (only R_v and R_phi, only R_phi) touch its first 4 and first column.
constexpr int kSummedOrder[tc::kNumPhysical] = {
    tc::kPhi0Het,   tc::kV0,        tc::kV0 + 1,   tc::kV0 + 2,       tc::kD0Ref,
    tc::kD0Ref + 1, tc::kD0Ref + 2, tc::kD0Sample, tc::kD0Sample + 1, tc::kD0Sample + 2,
    tc::kF0,        tc::kF0 + 1,    tc::kF0 + 2,   tc::kF0 + 3};

// An angle's lanes in the summed pass (kGramLanes doubles per entry; within LaneGramDoubles of the
// full Gram): the row of d c2 / d contrast against tile columns [0, 16) (the last entry unused),
// the row of e against [0, 16), the 16 columns' sums, then the finite count.
constexpr int kSummedContrastRow = 0;
constexpr int kSummedERow = 16;
constexpr int kSummedColumnSums = 32;
constexpr int kSummedCount = 48;
constexpr int kSummedTileColumns = tc::kNumPhysical + 2;  // [J_phys, d c2 / d contrast, e]

// Columns [c0, c0 + kCols) of the contrast and e rows and the column sums (AddContrastAndERows):
// each column loaded once for its three sums, 3 kCols sums in flight.
template <int kCols>
inline void AddContrastAndERowsOf(const double* tile, int padded_count, int c0, double* lanes) {
  GramLanes by_contrast[kCols], by_e[kCols], sums[kCols];
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) {
    by_contrast[c] = LoadLanes(lanes + (kSummedContrastRow + c0 + c) * kGramLanes);
    by_e[c] = LoadLanes(lanes + (kSummedERow + c0 + c) * kGramLanes);
    sums[c] = LoadLanes(lanes + (kSummedColumnSums + c0 + c) * kGramLanes);
  }
  const double* contrast_row = tile + tc::kNumPhysical * kTile;
  const double* e_row = tile + (tc::kNumPhysical + 1) * kTile;
  const double* cols = tile + c0 * kTile;
  for (int t = 0; t < padded_count; t += kGramLanes) {
    const GramLanes g = LoadLanes(contrast_row + t);
    const GramLanes e = LoadLanes(e_row + t);
#pragma GCC unroll 16
    for (int c = 0; c < kCols; ++c) {
      GramLanes y = LoadLanes(cols + c * kTile + t);
      __asm__("" : "+v"(y));  // one load for the three sums (gram_block.h, AddLaneRowColumns)
      by_contrast[c] += g * y;
      by_e[c] += e * y;
      sums[c] += y;
    }
  }
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) {
    StoreLanes(by_contrast[c], lanes + (kSummedContrastRow + c0 + c) * kGramLanes);
    StoreLanes(by_e[c], lanes + (kSummedERow + c0 + c) * kGramLanes);
    StoreLanes(sums[c], lanes + (kSummedColumnSums + c0 + c) * kGramLanes);
  }
}

// The angle's lanes += the contrast and e rows of the tile against its 16 columns and the
// columns' sums, over points [0, padded_count), in chunks whose 3 sums per column and 3 loaded
// vectors fit the level's vector registers (32 at AVX-512, 16 below).
inline void AddContrastAndERows(const double* tile, int padded_count, double* lanes) {
  constexpr int kChunk = kGramLanes == 8 ? 8 : 4;
  static_assert(kSummedTileColumns % kChunk == 0);
  for (int c0 = 0; c0 < kSummedTileColumns; c0 += kChunk) {
    AddContrastAndERowsOf<kChunk>(tile, padded_count, c0, lanes);
  }
}

// The physical columns of one row vector c_P P + c_Q Q + c_v R_v + c_phi R_phi at point t into
// tile columns column[p] (p the physical index), from the factor and summed columns.
struct PhysicalRowSource {
  const double* factors;
  const double* summed;
  const double* dxj;  // d x_s,j / d(f0..f3) at the tile's columns: dxj[m n + t]
  double dxi[4];      // d x_s,i / d(f0..f3)
  int n;
};

inline void StorePhysicalRow(const PhysicalRowSource& src, int t, double c_p, double c_q,
                             double c_v, double c_phi, double* tile, const int* column) {
  const double* f = src.factors;
  const double* s = src.summed;
  const double cr = c_p * s[kPr * kTile + t] + c_q * s[kQr * kTile + t];
  const double cs = c_p * s[kPs * kTile + t] + c_q * s[kQs * kTile + t];
  const double cu = c_p * s[kPu * kTile + t] + c_q * s[kQu * kTile + t];
  const double cw = c_p * s[kPw * kTile + t] + c_q * s[kQw * kTile + t];
  const double minus_g1 = s[kMinusG1 * kTile + t];
  const double cv = c_v * minus_g1, cphi = c_phi * minus_g1;
  for (int m = 0; m < 3; ++m) {
    tile[column[tc::kD0Ref + m] * kTile + t] = cr * f[(kDHr + m) * kTile + t];
    tile[column[tc::kD0Sample + m] * kTile + t] = cs * f[(kDHs + m) * kTile + t];
    tile[column[tc::kV0 + m] * kTile + t] = cv * f[(kDDv + m) * kTile + t];
  }
  for (int m = 0; m < 4; ++m) {
    tile[column[tc::kF0 + m] * kTile + t] = cu * src.dxi[m] + cw * src.dxj[m * src.n + t];
  }
  tile[column[tc::kPhi0Het] * kTile + t] = cphi * f[kDv * kTile + t];
}

// The inverse of kSummedOrder: the summed lane Gram's column of each physical parameter.
constexpr int kSummedColumnOf[tc::kNumPhysical] = {4, 5, 6, 7, 8, 9, 1, 2, 3, 10, 11, 12, 13, 0};
static_assert(kSummedOrder[kSummedColumnOf[tc::kD0Ref]] == tc::kD0Ref &&
              kSummedOrder[kSummedColumnOf[tc::kD0Sample + 2]] == tc::kD0Sample + 2 &&
              kSummedOrder[kSummedColumnOf[tc::kV0 + 1]] == tc::kV0 + 1 &&
              kSummedOrder[kSummedColumnOf[tc::kF0 + 3]] == tc::kF0 + 3 &&
              kSummedOrder[kSummedColumnOf[tc::kPhi0Het]] == tc::kPhi0Het);

constexpr int kIdentityOrder[tc::kNumPhysical] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

// The angle-independent part of a tile of the summed pass: P, Q and -g1 per point, W = 0.
void SummedBasis(const TwoComponentInputs& in, int i, int count, const double* factors,
                 double* summed) {
  const double* hr_col = factors + kHr * kTile;
  const double* hs_col = factors + kHs * kTile;
  const double* a_col = factors + kA * kTile;
  const double* b_col = factors + kB * kTile;
  const double* inverse_den_col = factors + kInverseDen * kTile;
  const double* dden_du_col = factors + kDDenDu * kTile;
  const double* dden_dw_col = factors + kDDenDw * kTile;
  const double* w_col = factors + kW * kTile;
  const double u = in.fraction[i], ur = 1.0 - u;
#pragma omp simd
  for (int t = 0; t < count; ++t) {
    const double hr = hr_col[t], hs = hs_col[t], a = a_col[t], b = b_col[t];
    const double inverse_den = inverse_den_col[t];
    const double w = w_col[t], wr = 1.0 - w;
    const double g0 = (a * a * hr * hr + b * b * hs * hs) * inverse_den;
    const double g1 = 2.0 * (a * b) * hr * hs * inverse_den;
    summed[kPr * kTile + t] = 2.0 * a * a * hr * inverse_den;
    summed[kQr * kTile + t] = 2.0 * a * b * hs * inverse_den;
    summed[kPs * kTile + t] = 2.0 * b * b * hs * inverse_den;
    summed[kQs * kTile + t] = 2.0 * a * b * hr * inverse_den;
    const double na0 = 2.0 * a * hr * hr, na1 = 2.0 * b * hr * hs;
    const double nb0 = 2.0 * b * hs * hs, nb1 = 2.0 * a * hr * hs;
    summed[kPu * kTile + t] = ((na0 * (-wr) + nb0 * w) - g0 * dden_du_col[t]) * inverse_den;
    summed[kQu * kTile + t] = ((na1 * (-wr) + nb1 * w) - g1 * dden_du_col[t]) * inverse_den;
    summed[kPw * kTile + t] = ((na0 * (-ur) + nb0 * u) - g0 * dden_dw_col[t]) * inverse_den;
    summed[kQw * kTile + t] = ((na1 * (-ur) + nb1 * u) - g1 * dden_dw_col[t]) * inverse_den;
    summed[kMinusG1 * kTile + t] = -g1;
  }
  for (int c = kW00; c <= kW33; ++c) {
#pragma omp simd
    for (int t = 0; t < count; ++t) summed[c * kTile + t] = 0.0;
  }
}

// One angle of one tile of the summed pass: its physical columns (StorePhysicalRow), d c2 /
// d contrast and e in the tile; W += its terms; its lanes += the contrast and e rows, the column
// sums and the count.
void AccumulateSummedTile(const TwoComponentAngle& angle, const ProductTables& tables,
                          const PhysicalRowSource& src, const float* data, int count,
                          double* summed, double* tile, double* lanes, int64_t& finite_points) {
  const double* hr_col = src.factors + kHr * kTile;
  const double* hs_col = src.factors + kHs * kTile;
  const double* a_col = src.factors + kA * kTile;
  const double* b_col = src.factors + kB * kTile;
  const double* inverse_den_col = src.factors + kInverseDen * kTile;
  const double contrast = angle.contrast;
  const double offset = angle.offset;
  const double s = angle.phase_per_unit;
  const double ds = angle.dphase_dphi0_per_unit;
  const double ss = s * s, sds = s * ds, dsds = ds * ds;
  const double* sin_j = tables.sin_j;
  const double* cos_j = tables.cos_j;
  const double sin_i = tables.sin_i, cos_i = tables.cos_i;
  int64_t finite = 0;
#pragma omp simd reduction(+ : finite)
  for (int t = 0; t < count; ++t) {
    const double d = static_cast<double>(data[t]);
    const double weight = (d - d) == 0.0 ? 1.0 : 0.0;  // 0 for NaN and +-inf
    const double sin_phase = sin_j[t] * cos_i - cos_j[t] * sin_i;
    const double cos_phase = cos_j[t] * cos_i + sin_j[t] * sin_i;
    const double hr = hr_col[t], hs = hs_col[t], a = a_col[t], b = b_col[t];
    const double num = a * a * hr * hr + b * b * hs * hs + 2.0 * (a * b) * hr * hs * cos_phase;
    const double g = num * inverse_den_col[t];
    const double c2 = offset + contrast * g;
    const double cw = contrast * weight;
    const double c_sin = cw * sin_phase;
    StorePhysicalRow(src, t, cw, cw * cos_phase, c_sin * s, c_sin * ds, tile, kIdentityOrder);
    tile[tc::kNumPhysical * kTile + t] = weight * g;  // d c2 / d contrast
    // weight * (d - c2) would be NaN for non-finite d.
    tile[(tc::kNumPhysical + 1) * kTile + t] = weight > 0.0 ? d - c2 : 0.0;
    const double wc = contrast * cw;  // f_k c_k^2
    const double w_cos = wc * cos_phase;
    const double w_sin = wc * sin_phase;
    const double w_sin_cos = w_sin * cos_phase;
    const double w_sin_sin = w_sin * sin_phase;
    summed[kW00 * kTile + t] += wc;
    summed[kW10 * kTile + t] += w_cos;
    summed[kW11 * kTile + t] += w_cos * cos_phase;
    summed[kW20 * kTile + t] += w_sin * s;
    summed[kW21 * kTile + t] += w_sin_cos * s;
    summed[kW22 * kTile + t] += w_sin_sin * ss;
    summed[kW30 * kTile + t] += w_sin * ds;
    summed[kW31 * kTile + t] += w_sin_cos * ds;
    summed[kW32 * kTile + t] += w_sin_sin * sds;
    summed[kW33 * kTile + t] += w_sin_sin * dsds;
    finite += weight > 0.0 ? 1 : 0;
  }
  finite_points += finite;
  ZeroTilePadding(tile, 0, kSummedTileColumns, count);
  AddContrastAndERows(tile, PaddedCount(count), lanes);
  lanes[kSummedCount * kGramLanes] += static_cast<double>(finite);
}

// AddSummedPhysicalBlock's raise of W's diagonal (relative).
constexpr double kSummedRegularization = 1e-14;

// W = L L^T per point (in place), then the Gram of the rows B L added to the summed lane Gram.
void AddSummedPhysicalBlock(const PhysicalRowSource& src, int count, double* summed, double* tile,
                            double* summed_lanes) {
  double* w00 = summed + kW00 * kTile;
  double* w10 = summed + kW10 * kTile;
  double* w11 = summed + kW11 * kTile;
  double* w20 = summed + kW20 * kTile;
  double* w21 = summed + kW21 * kTile;
  double* w22 = summed + kW22 * kTile;
  double* w30 = summed + kW30 * kTile;
  double* w31 = summed + kW31 * kTile;
  double* w32 = summed + kW32 * kTile;
  double* w33 = summed + kW33 * kTile;
  // The diagonal is raised by kSummedRegularization of itself: W has rank min(4, angles) and is
  // near that at small phases (cos Phi_k near 1 for every angle), where an unpivoted Cholesky
  // factor of W itself meets pivots that rounding leaves near or below 0 and entries of L that
  // their rounding blows up (1e-8 of the phi0 diagonal measured with 3 angles). The Schur
  // complements of W + r diag(W) are at least r times W's diagonal, far above the few ulp of their
  // rounding: every pivot is positive and L is bounded by the diagonal, and the Gram gains r times
  // the Gram of the rows B diag(W)^(1/2), a relative 1e-14 of the diagonal scales.
  constexpr double kRaise = 1.0 + kSummedRegularization;
#pragma omp simd
  for (int t = 0; t < count; ++t) {
    const double d0 = w00[t] * kRaise;
    const double l00 = d0 > 0.0 ? std::sqrt(d0) : 0.0;
    const double r0 = d0 > 0.0 ? 1.0 / l00 : 0.0;
    const double l10 = w10[t] * r0, l20 = w20[t] * r0, l30 = w30[t] * r0;
    const double d1 = w11[t] * kRaise - l10 * l10;
    const double l11 = d1 > 0.0 ? std::sqrt(d1) : 0.0;
    const double r1 = d1 > 0.0 ? 1.0 / l11 : 0.0;
    const double l21 = (w21[t] - l20 * l10) * r1;
    const double l31 = (w31[t] - l30 * l10) * r1;
    const double d2 = w22[t] * kRaise - l20 * l20 - l21 * l21;
    const double l22 = d2 > 0.0 ? std::sqrt(d2) : 0.0;
    const double r2 = d2 > 0.0 ? 1.0 / l22 : 0.0;
    const double l32 = (w32[t] - l30 * l20 - l31 * l21) * r2;
    const double d3 = w33[t] * kRaise - l30 * l30 - l31 * l31 - l32 * l32;
    const double l33 = d3 > 0.0 ? std::sqrt(d3) : 0.0;
    w00[t] = l00, w10[t] = l10, w11[t] = l11, w20[t] = l20, w21[t] = l21;
    w22[t] = l22, w30[t] = l30, w31[t] = l31, w32[t] = l32, w33[t] = l33;
  }
  const int* column = kSummedColumnOf;
  // Rows 1 and 2 of B L (columns of L: P, Q, R_v, R_phi coefficients) touch every column.
#pragma omp simd
  for (int t = 0; t < count; ++t)
    StorePhysicalRow(src, t, w00[t], w10[t], w20[t], w30[t], tile, column);
  AddTileColumnsToLaneGram<false>(tile, count, tc::kNumPhysical, summed_lanes, nullptr);
#pragma omp simd
  for (int t = 0; t < count; ++t)
    StorePhysicalRow(src, t, 0.0, w11[t], w21[t], w31[t], tile, column);
  AddTileColumnsToLaneGram<false>(tile, count, tc::kNumPhysical, summed_lanes, nullptr);
  // Rows 3 and 4: R_v and R_phi only, the summed order's first 4 columns and first column.
  const double* dv = src.factors + kDv * kTile;
  const double* minus_g1 = summed + kMinusG1 * kTile;
#pragma omp simd
  for (int t = 0; t < count; ++t) {
    tile[0 * kTile + t] = w32[t] * minus_g1[t] * dv[t];
    for (int m = 0; m < 3; ++m) {
      tile[(1 + m) * kTile + t] = w22[t] * minus_g1[t] * src.factors[(kDDv + m) * kTile + t];
    }
  }
  AddTileColumnsToLaneGram<false>(tile, count, 4, summed_lanes, nullptr);
#pragma omp simd
  for (int t = 0; t < count; ++t) tile[t] = w33[t] * minus_g1[t] * dv[t];
  AddTileColumnsToLaneGram<false>(tile, count, 1, summed_lanes, nullptr);
}

// grams[k] += the angle's lanes of the summed pass (its contrast, offset and e rows).
void FlushSummedAngleLanes(const double* lanes, int gram_size, double* gram) {
  const int contrast = tc::kNumPhysical, offset = contrast + 1, e = contrast + 2;
  for (int c = 0; c <= contrast; ++c) {
    gram[contrast + c * gram_size] += LaneSum(lanes + (kSummedContrastRow + c) * kGramLanes);
  }
  for (int c = 0; c <= contrast + 1; ++c) {
    const int column = c <= contrast ? c : e;  // the tile's column 15 is e
    gram[e + column * gram_size] += LaneSum(lanes + (kSummedERow + c) * kGramLanes);
    const double sum = LaneSum(lanes + (kSummedColumnSums + c) * kGramLanes);
    if (c <= contrast) {
      gram[offset + c * gram_size] += sum;  // (offset, c)
    } else {
      gram[e + offset * gram_size] += sum;  // (e, offset)
    }
  }
  gram[offset + offset * gram_size] += lanes[kSummedCount * kGramLanes];
}

void AccumulateSummedRows(const TwoComponentInputs& in, int row_begin, int row_end, int row_stride,
                          const float* const* data, double* const* grams, int64_t* finite_points,
                          double* factors, double* tile, double* lane_grams) {
  const int lane_gram_doubles = LaneGramDoubles(in.gram_size);
  double* summed_lanes = lane_grams + in.num_angles * lane_gram_doubles;
  double* summed = summed_lanes + LaneGramDoubles(tc::kNumPhysical);
  for (int k = 0; k < in.num_angles; ++k) {
    ClearLaneGram(in.gram_size, lane_grams + k * lane_gram_doubles);
  }
  ClearLaneGram(tc::kNumPhysical, summed_lanes);
  const int n = in.num_times;
  SeparableExpRowCache row_caches[2];
  ForEachTile(n, row_begin, row_end, row_stride, [&](int i, int j, int count, int64_t point) {
    SharedFactors<true>(in, i, j, count, row_caches, factors);
    SummedBasis(in, i, count, factors, summed);
    const double* dx = in.fraction_derivatives;
    const PhysicalRowSource src{
        factors, summed, dx + j, {dx[i], dx[n + i], dx[2 * n + i], dx[3 * n + i]}, n};
    for (int k = 0; k < in.num_angles; ++k) {
      const TwoComponentAngle& angle = in.angles[k];
      PrefetchNextTile(data[k] + point + count);
      AccumulateSummedTile(angle, TablesOf(angle, i, j), src, data[k] + point, count, summed, tile,
                           lane_grams + k * lane_gram_doubles, finite_points[k]);
    }
    AddSummedPhysicalBlock(src, count, summed, tile, summed_lanes);
  });
  for (int k = 0; k < in.num_angles; ++k) {
    FlushSummedAngleLanes(lane_grams + k * lane_gram_doubles, in.gram_size, grams[k]);
  }
  // The physical block summed over the angles, in angle 0's Gram.
  ForEachLaneGramEntry(tc::kNumPhysical, [&](int row, int column, int offset) {
    const int a = kSummedOrder[row], c = kSummedOrder[column];
    grams[0][(a > c ? a : c) + (a > c ? c : a) * in.gram_size] += LaneSum(summed_lanes + offset);
  });
}

void SumSquaredResiduals(const TwoComponentInputs& in, int row_begin, int row_end, int row_stride,
                         const float* const* data, double* squared_residuals, double* factors,
                         double* tile, double* sums) {
  // The linear loss's per-thread lane sums, flushed once at the end.
  ClearLaneSums(kCostSumsDoubles * in.num_angles, sums);
  SeparableExpRowCache row_caches[2];
  ForEachTile<kCostTile>(
      in.num_times, row_begin, row_end, row_stride, [&](int i, int j, int count, int64_t point) {
        SharedFactors<false>(in, i, j, count, row_caches, factors);
        for (int k = 0; k < in.num_angles; ++k) {
          const TwoComponentAngle& angle = in.angles[k];
          PrefetchNextTile<kCostTile>(data[k] + point + count);
          squared_residuals[k] += TileCost(angle, TablesOf(angle, i, j), data[k] + point, count,
                                           in.loss, factors, tile, sums + k * kCostSumsDoubles);
        }
      });
  if (in.loss.function == LossFunction::kLinear) {
    for (int k = 0; k < in.num_angles; ++k) {
      squared_residuals[k] += LaneSum(sums + k * kCostSumsDoubles);
    }
  }
}

void AccumulateScalingRows(const TwoComponentInputs& in, int row_begin, int row_end, int row_stride,
                           const float* const* data, double* const* grams, int64_t* finite_points,
                           double* factors, double* tile, double* sums) {
  // Per-thread sums, flushed once at the end (gram_block.h).
  ClearLaneSums(kScalingSumsDoubles * in.num_angles, sums);
  SeparableExpRowCache row_caches[2];
  ForEachTile<kCostTile>(in.num_times, row_begin, row_end, row_stride,
                         [&](int i, int j, int count, int64_t point) {
                           SharedFactors<false>(in, i, j, count, row_caches, factors);
                           for (int k = 0; k < in.num_angles; ++k) {
                             const TwoComponentAngle& angle = in.angles[k];
                             PrefetchNextTile<kCostTile>(data[k] + point + count);
                             TileScalingSums(angle, TablesOf(angle, i, j), data[k] + point, count,
                                             factors, tile, sums + k * kScalingSumsDoubles);
                           }
                         });
  for (int k = 0; k < in.num_angles; ++k) {
    FlushScalingSums(sums + k * kScalingSumsDoubles, grams[k], finite_points[k]);
  }
}

// c2 = offset + contrast g of angle k at row i, columns [j_begin, j_end) (i < j_begin): the cost
// pass's model (StoreTileResiduals), in segments of kCostTile.
void EvaluateUpperSegment(const TwoComponentInputs& in, int k, int i, int j_begin, int j_end,
                          double* c2_out, double* factors) {
  const TwoComponentAngle& angle = in.angles[k];
  SeparableExpRowCache row_caches[2];
  for (int j = j_begin; j < j_end; j += kCostTile) {
    const int count = j_end - j < kCostTile ? j_end - j : kCostTile;
    SharedFactors<false>(in, i, j, count, row_caches, factors);
    const TileModel tile = TileModelOf(TablesOf(angle, i, j), factors);
    const double contrast = angle.contrast;
    const double offset = angle.offset;
    double* c2 = c2_out + (j - j_begin);
#pragma omp simd
    for (int t = 0; t < count; ++t) c2[t] = offset + contrast * TileG(tile, t);
  }
}

// The high and low halves of x (Veltkamp's split): hi + lo = x exactly, each with at most 26
// significant bits, so the product of two halves is exact. |x| < 1e300 (no overflow).
inline void SplitHalves(double x, double* hi, double* lo) {
  constexpr double kSplitter = 134217729.0;  // 2^27 + 1
  const double scaled = kSplitter * x;
  *hi = scaled - (scaled - x);
  *lo = x - *hi;
}

// s C[v]_j = hi + lo exactly, lo from Dekker's product of the halves (the value std::fma(s, v,
// -hi) gives, at every level: the baseline level has no FMA instruction, and a libm call per
// value would keep the loop scalar); then the first-order correction of FillVelocityPhaseTables.
bool FillVelocityTables(double s, const double* velocity, int64_t n, double* sin_table,
                        double* cos_table) {
  // The domain: the largest |velocity[j]| bounds every phase (rounding is monotone), and a sum of
  // velocity[j] * 0 is 0 unless a value is infinite or NaN.
  double largest = 0.0, probe = 0.0;
#pragma omp simd reduction(max : largest) reduction(+ : probe)
  for (int64_t j = 0; j < n; ++j) {
    const double magnitude = std::fabs(velocity[j]);
    largest = magnitude > largest ? magnitude : largest;
    probe += velocity[j] * 0.0;
  }
  const double s_magnitude = std::fabs(s);
  if (!(probe == 0.0 && largest < 1e300 && s_magnitude < 1e300 &&
        s_magnitude * largest <= vector_math::kSinCosMaxArgument)) {
    return false;
  }
  double s_hi, s_lo;
  SplitHalves(s, &s_hi, &s_lo);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const double v = velocity[j];
    const double hi = s * v;
    double v_hi, v_lo;
    SplitHalves(v, &v_hi, &v_lo);
    const double lo = ((s_hi * v_hi - hi) + s_hi * v_lo + s_lo * v_hi) + s_lo * v_lo;
    double sin_hi, cos_hi;
    vector_math::SinCos(hi, &sin_hi, &cos_hi);
    sin_table[j] = sin_hi + lo * cos_hi;
    cos_table[j] = cos_hi - lo * sin_hi;
  }
  return true;
}

}  // namespace

// External linkage from the declaration in two_component_pass_variant.h.
const TwoComponentFunctions kTwoComponentFunctions = {
    &AccumulateRows,     &SumSquaredResiduals,  &AccumulateScalingRows,
    &FillVelocityTables, &AccumulateSummedRows, &EvaluateUpperSegment};

}  // namespace homodyne::pass_kernel::HOMODYNE_PASS_KERNEL_LEVEL
