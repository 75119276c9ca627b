// PassKernel (pass_kernel.h): the vectorised per-batch work of a fitting pass. Formulas and
// guards are those of ModelEvaluation::EvaluateSegment (src/model/model.cc; docs/model.md),
// rearranged so the angle-independent factors are shared by angles.
#include "model/pass_kernel.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "homodyne/errors.h"
#include "model/vector_math.h"

namespace homodyne {
namespace {

using model_limits::kG1Floor;
using model_limits::kLogG1DiffusionMin;
using model_limits::kSincTaylorRadius;
using model_limits::kSmoothAbsEpsilon;
constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;
constexpr int kTile = PassKernel::kTilePoints;

// sinc(x) = sin(x)/x and its derivative (docs/model.md, Shear factor, Jacobian) from sin x and cos
// x, with the reference's Taylor branch for |x| < 1e-4. Branch-free (both sides computed, one
// selected).
inline void SincFromSinCos(double x, double sin_x, double cos_x, double* sinc, double* dsinc) {
  const double x2 = x * x;
  const bool taylor = std::abs(x) < kSincTaylorRadius;
  const double sinc_taylor = 1.0 - x2 / 6.0 + x2 * x2 / 120.0;
  const double dsinc_taylor = -x / 3.0 + x * x2 / 30.0;
  *sinc = taylor ? sinc_taylor : sin_x / x;
  *dsinc = taylor ? dsinc_taylor : (x * cos_x - sin_x) / x2;
}

// kLibm: libm for phases beyond vector_math::kSinCosMaxArgument (rare; the loop stays scalar).
template <bool kLibm>
inline void SinCosVectorOrLibm(double x, double* sin_x, double* cos_x) {
  if constexpr (kLibm) {
    *sin_x = std::sin(x);
    *cos_x = std::cos(x);
  } else {
    vector_math::SinCos(x, sin_x, cos_x);
  }
}

// Columns of the tile are padded to a multiple of 4 (the padding stays zero), so the Gram update
// is a set of 4 x 4 blocks.
int PaddedColumns(int gram_size) { return (gram_size + 3) / 4 * 4; }

// gram(a0 + a, c0 + c) += sum_t x_{a0+a}[t] x_{c0+c}[t] for a, c < 4 (lower triangle only, padding
// skipped). Sixteen named accumulators: the compiler keeps them in vector registers, which makes
// this about four times faster than Eigen's general product for these thin matrices.
void AddGramBlock(const double* tile, int count, int a0, int c0, Eigen::MatrixXd& gram) {
  const double* a_0 = tile + (a0 + 0) * kTile;
  const double* a_1 = tile + (a0 + 1) * kTile;
  const double* a_2 = tile + (a0 + 2) * kTile;
  const double* a_3 = tile + (a0 + 3) * kTile;
  const double* c_0 = tile + (c0 + 0) * kTile;
  const double* c_1 = tile + (c0 + 1) * kTile;
  const double* c_2 = tile + (c0 + 2) * kTile;
  const double* c_3 = tile + (c0 + 3) * kTile;
  double s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
  double s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
#pragma omp simd reduction(+ : s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, \
                               s31, s32, s33)
  for (int t = 0; t < count; ++t) {
    const double x0 = a_0[t], x1 = a_1[t], x2 = a_2[t], x3 = a_3[t];
    const double y0 = c_0[t], y1 = c_1[t], y2 = c_2[t], y3 = c_3[t];
    s00 += x0 * y0, s01 += x0 * y1, s02 += x0 * y2, s03 += x0 * y3;
    s10 += x1 * y0, s11 += x1 * y1, s12 += x1 * y2, s13 += x1 * y3;
    s20 += x2 * y0, s21 += x2 * y1, s22 += x2 * y2, s23 += x2 * y3;
    s30 += x3 * y0, s31 += x3 * y1, s32 += x3 * y2, s33 += x3 * y3;
  }
  const double sums[4][4] = {
      {s00, s01, s02, s03}, {s10, s11, s12, s13}, {s20, s21, s22, s23}, {s30, s31, s32, s33}};
  const int g = static_cast<int>(gram.rows());
  for (int a = 0; a < 4 && a0 + a < g; ++a) {
    for (int c = 0; c < 4 && c0 + c <= a0 + a; ++c) gram(a0 + a, c0 + c) += sums[a][c];
  }
}

}  // namespace

