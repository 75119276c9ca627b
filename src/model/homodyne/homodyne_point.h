// The homodyne modes, static and laminar_flow (docs/model.md): their ModePoint (mode_point.h).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "homodyne/model.h"
#include "model/mode_point.h"

namespace homodyne {

// The model of a static or laminar_flow HomodyneModel at its physical parameters (3 or 7 values,
// PhysicalParameterNames order, phi0 in degrees). The mode catalog's builder for both modes.
std::unique_ptr<const ModePoint> MakeHomodynePoint(const HomodyneModel& model,
                                                   std::span<const double> physical_parameters);

// The O(N) tables of a static or laminar_flow point (docs/model.md, Rates, The time integrals):
// the cumulative integrals of the diffusion rate and (laminar_flow) of the shear rate, each with
// its derivatives with respect to (amplitude, exponent, offset). Computed once per point by the
// CPU model and by the device passes' inputs (homodyne_device.cc), which so start from bitwise
// the same tables.
struct HomodyneRateTables {
  std::vector<double> diffusion;              // C_D, N values
  std::vector<double> diffusion_derivatives;  // 3 N: d C_D / d(D0, alpha, D_offset)
  std::vector<double> shear;                  // laminar_flow: C_G, N values; static: empty
  std::vector<double> shear_derivatives;      // laminar_flow: 3 N; static: empty
};
HomodyneRateTables ComputeHomodyneRateTables(const HomodyneModel& model,
                                             std::span<const double> physical_parameters);

}  // namespace homodyne
