// The device passes' host side (device_pass_backend.h): the plain inputs at a point, the jobs of a
// call, and the block sums into per-batch sums. Compiled with contraction off (device_point.h).
#include <cmath>
#include <cstddef>
#include <numbers>
#include <span>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/two_component/two_component_point.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

using model_limits::kMinTimeGuardSeconds;
using model_limits::kRateFloor;
constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;

// The rate r(t) = max(amplitude ts^exponent + rate_offset, 1e-10) integrated by the cumulative
// trapezoid in steps, with the integral's derivatives with respect to (amplitude, exponent,
// rate_offset): the arithmetic of the CPU model's tables (docs/model.md, Rates, The time
// integrals), so the device passes start from bitwise the CPU's tables.
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

// The two_component tables at `parameters` (two_component_point.h), by the arithmetic of the CPU
// model's (TwoComponentPoint's constructor and BuildVelocityTables, two_component_point.cc), into
// inputs->two_component_arrays (TwoComponentTablesAt layout) and the angles' terms.
namespace tc = two_component;

// pw(t, e) and d pw / d e.
void PowerAndDerivative(double t, double exponent, double* power, double* derivative) {
  if (!(t > 0.0)) {
    *power = 0.0;
    *derivative = 0.0;
    return;
  }
  const double ts = t > tc::kPowerTimeFloor ? t : tc::kPowerTimeFloor;
  *power = std::pow(ts, exponent);
  *derivative = *power * std::log(ts);
}

// log(1 + e^x) without overflow, and its derivative 1 / (1 + e^-x).
double Softplus(double x) { return (x > 0.0 ? x : 0.0) + std::log1p(std::exp(-std::fabs(x))); }
double Logistic(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// Cumulative trapezoid with dt of `values` (N) and of their 3 partials (3 N) into cumulative (N)
// and derivatives (3 N), the sum first, then times dt.
void CumulativeTrapezoid(const std::vector<double>& values, const std::vector<double>& partials,
                         double dt, double* cumulative, double* derivatives) {
  const std::size_t n = values.size();
  double sums[4] = {0.0, 0.0, 0.0, 0.0};
  cumulative[0] = 0.0;
  for (std::size_t p = 0; p < 3; ++p) derivatives[p * n] = 0.0;
  for (std::size_t k = 1; k < n; ++k) {
    sums[0] += 0.5 * (values[k - 1] + values[k]);
    cumulative[k] = sums[0] * dt;
    for (std::size_t p = 0; p < 3; ++p) {
      sums[p + 1] += 0.5 * (partials[p * n + k - 1] + partials[p * n + k]);
      derivatives[p * n + k] = sums[p + 1] * dt;
    }
  }
}

void MakeTwoComponentInputs(const PassPoint& point, DevicePassInputs* inputs) {
  const HomodyneModel& model = point.evaluation->model();
  const std::span<const double> p = point.evaluation->physical_parameters();
  HOMODYNE_CHECK(p.size() == static_cast<std::size_t>(tc::kNumPhysical));
  const std::vector<double>& t = model.times_seconds();
  const std::size_t n = t.size();
  const std::size_t num_angles = point.phi_degrees.size();
  const double q = model.geometry().q_inv_angstrom;
  const double dt = model.geometry().dt_seconds;
  inputs->two_component = true;
  inputs->num_times = static_cast<int>(n);
  inputs->transport_prefactor = 0.5 * q * q;
  inputs->two_component_arrays.assign(
      static_cast<std::size_t>(device_pass::TwoComponentTableDoubles(
          static_cast<int64_t>(n), static_cast<int64_t>(num_angles))),
      0.0);
  double* base = inputs->two_component_arrays.data();
  // The two transports J_c(t) (floored at 0) and the velocity v(t), at 0, 4 N and 8 N.
  std::vector<double> rate(n), partials(3 * n);
  for (int c = 0; c < 3; ++c) {
    const int first = c == 0 ? tc::kD0Ref : c == 1 ? tc::kD0Sample : tc::kV0;
    const bool floored = c < 2;
    const double amplitude = p[first], exponent = p[first + 1], rate_offset = p[first + 2];
    for (std::size_t k = 0; k < n; ++k) {
      double power = 0.0, dpower = 0.0;
      PowerAndDerivative(t[k], exponent, &power, &dpower);
      const double raw = amplitude * power + rate_offset;
      const bool active = !floored || raw > 0.0;
      rate[k] = active ? raw : 0.0;
      partials[k] = active ? power : 0.0;
      partials[n + k] = active ? amplitude * dpower : 0.0;
      partials[2 * n + k] = active ? 1.0 : 0.0;
    }
    double* cumulative = base + 4 * n * static_cast<std::size_t>(c);
    CumulativeTrapezoid(rate, partials, dt, cumulative, cumulative + n);
  }
  // The sample fraction x_s(t) and its derivatives with respect to f0..f3, at 12 N and 13 N.
  double* fraction = base + 12 * n;
  double* fraction_derivatives = base + 13 * n;
  const double f0 = p[tc::kF0], f1 = p[tc::kF1], f2 = p[tc::kF2], f3 = p[tc::kF3];
  const double k50 = tc::kSoftClipSharpness;
  for (std::size_t k = 0; k < n; ++k) {
    const double argument = f1 * (t[k] - f2);
    const bool clipped = argument > tc::kExpArgumentLimit || argument < -tc::kExpArgumentLimit;
    const double e =
        std::exp(clipped ? std::copysign(tc::kExpArgumentLimit, argument) : argument);
    const double z = f0 * e + f3;
    const double x_low = Softplus(k50 * z) / k50;
    fraction[k] = 1.0 - Softplus(k50 * (1.0 - x_low)) / k50;
    const double dx_dz = Logistic(k50 * (1.0 - x_low)) * Logistic(k50 * z);
    fraction_derivatives[k] = dx_dz * e;
    fraction_derivatives[n + k] = clipped ? 0.0 : dx_dz * f0 * e * (t[k] - f2);
    fraction_derivatives[2 * n + k] = clipped ? 0.0 : dx_dz * (-f0 * e * f1);
    fraction_derivatives[3 * n + k] = dx_dz;
  }
  // The angles' terms and their tables sin(s C[v]_j), cos(s C[v]_j) (s C[v]_j = hi + lo exactly,
  // carried to second order), at 17 N + 2 N k.
  const double* velocity = base + 8 * n;
  for (std::size_t k = 0; k < num_angles; ++k) {
    const double psi = (point.phi_degrees[k] + p[tc::kPhi0Het]) * kRadiansPerDegree;
    device_pass::TwoComponentAngleTerms angle;
    angle.contrast = point.contrast[k];
    angle.offset = point.offset[k];
    angle.phase_per_unit = q * std::cos(psi);
    angle.dphase_dphi0_per_unit = -q * std::sin(psi) * kRadiansPerDegree;
    angle.angle = static_cast<int>(k);
    inputs->two_component_angles.push_back(angle);
    double* sin_table = base + 17 * n + 2 * n * k;
    double* cos_table = sin_table + n;
    const double s = angle.phase_per_unit;
    for (std::size_t j = 0; j < n; ++j) {
      const double hi = s * velocity[j];
      const double lo = std::fma(s, velocity[j], -hi);
      const double sin_hi = std::sin(hi), cos_hi = std::cos(hi);
      sin_table[j] = sin_hi + lo * cos_hi;
      cos_table[j] = cos_hi - lo * sin_hi;
    }
  }
}

}  // namespace