PassKernel::Workspace::Workspace(int gram_size)
    : g1_diffusion_(kTile),
      dlog_g1d_(3 * kTile),
      m_shear_(kTile),
      dm_shear_(3 * kTile),
      tile_(static_cast<size_t>(kTile) * PaddedColumns(gram_size), 0.0),
      gram_size_(gram_size) {}

PassKernel::PassKernel(const ModelEvaluation& evaluation, std::span<const double> phi_degrees,
                       std::span<const double> contrast, std::span<const double> offset)
    : evaluation_(evaluation),
      laminar_(evaluation.model().mode() == AnalysisMode::kLaminarFlow),
      num_times_(evaluation.model().num_times()),
      gram_size_(evaluation.model().num_point_derivatives() + 1) {
  HOMODYNE_CHECK(phi_degrees.size() == contrast.size() && contrast.size() == offset.size());
  for (size_t k = 0; k < phi_degrees.size(); ++k) {
    Angle angle;
    angle.contrast = contrast[k];
    angle.offset = offset[k];
    if (laminar_) {
      const double phi0 = evaluation.physical_parameters()[kPhi0];
      const double psi = (phi0 - phi_degrees[k]) * kRadiansPerDegree;
      angle.phase_per_step = evaluation.sinc_prefactor() * std::cos(psi);
      angle.dphase_dphi0_per_step =
          -evaluation.sinc_prefactor() * std::sin(psi) * kRadiansPerDegree;
    }
    angles_.push_back(angle);
  }
}

// Per point of the tile (t = j - j_begin):
//   g1d = exp(clip(-w M_D, -700, 0)), d log g1d / d theta_D = -w (diff_D / M_D) (dC_D[i] - dC_D[j])
//   (zero where the clip binds); laminar: M_G, d M_G / d theta_G = (diff_G / M_G) (dC_G[i] -
//   dC_G[j]).
template <bool kLaminar, bool kWithDerivatives>
void PassKernel::SharedFactors(int i, int j_begin, int count, Workspace& workspace) const {
  const size_t n = static_cast<size_t>(num_times_);
  const double w = evaluation_.diffusion_prefactor();
  const double* c_d = evaluation_.cumulative_diffusion().data() + j_begin;
  const double* dc_d = evaluation_.cumulative_diffusion_derivatives().data() + j_begin;
  const double c_d_i = evaluation_.cumulative_diffusion()[static_cast<size_t>(i)];
  const double* dc_d_all = evaluation_.cumulative_diffusion_derivatives().data();
  const double dc_d_i0 = dc_d_all[i], dc_d_i1 = dc_d_all[n + i], dc_d_i2 = dc_d_all[2 * n + i];
  double* g1d = workspace.g1_diffusion_.data();
  double* dlog0 = workspace.dlog_g1d_.data();
  double* dlog1 = dlog0 + kTile;
  double* dlog2 = dlog1 + kTile;
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
  if constexpr (kLaminar) {
    const double* c_g = evaluation_.cumulative_shear().data() + j_begin;
    const double* dc_g = evaluation_.cumulative_shear_derivatives().data() + j_begin;
    const double c_g_i = evaluation_.cumulative_shear()[static_cast<size_t>(i)];
    const double* dc_g_all = evaluation_.cumulative_shear_derivatives().data();
    const double dc_g_i0 = dc_g_all[i], dc_g_i1 = dc_g_all[n + i], dc_g_i2 = dc_g_all[2 * n + i];
    double* m_g = workspace.m_shear_.data();
    double* dm0 = workspace.dm_shear_.data();
    double* dm1 = dm0 + kTile;
    double* dm2 = dm1 + kTile;
#pragma omp simd
    for (int t = 0; t < count; ++t) {
      const double diff = c_g_i - c_g[t];
      const double m = std::sqrt(diff * diff + kSmoothAbsEpsilon);
      m_g[t] = m;
      if constexpr (kWithDerivatives) {
        const double unit = diff / m;
        dm0[t] = unit * (dc_g_i0 - dc_g[t]);
        dm1[t] = unit * (dc_g_i1 - dc_g[n + t]);
        dm2[t] = unit * (dc_g_i2 - dc_g[2 * n + t]);
      }
    }
  }
}

