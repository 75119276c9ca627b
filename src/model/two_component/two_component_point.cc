// The two-component model at one parameter vector (two_component_point.h): the O(N) tables, the
// scalar c2 and analytic Jacobian with libm (the reference the pass body is tested against), and
// the pass body at the chosen level (two_component_pass_variant.h).
//
// Derivatives follow the successor's JAX autodiff: zero where a clip or floor binds (the transport
// exponent's clip at -700, J_c's floor at 0, the fraction exponent's clip, the normalisation
// floor); the soft clip and the smooth |x| are differentiated as they are.
#include "model/two_component/two_component_point.h"

#include <cmath>
#include <cstddef>
#include <memory>
#include <numbers>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "model/isa_level.h"
#include "model/separable_exp.h"
#include "model/two_component/two_component_pass_variant.h"

namespace homodyne {
namespace {

using namespace two_component;  // NOLINT: the mode's own constants and indices
constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;

// pw(t, e) and d pw / d e (two_component_point.h), from ts = max(t, kPowerTimeFloor) and its
// log (GuardedTime, LogOfGuardedTime: the same for the three rates of a time, computed once).
double GuardedTime(double t) { return t > kPowerTimeFloor ? t : kPowerTimeFloor; }
double LogOfGuardedTime(double t) { return t > 0.0 ? std::log(GuardedTime(t)) : 0.0; }
void PowerAndDerivative(double t, double log_ts, double exponent, double* power,
                        double* derivative) {
  if (!(t > 0.0)) {
    *power = 0.0;
    *derivative = 0.0;
    return;
  }
  *power = std::pow(GuardedTime(t), exponent);
  *derivative = *power * log_ts;
}

// log(1 + e^x) without overflow (jax.nn.softplus = logaddexp(x, 0)) and its derivative
// 1 / (1 + e^-x), from one exp: e^-|x| is both Softplus's term and Logistic's e^-x (x >= 0) or
// e^x (x < 0).
struct SoftplusAndLogistic {
  double softplus;
  double logistic;
};
SoftplusAndLogistic SoftplusWithLogistic(double x) {
  const double e = std::exp(-std::fabs(x));
  return {(x > 0.0 ? x : 0.0) + std::log1p(e), x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e)};
}

// Cumulative trapezoid with dt of the rate `values` (N), and of its 3 parameter partials
// (`partials`, 3 N column-major), into `cumulative` (N) and `derivatives` (3 N): C_0 = 0,
// C_k = dt * sum_{m<k} (y_m + y_{m+1}) / 2, as the successor (the sum first, then times dt).
void CumulativeTrapezoid(const std::vector<double>& values, const std::vector<double>& partials,
                         double dt, std::vector<double>* cumulative,
                         std::vector<double>* derivatives) {
  const std::size_t n = values.size();
  cumulative->assign(n, 0.0);
  derivatives->assign(3 * n, 0.0);
  double sums[4] = {0.0, 0.0, 0.0, 0.0};
  for (std::size_t k = 1; k < n; ++k) {
    sums[0] += 0.5 * (values[k - 1] + values[k]);
    (*cumulative)[k] = sums[0] * dt;
    for (std::size_t p = 0; p < 3; ++p) {
      sums[p + 1] += 0.5 * (partials[p * n + k - 1] + partials[p * n + k]);
      (*derivatives)[p * n + k] = sums[p + 1] * dt;
    }
  }
}

class TwoComponentPoint final : public ModePoint {
 public:
  TwoComponentPoint(const HomodyneModel& model, std::span<const double> p)
      : q_(model.geometry().q_inv_angstrom) {
    HOMODYNE_CHECK(p.size() == static_cast<std::size_t>(kNumPhysical));
    parameters_.assign(p.begin(), p.end());
    TwoComponentTables tables = ComputeTwoComponentTables(model, p);
    reference_ = std::move(tables.reference);
    sample_ = std::move(tables.sample);
    velocity_ = std::move(tables.velocity);
    fraction_ = std::move(tables.fraction);
    fraction_derivatives_ = std::move(tables.fraction_derivatives);
  }