device_pass::TwoComponentTables DevicePassInputs::HostTwoComponentTables() const {
  HOMODYNE_CHECK(two_component);
  return device_pass::TwoComponentTablesAt(num_times, transport_prefactor,
                                           two_component_arrays.data());
}

device_pass::ModelTables DevicePassInputs::HostTables() const {
  device_pass::ModelTables tables;
  tables.num_times = static_cast<int>(cumulative_diffusion.size());
  tables.diffusion_prefactor = diffusion_prefactor;
  tables.cumulative_diffusion = cumulative_diffusion.data();
  tables.cumulative_diffusion_derivatives = cumulative_diffusion_derivatives.data();
  if (laminar) {
    tables.cumulative_shear = cumulative_shear.data();
    tables.cumulative_shear_derivatives = cumulative_shear_derivatives.data();
  }
  return tables;
}

DevicePassInputs MakeDevicePassInputs(const PassPoint& point) {
  HOMODYNE_CHECK(point.evaluation != nullptr && point.contrast.size() == point.phi_degrees.size() &&
                 point.offset.size() == point.phi_degrees.size());
  const HomodyneModel& model = point.evaluation->model();
  const AnalysisMode mode = model.mode();
  if (mode != AnalysisMode::kStatic && mode != AnalysisMode::kLaminarFlow &&
      mode != AnalysisMode::kTwoComponent) {
    throw NotCompiledError(
        "the device passes compute static, laminar_flow and two_component only, not " +
        std::string(ToString(mode)));
  }
  const std::span<const double> parameters = point.evaluation->physical_parameters();
  DevicePassInputs inputs;
  inputs.loss.function = static_cast<int>(point.loss.function);
  inputs.loss.residual_scale = point.loss.residual_scale;
  if (mode == AnalysisMode::kTwoComponent) {
    inputs.gram_size = model.num_point_derivatives() + 1;
    HOMODYNE_CHECK(inputs.gram_size == device_pass::TwoComponentShape::kGramSize);
    MakeTwoComponentInputs(point, &inputs);
    return inputs;
  }
  inputs.laminar = mode == AnalysisMode::kLaminarFlow;
  inputs.gram_size = model.num_point_derivatives() + 1;
  inputs.diffusion_prefactor = model.geometry().DiffusionPrefactor();

  // The t -> 0 guard (docs/model.md, Rates): ts = max(t, eps_t), eps_t = max(|t1 - t0| / 2, 1e-8).
  const std::vector<double>& t = model.times_seconds();
  const std::size_t n = t.size();
  const double half_spacing = 0.5 * std::abs(t[n > 1 ? 1 : 0] - t[0]);
  const double eps_t = half_spacing > kMinTimeGuardSeconds ? half_spacing : kMinTimeGuardSeconds;
  std::vector<double> guarded_times(n);
  for (std::size_t k = 0; k < n; ++k) guarded_times[k] = t[k] > eps_t ? t[k] : eps_t;
  IntegrateRate(guarded_times, parameters[kD0], parameters[kAlpha], parameters[kDOffset],
                &inputs.cumulative_diffusion, &inputs.cumulative_diffusion_derivatives);
  if (inputs.laminar) {
    IntegrateRate(guarded_times, parameters[kGammaDot0], parameters[kBeta],
                  parameters[kGammaDotOffset], &inputs.cumulative_shear,
                  &inputs.cumulative_shear_derivatives);
  }

  // The angles' coefficients, as the CPU kernel's (docs/model.md, Shear factor).
  const double sinc_prefactor = model.geometry().SincPrefactor();
  for (std::size_t k = 0; k < point.phi_degrees.size(); ++k) {
    device_pass::AngleTerms angle;
    angle.contrast = point.contrast[k];
    angle.offset = point.offset[k];
    if (inputs.laminar) {
      const double psi = (parameters[kPhi0] - point.phi_degrees[k]) * kRadiansPerDegree;
      angle.phase_per_step = sinc_prefactor * std::cos(psi);
      angle.dphase_dphi0_per_step = -sinc_prefactor * std::sin(psi) * kRadiansPerDegree;
    }
    inputs.angles.push_back(angle);
  }
  return inputs;
}

