// The two-component mode's device inputs at a point (two_component_device.h,
// TwoComponentDeviceMode::MakeInputs): the CPU model's own tables (ComputeTwoComponentTables; the
// velocity's sin / cos tables as FillVelocityPhaseTables computes them, two_component_point.cc),
// so that the device passes start from bitwise the same numbers, and the angles' terms. Compiled
// with contraction off (src/model/device/device_point.h).
#include "model/two_component/two_component_device.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <span>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/two_component/two_component_point.h"

namespace homodyne::device_pass {

void TwoComponentDeviceMode::MakeInputs(const DevicePoint& point, DeviceInputs<Angle>* inputs) {
  constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;
  namespace tc = two_component;
  HOMODYNE_CHECK(point.evaluation != nullptr && inputs != nullptr);
  const HomodyneModel& model = point.evaluation->model();
  HOMODYNE_CHECK(model.mode() == AnalysisMode::kTwoComponent);
  HOMODYNE_CHECK(model.num_point_derivatives() + 1 == Shape::kGramSize);
  const std::span<const double> p = point.evaluation->physical_parameters();
  HOMODYNE_CHECK(p.size() == static_cast<std::size_t>(tc::kNumPhysical));
  const std::size_t n = static_cast<std::size_t>(model.num_times());
  const std::size_t num_angles = static_cast<std::size_t>(point.num_angles);
  const double q = model.geometry().q_inv_angstrom;
  inputs->scalars.num_times = model.num_times();
  inputs->scalars.values[0] = 0.5 * q * q;
  inputs->tables.assign(static_cast<std::size_t>(TwoComponentTableDoubles(
                            static_cast<int64_t>(n), static_cast<int64_t>(num_angles))),
                        0.0);
  double* base = inputs->tables.data();
  // The two transports' integrals and the velocity's, each C (N) then its derivatives (3 N), at
  // 0, 4 N and 8 N; x_s and its derivatives at 12 N and 13 N (TwoComponentTablesAt).
  const homodyne::TwoComponentTables tables = homodyne::ComputeTwoComponentTables(model, p);
  const homodyne::TwoComponentTables::Integral* integrals[3] = {&tables.reference, &tables.sample,
                                                                &tables.velocity};
  for (std::size_t c = 0; c < 3; ++c) {
    double* cumulative = base + 4 * n * c;
    std::copy(integrals[c]->cumulative.begin(), integrals[c]->cumulative.end(), cumulative);
    std::copy(integrals[c]->derivatives.begin(), integrals[c]->derivatives.end(), cumulative + n);
  }
  std::copy(tables.fraction.begin(), tables.fraction.end(), base + 12 * n);
  std::copy(tables.fraction_derivatives.begin(), tables.fraction_derivatives.end(), base + 13 * n);
  // The angles' terms and their tables sin(s C[v]_j), cos(s C[v]_j) at 17 N + 2 N k.
  const double* velocity = base + 8 * n;
  inputs->angles.clear();
  for (std::size_t k = 0; k < num_angles; ++k) {
    const double psi = (point.phi_degrees[k] + p[tc::kPhi0Het]) * kRadiansPerDegree;
    Angle angle;
    angle.contrast = point.contrast[k];
    angle.offset = point.offset[k];
    angle.phase_per_unit = q * std::cos(psi);
    angle.dphase_dphi0_per_unit = -q * std::sin(psi) * kRadiansPerDegree;
    angle.angle = static_cast<int>(k);
    inputs->angles.push_back(angle);
    double* sin_table = base + 17 * n + 2 * n * k;
    FillVelocityPhaseTables(angle.phase_per_unit, {velocity, n}, sin_table, sin_table + n);
  }
}

}  // namespace homodyne::device_pass