  void EvaluateSegment(double phi_degrees, double contrast, double offset, int i, int j_begin,
                       int j_end, double* c2_out, double* jacobian_out) const override;

  std::unique_ptr<const ModePass> PreparePass(std::span<const double> phi_degrees,
                                              std::span<const double> contrast,
                                              std::span<const double> offset, IsaLevel level,
                                              const PassLoss& loss) const override;

 private:
  using TransportTable = TwoComponentTables::Integral;
  pass_kernel::TwoComponentInputs Inputs() const;

  double q_;
  std::vector<double> parameters_;
  TransportTable reference_, sample_, velocity_;
  std::vector<double> fraction_;              // x_s(t), N values
  std::vector<double> fraction_derivatives_;  // 4 N: d x_s / d(f0, f1, f2, f3)
};

// The pass body at one point (two_component_pass_variant.h) for one set of angles.
class TwoComponentPass final : public ModePass {
  // PassScratch (mode_point.h) holds the factor columns the passes carve and, in its tile (a
  // gram size of kNumPhysical + 3), the cost and scaling passes' per-point values of a row
  // segment (two_component_pass_variant.h).
  static constexpr int kScratchFactorDoubles =
      PassScratch::kFactorColumns * pass_kernel::kTilePoints;
  static_assert(pass_kernel::kTwoComponentFactorColumns * pass_kernel::kTilePoints <=
                kScratchFactorDoubles);
  static_assert(pass_kernel::kTwoComponentCostFactorColumns * pass_kernel::kCostTilePoints <=
                kScratchFactorDoubles);
  static_assert(pass_kernel::kScalingColumns * pass_kernel::kCostTilePoints <=
                pass_kernel::kTilePoints * pass_kernel::PaddedTileColumns(kNumPhysical + 3));

 public:
  TwoComponentPass(pass_kernel::TwoComponentInputs inputs,
                   std::vector<pass_kernel::TwoComponentAngle> angles,
                   const pass_kernel::TwoComponentFunctions* functions)
      : inputs_(inputs), angles_(std::move(angles)), functions_(functions) {
    HOMODYNE_CHECK(functions_ != nullptr);
    BuildVelocityTables();
    BuildTransportFactors();
    inputs_.angles = angles_.data();
    inputs_.num_angles = static_cast<int>(angles_.size());
  }
  void AccumulateRows(int row_begin, int row_end, int row_stride, const float* const* data,
                      double* const* grams, int64_t* finite_points,
                      PassScratch& scratch) const override {
    pass_kernel::TwoComponentInputs inputs = inputs_;
    inputs.gram_size = scratch.gram_size;
    scratch.lane_grams.resize(static_cast<size_t>(pass_kernel::LaneGramDoubles(scratch.gram_size)) *
                              angles_.size());
    functions_->accumulate_rows(inputs, row_begin, row_end, row_stride, data, grams, finite_points,
                                scratch.factors.data(), scratch.tile.data(),
                                scratch.lane_grams.data());
  }
  void AccumulateSummedPhysicalRows(int row_begin, int row_end, int row_stride,
                                    const float* const* data, double* const* grams,
                                    int64_t* finite_points, PassScratch& scratch) const override {
    if (inputs_.loss.function != LossFunction::kLinear) {
      AccumulateRows(row_begin, row_end, row_stride, data, grams, finite_points, scratch);
      return;
    }
    pass_kernel::TwoComponentInputs inputs = inputs_;
    inputs.gram_size = scratch.gram_size;
    scratch.lane_grams.resize(static_cast<size_t>(
        pass_kernel::SummedLaneGramsDoubles(scratch.gram_size, static_cast<int>(angles_.size()))));
    functions_->accumulate_summed_rows(inputs, row_begin, row_end, row_stride, data, grams,
                                       finite_points, scratch.factors.data(), scratch.tile.data(),
                                       scratch.lane_grams.data());
  }
  void SumSquaredResiduals(int row_begin, int row_end, int row_stride, const float* const* data,
                           double* squared_residuals, PassScratch& scratch) const override {
    // The per-thread sums of e^2 live in the lane Grams' space (gram_block.h).
    const size_t sums = static_cast<size_t>(pass_kernel::kCostSumsDoubles) * angles_.size();
    if (scratch.lane_grams.size() < sums) scratch.lane_grams.resize(sums);
    functions_->sum_squared_residuals(inputs_, row_begin, row_end, row_stride, data,
                                      squared_residuals, scratch.factors.data(),
                                      scratch.tile.data(), scratch.lane_grams.data());
  }
  void AccumulateScalingRows(int row_begin, int row_end, int row_stride, const float* const* data,
                             double* const* grams, int64_t* finite_points,
                             PassScratch& scratch) const override {
    // The per-thread scaling sums live in the lane Grams' space (gram_block.h).
    const size_t sums = static_cast<size_t>(pass_kernel::kScalingSumsDoubles) * angles_.size();
    if (scratch.lane_grams.size() < sums) scratch.lane_grams.resize(sums);
    functions_->accumulate_scaling_rows(inputs_, row_begin, row_end, row_stride, data, grams,
                                        finite_points, scratch.factors.data(), scratch.tile.data(),
                                        scratch.lane_grams.data());
  }
  void EvaluateUpperSegment(int k, int i, int j_begin, int j_end, double* c2_out,
                            PassScratch& scratch) const override {
    functions_->evaluate_upper_segment(inputs_, k, i, j_begin, j_end, c2_out,
                                       scratch.factors.data());
  }

