// The homodyne pass kernel's body for one instruction-set level (homodyne_pass_variant.h): compiled
// once per level with that level's -march and HOMODYNE_PASS_KERNEL_LEVEL set to its name
// (src/model/CMakeLists.txt). Formulas and guards are those of ModelEvaluation::EvaluateSegment
// (homodyne_point.cc; docs/model.md), rearranged so the angle-independent factors are shared by
// angles.
//
// Only plain C++ here: no Eigen, no standard-library templates, and the helpers in an unnamed
// namespace, so that this object defines nothing outside homodyne::pass_kernel::<level>
// (homodyne_pass_variant.h; tests/model/pass_kernel_symbols_test.sh). std::sqrt, std::fabs,
// std::sin and std::cos are the C library's functions (built in at -O2).
#include "model/homodyne/homodyne_pass_variant.h"

#include <cmath>
#include <numbers>

#include "homodyne/model.h"
#include "model/separable_exp.h"
#include "model/vector_math.h"

#ifndef HOMODYNE_PASS_KERNEL_LEVEL
#error "HOMODYNE_PASS_KERNEL_LEVEL (baseline, avx2, avx512 or native) must name the level"
#endif

namespace homodyne::pass_kernel::HOMODYNE_PASS_KERNEL_LEVEL {
namespace {

using model_limits::kG1Floor;
using model_limits::kLogG1DiffusionMin;
using model_limits::kSincTaylorRadius;
using model_limits::kSmoothAbsEpsilon;
constexpr int kTile = kTilePoints;
constexpr int kPhi0Column = kPhi0;  // the tile column of d c2 / d phi0

// sinc(x) = sin(x)/x and its derivative (docs/model.md, Shear factor, Jacobian) from sin x, cos
// x and 1 / x (the angle's 1 / s times the point's 1 / M_G: no division per angle), with the
// reference's Taylor branch for |x| < 1e-4, its divisions by 6, 120, 3 and 30 as products with
// the rounded reciprocals (the branch is computed for every point, and a division per vector
// costs as much as a dozen products; the terms differ by an ulp of themselves: below 1e-24 of
// sinc, 1 ulp of sinc'). Branch-free (both sides computed, one selected; the unselected side may
// be NaN where s = 0).
inline void SincFromSinCos(double x, double sin_x, double cos_x, double inverse, double* sinc,
                           double* dsinc) {
  constexpr double kSixth = 1.0 / 6.0, kOver120 = 1.0 / 120.0;
  constexpr double kThird = 1.0 / 3.0, kOver30 = 1.0 / 30.0;
  const double x2 = x * x;
  const bool taylor = std::fabs(x) < kSincTaylorRadius;
  const double sinc_taylor = 1.0 - x2 * kSixth + x2 * x2 * kOver120;
  const double dsinc_taylor = -x * kThird + x * x2 * kOver30;
  *sinc = taylor ? sinc_taylor : sin_x * inverse;
  *dsinc = taylor ? dsinc_taylor : (x * cos_x - sin_x) * (inverse * inverse);
}

// How a laminar tile computes sin and cos of its phases x = s M_G:
//   kVector: vector_math::SinCos per point and angle;
//   kLibm: libm, for phases beyond vector_math::kSinCosMaxArgument (rare; the loop stays scalar);
//   kProduct: the per-row separable form (separable_exp.h): with A = s (C_G[j] - C_G[i]) and
//     x = A + delta, delta = s (M_G - |diff_G|) (the smoothing of |diff_G|; C_G grows, so
//     |diff_G| = C_G[j] - C_G[i]),
//       sin A = S[j] K[i] - K[j] S[i],  cos A = K[j] K[i] + S[j] S[i]  (S, K: the angle's tables,
//       AngleCoefficients::shear_sin, shear_cos),
//       sin x = sin A (1 - delta^2 / 2) + cos A delta,
//       cos x = cos A (1 - delta^2 / 2) - sin A delta
//     (evaluated as ProductSinc: with 1 / s in the row's table values, no Taylor select).
//     Its error is a few units of 1e-16 absolute in sin x and cos x (and delta^3 / 6), which
//     sinc = sin x / x and sinc' = (x cos x - sin x) / x^2 divide by x and x^2: a tile takes it
//     only where all its phases are at least kProductMinPhase and delta at most kProductMaxDelta
//     (ProductFormApplies), the direct form elsewhere (the tiles next to the diagonal).
//   kSeries: no sin or cos; sinc and sinc' from their Taylor series (SincSeries) where all phases
//     of the tile are below kSeriesMaxPhase (the tiles next to the diagonal, and the angles
//     nearly perpendicular to the flow). The series is accurate to 2 ulp there; the reference's
//     (x cos x - sin x) / x^2 cancels digits at small x (3 ulp / x^2 relative), which the direct
//     form shares.
//   kSeriesThenProduct: the tiles whose phases cross kSeriesMaxPhase (on a typical grid the first
//     tile of every row, its phases rising from about 0): the points below kSeriesMaxPhase in
//     kSeries, the others in kProduct, as two loops over the tile's two ranges (ForEachFormRange;
//     ProductTables::series_end), where the product form's conditions hold at the tile's first
//     point apart from its phase (SeriesThenProductApplies). Each point gets the accuracy of its
//     form (kSeriesMaxPhase = kProductMinPhase). (Before the per-row forms, both forms were
//     computed at every point of such a tile and one selected: 1.7 times the product form's
//     instructions per point.)
enum class SinCosForm { kVector, kLibm, kProduct, kSeries, kSeriesThenProduct };

inline constexpr double kSeriesMaxPhase = 0.5;

inline constexpr double kProductMinPhase = 0.5;
static_assert(kProductMinPhase == kSeriesMaxPhase,
              "kSeriesThenProduct splits its points at one phase");
inline constexpr double kProductMaxDelta = 1e-5;

// The angle's tables at row i and the tile's columns (kProduct and kSeriesThenProduct only).
struct ProductTables {
  const double* sin_j = nullptr;  // S[j_begin + t]
  const double* cos_j = nullptr;  // K[j_begin + t]
  double sin_i = 0.0;             // S[i]
  double cos_i = 0.0;             // K[i]
  // kSeriesThenProduct: the tile's first point in product form (its phase at least
  // kProductMinPhase; the points before it in kSeries).
  int series_end = 0;
};

// Calls range.template operator()<kRangeForm>(begin, end) for each range [begin, end) of the
// tile's points that one form computes: [0, count) in kForm, or for kSeriesThenProduct
// [0, series_end) in kSeries and [series_end, count) in kProduct.
template <SinCosForm kForm, typename Range>
inline void ForEachFormRange(const ProductTables& tables, int count, Range&& range) {
  if constexpr (kForm == SinCosForm::kSeriesThenProduct) {
    range.template operator()<SinCosForm::kSeries>(0, tables.series_end);
    range.template operator()<SinCosForm::kProduct>(tables.series_end, count);
  } else {
    range.template operator()<kForm>(0, count);
  }
}

// sin x and cos x in the direct forms (kLibm, kVector).
template <SinCosForm kForm>
inline void PhaseSinCos(double x, double* sin_x, double* cos_x) {
  static_assert(kForm == SinCosForm::kLibm || kForm == SinCosForm::kVector);
  if constexpr (kForm == SinCosForm::kLibm) {
    *sin_x = std::sin(x);
    *cos_x = std::cos(x);
  } else {
    vector_math::SinCos(x, sin_x, cos_x);
  }
}

// sinc(x) = sum_k (-1)^k x^(2k) / (2k+1)! to k = 7 and sinc'(x) = x sum_k (-1)^k 2k x^(2k-2) /
// (2k+1)! to k = 8, for |x| <= kSeriesMaxPhase: the first terms left out are below 2e-22 and
// 1e-17 of the values. Horner in z = x^2.
// SincSeriesOfSquare: the same from z = x^2, with sinc'(x) / x for sinc'.
inline void SincSeriesOfSquare(double z, double* sinc, double* dsinc_over_x) {
  double p = -1.0 / 1307674368000.0;  // -1/15!
  p = p * z + 1.0 / 6227020800.0;     // 1/13!
  p = p * z - 1.0 / 39916800.0;       // -1/11!
  p = p * z + 1.0 / 362880.0;         // 1/9!
  p = p * z - 1.0 / 5040.0;
  p = p * z + 1.0 / 120.0;
  p = p * z - 1.0 / 6.0;
  *sinc = p * z + 1.0;
  // 2k / (2k+1)! for k = 8 down to 1, alternating signs (k = 1: -2/3! = -1/3).
  double q = 16.0 / 355687428096000.0;  // 16/17!
  q = q * z - 14.0 / 1307674368000.0;   // 14/15!
  q = q * z + 12.0 / 6227020800.0;      // 12/13!
  q = q * z - 10.0 / 39916800.0;        // 10/11!
  q = q * z + 8.0 / 362880.0;           // 8/9!
  q = q * z - 6.0 / 5040.0;             // 6/7!
  q = q * z + 4.0 / 120.0;              // 4/5!
  q = q * z - 2.0 / 6.0;                // 2/3!
  *dsinc_over_x = q;
}

inline void SincSeries(double x, double* sinc, double* dsinc) {
  double dsinc_over_x;
  SincSeriesOfSquare(x * x, sinc, &dsinc_over_x);
  *dsinc = dsinc_over_x * x;
}

// sinc and sinc' of the phase x in the form kForm (kVector, kLibm or kSeries; kProduct is
// ProductSinc); inverse = 1 / x as SincFromSinCos.
template <SinCosForm kForm>
inline void PhaseSinc(double x, double inverse, double* sinc, double* dsinc) {
  if constexpr (kForm == SinCosForm::kSeries) {
    SincSeries(x, sinc, dsinc);
  } else {
    double sin_x, cos_x;
    PhaseSinCos<kForm>(x, &sin_x, &cos_x);
    SincFromSinCos(x, sin_x, cos_x, inverse, sinc, dsinc);
  }
}

// The product form's sinc x and cos x (x = s M_G, all phases of the tile >= kProductMinPhase, so
// no Taylor branch) from sin x / s, the sums of SinCosForm::kProduct with the angle's 1 / s taken
// into the row's table values: with delta = s r (r the smoothing M_G - |diff_G|) and h = s^2 / 2,
//   sin x / s = (sin A / s) (1 - delta^2 / 2) + cos A r = P + r (cos A - h r P),
//   cos x = cos A (1 - delta^2 / 2) - sin A delta = cos A - h r (2 P + r cos A),
//   P = sin A / s = S[j] (K[i] / s) - K[j] (S[i] / s),  cos A = K[j] K[i] + S[j] S[i],
// sinc x = (sin x / s) (1 / M_G): 8 lane operations for sinc (instead of 11, and the Taylor
// select's 8 and 2 divisions) and 3 more for cos x. The same terms, rounded in another order.
inline void ProductSinc(double sin_j, double cos_j, double sin_i, double cos_i, double sin_i_over_s,
                        double cos_i_over_s, double half_s_squared, double smoothing,
                        double inverse_m, double* sinc, double* cos_x) {
  const double sin_a_over_s = sin_j * cos_i_over_s - cos_j * sin_i_over_s;
  const double cos_a = cos_j * cos_i + sin_j * sin_i;
  const double h_r = half_s_squared * smoothing;
  const double sin_x_over_s = sin_a_over_s + smoothing * (cos_a - h_r * sin_a_over_s);
  *sinc = sin_x_over_s * inverse_m;
  *cos_x = cos_a - h_r * (2.0 * sin_a_over_s + smoothing * cos_a);
}

// The diffusion factor g1d = exp(-w M_D) of a tile in per-row separable form (separable_exp.h):
// where it applies, one product per point, and diff_D / M_D = -1.
bool DiffusionSeparable(const Inputs& in, int i, int j_begin, int count,
                        SeparableExpRowCache* cache, SeparableExpTile* tile) {
  return SeparableExpApplies(in.cumulative_diffusion, in.diffusion_factors, in.diffusion_prefactor,
                             kSmoothAbsEpsilon, i, j_begin, count, cache, tile);
}

// M_G = sqrt(diff_G^2 + 1e-12) of a laminar tile without the square root (separable_exp.h): with
// d = |diff_G| = C_G[j] - C_G[i] (C_G does not decrease) and u = 1e-12 / d^2,
//   M_G = d sqrt(1 + u),  M_G - d = d (u/2 - u^2/8 + u^3/16),
//   d / M_G = 1 - u/2 + 3u^2/8 - 5u^3/16,
// and 1 / M_G = (1 / d) (d / M_G): one reciprocal per point instead of a square root and two
// divisions. The series' next terms are below 35 u^4 / 128 relative: a point takes this form
// where u <= kShearSeriesMaxU, so they are below 3e-21 (ShearSeriesBegin); the direct form
// elsewhere (the points next to the diagonal where C_G grows slowly).
inline constexpr double kShearSeriesMaxU = 1e-5;

// The first t in [0, count) with qualifies(t), count if none, where the points that qualify are a
// suffix of [0, count) (qualifies is monotone along a row): a binary search. (No
// std::partition_point: this object uses no standard-library templates, see the top.)
template <typename Qualifies>
int FirstQualifyingPoint(int count, Qualifies qualifies) {
  int low = 0, high = count;  // the answer lies in [low, high]
  while (low < high) {
    const int middle = low + (high - low) / 2;
    if (qualifies(middle)) {
      high = middle;
    } else {
      low = middle + 1;
    }
  }
  return low;
}

// The first point t of the tile (row i, columns j_begin + [0, count)) from which on the shear
// series applies (u <= kShearSeriesMaxU, d > 0), count if none. d grows along the row, so the
// points that qualify are a suffix of the tile: a binary search. NaN never qualifies (where C_G
// holds NaN the split point is arbitrary, and both forms give NaN).
int ShearSeriesBegin(const Inputs& in, int i, int j_begin, int count) {
  const double c_g_i = in.cumulative_shear[i];
  const double* c_g = in.cumulative_shear + j_begin;
  return FirstQualifyingPoint(count, [&](int t) {
    const double d = c_g[t] - c_g_i;
    return d > 0.0 && kSmoothAbsEpsilon <= kShearSeriesMaxU * (d * d);
  });
}

// The diffusion factors of row i, columns [j_begin, j_begin + count), into the scratch. Per point
// of the tile (t = j - j_begin): g1d = exp(clip(-w M_D, -700, 0)) and, with kWithDerivatives,
// d log g1d / d theta_D = -w (diff_D / M_D) (dC_D[i] - dC_D[j]) (zero where the clip binds).
// kSeparable: g1d from the separable form (SeparableExpTile, which `diffusion` holds),
// diff_D / M_D = -1.
template <bool kWithDerivatives, bool kSeparable>
void DiffusionFactors(const Inputs& in, int i, int j_begin, int count,
                      const SeparableExpTile& diffusion, const Scratch& scratch) {
  const int n = in.num_times;
  const double w = in.diffusion_prefactor;
  const double* c_d = in.cumulative_diffusion + j_begin;
  const double* dc_d = in.cumulative_diffusion_derivatives + j_begin;
  const double c_d_i = in.cumulative_diffusion[i];
  const double* dc_d_all = in.cumulative_diffusion_derivatives;
  const double dc_d_i0 = dc_d_all[i], dc_d_i1 = dc_d_all[n + i], dc_d_i2 = dc_d_all[2 * n + i];
  double* g1d = scratch.g1_diffusion;
  double* dlog0 = scratch.dlog_g1d;
  double* dlog1 = dlog0 + kTile;
  double* dlog2 = dlog1 + kTile;
  if constexpr (kSeparable) {
    const double* factors_j = diffusion.factors_j;
    const double factor_low = diffusion.factor_low, factor_high = diffusion.factor_high;
    const int split = diffusion.split;
#pragma omp simd
    for (int t = 0; t < count; ++t) {
      g1d[t] = factors_j[t] * (t < split ? factor_low : factor_high);
      if constexpr (kWithDerivatives) {
        dlog0[t] = w * (dc_d_i0 - dc_d[t]);
        dlog1[t] = w * (dc_d_i1 - dc_d[n + t]);
        dlog2[t] = w * (dc_d_i2 - dc_d[2 * n + t]);
      }
    }
  } else {
#pragma omp simd
    for (int t = 0; t < count; ++t) {
      const double diff = c_d_i - c_d[t];
      const double m_d = std::sqrt(diff * diff + kSmoothAbsEpsilon);
      const double log_g1d_raw = -w * m_d;
      const bool clipped = log_g1d_raw < kLogG1DiffusionMin;
      g1d[t] = vector_math::Exp(clipped ? kLogG1DiffusionMin : log_g1d_raw);
      if constexpr (kWithDerivatives) {
        const double factor = clipped ? 0.0 : -w * (diff / m_d);
        dlog0[t] = factor * (dc_d_i0 - dc_d[t]);
        dlog1[t] = factor * (dc_d_i1 - dc_d[n + t]);
        dlog2[t] = factor * (dc_d_i2 - dc_d[2 * n + t]);
      }
    }
  }
}

// The laminar shear factors of row i at the tile's points [t_begin, t_end) (columns j_begin + t)
// into the scratch: M_G, 1 / M_G, the smoothing M_G - |diff_G| and, with kWithDerivatives,
// d M_G / d theta_G = (diff_G / M_G) (dC_G[i] - dC_G[j]). kSeries: from one reciprocal of
// |diff_G| (ShearSeriesBegin), the direct form otherwise.
template <bool kWithDerivatives, bool kSeries>
void ShearFactors(const Inputs& in, int i, int j_begin, int t_begin, int t_end,
                  const Scratch& scratch) {
  const int n = in.num_times;
  const double* c_g = in.cumulative_shear + j_begin;
  const double* dc_g = in.cumulative_shear_derivatives + j_begin;
  const double c_g_i = in.cumulative_shear[i];
  const double* dc_g_all = in.cumulative_shear_derivatives;
  const double dc_g_i0 = dc_g_all[i], dc_g_i1 = dc_g_all[n + i], dc_g_i2 = dc_g_all[2 * n + i];
  double* m_g = scratch.m_shear;
  double* inverse_m_g = scratch.inverse_m_shear;
  double* smoothing = scratch.smoothing_shear;
  double* dm0 = scratch.dm_shear;
  double* dm1 = dm0 + kTile;
  double* dm2 = dm1 + kTile;
  if constexpr (kSeries) {
#pragma omp simd
    for (int t = t_begin; t < t_end; ++t) {
      const double distance = c_g[t] - c_g_i;  // |diff_G|
      const double inverse_distance = 1.0 / distance;
      const double u = kSmoothAbsEpsilon * (inverse_distance * inverse_distance);
      // sqrt(1 + u) - 1 and 1 / sqrt(1 + u) to third order in u (ShearSeriesBegin).
      const double smoothing_ratio = u * (0.5 - u * (0.125 - u * 0.0625));
      const double distance_over_m = 1.0 - u * (0.5 - u * (0.375 - u * 0.3125));
      smoothing[t] = distance * smoothing_ratio;
      m_g[t] = distance + smoothing[t];
      inverse_m_g[t] = inverse_distance * distance_over_m;
      if constexpr (kWithDerivatives) {
        // diff_G / M_G = -distance / M_G.
        dm0[t] = -distance_over_m * (dc_g_i0 - dc_g[t]);
        dm1[t] = -distance_over_m * (dc_g_i1 - dc_g[n + t]);
        dm2[t] = -distance_over_m * (dc_g_i2 - dc_g[2 * n + t]);
      }
    }
  } else {
#pragma omp simd
    for (int t = t_begin; t < t_end; ++t) {
      const double diff = c_g_i - c_g[t];
      const double m = std::sqrt(diff * diff + kSmoothAbsEpsilon);
      const double inverse_m = 1.0 / m;
      m_g[t] = m;
      inverse_m_g[t] = inverse_m;
      smoothing[t] = kSmoothAbsEpsilon / (m + std::fabs(diff));
      if constexpr (kWithDerivatives) {
        const double unit = diff * inverse_m;
        dm0[t] = unit * (dc_g_i0 - dc_g[t]);
        dm1[t] = unit * (dc_g_i1 - dc_g[n + t]);
        dm2[t] = unit * (dc_g_i2 - dc_g[2 * n + t]);
      }
    }
  }
}

// The angle-independent factors of row i, columns [j_begin, j_begin + count), into the scratch:
// the diffusion factors (DiffusionFactors; separable where DiffusionSeparable) and, laminar, the
// shear factors (ShearFactors: the direct form before ShearSeriesBegin, the series from there).
template <bool kWithDerivatives>
void TileSharedFactors(const Inputs& in, int i, int j_begin, int count, SeparableExpRowCache* cache,
                       const Scratch& scratch) {
  SeparableExpTile diffusion;
  if (DiffusionSeparable(in, i, j_begin, count, cache, &diffusion)) {
    DiffusionFactors<kWithDerivatives, true>(in, i, j_begin, count, diffusion, scratch);
  } else {
    DiffusionFactors<kWithDerivatives, false>(in, i, j_begin, count, diffusion, scratch);
  }
  if (!in.laminar) return;
  const int series_begin = ShearSeriesBegin(in, i, j_begin, count);
  ShearFactors<kWithDerivatives, false>(in, i, j_begin, 0, series_begin, scratch);
  ShearFactors<kWithDerivatives, true>(in, i, j_begin, series_begin, count, scratch);
}

// One angle's rows of [J | e] at the tile's points [t_begin, t_end) in the form kForm
// (docs/model.md, Jacobian; as ModelEvaluation), zero rows for non-finite data, into the scratch's
// tile; returns the number of finite data points among them. Under the linear loss the offset
// column is left out (AddTileToOffsetLaneGram sums its Gram row).
template <bool kLaminar, SinCosForm kForm, bool kLinear>
int64_t FillTileRows(const AngleCoefficients& angle, const ProductTables& tables, const float* data,
                     int t_begin, int t_end, const Scratch& scratch) {
  constexpr int kPhysical = kLaminar ? 7 : 3;
  // Column c of the tile at tile + c kTile (written with constant offsets: vectorises).
  double* const tile = scratch.tile;
  const double* g1d = scratch.g1_diffusion;
  const double* dlog = scratch.dlog_g1d;
  const double* m_g = scratch.m_shear;
  const double* inverse_m_g = scratch.inverse_m_shear;
  const double* smoothing = scratch.smoothing_shear;
  // The tables (kProduct only: null and unread otherwise).
  const double* product_sin_j = tables.sin_j;
  const double* product_cos_j = tables.cos_j;
  const double product_sin_i = tables.sin_i, product_cos_i = tables.cos_i;
  const double* dm = scratch.dm_shear;
  const double contrast = angle.contrast;
  const double offset = angle.offset;
  const double s = angle.phase_per_step;
  const double inverse_s = 1.0 / s;  // inf where s = 0 (only the Taylor branch is then taken)
  const double ds = angle.dphase_dphi0_per_step;
  // kProduct (ProductSinc): the row's table values over s, s^2 / 2, and d s / d phi0 over s.
  const double product_sin_i_over_s = product_sin_i * inverse_s;
  const double product_cos_i_over_s = product_cos_i * inverse_s;
  const double half_s_squared = 0.5 * (s * s);
  const double ds_over_s = ds * inverse_s;
  int64_t finite = 0;
#pragma omp simd reduction(+ : finite)
  for (int t = t_begin; t < t_end; ++t) {
    const double d = static_cast<double>(data[t]);
    const double weight = (d - d) == 0.0 ? 1.0 : 0.0;  // 0 for NaN and +-inf
    double g1 = g1d[t];
    double dg1_dphase = 0.0;
    // kProduct: x d g1 / d phase (x the phase), which the phase's columns scale by 1 / M_G and
    // d s / d phi0 / s (x / M_G = s, x / s = M_G): no phase, no 1 / x.
    double dg1_dphase_times_phase = 0.0;
    if constexpr (kLaminar && kForm == SinCosForm::kProduct) {
      double sinc, cos_x;
      ProductSinc(product_sin_j[t], product_cos_j[t], product_sin_i, product_cos_i,
                  product_sin_i_over_s, product_cos_i_over_s, half_s_squared, smoothing[t],
                  inverse_m_g[t], &sinc, &cos_x);
      const double g1d_sinc = g1d[t] * sinc;
      g1 = g1d_sinc * sinc;
      // x sinc'(x) = cos x - sinc x.
      dg1_dphase_times_phase = 2.0 * g1d_sinc * (cos_x - sinc);
    } else if constexpr (kLaminar) {
      const double phase = s * m_g[t];
      double sinc, dsinc;
      PhaseSinc<kForm>(phase, inverse_s * inverse_m_g[t], &sinc, &dsinc);
      g1 = g1d[t] * (sinc * sinc);
      dg1_dphase = g1d[t] * 2.0 * sinc * dsinc;
    }
    const double g1_floored = g1 > kG1Floor ? g1 : kG1Floor;
    const double g1_squared = g1_floored * g1_floored;
    const double c2 = offset + contrast * g1_squared;
    // Zero where the floor binds (as the reference's autodiff) or the data point is not finite.
    const double dc2_dg1 = g1 > kG1Floor ? 2.0 * contrast * g1 * weight : 0.0;
    const double dc2_dlog = dc2_dg1 * g1;
    tile[0 * kTile + t] = dc2_dlog * dlog[0 * kTile + t];
    tile[1 * kTile + t] = dc2_dlog * dlog[1 * kTile + t];
    tile[2 * kTile + t] = dc2_dlog * dlog[2 * kTile + t];
    if constexpr (kLaminar) {
      double dc2_dm, dc2_dphi0;
      if constexpr (kForm == SinCosForm::kProduct) {
        const double dc2_dphase_times_phase = dc2_dg1 * dg1_dphase_times_phase;
        dc2_dm = dc2_dphase_times_phase * inverse_m_g[t];
        dc2_dphi0 = dc2_dphase_times_phase * ds_over_s;
      } else {
        const double dc2_dphase = dc2_dg1 * dg1_dphase;
        dc2_dm = dc2_dphase * s;
        dc2_dphi0 = dc2_dphase * ds * m_g[t];
      }
      tile[3 * kTile + t] = dc2_dm * dm[0 * kTile + t];
      tile[4 * kTile + t] = dc2_dm * dm[1 * kTile + t];
      tile[5 * kTile + t] = dc2_dm * dm[2 * kTile + t];
      tile[kPhi0Column * kTile + t] = dc2_dphi0;
    }
    tile[kPhysical * kTile + t] = weight * g1_squared;  // d c2 / d contrast
    // weight * (d - c2) would be NaN for non-finite d.
    const double e = weight > 0.0 ? d - c2 : 0.0;
    if constexpr (kLinear) {
      // d c2 / d offset (= weight) is not stored: AddTileToOffsetLaneGram sums its Gram row.
      tile[(kPhysical + 1) * kTile + t] = e;
    } else {
      tile[(kPhysical + 1) * kTile + t] = weight;  // d c2 / d offset
      tile[(kPhysical + 2) * kTile + t] = e;
    }
    finite += weight > 0.0 ? 1 : 0;
  }
  return finite;
}

// One angle of one tile: its rows of [J | e] (FillTileRows, over the ranges of ForEachFormRange),
// then gram += tile^T tile (lower triangle). Under the linear loss the tile goes into the angle's
// lane Gram (lanes; gram_block.h), under a robust loss straight into gram.
template <bool kLaminar, SinCosForm kForm, bool kLinear>
void AccumulateTile(const AngleCoefficients& angle, const ProductTables& tables, const float* data,
                    int count, int gram_size, const PassLoss& loss, const Scratch& scratch,
                    double* lanes, double* gram, int64_t& finite_points) {
  constexpr int kPhysical = kLaminar ? 7 : 3;
  // AddTileToOffsetLaneGram: the tile's kPhysical + 2 columns end in a single-row block.
  static_assert((kPhysical + 2) % 4 == 1);
  int64_t finite = 0;
  ForEachFormRange<kForm>(tables, count, [&]<SinCosForm kRangeForm>(int t_begin, int t_end) {
    finite +=
        FillTileRows<kLaminar, kRangeForm, kLinear>(angle, tables, data, t_begin, t_end, scratch);
  });
  finite_points += finite;
  if constexpr (kLinear) {
    AddTileToOffsetLaneGram(scratch.tile, count, finite, gram_size, lanes);
  } else {
    AddRobustTileGram(loss, scratch.tile, count, gram_size, gram);
  }
}

// The per-point model of a tile without derivatives: the tile's columns and the angle's
// coefficients as the loops of StoreTileResiduals and TileScalingSums read them.
struct TileModel {
  const double* g1d;
  const double* m_g;
  const double* inverse_m_g;
  const double* smoothing;
  // The tables (kProduct only: null and unread otherwise).
  const double* product_sin_j;
  const double* product_cos_j;
  double product_sin_i;
  double product_cos_i;
  // kProduct: S[i] / s, K[i] / s and s^2 / 2 (ProductSinc).
  double product_sin_i_over_s;
  double product_cos_i_over_s;
  double half_s_squared;
  double s;
  double inverse_s;  // inf where s = 0 (only the Taylor branch is then taken)
};

template <SinCosForm kForm>
TileModel TileModelOf(const AngleCoefficients& angle, const ProductTables& tables,
                      const Scratch& scratch) {
  const double* smoothing = scratch.smoothing_shear;
  const double s = angle.phase_per_step;
  const double inverse_s = 1.0 / s;
  return {scratch.g1_diffusion,
          scratch.m_shear,
          scratch.inverse_m_shear,
          smoothing,
          tables.sin_j,
          tables.cos_j,
          tables.sin_i,
          tables.cos_i,
          tables.sin_i * inverse_s,
          tables.cos_i * inverse_s,
          0.5 * (s * s),
          s,
          inverse_s};
}

// g1^2 at point t of the tile, g1 floored at kG1Floor: d c2 / d contrast (c2 = offset + contrast
// g1^2). Inline into the callers' simd loops.
// kProduct: sinc from ProductSinc, without sinc' or the Taylor select.
template <bool kLaminar, SinCosForm kForm>
inline double FlooredG1Squared(const TileModel& tile, int t) {
  double g1 = tile.g1d[t];
  if constexpr (kLaminar && kForm == SinCosForm::kProduct) {
    double sinc, cos_x;  // cos_x unused: the compiler drops it
    ProductSinc(tile.product_sin_j[t], tile.product_cos_j[t], tile.product_sin_i,
                tile.product_cos_i, tile.product_sin_i_over_s, tile.product_cos_i_over_s,
                tile.half_s_squared, tile.smoothing[t], tile.inverse_m_g[t], &sinc, &cos_x);
    g1 = tile.g1d[t] * (sinc * sinc);
  } else if constexpr (kLaminar) {
    const double phase = tile.s * tile.m_g[t];
    double sinc, dsinc;
    PhaseSinc<kForm>(phase, tile.inverse_s * tile.inverse_m_g[t], &sinc, &dsinc);
    g1 = tile.g1d[t] * (sinc * sinc);
  }
  const double g1_floored = g1 > kG1Floor ? g1 : kG1Floor;
  return g1_floored * g1_floored;
}

// Stores e at the tile's points [t_begin, t_end) in the form kForm in residuals[t_begin, t_end)
// (0 at non-finite data points): the cost pass's sum of e^2 (AddSquaresToLanes) or a robust
// loss's sum of rho (LossSum) reads them.
template <bool kLaminar, SinCosForm kForm>
void StoreTileResiduals(const AngleCoefficients& angle, const ProductTables& tables,
                        const float* data, int t_begin, int t_end, const Scratch& scratch,
                        double* residuals) {
  const TileModel tile = TileModelOf<kForm>(angle, tables, scratch);
  const double contrast = angle.contrast;
  const double offset = angle.offset;
#pragma omp simd
  for (int t = t_begin; t < t_end; ++t) {
    const double d = static_cast<double>(data[t]);
    const bool is_finite = (d - d) == 0.0;
    const double e = d - (offset + contrast * FlooredG1Squared<kLaminar, kForm>(tile, t));
    residuals[t] = is_finite ? e : 0.0;
  }
}

// The tile's terms of a scaling pass (PassKernel::AccumulateScalingRows): adds to the angle's
// scaling sums (gram_block.h: the 3 x 3 Gram of [g, 1, e] over the finite points, g = g1^2 = d c2
// / d contrast, 1 = d c2 / d offset, and their count). The same values as the tile's columns in
// AccumulateTile, stored per range of ForEachFormRange (StoreScalingColumns), then added to the
// lane sums (AddScalingColumns).
template <bool kLaminar, SinCosForm kForm>
void TileScalingSums(const AngleCoefficients& angle, const ProductTables& tables, const float* data,
                     int count, const Scratch& scratch, double* sums) {
  ForEachFormRange<kForm>(tables, count, [&]<SinCosForm kRangeForm>(int t_begin, int t_end) {
    const TileModel tile = TileModelOf<kRangeForm>(angle, tables, scratch);
    StoreScalingColumns(
        data, t_begin, t_end, angle.contrast, angle.offset,
        [tile](int t) { return FlooredG1Squared<kLaminar, kRangeForm>(tile, t); }, scratch.tile);
  });
  AddScalingColumns(scratch.tile, count, sums);
}

// The tile's term of a cost pass: the linear loss adds e^2 to the angle's lane sums (sums,
// kCostSumsDoubles; AddSquaresToLanes) and returns 0, a robust loss returns s^2 sum rho(z).
template <bool kLaminar, SinCosForm kForm>
double TileCost(const AngleCoefficients& angle, const ProductTables& tables, const float* data,
                int count, const PassLoss& loss, const Scratch& scratch, double* sums) {
  ForEachFormRange<kForm>(tables, count, [&]<SinCosForm kRangeForm>(int t_begin, int t_end) {
    StoreTileResiduals<kLaminar, kRangeForm>(angle, tables, data, t_begin, t_end, scratch,
                                             scratch.tile);
  });
  if (loss.function == LossFunction::kLinear) {
    AddSquaresToLanes(scratch.tile, count, sums);
    return 0.0;
  }
  return LossSum(loss, scratch.tile, count);
}

// True when a laminar tile's phases exceed vector_math::kSinCosMaxArgument. M_G grows along a row
// (C_G is strictly increasing), so the tile's last point has the largest phase.
bool NeedsLibm(const AngleCoefficients& angle, int count, const Scratch& scratch) {
  return std::fabs(angle.phase_per_step) * scratch.m_shear[count - 1] >
         vector_math::kSinCosMaxArgument;
}

// True when the product form applies to every point of the laminar tile for the angle: the angle
// has tables, all phases are at least kProductMinPhase and all deltas at most kProductMaxDelta.
// M_G grows along the row and M_G - |diff_G| shrinks, so the tile's first point has the smallest
// phase and the largest delta.
bool ProductFormApplies(const AngleCoefficients& angle, const Scratch& scratch) {
  const double abs_s = std::fabs(angle.phase_per_step);
  return angle.shear_sin != nullptr && abs_s * scratch.m_shear[0] >= kProductMinPhase &&
         abs_s * scratch.smoothing_shear[0] <= kProductMaxDelta;
}

// True when kSeriesThenProduct applies to the laminar tile for the angle (a tile that neither
// kSeries nor kProduct takes): the angle has tables and the tile's first point, whose delta is
// the tile's largest, has delta at most kProductMaxDelta, so every point in product form (phase
// at least kProductMinPhase) has too.
bool SeriesThenProductApplies(const AngleCoefficients& angle, const Scratch& scratch) {
  return angle.shear_sin != nullptr &&
         std::fabs(angle.phase_per_step) * scratch.smoothing_shear[0] <= kProductMaxDelta;
}

// The first point of the laminar tile whose phase for the angle is at least kProductMinPhase
// (count if none): M_G grows along the row, so a binary search.
int FirstProductPoint(const AngleCoefficients& angle, int count, const Scratch& scratch) {
  const double abs_s = std::fabs(angle.phase_per_step);
  return FirstQualifyingPoint(
      count, [&](int t) { return abs_s * scratch.m_shear[t] >= kProductMinPhase; });
}

// The laminar tile's form of sin and cos for the angle (SinCosForm) and, for kProduct and
// kSeriesThenProduct, its tables at row i and the tile's columns (and the split point).
SinCosForm LaminarForm(const AngleCoefficients& angle, int i, int j_begin, int count,
                       const Scratch& scratch, ProductTables* tables) {
  if (NeedsLibm(angle, count, scratch)) return SinCosForm::kLibm;
  if (std::fabs(angle.phase_per_step) * scratch.m_shear[count - 1] <= kSeriesMaxPhase) {
    return SinCosForm::kSeries;
  }
  SinCosForm form = SinCosForm::kProduct;
  if (!ProductFormApplies(angle, scratch)) {
    if (!SeriesThenProductApplies(angle, scratch)) return SinCosForm::kVector;
    form = SinCosForm::kSeriesThenProduct;
    tables->series_end = FirstProductPoint(angle, count, scratch);
  }
  tables->sin_j = angle.shear_sin + j_begin;
  tables->cos_j = angle.shear_cos + j_begin;
  tables->sin_i = angle.shear_sin[i];
  tables->cos_i = angle.shear_cos[i];
  return form;
}

// Calls body.template operator()<kLaminar, kForm>(tables) with the angle's form of sin and cos at
// the tile of row i, columns [j_begin, j_begin + count), whose shared factors the scratch holds
// (LaminarForm; kVector for static flow), and its product tables.
template <typename Body>
void WithAngleForm(const Inputs& in, const AngleCoefficients& angle, int i, int j_begin, int count,
                   const Scratch& scratch, Body&& body) {
  ProductTables tables;
  if (!in.laminar) {
    body.template operator()<false, SinCosForm::kVector>(tables);
    return;
  }
  switch (LaminarForm(angle, i, j_begin, count, scratch, &tables)) {
    case SinCosForm::kLibm:
      body.template operator()<true, SinCosForm::kLibm>(tables);
      break;
    case SinCosForm::kVector:
      body.template operator()<true, SinCosForm::kVector>(tables);
      break;
    case SinCosForm::kProduct:
      body.template operator()<true, SinCosForm::kProduct>(tables);
      break;
    case SinCosForm::kSeries:
      body.template operator()<true, SinCosForm::kSeries>(tables);
      break;
    case SinCosForm::kSeriesThenProduct:
      body.template operator()<true, SinCosForm::kSeriesThenProduct>(tables);
      break;
  }
}

// For every tile of rows row_begin, row_begin + row_stride, ... (below row_end; ForEachTile): its
// shared factors (TileSharedFactors<kFullPass>), then, for every angle k,
// body.template operator()<kLaminar, kForm>(k, angle, tables, values, count) with the angle's form
// (WithAngleForm), its product tables and its data values of the tile. Tiles of kTilePoints in the
// full pass, kCostTilePoints in the others (tile.h; the scratch's columns hold that many: Scratch).
template <bool kFullPass, typename Body>
void ForEachAngleTile(const Inputs& in, int row_begin, int row_end, int row_stride,
                      const float* const* data, const Scratch& scratch, Body&& body) {
  constexpr int kPoints = kFullPass ? kTilePoints : kCostTilePoints;
  static_assert(kPoints <= kSeparableExpBlock, "a tile lies in at most two blocks");
  SeparableExpRowCache row_factors;
  ForEachTile<kPoints>(
      in.num_times, row_begin, row_end, row_stride, [&](int i, int j, int count, int64_t point) {
        TileSharedFactors<kFullPass>(in, i, j, count, &row_factors, scratch);
        for (int k = 0; k < in.num_angles; ++k) {
          const AngleCoefficients& angle = in.angles[k];
          const float* values = data[k] + point;
          PrefetchNextTile<kPoints>(values + count);
          WithAngleForm(in, angle, i, j, count, scratch,
                        [&]<bool kLaminar, SinCosForm kForm>(const ProductTables& tables) {
                          body.template operator()<kLaminar, kForm>(k, angle, tables, values,
                                                                    count);
                        });
        }
      });
}

// The static full pass through per-frame sums (Inputs::static_row_sums; docs/design.md section
// 2, The static full pass through per-frame sums). With J_p = -2 c w g1^2 D_p (D_p = dC_D[j] -
// dC_D[i] along theta_p), J_contrast = g1^2, J_offset = 1, every entry of J^T J is a sum over the
// points of G4 = g1^4, G2 = g1^2 times products of D_p: the rows' sums of Inputs::static_row_sums,
// scaled per angle by c and w. Only the data terms read every point: e^2, e, and with
// u = e g1^2 (floored g1), u itself and J^T e's sums of u D_p, exchanged into sums over rows and
// columns: with b the batch's first row and A_p[j] = dC_D[j] / d theta_p - dC_D[b] / d theta_p,
//   sum u D_p = sum_j A_p[j] U_j - sum_i A_p[i] R_i,
// U_j the batch's column sum of u (Scratch::column_sums, one add per point), R_i the row's sum of
// u (per tile, as lanes), so per point the cost pass's residual, e^2, e, u, the column add and
// the data's sum (below) instead of three more products with D_p. The rebase at b keeps the two
// sums' terms near the size of the u D_p they replace: measured within 3e-17 of the Gram's scales
// also with all rows in one batch (tests/model/pass_kernel_test.cc). The column sums cost O(N)
// per batch and angle (zeroed, then read once). A non-finite data point's terms, which the row
// sums hold, are subtracted (AddStaticPoint); the data's lane sum, non-finite exactly when some
// point is, says when to look for them. Where the floor or the clip binds, the row sums hold g1^4
// and g1^2 instead of zero and 1e-20: below 1e-20 relative to the entries (the points next to the
// diagonal have g1 near 1).
//
// Per angle the scratch's lane-Gram space holds kStaticAngleSums doubles: the data sums as lane
// sums (gram_block.h; kStaticE2 ..., kGramLanes partial sums each, kMaxGramLanes apart), added
// up once per batch, and the row sums of the non-finite points (kStaticCorrections on).
inline constexpr int kStaticE2 = 0;    // sum e^2
inline constexpr int kStaticE = 1;     // sum e
inline constexpr int kStaticEG = 2;    // sum u = e g1f^2 (the contrast column)
inline constexpr int kStaticRowU = 3;  // sum_i A_p[i] R_i (3)
inline constexpr int kStaticData = 6;  // sum of the data values (then the finite points' count)
inline constexpr int kStaticDataSums = 7;
inline constexpr int kStaticCorrections = kStaticDataSums * kMaxGramLanes;
inline constexpr int kStaticAngleSums = kStaticCorrections + kStaticRowSums;
static_assert(kStaticAngleSums <= LaneGramDoubles(6), "fits an angle's lane-Gram space");

// kGramLanes float32 values as doubles (one vcvtps2pd from memory: converting a float vector
// type compiled to five instructions at AVX-512).
inline GramLanes LoadFloatLanes(const float* values) {
  GramLanes lanes;
  for (int l = 0; l < kGramLanes; ++l) lanes[l] = static_cast<double>(values[l]);
  return lanes;
}

inline GramLanes BroadcastLanes(double value) {
  GramLanes lanes;
  for (int l = 0; l < kGramLanes; ++l) lanes[l] = value;
  return lanes;
}

// The running data sums of one angle's tile (AddStaticDataVector).
struct StaticDataLanes {
  GramLanes e2, e, u, data;
};

// One vector of kGramLanes points of the static full pass's data terms: d the data, g1 the
// points' g1 of diffusion (unfloored), valid false at a row's padding (its d and g1 then any
// finite value); adds e^2, e, u = e g1f^2 and d to the lanes and u to the columns' sums
// (columns[0, kGramLanes)). A non-finite d gives e = u = 0 and poisons lanes.data.
template <typename Mask>
inline void AddStaticDataVector(GramLanes d, GramLanes g1, Mask valid, GramLanes contrast,
                                GramLanes offset, double* columns, StaticDataLanes& lanes) {
  const GramLanes floor = BroadcastLanes(kG1Floor);
  const GramLanes zero = {};
  const GramLanes g1_floored = g1 > floor ? g1 : floor;
  const GramLanes g = g1_floored * g1_floored;
  const GramLanes residual = d - (offset + contrast * g);
  const GramLanes e = (((d - d) == zero) & valid) ? residual : zero;
  const GramLanes u = e * g;
  lanes.e2 += e * e;
  lanes.e += e;
  lanes.u += u;
  lanes.data += d;
  StoreLanes(LoadLanes(columns) + u, columns);
}

// The row sums' terms of the point (i, j) (Inputs::static_row_sums), added to sums.
void AddStaticPoint(const Inputs& in, int i, int j, double* sums) {
  const int n = in.num_times;
  const double* dc = in.cumulative_diffusion_derivatives;
  const double g2 = vector_math::ExpOfScaledDifference(
      2.0 * in.diffusion_prefactor, in.cumulative_diffusion[j], in.cumulative_diffusion[i]);
  const double g4 = g2 * g2;
  double d[3];
  for (int p = 0; p < 3; ++p) d[p] = dc[p * n + j] - dc[p * n + i];
  sums[kStaticG4] += g4;
  sums[kStaticG2] += g2;
  int pq = kStaticG4DD;
  for (int q = 0; q < 3; ++q) {
    sums[kStaticG4D + q] += g4 * d[q];
    sums[kStaticG2D + q] += g2 * d[q];
    for (int p = q; p < 3; ++p) sums[pq++] += g4 * d[p] * d[q];
  }
}

// terms[p] = sum over j in [column_begin, n) of (dc[p n + j] - base[p]) columns[j]: the column
// sums' part of J^T e (AccumulateStaticRows). Not inlined: inside the pass's loop nest the
// compiler kept this loop's pointers on the stack (20 instructions per 8 columns, 12 alone).
__attribute__((noinline)) void StaticColumnTerms(const double* dc, int n, int column_begin,
                                                 const double* base, const double* columns,
                                                 double* terms) {
  const double* dc1 = dc + n;
  const double* dc2 = dc + 2 * n;
  double sum0 = 0.0, sum1 = 0.0, sum2 = 0.0;
#pragma omp simd reduction(+ : sum0, sum1, sum2)
  for (int j = column_begin; j < n; ++j) {
    const double u = columns[j];
    sum0 += (dc[j] - base[0]) * u;
    sum1 += (dc1[j] - base[1]) * u;
    sum2 += (dc2[j] - base[2]) * u;
  }
  terms[0] = sum0;
  terms[1] = sum1;
  terms[2] = sum2;
}

void AccumulateStaticRows(const Inputs& in, int row_begin, int row_end, int row_stride,
                          const float* const* data, double* const* grams, int64_t* finite_points,
                          const Scratch& scratch) {
  const int n = in.num_times;
  if (row_begin >= n - 1) return;  // no point
  // The rows' sums, shared by the angles.
  double rows[kStaticRowSums] = {};
  for (int i = row_begin; i < row_end && i < n - 1; i += row_stride) {
    const double* row = in.static_row_sums + static_cast<int64_t>(i) * kStaticRowSums;
    for (int m = 0; m < kStaticRowSums; ++m) rows[m] += row[m];
  }
  double* const sums = scratch.lane_grams;
  for (int m = 0; m < kStaticAngleSums * in.num_angles; ++m) sums[m] = 0.0;
  // The batch's columns are row_begin + 1 .. n - 1 (and a vector's padding past them).
  const int column_stride = StaticColumnSumsStride(n);
  for (int k = 0; k < in.num_angles; ++k) {
    double* columns = scratch.column_sums + static_cast<int64_t>(k) * column_stride;
    for (int j = row_begin + 1; j < column_stride; ++j) columns[j] = 0.0;
  }
  const double* dc = in.cumulative_diffusion_derivatives;
  const double base[3] = {dc[row_begin], dc[n + row_begin], dc[2 * n + row_begin]};
  SeparableExpRowCache row_factors;
  ForEachTile<kCostTilePoints>(
      n, row_begin, row_end, row_stride, [&](int i, int j, int count, int64_t point) {
        TileSharedFactors<false>(in, i, j, count, &row_factors, scratch);
        double* g1d = scratch.g1_diffusion;
        ZeroLanePadding(g1d, count);
        const double row_a[3] = {dc[i] - base[0], dc[n + i] - base[1], dc[2 * n + i] - base[2]};
        const int whole = count / kGramLanes * kGramLanes;
        for (int k = 0; k < in.num_angles; ++k) {
          const float* values = data[k] + point;
          PrefetchNextTile<kCostTilePoints>(values + count);
          const GramLanes contrast = BroadcastLanes(in.angles[k].contrast);
          const GramLanes offset = BroadcastLanes(in.angles[k].offset);
          double* columns = scratch.column_sums + static_cast<int64_t>(k) * column_stride + j;
          double* angle_sums = sums + k * kStaticAngleSums;
          double* lanes[kStaticDataSums];
          for (int m = 0; m < kStaticDataSums; ++m) lanes[m] = angle_sums + m * kMaxGramLanes;
          // The tile's sums from zero (its u is the row's R_i term), added to the angle's lanes
          // after the tile: whole vectors, no horizontal sum per tile.
          StaticDataLanes tile = {};
          const GramLanes all = {};
          const auto all_valid = all == all;
          for (int t = 0; t < whole; t += kGramLanes) {
            AddStaticDataVector(LoadFloatLanes(values + t), LoadLanes(g1d + t), all_valid, contrast,
                                offset, columns + t, tile);
          }
          if (whole < count) {
            // The row's last points: the data copied (no read past the rows' data), the padding
            // 0 and not valid.
            GramLanes d = {}, index;
            for (int l = 0; l < kGramLanes; ++l) {
              if (whole + l < count) d[l] = static_cast<double>(values[whole + l]);
              index[l] = l;
            }
            AddStaticDataVector(d, LoadLanes(g1d + whole), index < BroadcastLanes(count - whole),
                                contrast, offset, columns + whole, tile);
          }
          StoreLanes(LoadLanes(lanes[kStaticE2]) + tile.e2, lanes[kStaticE2]);
          StoreLanes(LoadLanes(lanes[kStaticE]) + tile.e, lanes[kStaticE]);
          StoreLanes(LoadLanes(lanes[kStaticEG]) + tile.u, lanes[kStaticEG]);
          for (int p = 0; p < 3; ++p) {
            StoreLanes(LoadLanes(lanes[kStaticRowU + p]) + BroadcastLanes(row_a[p]) * tile.u,
                       lanes[kStaticRowU + p]);
          }
          StoreLanes(LoadLanes(lanes[kStaticData]) + tile.data, lanes[kStaticData]);
        }
      });
  // The finite points: all of the rows' where the data's sum is finite (a sum of at most 2^53
  // float32 values cannot overflow); else counted, and the non-finite points' terms, which the
  // row sums hold, added up to be subtracted. Then the count replaces the data's sum.
  int64_t points = 0;
  for (int i = row_begin; i < row_end && i < n - 1; i += row_stride) points += n - 1 - i;
  for (int k = 0; k < in.num_angles; ++k) {
    double* angle_sums = sums + k * kStaticAngleSums;
    double* data_lanes = angle_sums + kStaticData * kMaxGramLanes;
    const double data_sum = LaneSum(data_lanes);
    int64_t finite = points;
    if ((data_sum - data_sum) != 0.0) {
      int64_t point = 0;
      for (int i = row_begin; i < row_end && i < n - 1; i += row_stride) {
        for (int j = i + 1; j < n; ++j, ++point) {
          const double d = static_cast<double>(data[k][point]);
          if ((d - d) != 0.0) {
            AddStaticPoint(in, i, j, angle_sums + kStaticCorrections);
            --finite;
          }
        }
      }
    }
    for (int l = 0; l < kGramLanes; ++l) data_lanes[l] = l == 0 ? static_cast<double>(finite) : 0;
  }
  const double w = in.diffusion_prefactor;
  const int size = in.gram_size;  // 6: D0, alpha, D_offset, contrast, offset, e
  for (int k = 0; k < in.num_angles; ++k) {
    const double* angle_sums = sums + k * kStaticAngleSums;
    auto sum_of = [angle_sums](int m) { return LaneSum(angle_sums + m * kMaxGramLanes); };
    const double finite = sum_of(kStaticData);
    // sum u D_p = sum_j A_p[j] U_j - sum_i A_p[i] R_i.
    const double* columns = scratch.column_sums + static_cast<int64_t>(k) * column_stride;
    double column_terms[3];
    StaticColumnTerms(dc, n, row_begin + 1, base, columns, column_terms);
    // Without a finite point J^T J is zero exactly (not the rounding the subtraction leaves).
    const bool any_finite = finite > 0.0;
    double total[kStaticRowSums];
    for (int m = 0; m < kStaticRowSums; ++m) {
      total[m] = any_finite ? rows[m] - angle_sums[kStaticCorrections + m] : 0.0;
    }
    const double c = in.angles[k].contrast;
    const double a = -2.0 * c * w;  // J_p = a g1^2 D_p
    double* gram = grams[k];
    auto at = [gram, size](int r, int col) -> double& { return gram[col * size + r]; };
    int pq = kStaticG4DD;
    for (int q = 0; q < 3; ++q) {
      for (int p = q; p < 3; ++p) at(p, q) += (a * a) * total[pq++];
      at(3, q) += a * total[kStaticG4D + q];
      at(4, q) += a * total[kStaticG2D + q];
      at(5, q) += a * (column_terms[q] - sum_of(kStaticRowU + q));
    }
    at(3, 3) += total[kStaticG4];
    at(4, 3) += total[kStaticG2];
    at(5, 3) += sum_of(kStaticEG);
    at(4, 4) += finite;
    at(5, 4) += sum_of(kStaticE);
    at(5, 5) += sum_of(kStaticE2);
    finite_points[k] += static_cast<int64_t>(finite);
  }
}

void AccumulateRows(const Inputs& in, int row_begin, int row_end, int row_stride,
                    const float* const* data, double* const* grams, int64_t* finite_points,
                    const Scratch& scratch) {
  if (!in.laminar && in.static_row_sums != nullptr && in.loss.function == LossFunction::kLinear) {
    AccumulateStaticRows(in, row_begin, row_end, row_stride, data, grams, finite_points, scratch);
    return;
  }
  const int lane_gram_doubles = LaneGramDoubles(in.gram_size);
  for (int k = 0; k < in.num_angles; ++k) {
    ClearLaneGram(in.gram_size, scratch.lane_grams + k * lane_gram_doubles);
  }
  ForEachAngleTile<true>(
      in, row_begin, row_end, row_stride, data, scratch,
      [&]<bool kLaminar, SinCosForm kForm>(int k, const AngleCoefficients& angle,
                                           const ProductTables& tables, const float* values,
                                           int count) {
        if (in.loss.function == LossFunction::kLinear) {
          AccumulateTile<kLaminar, kForm, true>(angle, tables, values, count, in.gram_size, in.loss,
                                                scratch, scratch.lane_grams + k * lane_gram_doubles,
                                                grams[k], finite_points[k]);
        } else {
          AccumulateTile<kLaminar, kForm, false>(angle, tables, values, count, in.gram_size,
                                                 in.loss, scratch, nullptr, grams[k],
                                                 finite_points[k]);
        }
      });
  if (in.loss.function == LossFunction::kLinear) {
    for (int k = 0; k < in.num_angles; ++k) {
      FlushOffsetLaneGram(scratch.lane_grams + k * lane_gram_doubles, in.gram_size, grams[k]);
    }
  }
}

void SumSquaredResiduals(const Inputs& in, int row_begin, int row_end, int row_stride,
                         const float* const* data, double* squared_residuals,
                         const Scratch& scratch) {
  // The linear loss's per-thread lane sums in the scratch (its lane Grams' space), flushed once
  // at the end.
  ClearLaneSums(kCostSumsDoubles * in.num_angles, scratch.lane_grams);
  ForEachAngleTile<false>(in, row_begin, row_end, row_stride, data, scratch,
                          [&]<bool kLaminar, SinCosForm kForm>(
                              int k, const AngleCoefficients& angle, const ProductTables& tables,
                              const float* values, int count) {
                            squared_residuals[k] += TileCost<kLaminar, kForm>(
                                angle, tables, values, count, in.loss, scratch,
                                scratch.lane_grams + k * kCostSumsDoubles);
                          });
  if (in.loss.function == LossFunction::kLinear) {
    for (int k = 0; k < in.num_angles; ++k) {
      squared_residuals[k] += LaneSum(scratch.lane_grams + k * kCostSumsDoubles);
    }
  }
}

void AccumulateScalingRows(const Inputs& in, int row_begin, int row_end, int row_stride,
                           const float* const* data, double* const* grams, int64_t* finite_points,
                           const Scratch& scratch) {
  // Per-thread sums in the scratch (its lane Grams' space), flushed once at the end.
  ClearLaneSums(kScalingSumsDoubles * in.num_angles, scratch.lane_grams);
  ForEachAngleTile<false>(
      in, row_begin, row_end, row_stride, data, scratch,
      [&]<bool kLaminar, SinCosForm kForm>(int k, const AngleCoefficients& angle,
                                           const ProductTables& tables, const float* values,
                                           int count) {
        TileScalingSums<kLaminar, kForm>(angle, tables, values, count, scratch,
                                         scratch.lane_grams + k * kScalingSumsDoubles);
      });
  for (int k = 0; k < in.num_angles; ++k) {
    FlushScalingSums(scratch.lane_grams + k * kScalingSumsDoubles, grams[k], finite_points[k]);
  }
}

// c2 = offset + contrast g1^2 of angle k at row i, columns [j_begin, j_end) (i < j_begin): the
// cost pass's model (StoreTileResiduals), in segments of kCostTilePoints.
void EvaluateUpperSegment(const Inputs& in, int k, int i, int j_begin, int j_end, double* c2_out,
                          const Scratch& scratch) {
  const AngleCoefficients& angle = in.angles[k];
  SeparableExpRowCache row_factors;
  for (int j = j_begin; j < j_end; j += kCostTilePoints) {
    const int count = j_end - j < kCostTilePoints ? j_end - j : kCostTilePoints;
    TileSharedFactors<false>(in, i, j, count, &row_factors, scratch);
    double* c2 = c2_out + (j - j_begin);
    WithAngleForm(in, angle, i, j, count, scratch,
                  [&]<bool kLaminar, SinCosForm kForm>(const ProductTables& tables) {
                    ForEachFormRange<kForm>(
                        tables, count, [&]<SinCosForm kRangeForm>(int t_begin, int t_end) {
                          const TileModel tile = TileModelOf<kRangeForm>(angle, tables, scratch);
                          const double contrast = angle.contrast;
                          const double offset = angle.offset;
#pragma omp simd
                          for (int t = t_begin; t < t_end; ++t) {
                            c2[t] =
                                offset + contrast * FlooredG1Squared<kLaminar, kRangeForm>(tile, t);
                          }
                        });
                  });
  }
}

}  // namespace

// External linkage from the declaration in homodyne_pass_variant.h.
const Functions kFunctions = {&AccumulateRows, &SumSquaredResiduals, &AccumulateScalingRows,
                              &EvaluateUpperSegment};

}  // namespace homodyne::pass_kernel::HOMODYNE_PASS_KERNEL_LEVEL
