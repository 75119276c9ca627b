// The homodyne modes (static, laminar_flow) at one parameter vector: the tables, the scalar c2 and
// analytic Jacobian exactly as the reference computes them (docs/model.md; derivatives:
// docs/model.md, Jacobian), and the pass kernel's body (homodyne_pass_variant.{h,cc}).
//
// Split of the work: the HomodynePoint constructor does everything that depends only on the
// parameters and the time grid (rates, cumulative integrals and their parameter derivatives) in
// O(N); EvaluateSegmentOf is the O(1)-per-point kernel. It evaluates each point directly (one exp,
// one sin per point; sin and cos with the Jacobian) from the same double-precision intermediates
// as the reference, so it agrees with it to rounding at any phase size.
#include "model/homodyne/homodyne_point.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <memory>
#include <numbers>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/homodyne/homodyne_pass_variant.h"
#include "model/mode_point.h"
#include "model/separable_exp.h"
#include "model/vector_math.h"

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
// log_guarded_times[k] = log(guarded_times[k]), computed once for both rates: ts^exponent is
// exp(exponent log ts) (one exp per time instead of a pow and a log; within a few ulp of pow,
// docs/history/performance-notebook.md, Per-pass set-up).
void IntegrateRate(const std::vector<double>& log_guarded_times, double amplitude, double exponent,
                   double rate_offset, std::vector<double>* cumulative,
                   std::vector<double>* derivatives) {
  const std::size_t n = log_guarded_times.size();
  cumulative->assign(n, 0.0);
  derivatives->assign(3 * n, 0.0);
  double* d_amplitude = derivatives->data();
  double* d_exponent = d_amplitude + n;
  double* d_offset = d_exponent + n;

  double previous_rate = 0.0;
  double previous_partials[3] = {0.0, 0.0, 0.0};
  for (std::size_t k = 0; k < n; ++k) {
    const double log_ts = log_guarded_times[k];
    const double power = std::exp(exponent * log_ts);
    const double raw_rate = amplitude * power + rate_offset;
    const bool active = raw_rate > kRateFloor;
    const double rate = active ? raw_rate : kRateFloor;
    const double partials[3] = {active ? power : 0.0, active ? amplitude * power * log_ts : 0.0,
                                active ? 1.0 : 0.0};
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

class HomodynePoint final : public ModePoint {
 public:
  HomodynePoint(const HomodyneModel& model, std::span<const double> physical_parameters);

  void EvaluateSegment(double phi_degrees, double contrast, double offset, int i, int j_begin,
                       int j_end, double* c2_out, double* jacobian_out) const override {
    const bool laminar = laminar_;
    if (laminar && jacobian_out != nullptr) {
      EvaluateSegmentOf<true, true>(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out,
                                    jacobian_out);
    } else if (laminar) {
      EvaluateSegmentOf<true, false>(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out,
                                     nullptr);
    } else if (jacobian_out != nullptr) {
      EvaluateSegmentOf<false, true>(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out,
                                     jacobian_out);
    } else {
      EvaluateSegmentOf<false, false>(phi_degrees, contrast, offset, i, j_begin, j_end, c2_out,
                                      nullptr);
    }
  }

  std::unique_ptr<const ModePass> PreparePass(std::span<const double> phi_degrees,
                                              std::span<const double> contrast,
                                              std::span<const double> offset, IsaLevel level,
                                              const PassLoss& loss) const override;

 private:
  friend class HomodynePass;

  // c2 (and, with kWithJacobian, num_point_derivatives() values per point) at (i, j) for j in
  // [j_begin, j_end).
  template <bool kLaminar, bool kWithJacobian>
  void EvaluateSegmentOf(double phi_degrees, double contrast, double offset, int i, int j_begin,
                         int j_end, double* c2_out, double* jacobian_out) const;

  bool laminar_;
  std::vector<double> parameters_;
  // Cumulative trapezoid integrals (in steps) of D(t) and gamma_dot(t), and their derivatives with
  // respect to the 3 parameters of each rate: column-major blocks of N values.
  std::vector<double> cumulative_diffusion_;
  std::vector<double> cumulative_diffusion_derivatives_;  // 3 * N
  std::vector<double> cumulative_shear_;                  // laminar_flow
  std::vector<double> cumulative_shear_derivatives_;      // 3 * N, laminar_flow
  double diffusion_prefactor_;                            // 0.5 q^2 dt (docs/model.md)
  double sinc_prefactor_;                                 // q L dt / (2 pi) (docs/model.md)
};

// The pass kernel's body at one point (ModePass): the angles' coefficients and the chosen level's
// functions (homodyne_pass_variant.h).
class HomodynePass final : public ModePass {
 public:
  HomodynePass(const HomodynePoint& point, std::span<const double> phi_degrees,
               std::span<const double> contrast, std::span<const double> offset, IsaLevel level,
               const PassLoss& loss)
      : point_(point),
        functions_(HOMODYNE_PASS_VARIANT(pass_kernel::Functions, kFunctions, level)),
        loss_(loss) {
    HOMODYNE_CHECK(functions_ != nullptr);
    for (size_t k = 0; k < phi_degrees.size(); ++k) {
      pass_kernel::AngleCoefficients angle;
      angle.contrast = contrast[k];
      angle.offset = offset[k];
      if (point.laminar_) {
        const double phi0 = point.parameters_[kPhi0];
        const double psi = (phi0 - phi_degrees[k]) * kRadiansPerDegree;
        angle.phase_per_step = point.sinc_prefactor_ * std::cos(psi);
        angle.dphase_dphi0_per_step = -point.sinc_prefactor_ * std::sin(psi) * kRadiansPerDegree;
      }
      angles_.push_back(angle);
    }
    BuildDiffusionFactors();
    if (point.laminar_) BuildShearTables();
    if (!point.laminar_ && loss.function == LossFunction::kLinear) BuildStaticRowSums();
  }

  void AccumulateRows(int row_begin, int row_end, int row_stride, const float* const* data,
                      double* const* grams, int64_t* finite_points,
                      PassScratch& scratch) const override {
    const size_t lane_grams =
        static_cast<size_t>(pass_kernel::LaneGramDoubles(scratch.gram_size)) * angles_.size();
    if (static_row_sums_.empty()) {
      scratch.lane_grams.resize(lane_grams);
      functions_->accumulate_rows(Inputs(scratch.gram_size), row_begin, row_end, row_stride, data,
                                  grams, finite_points, ScratchOf(scratch));
      return;
    }
    // The static per-frame form reads the cost pass's factor columns (tiles of kCostTilePoints)
    // and keeps its column sums after the lane Grams.
    const int num_times = static_cast<int>(point_.cumulative_diffusion_.size());
    scratch.lane_grams.resize(lane_grams +
                              static_cast<size_t>(pass_kernel::StaticColumnSumsStride(num_times)) *
                                  angles_.size());
    pass_kernel::Scratch cost_scratch = CostScratchOf(scratch);
    cost_scratch.column_sums = scratch.lane_grams.data() + lane_grams;
    functions_->accumulate_rows(Inputs(scratch.gram_size), row_begin, row_end, row_stride, data,
                                grams, finite_points, cost_scratch);
  }

  void SumSquaredResiduals(int row_begin, int row_end, int row_stride, const float* const* data,
                           double* squared_residuals, PassScratch& scratch) const override {
    // The per-thread sums of e^2 live in the lane Grams' space (gram_block.h).
    const size_t sums = static_cast<size_t>(pass_kernel::kCostSumsDoubles) * angles_.size();
    if (scratch.lane_grams.size() < sums) scratch.lane_grams.resize(sums);
    functions_->sum_squared_residuals(Inputs(scratch.gram_size), row_begin, row_end, row_stride,
                                      data, squared_residuals, CostScratchOf(scratch));
  }

  void AccumulateScalingRows(int row_begin, int row_end, int row_stride, const float* const* data,
                             double* const* grams, int64_t* finite_points,
                             PassScratch& scratch) const override {
    // The per-thread scaling sums live in the lane Grams' space (gram_block.h).
    const size_t sums = static_cast<size_t>(pass_kernel::kScalingSumsDoubles) * angles_.size();
    if (scratch.lane_grams.size() < sums) scratch.lane_grams.resize(sums);
    functions_->accumulate_scaling_rows(Inputs(scratch.gram_size), row_begin, row_end, row_stride,
                                        data, grams, finite_points, CostScratchOf(scratch));
  }

  bool PerFrameGram() const override { return !static_row_sums_.empty(); }

  void EvaluateUpperSegment(int k, int i, int j_begin, int j_end, double* c2_out,
                            PassScratch& scratch) const override {
    functions_->evaluate_upper_segment(Inputs(scratch.gram_size), k, i, j_begin, j_end, c2_out,
                                       CostScratchOf(scratch));
  }

 private:
  pass_kernel::Inputs Inputs(int gram_size) const {
    pass_kernel::Inputs inputs;
    inputs.laminar = point_.laminar_;
    inputs.num_times = static_cast<int>(point_.cumulative_diffusion_.size());
    inputs.gram_size = gram_size;
    inputs.diffusion_prefactor = point_.diffusion_prefactor_;
    inputs.cumulative_diffusion = point_.cumulative_diffusion_.data();
    inputs.cumulative_diffusion_derivatives = point_.cumulative_diffusion_derivatives_.data();
    inputs.diffusion_factors = diffusion_factors_.data();
    if (!static_row_sums_.empty()) inputs.static_row_sums = static_row_sums_.data();
    if (point_.laminar_) {
      inputs.cumulative_shear = point_.cumulative_shear_.data();
      inputs.cumulative_shear_derivatives = point_.cumulative_shear_derivatives_.data();
    }
    inputs.angles = angles_.data();
    inputs.num_angles = static_cast<int>(angles_.size());
    inputs.loss = loss_;
    return inputs;
  }

  // The factor columns of the scratch, as the body names them.
  static pass_kernel::Scratch ScratchOf(PassScratch& scratch) {
    constexpr int kTile = pass_kernel::kTilePoints;
    double* factors = scratch.factors.data();
    return {factors,
            factors + kTile,
            factors + 4 * kTile,
            factors + 9 * kTile,
            factors + 5 * kTile,
            factors + 8 * kTile,
            scratch.tile.data(),
            scratch.lane_grams.data()};
  }

  // The factor columns of the passes without derivatives (cost, scaling), whose tiles have
  // kCostTilePoints (homodyne_pass_variant.cc, ForEachAngleTile): the four columns they read, that
  // long; no derivative columns. The tile holds a segment's residuals or scaling values.
  static pass_kernel::Scratch CostScratchOf(PassScratch& scratch) {
    constexpr int kPoints = pass_kernel::kCostTilePoints;
    static_assert(4 * kPoints <= pass_kernel::kTilePoints * PassScratch::kFactorColumns);
    // PassScratch's tile: kTilePoints * PaddedTileColumns(gram_size) doubles, gram_size at least
    // the static mode's 6; it holds a segment's per-point values (gram_block.h).
    static_assert(pass_kernel::kScalingColumns * kPoints <=
                  pass_kernel::kTilePoints * pass_kernel::PaddedTileColumns(6));
    double* factors = scratch.factors.data();
    return {factors,
            nullptr,
            factors + kPoints,
            factors + 2 * kPoints,
            nullptr,
            factors + 3 * kPoints,
            scratch.tile.data(),
            scratch.lane_grams.data()};
  }

  // The separable diffusion factors (pass_kernel::Inputs::diffusion_factors; separable_exp.h).
  void BuildDiffusionFactors() {
    const std::vector<double>& diffusion = point_.cumulative_diffusion_;
    diffusion_factors_.resize(diffusion.size());
    pass_kernel::BuildSeparableExpFactors(diffusion.data(), static_cast<int>(diffusion.size()),
                                          point_.diffusion_prefactor_, diffusion_factors_.data());
  }

  // The static mode's per-row sums (pass_kernel::Inputs::static_row_sums; StaticRowSums below)
  // when the per-frame form holds on the whole grid, else none (the full pass then builds the
  // Gram point by point).
  void BuildStaticRowSums() {
    static_row_sums_ =
        StaticRowSums(point_.cumulative_diffusion_, point_.cumulative_diffusion_derivatives_,
                      point_.diffusion_prefactor_);
  }

  // The angles' tables sin(s C_G[j]) and cos(s C_G[j]) (AngleCoefficients::shear_sin, shear_cos;
  // s = phase_per_step): s C_G[j] = hi + lo exactly (lo from an FMA), sin(hi + lo) = sin(hi) +
  // lo cos(hi) and cos(hi + lo) = cos(hi) - lo sin(hi) (|lo| <= ulp(hi) / 2: the next terms are
  // below the rounding of the values). sin(hi) and cos(hi) from vector_math::SinCos in a
  // vectorised loop (a few ulp; with the rates' single log, the set-up of a pass at N = 600 fell
  // from 50 to 28 us: docs/history/performance-notebook.md, Per-pass set-up), or libm where a phase
  // exceeds its domain (C_G grows, so the ends of the table bound |hi|).
  // One angle's tables (BuildShearTables), sin(hi) and cos(hi) from vector_math::SinCos
  // (kVector) or libm.
  template <bool kVector>
  static void FillShearTable(double s, const double* c_g, size_t n, double* sin_table,
                             double* cos_table) {
#pragma omp simd
    for (size_t j = 0; j < n; ++j) {
      const double hi = s * c_g[j];
      const double lo = std::fma(s, c_g[j], -hi);
      double sin_hi, cos_hi;
      if constexpr (kVector) {
        vector_math::SinCos(hi, &sin_hi, &cos_hi);
      } else {
        sin_hi = std::sin(hi);
        cos_hi = std::cos(hi);
      }
      sin_table[j] = sin_hi + lo * cos_hi;
      cos_table[j] = cos_hi - lo * sin_hi;
    }
  }

  void BuildShearTables() {
    const std::vector<double>& shear = point_.cumulative_shear_;
    const size_t n = shear.size();
    shear_tables_.assign(2 * n * angles_.size(), 0.0);
    for (size_t k = 0; k < angles_.size(); ++k) {
      double* sin_table = shear_tables_.data() + 2 * n * k;
      double* cos_table = sin_table + n;
      const double s = angles_[k].phase_per_step;
      const double* c_g = shear.data();
      const bool vector_domain =
          n == 0 || std::max(std::fabs(s * c_g[0]), std::fabs(s * c_g[n - 1])) <=
                        vector_math::kSinCosMaxArgument;  // NaN: libm
      if (vector_domain) {
        FillShearTable<true>(s, c_g, n, sin_table, cos_table);
      } else {
        FillShearTable<false>(s, c_g, n, sin_table, cos_table);
      }
      angles_[k].shear_sin = sin_table;
      angles_[k].shear_cos = cos_table;
    }
  }

  const HomodynePoint& point_;
  std::vector<double> diffusion_factors_;  // N values (BuildDiffusionFactors)
  std::vector<double> static_row_sums_;    // N kStaticRowSums values, or none (BuildStaticRowSums)
  std::vector<double> shear_tables_;       // laminar_flow: per angle, N sines then N cosines
  const pass_kernel::Functions* functions_;
  PassLoss loss_;
  std::vector<pass_kernel::AngleCoefficients> angles_;
};

HomodynePoint::HomodynePoint(const HomodyneModel& model,
                             std::span<const double> physical_parameters)
    : laminar_(model.mode() == AnalysisMode::kLaminarFlow),
      parameters_(physical_parameters.begin(), physical_parameters.end()),
      diffusion_prefactor_(model.geometry().DiffusionPrefactor()),
      sinc_prefactor_(model.geometry().SincPrefactor()) {
  HomodyneRateTables tables = ComputeHomodyneRateTables(model, physical_parameters);
  cumulative_diffusion_ = std::move(tables.diffusion);
  cumulative_diffusion_derivatives_ = std::move(tables.diffusion_derivatives);
  cumulative_shear_ = std::move(tables.shear);
  cumulative_shear_derivatives_ = std::move(tables.shear_derivatives);
}

std::unique_ptr<const ModePass> HomodynePoint::PreparePass(std::span<const double> phi_degrees,
                                                           std::span<const double> contrast,
                                                           std::span<const double> offset,
                                                           IsaLevel level,
                                                           const PassLoss& loss) const {
  return std::make_unique<HomodynePass>(*this, phi_degrees, contrast, offset, level, loss);
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
void HomodynePoint::EvaluateSegmentOf(double phi_degrees, double contrast, double offset, int i,
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

}  // namespace

// When the per-frame form holds on the whole grid: C_D grows from every frame to the next by
// a_i > 0 with the smoothing of M_D at most kPerFrameNegligible relative there (separable_exp.h's
// two conditions at d0 = a_i with this bound, so at every point of the grid, as C_D grows). 1e-14
// rather than the separable form's 1e-16: the per-frame sums leave the smoothing out of J^T J only
// (the points' e and J^T e keep it), where it moves an entry by at most that much relative, within
// the 1e-12 the pass kernel's tests hold the Gram to; at 1e-16 the form needed C_D to grow by 71
// per frame (D >= 71 A^2/s at dt = 1 s). From the last row up: with r = exp(-2 w a_i) (r^2 for
// G4) and d_p = dC_D[i + 1] - dC_D[i] along theta_p, row i's sums are row i + 1's moved to frame
// i (D_p grows by d_p, G by the factor r) plus the point (i, i + 1):
//   S4[i] = r^2 (1 + S4[i+1]),  S4_p[i] = r^2 (S4_p[i+1] + d_p (1 + S4[i+1])),
//   S4_pq[i] = r^2 (S4_pq[i+1] + d_p S4_q[i+1] + d_q S4_p[i+1] + d_p d_q (1 + S4[i+1])),
// and S2 likewise with r. O(N) per pass; each step rounds relative to its terms, which decay by r,
// so the sums are within about (decay length in frames) ulp of the point-by-point sums.
std::vector<double> StaticRowSums(std::span<const double> cumulative_diffusion,
                                  std::span<const double> cumulative_diffusion_derivatives,
                                  double diffusion_prefactor) {
  const std::span<const double> c = cumulative_diffusion;
  const int n = static_cast<int>(c.size());
  HOMODYNE_CHECK(cumulative_diffusion_derivatives.size() == 3 * c.size());
  const double w = diffusion_prefactor;
  for (int i = 0; i + 1 < n; ++i) {
    const double a = c[i + 1] - c[i];
    // Written so that NaN fails.
    constexpr double kPerFrameNegligible = 1e-14;
    const bool holds = a > 0.0 &&
                       model_limits::kSmoothAbsEpsilon <= 2.0 * kPerFrameNegligible * a * a &&
                       model_limits::kSmoothAbsEpsilon * w <= 2.0 * kPerFrameNegligible * a;
    if (!holds) return {};
  }
  using namespace pass_kernel;
  const double* dc = cumulative_diffusion_derivatives.data();
  std::vector<double> sums(static_cast<size_t>(n) * kStaticRowSums, 0.0);
  double s4 = 0.0, s2 = 0.0, s4d[3] = {0.0, 0.0, 0.0}, s2d[3] = {0.0, 0.0, 0.0};
  double s4dd[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  for (int i = n - 2; i >= 0; --i) {
    const double r2 = vector_math::ExpOfScaledDifference(2.0 * w, c[i + 1], c[i]);
    const double r4 = vector_math::ExpOfScaledDifference(4.0 * w, c[i + 1], c[i]);
    double d[3];
    for (int p = 0; p < 3; ++p) d[p] = dc[p * n + i + 1] - dc[p * n + i];
    const double one4 = 1.0 + s4, one2 = 1.0 + s2;
    int pq = 0;
    for (int q = 0; q < 3; ++q) {
      for (int p = q; p < 3; ++p, ++pq) {
        s4dd[pq] = r4 * (s4dd[pq] + d[p] * s4d[q] + d[q] * s4d[p] + d[p] * d[q] * one4);
      }
    }
    for (int p = 0; p < 3; ++p) {
      s4d[p] = r4 * (s4d[p] + d[p] * one4);
      s2d[p] = r2 * (s2d[p] + d[p] * one2);
    }
    s4 = r4 * one4;
    s2 = r2 * one2;
    double* row = sums.data() + static_cast<size_t>(i) * kStaticRowSums;
    row[kStaticG4] = s4;
    row[kStaticG2] = s2;
    for (int p = 0; p < 3; ++p) {
      row[kStaticG4D + p] = s4d[p];
      row[kStaticG2D + p] = s2d[p];
    }
    for (int m = 0; m < 6; ++m) row[kStaticG4DD + m] = s4dd[m];
  }
  return sums;
}

void AddStaticPointRowSums(std::span<const double> cumulative_diffusion,
                           std::span<const double> cumulative_diffusion_derivatives,
                           double diffusion_prefactor, int i, int j, double* sums) {
  using namespace pass_kernel;
  const int n = static_cast<int>(cumulative_diffusion.size());
  HOMODYNE_CHECK(0 <= i && i < j && j < n);
  const double* dc = cumulative_diffusion_derivatives.data();
  const double g2 = vector_math::ExpOfScaledDifference(
      2.0 * diffusion_prefactor, cumulative_diffusion[j], cumulative_diffusion[i]);
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

HomodyneRateTables ComputeHomodyneRateTables(const HomodyneModel& model,
                                             std::span<const double> physical_parameters) {
  const std::vector<double>& t = model.times_seconds();
  const std::size_t n = t.size();

  // The t -> 0 guard (docs/model.md, Rates):
  //   ts = max(t, eps_t), eps_t = max(|t[1] - t[0]| / 2, 1e-8).
  const double spacing = std::abs(t[n > 1 ? 1 : 0] - t[0]);
  const double half_spacing = 0.5 * spacing;
  const double eps_t = half_spacing > kMinTimeGuardSeconds ? half_spacing : kMinTimeGuardSeconds;
  std::vector<double> log_guarded_times(n);
  for (std::size_t k = 0; k < n; ++k) {
    log_guarded_times[k] = std::log(t[k] > eps_t ? t[k] : eps_t);
  }

  HomodyneRateTables tables;
  IntegrateRate(log_guarded_times, physical_parameters[kD0], physical_parameters[kAlpha],
                physical_parameters[kDOffset], &tables.diffusion, &tables.diffusion_derivatives);
  if (model.mode() == AnalysisMode::kLaminarFlow) {
    IntegrateRate(log_guarded_times, physical_parameters[kGammaDot0], physical_parameters[kBeta],
                  physical_parameters[kGammaDotOffset], &tables.shear, &tables.shear_derivatives);
  }
  return tables;
}

std::unique_ptr<const ModePoint> MakeHomodynePoint(const HomodyneModel& model,
                                                   std::span<const double> physical_parameters) {
  return std::make_unique<HomodynePoint>(model, physical_parameters);
}

double ScatteringGeometry::DiffusionPrefactor() const {
  return 0.5 * (q_inv_angstrom * q_inv_angstrom) * dt_seconds;  // docs/model.md
}

double ScatteringGeometry::SincPrefactor() const {
  return 0.5 / std::numbers::pi * q_inv_angstrom * gap_angstrom * dt_seconds;  // docs/model.md
}

}  // namespace homodyne