 private:
  // The angles' tables sin(s C[v]_j) and cos(s C[v]_j) (TwoComponentAngle::velocity_sin,
  // velocity_cos; s = phase_per_unit; FillVelocityPhaseTables).
  void BuildVelocityTables() {
    const std::size_t n = static_cast<std::size_t>(inputs_.num_times);
    const double* velocity = inputs_.cumulative_velocity;
    velocity_tables_.resize(2 * n * angles_.size());  // every value written below
    for (std::size_t k = 0; k < angles_.size(); ++k) {
      double* sin_table = velocity_tables_.data() + 2 * n * k;
      double* cos_table = sin_table + n;
      FillVelocityPhaseTables(angles_[k].phase_per_unit, {velocity, n}, sin_table, cos_table);
      angles_[k].velocity_sin = sin_table;
      angles_[k].velocity_cos = cos_table;
    }
  }

  // The separable transport factors of both components (TwoComponentInputs::reference_factors,
  // sample_factors; separable_exp.h).
  void BuildTransportFactors() {
    const int n = inputs_.num_times;
    transport_factors_.resize(2 * static_cast<std::size_t>(n));
    pass_kernel::BuildSeparableExpFactors(inputs_.cumulative_reference, n,
                                          inputs_.transport_prefactor, transport_factors_.data());
    pass_kernel::BuildSeparableExpFactors(inputs_.cumulative_sample, n, inputs_.transport_prefactor,
                                          transport_factors_.data() + n);
    inputs_.reference_factors = transport_factors_.data();
    inputs_.sample_factors = transport_factors_.data() + n;
  }

