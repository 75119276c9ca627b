// The phi0 mirror check of a laminar_flow fit (docs/results.md, The phi0 mirror check): where the
// angles of the data cannot tell phi0 from its mirror image, one more local fit from the mirror
// and, when the two tie, a warning that names both.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "homodyne/results.h"
#include "objective/batched_objective.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// Angles closer than this (degrees, modulo 90) count as one for the mirror condition.
inline constexpr double kPhi0MirrorAngleToleranceDegrees = 0.5;

// The mirror of phi0 that the angles cannot tell from it, or none. The shear factor depends on
// |cos(phi0 - phi_k)| only (docs/model.md, Shear factor (laminar_flow)), so phi0' = 2a - phi0
// gives every angle the same model exactly when 2 phi_k = 2a modulo 180 for every k, that is
// when all the angles agree modulo 90 (within kPhi0MirrorAngleToleranceDegrees): {0, 90},
// {45, 135, -45}, a single angle. Then a is their mean modulo 90 and the mirror is defined
// modulo 180; the value returned is the one of 2a - phi0 + m 180 (integer m) inside [lower,
// upper] nearest to phi0, or none when none is inside (the bounds alone then pick the sign), or
// when the angles disagree modulo 90 (e.g. 0, 30, 90: the data tell phi0 from -phi0).
// `outside_bounds`, when not null, is set to the mirror 2a - phi0 nearest to the bounds when the
// angles are symmetric but no mirror is inside them (NaN otherwise).
std::optional<double> Phi0Mirror(const std::vector<double>& phi_degrees, double phi0, double lower,
                                 double upper, double* outside_bounds = nullptr);

// What the check found, before the result is recorded.
struct Phi0MirrorFinding {
  double phi0 = 0.0;          // the fit's value
  double cost = 0.0;          // the final fit's chi2 (its robust cost under a robust loss)
  double mirror_phi0 = 0.0;   // where the mirror fit ended
  double mirror_start = 0.0;  // where it started (Phi0Mirror)
  double mirror_cost = 0.0;   // its chi2 (robust cost)
  double noise_scale = 1.0;   // the final fit's reduced chi2 (>= tiny): one unit of chi2 noise
  std::string status;         // the mirror fit's LM status
  int iterations = 0;
  int64_t passes = 0;
  std::string angles;  // the data's angles as text, "0, 90"
  // |cost - mirror_cost| / noise_scale <= 1: the data do not prefer either.
  bool tie = false;
};

// After the final fit `solution` (reduced layout, options `lm`: bounds and names) of a
// laminar_flow fit: when Phi0Mirror gives a mirror inside phi0's bounds (phi0 fitted, not fixed),
// one local fit of `objective` (through `map`) from the solution with phi0 at the mirror, the
// other parameters where they are (the model is the same there), and the finding. None when the
// mode has no phi0, phi0 is held, the angles tell the two apart, the mirror lies outside the
// bounds or within one standard error (or 1e-3 degrees) of phi0 (an info line says which of the
// last two), the solution is empty, or the mirror fit was stopped by a signal (`stopped` set).
// The local fit has lm's tolerances and a callback that only watches for signals.
std::optional<Phi0MirrorFinding> CheckPhi0Mirror(BatchedObjective& objective, const ScalingMap& map,
                                                 const LevenbergMarquardtOptions& lm,
                                                 const LevenbergMarquardtSummary& solution,
                                                 const std::vector<double>& phi_degrees,
                                                 bool* stopped = nullptr);

// Records `finding` in result.phi0_mirror (the uncertainty of both values: the result's phi0
// uncertainty, the same curvature by symmetry) and, on a tie, a warning naming both values and
// their chi2 (logged and added to result.warnings); otherwise one info line.
void RecordPhi0Mirror(const Phi0MirrorFinding& finding, FitResult& result);

}  // namespace homodyne
