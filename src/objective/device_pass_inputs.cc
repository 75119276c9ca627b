// The device passes' host side (device_pass_backend.h): the plain inputs at a point, the jobs of a
// call, and the block sums into per-batch sums. Compiled with contraction off (device_point.h).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/homodyne/homodyne_point.h"
#include "model/two_component/two_component_point.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;

namespace tc = two_component;

// The two_component tables at the point's parameters (two_component_point.h: the CPU model's own
// ComputeTwoComponentTables; the velocity's sin/cos tables as BuildVelocityTables computes them,
// two_component_point.cc), into inputs->two_component_arrays (TwoComponentTablesAt layout), and
// the angles' terms.

void MakeTwoComponentInputs(const PassPoint& point, DevicePassInputs* inputs) {
  const HomodyneModel& model = point.evaluation->model();
  const std::span<const double> p = point.evaluation->physical_parameters();
  HOMODYNE_CHECK(p.size() == static_cast<std::size_t>(tc::kNumPhysical));
  const std::vector<double>& t = model.times_seconds();
  const std::size_t n = t.size();
  const std::size_t num_angles = point.phi_degrees.size();
  const double q = model.geometry().q_inv_angstrom;
  inputs->two_component = true;
  inputs->num_times = static_cast<int>(n);
  inputs->transport_prefactor = 0.5 * q * q;
  inputs->two_component_arrays.assign(
      static_cast<std::size_t>(device_pass::TwoComponentTableDoubles(
          static_cast<int64_t>(n), static_cast<int64_t>(num_angles))),
      0.0);
  double* base = inputs->two_component_arrays.data();
  // The CPU model's tables (two_component_point.h), so the device passes start from bitwise the
  // same: the two transports' integrals and the velocity's, each C (N) then its derivatives (3 N),
  // at 0, 4 N and 8 N; x_s and its derivatives at 12 N and 13 N.
  const TwoComponentTables tables = ComputeTwoComponentTables(model, p);
  const TwoComponentTables::Integral* integrals[3] = {&tables.reference, &tables.sample,
                                                      &tables.velocity};
  for (std::size_t c = 0; c < 3; ++c) {
    double* cumulative = base + 4 * n * c;
    std::copy(integrals[c]->cumulative.begin(), integrals[c]->cumulative.end(), cumulative);
    std::copy(integrals[c]->derivatives.begin(), integrals[c]->derivatives.end(), cumulative + n);
  }
  std::copy(tables.fraction.begin(), tables.fraction.end(), base + 12 * n);
  std::copy(tables.fraction_derivatives.begin(), tables.fraction_derivatives.end(), base + 13 * n);
  // The angles' terms and their tables sin(s C[v]_j), cos(s C[v]_j) (FillVelocityPhaseTables),
  // at 17 N + 2 N k.
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
    FillVelocityPhaseTables(angle.phase_per_unit, {velocity, n}, sin_table, sin_table + n);
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

  // The CPU model's tables (homodyne_point.h), so the device passes start from bitwise the same.
  HomodyneRateTables tables = ComputeHomodyneRateTables(model, parameters);
  inputs.cumulative_diffusion = std::move(tables.diffusion);
  inputs.cumulative_diffusion_derivatives = std::move(tables.diffusion_derivatives);
  if (inputs.laminar) {
    inputs.cumulative_shear = std::move(tables.shear);
    inputs.cumulative_shear_derivatives = std::move(tables.shear_derivatives);
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
    // The device backends take no strided batches (PassBackend::SupportsRowStride).
    HOMODYNE_CHECK(batch.row_stride == 1);
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