  pass_kernel::TwoComponentInputs inputs_;
  std::vector<pass_kernel::TwoComponentAngle> angles_;
  std::vector<double> velocity_tables_;    // per angle, N sines then N cosines
  std::vector<double> transport_factors_;  // N reference factors, then N sample factors
  const pass_kernel::TwoComponentFunctions* functions_;
};

pass_kernel::TwoComponentInputs TwoComponentPoint::Inputs() const {
  pass_kernel::TwoComponentInputs in;
  in.num_times = static_cast<int>(fraction_.size());
  in.transport_prefactor = 0.5 * q_ * q_;
  in.cumulative_reference = reference_.cumulative.data();
  in.cumulative_reference_derivatives = reference_.derivatives.data();
  in.cumulative_sample = sample_.cumulative.data();
  in.cumulative_sample_derivatives = sample_.derivatives.data();
  in.cumulative_velocity = velocity_.cumulative.data();
  in.cumulative_velocity_derivatives = velocity_.derivatives.data();
  in.fraction = fraction_.data();
  in.fraction_derivatives = fraction_derivatives_.data();
  return in;
}

// The angle's coefficients: Phi = phase_per_unit (C[v]_j - C[v]_i) and d/d phi0_het of the factor.
pass_kernel::TwoComponentAngle AngleOf(double q, double phi0_het, double phi_degrees,
                                       double contrast, double offset) {
  const double psi = (phi_degrees + phi0_het) * kRadiansPerDegree;
  pass_kernel::TwoComponentAngle angle;
  angle.contrast = contrast;
  angle.offset = offset;
  angle.phase_per_unit = q * std::cos(psi);
  angle.dphase_dphi0_per_unit = -q * std::sin(psi) * kRadiansPerDegree;
  return angle;
}

std::unique_ptr<const ModePass> TwoComponentPoint::PreparePass(std::span<const double> phi_degrees,
                                                               std::span<const double> contrast,
                                                               std::span<const double> offset,
                                                               IsaLevel level,
                                                               const PassLoss& loss) const {
  std::vector<pass_kernel::TwoComponentAngle> angles;
  for (std::size_t k = 0; k < phi_degrees.size(); ++k) {
    angles.push_back(AngleOf(q_, parameters_[kPhi0Het], phi_degrees[k], contrast[k], offset[k]));
  }
  pass_kernel::TwoComponentInputs inputs = Inputs();
  inputs.loss = loss;
  return std::make_unique<TwoComponentPass>(
      inputs, std::move(angles),
      HOMODYNE_PASS_VARIANT(pass_kernel::TwoComponentFunctions, kTwoComponentFunctions, level));
}

// Per point (two_component_point.h), with libm; the Jacobian by the chain rule through H_r, H_s,
// Phi and the fractions x_s,i = u, x_s,j = w:
//   dg/dH_r = 2 (A^2 H_r + A B H_s cos Phi) / den,  dg/dH_s = 2 (B^2 H_s + A B H_r cos Phi) / den
//   dg/dPhi = -2 A B H_r H_s sin Phi / den
//   dg/du = (n_A dA/du + n_B dB/du) / den - g dden/du / den, n_A = dnum/dA, n_B = dnum/dB,
//   dA/du = -(1 - w), dB/du = w, dden/du = (4u - 2) N_j (0 where the floor binds); w likewise.
void TwoComponentPoint::EvaluateSegment(double phi_degrees, double contrast, double offset, int i,
                                        int j_begin, int j_end, double* c2_out,
                                        double* jacobian_out) const {
  const std::size_t n = fraction_.size();
  const std::size_t row = static_cast<std::size_t>(i);
  const double w_q = 0.5 * q_ * q_;
  const pass_kernel::TwoComponentAngle angle =
      AngleOf(q_, parameters_[kPhi0Het], phi_degrees, contrast, offset);
  const double u = fraction_[row], ur = 1.0 - u;
  const double norm_i = u * u + ur * ur;
  constexpr int kStride = kNumPhysical + 2;
  for (int j = j_begin; j < j_end; ++j) {
    const std::size_t col = static_cast<std::size_t>(j);
    // Transport factors and their derivatives with respect to the component's 3 parameters.
    double h[2], dh[2][3];
    for (int c = 0; c < 2; ++c) {
      const TransportTable& table = c == 0 ? reference_ : sample_;
      const double diff = table.cumulative[col] - table.cumulative[row];
      const double m = std::sqrt(diff * diff + kSmoothAbsEpsilon);
      const double log_h = -w_q * m;
      const bool clipped = log_h < kLogTransportMin;
      h[c] = std::exp(clipped ? kLogTransportMin : log_h);
      const double factor = clipped ? 0.0 : h[c] * (-w_q) * (diff / m);
      for (std::size_t p = 0; p < 3; ++p) {
        dh[c][p] = factor * (table.derivatives[p * n + col] - table.derivatives[p * n + row]);
      }
    }
    const double dv = velocity_.cumulative[col] - velocity_.cumulative[row];
    const double phase = angle.phase_per_unit * dv;
    const double cos_phase = std::cos(phase), sin_phase = std::sin(phase);
    const double w = fraction_[col], wr = 1.0 - w;
    const double a = ur * wr, b = u * w;
    const double hr = h[0], hs = h[1];
    const double num = a * a * hr * hr + b * b * hs * hs + 2.0 * (a * b) * hr * hs * cos_phase;
    const double norm_j = w * w + wr * wr;
    const double den_raw = norm_i * norm_j;
    const bool floored = !(den_raw > kNormalizationFloor);
    const double den = floored ? kNormalizationFloor : den_raw;
    const double g = num / den;
    c2_out[j - j_begin] = offset + contrast * g;
    if (jacobian_out == nullptr) continue;

    double* jac = jacobian_out + static_cast<std::size_t>(j - j_begin) * kStride;
    const double dg_dhr = 2.0 * (a * a * hr + a * b * hs * cos_phase) / den;
    const double dg_dhs = 2.0 * (b * b * hs + a * b * hr * cos_phase) / den;
    const double dg_dphase = -2.0 * a * b * hr * hs * sin_phase / den;
    const double n_a = 2.0 * a * hr * hr + 2.0 * b * hr * hs * cos_phase;
    const double n_b = 2.0 * b * hs * hs + 2.0 * a * hr * hs * cos_phase;
    const double dden_du = floored ? 0.0 : (4.0 * u - 2.0) * norm_j;
    const double dden_dw = floored ? 0.0 : (4.0 * w - 2.0) * norm_i;
    const double dg_du = (n_a * (-wr) + n_b * w) / den - g * dden_du / den;
    const double dg_dw = (n_a * (-ur) + n_b * u) / den - g * dden_dw / den;
    for (std::size_t p = 0; p < 3; ++p) {
      jac[kD0Ref + p] = contrast * dg_dhr * dh[0][p];
      jac[kD0Sample + p] = contrast * dg_dhs * dh[1][p];
      const double ddv = velocity_.derivatives[p * n + col] - velocity_.derivatives[p * n + row];
      jac[kV0 + p] = contrast * dg_dphase * angle.phase_per_unit * ddv;
    }
    for (std::size_t m = 0; m < 4; ++m) {
      jac[kF0 + m] = contrast * (dg_du * fraction_derivatives_[m * n + row] +
                                 dg_dw * fraction_derivatives_[m * n + col]);
    }
    jac[kPhi0Het] = contrast * dg_dphase * angle.dphase_dphi0_per_unit * dv;
    jac[kNumPhysical] = g;        // d c2 / d contrast
    jac[kNumPhysical + 1] = 1.0;  // d c2 / d offset
  }
}

}  // namespace