// One angle of one tile: the rows of [J | e] (docs/model.md, Jacobian; as ModelEvaluation), zero
// rows for non-finite data, then gram += tile^T tile (lower triangle).
template <bool kLaminar, bool kLibm>
void PassKernel::AccumulateTile(const Angle& angle, const float* data, int count,
                                Workspace& workspace, Eigen::MatrixXd& gram,
                                int64_t& finite_points) const {
  constexpr int kPhysical = kLaminar ? 7 : 3;
  // Column c of the tile at tile + c kTile (written with constant offsets: vectorises).
  double* const tile = workspace.tile_.data();
  const double* g1d = workspace.g1_diffusion_.data();
  const double* dlog = workspace.dlog_g1d_.data();
  const double* m_g = workspace.m_shear_.data();
  const double* dm = workspace.dm_shear_.data();
  const double contrast = angle.contrast;
  const double offset = angle.offset;
  const double s = angle.phase_per_step;
  const double ds = angle.dphase_dphi0_per_step;
  int64_t finite = 0;
#pragma omp simd reduction(+ : finite)
  for (int t = 0; t < count; ++t) {
    const double d = static_cast<double>(data[t]);
    const double weight = (d - d) == 0.0 ? 1.0 : 0.0;  // 0 for NaN and +-inf
    double g1 = g1d[t];
    double dg1_dphase = 0.0;
    if constexpr (kLaminar) {
      const double phase = s * m_g[t];
      double sin_x, cos_x, sinc, dsinc;
      SinCosVectorOrLibm<kLibm>(phase, &sin_x, &cos_x);
      SincFromSinCos(phase, sin_x, cos_x, &sinc, &dsinc);
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
      const double dc2_dphase = dc2_dg1 * dg1_dphase;
      const double dc2_dm = dc2_dphase * s;
      tile[3 * kTile + t] = dc2_dm * dm[0 * kTile + t];
      tile[4 * kTile + t] = dc2_dm * dm[1 * kTile + t];
      tile[5 * kTile + t] = dc2_dm * dm[2 * kTile + t];
      tile[kPhi0 * kTile + t] = dc2_dphase * ds * m_g[t];
    }
    tile[kPhysical * kTile + t] = weight * g1_squared;  // d c2 / d contrast
    tile[(kPhysical + 1) * kTile + t] = weight;         // d c2 / d offset
    // weight * (d - c2) would be NaN for non-finite d.
    tile[(kPhysical + 2) * kTile + t] = weight > 0.0 ? d - c2 : 0.0;
    finite += weight > 0.0 ? 1 : 0;
  }
  finite_points += finite;
  const int padded = PaddedColumns(gram_size_);
  for (int a0 = 0; a0 < padded; a0 += 4) {
    for (int c0 = 0; c0 <= a0; c0 += 4) {
      AddGramBlock(workspace.tile_.data(), count, a0, c0, gram);
    }
  }
}

