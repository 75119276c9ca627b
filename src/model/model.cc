// The homodyne model and its analytic Jacobian, exactly as the reference computes it
// (docs/model.md; derivatives: docs/model.md, Jacobian).
//
// Split of the work: the ModelEvaluation constructor does everything that depends only on the
// parameters and the time grid (rates, cumulative integrals and their parameter derivatives) in
// O(N); EvaluateSegment is the O(1)-per-point kernel. The kernel evaluates each point directly
// (one exp, one sin per point; sin and cos with the Jacobian) from the same double-precision
// intermediates as the reference, so it agrees with it to rounding at any phase size.
#include <cmath>
#include <cstddef>
#include <numbers>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"

namespace homodyne {
namespace {

using model_limits::kG1Floor;
using model_limits::kLogG1DiffusionMin;
using model_limits::kMinTimeGuardSeconds;
using model_limits::kRateFloor;
using model_limits::kSincTaylorRadius;
using model_limits::kSmoothAbsEpsilon;
constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;

// Unnormalised sinc(x) = sin(x)/x and its derivative (docs/model.md, Shear factor, Jacobian), with
// the reference's Taylor branch for |x| < 1e-4.
inline double Sinc(double x) {
  if (std::abs(x) < kSincTaylorRadius) {
    const double x2 = x * x;
    return 1.0 - x2 / 6.0 + x2 * x2 / 120.0;
  }
  return std::sin(x) / x;
}

inline void SincAndDerivative(double x, double* sinc, double* derivative) {
  if (std::abs(x) < kSincTaylorRadius) {
    const double x2 = x * x;
    *sinc = 1.0 - x2 / 6.0 + x2 * x2 / 120.0;
    *derivative = -x / 3.0 + x * x2 / 30.0;
    return;
  }
  const double sin_x = std::sin(x);
  const double cos_x = std::cos(x);
  *sinc = sin_x / x;
  *derivative = (x * cos_x - sin_x) / (x * x);
}

// One rate r(t) = max(amplitude * ts^exponent + rate_offset, 1e-10) (docs/model.md, Rates)
// integrated by the cumulative trapezoid in steps (docs/model.md, The time integrals), with the
// derivatives of the integral with respect to (amplitude, exponent, rate_offset): columns of n
// values in `derivatives` (3 n). Where the floor is active the rate's derivatives are zero (as
// JAX's autodiff of the floor).
void IntegrateRate(const std::vector<double>& guarded_times, double amplitude, double exponent,
                   double rate_offset, std::vector<double>* cumulative,
                   std::vector<double>* derivatives) {
  const std::size_t n = guarded_times.size();
  cumulative->assign(n, 0.0);
  derivatives->assign(3 * n, 0.0);
  double* d_amplitude = derivatives->data();
  double* d_exponent = d_amplitude + n;
  double* d_offset = d_exponent + n;

  double previous_rate = 0.0;
  double previous_partials[3] = {0.0, 0.0, 0.0};
  for (std::size_t k = 0; k < n; ++k) {
    const double ts = guarded_times[k];
    const double power = std::pow(ts, exponent);
    const double raw_rate = amplitude * power + rate_offset;
    const bool active = raw_rate > kRateFloor;
    const double rate = active ? raw_rate : kRateFloor;
    const double partials[3] = {
        active ? power : 0.0, active ? amplitude * power * std::log(ts) : 0.0, active ? 1.0 : 0.0};
    if (k > 0) {
      (*cumulative)[k] = (*cumulative)[k - 1] + 0.5 * (previous_rate + rate);
      d_amplitude[k] = d_amplitude[k - 1] + 0.5 * (previous_partials[0] + partials[0]);
      d_exponent[k] = d_exponent[k - 1] + 0.5 * (previous_partials[1] + partials[1]);
      d_offset[k] = d_offset[k - 1] + 0.5 * (previous_partials[2] + partials[2]);
    }
    previous_rate = rate;
    for (int p = 0; p < 3; ++p) previous_partials[p] = partials[p];
  }
}

}  // namespace

double ScatteringGeometry::DiffusionPrefactor() const {
  return 0.5 * (q_inv_angstrom * q_inv_angstrom) * dt_seconds;  // docs/model.md
}

double ScatteringGeometry::SincPrefactor() const {
  return 0.5 / std::numbers::pi * q_inv_angstrom * gap_angstrom * dt_seconds;  // docs/model.md
}

HomodyneModel::HomodyneModel(AnalysisMode mode, ScatteringGeometry geometry,
                             std::vector<double> times_seconds)
    : mode_(mode), geometry_(geometry), times_seconds_(std::move(times_seconds)) {
  HOMODYNE_CHECK(!times_seconds_.empty());
}

ModelEvaluation::ModelEvaluation(const HomodyneModel& model,
                                 std::span<const double> physical_parameters)
    : model_(model),
      parameters_(physical_parameters.begin(), physical_parameters.end()),
      diffusion_prefactor_(model.geometry().DiffusionPrefactor()),
      sinc_prefactor_(model.geometry().SincPrefactor()) {
  HOMODYNE_CHECK(static_cast<int>(parameters_.size()) == model.num_physical());
  const std::vector<double>& t = model.times_seconds();
  const std::size_t n = t.size();

  // The t -> 0 guard (docs/model.md, Rates):
  //   ts = max(t, eps_t), eps_t = max(|t[1] - t[0]| / 2, 1e-8).
  const double spacing = std::abs(t[n > 1 ? 1 : 0] - t[0]);
  const double half_spacing = 0.5 * spacing;
  const double eps_t = half_spacing > kMinTimeGuardSeconds ? half_spacing : kMinTimeGuardSeconds;
  std::vector<double> guarded_times(n);
  for (std::size_t k = 0; k < n; ++k) guarded_times[k] = t[k] > eps_t ? t[k] : eps_t;

  IntegrateRate(guarded_times, parameters_[kD0], parameters_[kAlpha], parameters_[kDOffset],
                &cumulative_diffusion_, &cumulative_diffusion_derivatives_);
  if (model.mode() == AnalysisMode::kLaminarFlow) {
    IntegrateRate(guarded_times, parameters_[kGammaDot0], parameters_[kBeta],
                  parameters_[kGammaDotOffset], &cumulative_shear_, &cumulative_shear_derivatives_);
  }
}

// Per point (docs/model.md: The time integrals, Diffusion factor, Shear factor, g1 floor and c2):
//   M_D = sqrt((C_D[i] - C_D[j])^2 + 1e-12), g1d = exp(clip(-wq_dt M_D, -700, 0))
//   laminar: M_G likewise, Phi = (s cos psi) M_G, g1 = g1d sinc(Phi)^2;  static: g1 = g1d
//   g1 <- max(g1, 1e-10) (floor active when g1 <= 1e-10), c2 = offset + contrast g1^2
// Jacobian (docs/model.md, Jacobian), zero where the clip or the g1 floor is active:
//   d c2/d theta = 2 contrast g1 d g1/d theta,  d M/d theta = (E / M) (dC[i] - dC[j])
//   d g1/d M_D = -wq_dt g1,  d g1/d Phi = g1d 2 sinc sinc',  d Phi/d M_G = s cos psi,
//   d Phi/d phi0 = -s sin(psi) M_G pi/180 (phi0 in degrees);  contrast: g1^2, offset: 1.
// The upper clip at 0 never binds (M >= 1e-6 > 0), so only the lower one is tracked.
template <bool kLaminar, bool kWithJacobian>
void ModelEvaluation::EvaluateSegment(double phi_degrees, double contrast, double offset, int i,
                                      int j_begin, int j_end, double* c2_out,
                                      double* jacobian_out) const {
  const std::size_t n = cumulative_diffusion_.size();
  const std::size_t row = static_cast<std::size_t>(i);
  const double wq_dt = diffusion_prefactor_;
  const double* c_d = cumulative_diffusion_.data();
  const double* dc_d = cumulative_diffusion_derivatives_.data();
  const double c_d_i = c_d[row];
  const double dc_d_i[3] = {dc_d[row], dc_d[n + row], dc_d[2 * n + row]};

  const double* c_g = nullptr;
  const double* dc_g = nullptr;
  double c_g_i = 0.0;
  double dc_g_i[3] = {0.0, 0.0, 0.0};
  double phase_per_step = 0.0;         // s cos(psi): Phi = phase_per_step * M_G
  double dphase_dphi0_per_step = 0.0;  // d(s cos psi)/d phi0 with phi0 in degrees
  if constexpr (kLaminar) {
    c_g = cumulative_shear_.data();
    dc_g = cumulative_shear_derivatives_.data();
    c_g_i = c_g[row];
    for (std::size_t p = 0; p < 3; ++p) dc_g_i[p] = dc_g[p * n + row];
    const double psi = (parameters_[kPhi0] - phi_degrees) * kRadiansPerDegree;  // deg2rad
    phase_per_step = sinc_prefactor_ * std::cos(psi);
    dphase_dphi0_per_step = -sinc_prefactor_ * std::sin(psi) * kRadiansPerDegree;
  }
  constexpr int kNumPhysical = kLaminar ? 7 : 3;
  constexpr int kStride = kNumPhysical + 2;

  for (int j = j_begin; j < j_end; ++j) {
    const std::size_t col = static_cast<std::size_t>(j);
    const std::size_t k = static_cast<std::size_t>(j - j_begin);

    const double diff_d = c_d_i - c_d[col];
    const double m_d = std::sqrt(diff_d * diff_d + kSmoothAbsEpsilon);
    double log_g1d = -wq_dt * m_d;
    const bool clipped = log_g1d < kLogG1DiffusionMin;
    if (clipped) log_g1d = kLogG1DiffusionMin;
    const double g1d = std::exp(log_g1d);

    double g1 = g1d;
    [[maybe_unused]] double diff_g = 0.0;
    [[maybe_unused]] double m_g = 0.0;
    [[maybe_unused]] double sinc = 1.0;
    [[maybe_unused]] double dsinc = 0.0;
    if constexpr (kLaminar) {
      diff_g = c_g_i - c_g[col];
      m_g = std::sqrt(diff_g * diff_g + kSmoothAbsEpsilon);
      const double phase = phase_per_step * m_g;
      if constexpr (kWithJacobian) {
        SincAndDerivative(phase, &sinc, &dsinc);
      } else {
        sinc = Sinc(phase);
      }
      g1 = g1d * (sinc * sinc);
    }
    const bool floored = !(g1 > kG1Floor);
    const double g1_floored = floored ? kG1Floor : g1;
    const double g1_squared = g1_floored * g1_floored;
    c2_out[k] = offset + contrast * g1_squared;

    if constexpr (kWithJacobian) {
      double* jac = jacobian_out + k * kStride;
      const double dc2_dg1 = floored ? 0.0 : 2.0 * contrast * g1;
      const double dc2_dc_d = clipped ? 0.0 : dc2_dg1 * (-wq_dt * g1) * (diff_d / m_d);
      for (std::size_t p = 0; p < 3; ++p) jac[p] = dc2_dc_d * (dc_d_i[p] - dc_d[p * n + col]);
      if constexpr (kLaminar) {
        const double dc2_dphase = dc2_dg1 * g1d * 2.0 * sinc * dsinc;
        const double dc2_dc_g = dc2_dphase * phase_per_step * (diff_g / m_g);
        for (std::size_t p = 0; p < 3; ++p) {
          jac[3 + p] = dc2_dc_g * (dc_g_i[p] - dc_g[p * n + col]);
        }
        jac[kPhi0] = dc2_dphase * dphase_dphi0_per_step * m_g;
      }
      jac[kNumPhysical] = g1_squared;  // d c2 / d contrast
      jac[kNumPhysical + 1] = 1.0;     // d c2 / d offset
    }
  }
}

void ModelEvaluation::ComputeC2RowSegment(double phi_degrees, double contrast, double offset, int i,
                                          int j_begin, int j_end, std::span<double> c2_out) const {
  const int n = model_.num_times();
  HOMODYNE_CHECK(0 <= i && i < n);
  HOMODYNE_CHECK(0 <= j_begin && j_begin <= j_end && j_end <= n);
  HOMODYNE_CHECK(c2_out.size() >= static_cast<std::size_t>(j_end - j_begin));
  if (model_.mode() == AnalysisMode::kLaminarFlow) {
    EvaluateSegment<true, false>(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out.data(),
                                 nullptr);
  } else {
    EvaluateSegment<false, false>(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out.data(),
                                  nullptr);
  }
}

void ModelEvaluation::ComputeC2Matrix(double phi_degrees, double contrast, double offset,
                                      std::span<double> c2_out) const {
  const int n = model_.num_times();
  const std::size_t row_size = static_cast<std::size_t>(n);
  HOMODYNE_CHECK(c2_out.size() >= row_size * row_size);
  for (int i = 0; i < n; ++i) {
    ComputeC2RowSegment(phi_degrees, contrast, offset, i, 0, n,
                        c2_out.subspan(static_cast<std::size_t>(i) * row_size, row_size));
  }
}

void ModelEvaluation::EvaluateUpperTriangleRows(double phi_degrees, double contrast, double offset,
                                                int row_begin, int row_end,
                                                std::span<double> c2_out,
                                                std::span<double> jacobian_out) const {
  const int n = model_.num_times();
  HOMODYNE_CHECK(0 <= row_begin && row_begin <= row_end && row_end <= n);
  // Points in rows [row_begin, row_end): sum of (N - 1 - i).
  std::size_t num_points = 0;
  for (int i = row_begin; i < row_end; ++i) num_points += static_cast<std::size_t>(n - 1 - i);
  const std::size_t stride = static_cast<std::size_t>(model_.num_point_derivatives());
  const bool with_jacobian = !jacobian_out.empty();
  HOMODYNE_CHECK(c2_out.size() >= num_points);
  HOMODYNE_CHECK(!with_jacobian || jacobian_out.size() >= num_points * stride);
  const bool laminar = model_.mode() == AnalysisMode::kLaminarFlow;

  std::size_t point = 0;
  for (int i = row_begin; i < row_end; ++i) {
    double* c2 = c2_out.data() + point;
    double* jac = with_jacobian ? jacobian_out.data() + point * stride : nullptr;
    if (laminar && with_jacobian) {
      EvaluateSegment<true, true>(phi_degrees, contrast, offset, i, i + 1, n, c2, jac);
    } else if (laminar) {
      EvaluateSegment<true, false>(phi_degrees, contrast, offset, i, i + 1, n, c2, jac);
    } else if (with_jacobian) {
      EvaluateSegment<false, true>(phi_degrees, contrast, offset, i, i + 1, n, c2, jac);
    } else {
      EvaluateSegment<false, false>(phi_degrees, contrast, offset, i, i + 1, n, c2, jac);
    }
    point += static_cast<std::size_t>(n - 1 - i);
  }
}

}  // namespace homodyne
