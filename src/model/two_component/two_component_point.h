// The two-component (heterodyne) mode of the successor package xpcsjax (docs/model.md,
// Two-component mode): its ModePoint (mode_point.h) and the tables its pass body reads.
//
//   p = (D0_ref, alpha_ref, D_offset_ref, D0_sample, alpha_sample, D_offset_sample,
//        v0, v_beta, v_offset, f0, f1, f2, f3, phi0_het)
//   pw(t, e) = 0 (t <= 0), 1e-10^e (0 < t <= 1e-10), t^e (t > 1e-10)
//   J_c(t) = max(D0_c pw(t, alpha_c) + D_offset_c, 0)   c = ref, sample
//   v(t) = v0 pw(t, v_beta) + v_offset
//   C[y]_0 = 0, C[y]_k = dt sum_{m<k} (y_m + y_{m+1}) / 2
//   H_c(i, j) = exp(clip(-q^2/2 sqrt((C[J_c]_j - C[J_c]_i)^2 + 1e-12), -700, 0))
//   Phi(i, j) = q cos((phi + phi0_het) pi/180) (C[v]_j - C[v]_i)
//   x_s(t) = soft01(f0 exp(clip(f1 (t - f2), -700, 700)) + f3), x_r = 1 - x_s
//   soft01(z) = 1 - sp(50 (1 - sp(50 z) / 50)) / 50, sp(z) = log(1 + e^z)
//   A = x_r,i x_r,j, B = x_s,i x_s,j
//   g = (A^2 H_r^2 + B^2 H_s^2 + 2 A B H_r H_s cos Phi) / max(N_i N_j, 1e-10), N = x_s^2 + x_r^2
//   c2 = offset + contrast g
// t is the model's time grid (HomodyneModel::times_seconds) and dt the geometry's dt_seconds,
// given separately as in the successor.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "homodyne/model.h"
#include "model/mode_point.h"

namespace homodyne {

// Index of each physical parameter in the two-component parameter vector.
namespace two_component {
enum Index : int {
  kD0Ref = 0,
  kAlphaRef = 1,
  kDOffsetRef = 2,
  kD0Sample = 3,
  kAlphaSample = 4,
  kDOffsetSample = 5,
  kV0 = 6,
  kVBeta = 7,
  kVOffset = 8,
  kF0 = 9,
  kF1 = 10,
  kF2 = 11,
  kF3 = 12,
  kPhi0Het = 13,
  kNumPhysical = 14,
};
// Safeguards of the successor's kernel (docs/model.md, Two-component mode).
inline constexpr double kPowerTimeFloor = 1e-10;    // pw's floor of t
inline constexpr double kSmoothAbsEpsilon = 1e-12;  // sqrt(x^2 + 1e-12)
inline constexpr double kLogTransportMin = -700.0;  // clip of log H
inline constexpr double kExpArgumentLimit = 700.0;  // clip of the fraction's exponent
inline constexpr double kSoftClipSharpness = 50.0;  // soft01's sharpness
inline constexpr double kNormalizationFloor = 1e-10;
}  // namespace two_component

// The O(N) tables of the model at p (the formulas above): C[J_ref], C[J_sample] and C[v] with
// their derivatives with respect to (amplitude, exponent, offset), and x_s with its derivatives
// with respect to (f0, f1, f2, f3). Computed once per point by the CPU model and by the device
// passes' inputs (two_component_device.cc), which so start from bitwise the same tables.
struct TwoComponentTables {
  struct Integral {
    std::vector<double> cumulative;   // C[y], N values
    std::vector<double> derivatives;  // 3 N: d C[y] / d(amplitude, exponent, offset)
  };
  Integral reference, sample, velocity;
  std::vector<double> fraction;              // x_s(t), N values
  std::vector<double> fraction_derivatives;  // 4 N: d x_s / d(f0, f1, f2, f3)
};
TwoComponentTables ComputeTwoComponentTables(const HomodyneModel& model,
                                             std::span<const double> physical_parameters);

// One angle's tables sin(s C[v]_j) and cos(s C[v]_j), j < velocity.size() (s: the angle's phase
// per unit of C[v]), into sin_table and cos_table (velocity.size() values each): s C[v]_j =
// hi + lo exactly (lo from an FMA), sin(hi + lo) = sin(hi) + lo cos(hi), cos(hi + lo) =
// cos(hi) - lo sin(hi) (|lo| <= ulp(hi) / 2: the next terms are below the rounding of the
// values). sin(hi) and cos(hi) from vector_math::SinCos in the active instruction-set level's
// vectorised loop (ActiveIsaLevel; a few ulp, as the laminar tables), or libm where a phase
// exceeds its domain (vector_math::kSinCosMaxArgument) or is not finite. The CPU model and the
// device passes' inputs both fill theirs here, bitwise the same.
void FillVelocityPhaseTables(double s, std::span<const double> velocity, double* sin_table,
                             double* cos_table);

// The model of a two_component HomodyneModel at its 14 physical parameters. The mode catalog's
// builder (mode_catalog.h).
std::unique_ptr<const ModePoint> MakeTwoComponentPoint(const HomodyneModel& model,
                                                       std::span<const double> physical_parameters);

}  // namespace homodyne
