// The homodyne modes' device inputs at a point (homodyne_device.h, HomodyneDeviceMode::MakeInputs):
// the tables of the CPU model (ComputeHomodyneRateTables), so that the device passes start from
// bitwise the same numbers, and the angles' coefficients as the CPU kernel's (docs/model.md, Shear
// factor). Compiled with contraction off (src/model/device/device_point.h).
#include "model/homodyne/homodyne_device.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <span>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/homodyne/homodyne_pass_variant.h"
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
  // The static full pass through per-frame sums: under the linear loss, where the CPU's predicate
  // holds (StaticRowSums: its sums, or none), from the same tables as the CPU pass's.
  inputs->row_sums.clear();
  if (!kLaminar && point.loss_function == 0) {
    inputs->row_sums =
        StaticRowSums(tables.diffusion, tables.diffusion_derivatives, inputs->scalars.values[0]);
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

template <bool kLaminar>
void HomodyneDeviceMode<kLaminar>::GramFromDataSums(const Tables& tables, const double* row_sums,
                                                    const Angle& angle, int row_begin, int row_end,
                                                    const float* host_data, const double* data_sums,
                                                    double* triangle, int64_t* finite) {
  HOMODYNE_CHECK(!kLaminar && row_sums != nullptr);
  using pass_kernel::kStaticG2;
  using pass_kernel::kStaticG2D;
  using pass_kernel::kStaticG4;
  using pass_kernel::kStaticG4D;
  using pass_kernel::kStaticG4DD;
  using pass_kernel::kStaticRowSums;
  const int n = tables.num_times;
  const std::span<const double> diffusion(tables.cumulative_diffusion, static_cast<size_t>(n));
  const std::span<const double> derivatives(tables.cumulative_diffusion_derivatives,
                                            3 * static_cast<size_t>(n));
  // The rows' sums, and the points they count.
  double rows[kStaticRowSums] = {};
  int64_t points = 0;
  for (int i = row_begin; i < row_end && i < n - 1; ++i) {
    const double* row = row_sums + static_cast<int64_t>(i) * kStaticRowSums;
    for (int m = 0; m < kStaticRowSums; ++m) rows[m] += row[m];
    points += n - 1 - i;
  }
  // The non-finite points' terms, which the row sums hold (looked for only when the count says
  // there are some).
  const double count = data_sums[kStaticDataCount];
  double corrections[kStaticRowSums] = {};
  if (count < static_cast<double>(points)) {
    HOMODYNE_CHECK(host_data != nullptr);
    int64_t p = 0;
    for (int i = row_begin; i < row_end && i < n - 1; ++i) {
      for (int j = i + 1; j < n; ++j, ++p) {
        if (!IsFiniteValue(static_cast<double>(host_data[p]))) {
          AddStaticPointRowSums(diffusion, derivatives, tables.diffusion_prefactor, i, j,
                                corrections);
        }
      }
    }
  }
  // Without a finite point J^T J is zero exactly (not the rounding the subtraction leaves).
  const bool any_finite = count > 0.0;
  double total[kStaticRowSums];
  for (int m = 0; m < kStaticRowSums; ++m) total[m] = any_finite ? rows[m] - corrections[m] : 0.0;
  // Entry (r, c), c <= r, of the triangle; columns D0, alpha, D_offset, contrast, offset, e.
  auto at = [triangle](int r, int c) -> double& { return triangle[r * (r + 1) / 2 + c]; };
  for (int entry = 0; entry < Shape::kTriangle; ++entry) triangle[entry] = 0.0;
  const double a = -2.0 * angle.contrast * tables.diffusion_prefactor;  // J_p = a g1^2 D_p
  int pq = kStaticG4DD;
  for (int q = 0; q < 3; ++q) {
    for (int p = q; p < 3; ++p) at(p, q) = (a * a) * total[pq++];
    at(3, q) = a * total[kStaticG4D + q];
    at(4, q) = a * total[kStaticG2D + q];
    at(5, q) = a * data_sums[kStaticDataUD + q];
  }
  at(3, 3) = total[kStaticG4];
  at(4, 3) = total[kStaticG2];
  at(5, 3) = data_sums[kStaticDataU];
  at(4, 4) = count;
  at(5, 4) = data_sums[kStaticDataE];
  at(5, 5) = data_sums[kStaticDataE2];
  *finite = static_cast<int64_t>(count);
}

template struct HomodyneDeviceMode<false>;
template struct HomodyneDeviceMode<true>;

}  // namespace homodyne::device_pass
