// The final fit's solution as the result reports it (results.h): the parameters, uncertainties
// and covariance in the full layout (a contrast and an offset per angle), chi2 and dof with the
// reference's effective parameter count (docs/results.md, Degrees of freedom), the convergence
// status, and the warnings on how far to trust them (docs/design.md section 7).
#pragma once

#include <vector>

#include "fit_parameters.h"
#include "optimize/levenberg_marquardt.h"
#include "objective/batched_objective.h"
#include "homodyne/results.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// Fills result.physical, per_angle, covariance_names, covariance, per_angle_mode, chi_squared,
// reduced_chi_squared, degrees_of_freedom and convergence_status, and appends to
// result.warnings (each also logged): the optimiser's own, undetermined parameters (always) and,
// with full_validation (not fast mode), parameters ended on a bound and pairs of physical
// parameters correlated beyond 0.99. lm: the reduced bounds and names the final fit ran with;
// objective: the fit's (its residual count and full layout); phi_degrees: the data's angles;
// result.analysis_mode names the physical parameters.
// Returns the fitted physical parameters, in the model's order.
std::vector<double> RecordSolution(const LevenbergMarquardtSummary& summary,
                                   const LevenbergMarquardtOptions& lm,
                                   const FitParameters& parameters, const ResolvedScaling& scaling,
                                   const BatchedObjective& objective,
                                   const std::vector<double>& phi_degrees, bool full_validation,
                                   FitResult& result);

}  // namespace homodyne