void FillVelocityPhaseTables(double s, std::span<const double> velocity, double* sin_table,
                             double* cos_table) {
  // The active level's vector loop where every phase is within vector_math::SinCos's domain
  // (TwoComponentFunctions::fill_velocity_tables tests it), libm elsewhere.
  const pass_kernel::TwoComponentFunctions* functions = HOMODYNE_PASS_VARIANT(
      pass_kernel::TwoComponentFunctions, kTwoComponentFunctions, ActiveIsaLevel());
  if (functions != nullptr &&
      functions->fill_velocity_tables(s, velocity.data(), static_cast<int64_t>(velocity.size()),
                                      sin_table, cos_table)) {
    return;
  }
  for (std::size_t j = 0; j < velocity.size(); ++j) {
    const double hi = s * velocity[j];
    const double lo = std::fma(s, velocity[j], -hi);
    const double sin_hi = std::sin(hi), cos_hi = std::cos(hi);
    sin_table[j] = sin_hi + lo * cos_hi;
    cos_table[j] = cos_hi - lo * sin_hi;
  }
}

TwoComponentTables ComputeTwoComponentTables(const HomodyneModel& model,
                                             std::span<const double> p) {
  using namespace two_component;  // NOLINT: the mode's own constants and indices
  HOMODYNE_CHECK(p.size() == static_cast<std::size_t>(kNumPhysical));
  TwoComponentTables tables;
  const std::vector<double>& t = model.times_seconds();
  const std::size_t n = t.size();
  const double dt = model.geometry().dt_seconds;
  std::vector<double> rate(n), partials(3 * n), log_ts(n);
  for (std::size_t k = 0; k < n; ++k) log_ts[k] = LogOfGuardedTime(t[k]);
  // The two transports J_c(t) and the velocity v(t).
  for (int c = 0; c < 3; ++c) {
    const int first = c == 0 ? kD0Ref : c == 1 ? kD0Sample : kV0;
    const bool floored = c < 2;
    const double amplitude = p[first], exponent = p[first + 1], rate_offset = p[first + 2];
    for (std::size_t k = 0; k < n; ++k) {
      double power = 0.0, dpower = 0.0;
      PowerAndDerivative(t[k], log_ts[k], exponent, &power, &dpower);
      const double raw = amplitude * power + rate_offset;
      const bool active = !floored || raw > 0.0;
      rate[k] = active ? raw : 0.0;
      partials[k] = active ? power : 0.0;
      partials[n + k] = active ? amplitude * dpower : 0.0;
      partials[2 * n + k] = active ? 1.0 : 0.0;
    }
    TwoComponentTables::Integral& table = c == 0   ? tables.reference
                                          : c == 1 ? tables.sample
                                                   : tables.velocity;
    CumulativeTrapezoid(rate, partials, dt, &table.cumulative, &table.derivatives);
  }
  // The sample fraction x_s(t) and its derivatives with respect to f0..f3.
  tables.fraction.assign(n, 0.0);
  tables.fraction_derivatives.assign(4 * n, 0.0);
  const double f0 = p[kF0], f1 = p[kF1], f2 = p[kF2], f3 = p[kF3];
  const double k50 = kSoftClipSharpness;
  for (std::size_t k = 0; k < n; ++k) {
    const double argument = f1 * (t[k] - f2);
    const bool clipped = argument > kExpArgumentLimit || argument < -kExpArgumentLimit;
    const double e = std::exp(clipped ? std::copysign(kExpArgumentLimit, argument) : argument);
    const double z = f0 * e + f3;
    const SoftplusAndLogistic low = SoftplusWithLogistic(k50 * z);
    const double x_low = low.softplus / k50;
    const SoftplusAndLogistic high = SoftplusWithLogistic(k50 * (1.0 - x_low));
    tables.fraction[k] = 1.0 - high.softplus / k50;
    const double dx_dz = high.logistic * low.logistic;
    tables.fraction_derivatives[k] = dx_dz * e;
    tables.fraction_derivatives[n + k] = clipped ? 0.0 : dx_dz * f0 * e * (t[k] - f2);
    tables.fraction_derivatives[2 * n + k] = clipped ? 0.0 : dx_dz * (-f0 * e * f1);
    tables.fraction_derivatives[3 * n + k] = dx_dz;
  }
  return tables;
}

std::unique_ptr<const ModePoint> MakeTwoComponentPoint(
    const HomodyneModel& model, std::span<const double> physical_parameters) {
  return std::make_unique<TwoComponentPoint>(model, physical_parameters);
}

}  // namespace homodyne