template <bool kLaminar, bool kLibm>
double PassKernel::TileSquaredResiduals(const Angle& angle, const float* data, int count,
                                        const Workspace& workspace) const {
  const double* g1d = workspace.g1_diffusion_.data();
  const double* m_g = workspace.m_shear_.data();
  const double contrast = angle.contrast;
  const double offset = angle.offset;
  const double s = angle.phase_per_step;
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int t = 0; t < count; ++t) {
    const double d = static_cast<double>(data[t]);
    const bool is_finite = (d - d) == 0.0;
    double g1 = g1d[t];
    if constexpr (kLaminar) {
      const double phase = s * m_g[t];
      double sin_x, cos_x, sinc, dsinc;
      SinCosVectorOrLibm<kLibm>(phase, &sin_x, &cos_x);
      SincFromSinCos(phase, sin_x, cos_x, &sinc, &dsinc);
      g1 = g1d[t] * (sinc * sinc);
    }
    const double g1_floored = g1 > kG1Floor ? g1 : kG1Floor;
    const double e = d - (offset + contrast * (g1_floored * g1_floored));
    sum += is_finite ? e * e : 0.0;
  }
  return sum;
}

// M_G grows along a row (C_G is strictly increasing), so the tile's last point has the largest
// phase.
bool PassKernel::NeedsLibm(const Angle& angle, int count, const Workspace& workspace) const {
  return std::abs(angle.phase_per_step) * workspace.m_shear_[static_cast<size_t>(count - 1)] >
         vector_math::kSinCosMaxArgument;
}

void PassKernel::AccumulateRows(int row_begin, int row_end, std::span<const float* const> data,
                                std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points,
                                Workspace& workspace) const {
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= num_times_);
  HOMODYNE_CHECK(data.size() == angles_.size() && grams.size() == angles_.size() &&
                 finite_points.size() == angles_.size());
  HOMODYNE_CHECK(workspace.gram_size_ == gram_size_);
  int64_t point = 0;  // position in the batch's packed data
  for (int i = row_begin; i < row_end; ++i) {
    for (int j = i + 1; j < num_times_; j += kTile) {
      const int count = std::min(kTile, num_times_ - j);
      if (laminar_) {
        SharedFactors<true, true>(i, j, count, workspace);
      } else {
        SharedFactors<false, true>(i, j, count, workspace);
      }
      for (size_t k = 0; k < angles_.size(); ++k) {
        const float* values = data[k] + point;
        if (!laminar_) {
          AccumulateTile<false, false>(angles_[k], values, count, workspace, grams[k],
                                       finite_points[k]);
        } else if (NeedsLibm(angles_[k], count, workspace)) {
          AccumulateTile<true, true>(angles_[k], values, count, workspace, grams[k],
                                     finite_points[k]);
        } else {
          AccumulateTile<true, false>(angles_[k], values, count, workspace, grams[k],
                                      finite_points[k]);
        }
      }
      point += count;
    }
  }
}

double PassKernel::SumSquaredResiduals(int row_begin, int row_end,
                                       std::span<const float* const> data,
                                       Workspace& workspace) const {
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= num_times_);
  HOMODYNE_CHECK(data.size() == angles_.size());
  // Per-angle sums, added in angle order at the end: the same order for every split of rows.
  std::vector<double> sums(angles_.size(), 0.0);
  int64_t point = 0;
  for (int i = row_begin; i < row_end; ++i) {
    for (int j = i + 1; j < num_times_; j += kTile) {
      const int count = std::min(kTile, num_times_ - j);
      if (laminar_) {
        SharedFactors<true, false>(i, j, count, workspace);
      } else {
        SharedFactors<false, false>(i, j, count, workspace);
      }
      for (size_t k = 0; k < angles_.size(); ++k) {
        const float* values = data[k] + point;
        if (!laminar_) {
          sums[k] += TileSquaredResiduals<false, false>(angles_[k], values, count, workspace);
        } else if (NeedsLibm(angles_[k], count, workspace)) {
          sums[k] += TileSquaredResiduals<true, true>(angles_[k], values, count, workspace);
        } else {
          sums[k] += TileSquaredResiduals<true, false>(angles_[k], values, count, workspace);
        }
      }
      point += count;
    }
  }
  double total = 0.0;
  for (double sum : sums) total += sum;
  return total;
}

}  // namespace homodyne