std::vector<device_pass::PassJob> MakePassJobs(int num_times, std::span<const RowBatch> batches,
                                               std::span<const float* const> data, int num_angles) {
  HOMODYNE_CHECK(data.size() == batches.size() * static_cast<std::size_t>(num_angles));
  std::vector<device_pass::PassJob> jobs;
  jobs.reserve(data.size());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const RowBatch& batch = batches[b];
    HOMODYNE_CHECK(batch.points ==
                   UpperTriangleRowsSize(num_times, batch.row_begin, batch.row_end));
    for (int k = 0; k < num_angles; ++k) {
      device_pass::PassJob job;
      job.row_begin = batch.row_begin;
      job.row_end = batch.row_end;
      job.angle = k;
      job.points = batch.points;
      job.data = data[b * static_cast<std::size_t>(num_angles) + static_cast<std::size_t>(k)];
      jobs.push_back(job);
    }
  }
  return jobs;
}

void GramsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int gram_size,
                        std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) {
  const int triangle = device_pass::TriangleEntries(gram_size);
  const int stride = triangle + 1;
  const std::size_t job_doubles = static_cast<std::size_t>(blocks_per_job) * stride;
  HOMODYNE_CHECK(grams.size() == finite_points.size() &&
                 block_sums.size() == grams.size() * job_doubles);
  for (std::size_t job = 0; job < grams.size(); ++job) {
    const double* sums = block_sums.data() + job * job_doubles;
    Eigen::MatrixXd& gram = grams[job];
    gram.setZero(gram_size, gram_size);
    int entry = 0;
    for (int a = 0; a < gram_size; ++a) {
      for (int c = 0; c <= a; ++c, ++entry) {
        gram(a, c) = device_pass::BlockOrderSum(sums + entry, blocks_per_job, stride);
      }
    }
    finite_points[job] =
        static_cast<int64_t>(device_pass::BlockOrderSum(sums + triangle, blocks_per_job, stride));
  }
}

void CostsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int num_angles,
                        std::span<double> squared_residuals) {
  HOMODYNE_CHECK(block_sums.size() ==
                 squared_residuals.size() * static_cast<std::size_t>(num_angles) * blocks_per_job);
  for (std::size_t b = 0; b < squared_residuals.size(); ++b) {
    double sum = 0.0;
    for (int k = 0; k < num_angles; ++k) {
      const std::size_t job =
          b * static_cast<std::size_t>(num_angles) + static_cast<std::size_t>(k);
      sum +=
          device_pass::BlockOrderSum(block_sums.data() + job * blocks_per_job, blocks_per_job, 1);
    }
    squared_residuals[b] = sum;
  }
}

}  // namespace homodyne
