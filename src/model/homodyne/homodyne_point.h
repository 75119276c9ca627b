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

// The static mode's per-row sums of the full pass through per-frame sums (docs/design.md section
// 2, The static full pass through per-frame sums; layout pass_kernel::kStaticRowSums,
// homodyne_pass_variant.h: N rows of 14 values, row N - 1's zero) from C_D (N values), its
// derivatives (3 N) and the diffusion prefactor w, where the per-frame form holds on the whole
// grid; empty where it does not (then the full pass builds the Gram point by point). The one
// predicate and sweep of the CPU pass (HomodynePass) and of the device passes' inputs
// (homodyne_device.cc), so both take the per-frame form at the same points, from the same sums.
// Call it under the linear loss only (a robust loss rescales every point).
std::vector<double> StaticRowSums(std::span<const double> cumulative_diffusion,
                                  std::span<const double> cumulative_diffusion_derivatives,
                                  double diffusion_prefactor);

// Adds the point (i, j)'s terms of those row sums (i < j) to sums[0, 14): what a non-finite data
// point contributes to them and the Gram must not (the device passes' subtraction,
// homodyne_device.cc; the CPU pass body has its own copy, homodyne_pass_variant.cc AddStaticPoint).
void AddStaticPointRowSums(std::span<const double> cumulative_diffusion,
                           std::span<const double> cumulative_diffusion_derivatives,
                           double diffusion_prefactor, int i, int j, double* sums);

}  // namespace homodyne
