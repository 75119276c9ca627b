// The homodyne modes' device inputs at a point (homodyne_device.h, HomodyneDeviceMode::MakeInputs):
// the tables of the CPU model (ComputeHomodyneRateTables), so that the device passes start from
// bitwise the same numbers, and the angles' coefficients as the CPU kernel's (docs/model.md, Shear
// factor). Compiled with contraction off (src/model/device/device_point.h).
#include "model/homodyne/homodyne_device.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numbers>
#include <span>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/homodyne/homodyne_point.h"

namespace homodyne::device_pass {

template <bool kLaminar>
void HomodyneDeviceMode<kLaminar>::MakeInputs(const DevicePoint& point,
                                              DeviceInputs<Angle>* inputs) {
  constexpr double kRadiansPerDegree = std::numbers::pi / 180.0;
  HOMODYNE_CHECK(point.evaluation != nullptr && inputs != nullptr);
  const HomodyneModel& model = point.evaluation->model();
  HOMODYNE_CHECK(model.mode() == (kLaminar ? AnalysisMode::kLaminarFlow : AnalysisMode::kStatic));
  HOMODYNE_CHECK(model.num_point_derivatives() + 1 == Shape::kGramSize);
  const std::span<const double> parameters = point.evaluation->physical_parameters();
  const std::size_t n = static_cast<std::size_t>(model.num_times());
  inputs->scalars.num_times = model.num_times();
  inputs->scalars.values[0] = model.geometry().DiffusionPrefactor();

  // The tables in the layout of TablesAt.
  const HomodyneRateTables tables = ComputeHomodyneRateTables(model, parameters);
  inputs->tables.assign((kLaminar ? 8 : 4) * n, 0.0);
  double* base = inputs->tables.data();
  std::copy(tables.diffusion.begin(), tables.diffusion.end(), base);
  std::copy(tables.diffusion_derivatives.begin(), tables.diffusion_derivatives.end(), base + n);
  if constexpr (kLaminar) {
    std::copy(tables.shear.begin(), tables.shear.end(), base + 4 * n);
    std::copy(tables.shear_derivatives.begin(), tables.shear_derivatives.end(), base + 5 * n);
  }

  const double sinc_prefactor = model.geometry().SincPrefactor();
  inputs->angles.clear();
  for (int k = 0; k < point.num_angles; ++k) {
    Angle angle;
    angle.contrast = point.contrast[k];
    angle.offset = point.offset[k];
    if constexpr (kLaminar) {
      const double psi = (parameters[kPhi0] - point.phi_degrees[k]) * kRadiansPerDegree;
      angle.phase_per_step = sinc_prefactor * std::cos(psi);
      angle.dphase_dphi0_per_step = -sinc_prefactor * std::sin(psi) * kRadiansPerDegree;
    }
    inputs->angles.push_back(angle);
  }
}

template struct HomodyneDeviceMode<false>;
template struct HomodyneDeviceMode<true>;

}  // namespace homodyne::device_pass
