// How the standard strategy names the end of a Ceres run (private to src/optimize and its tests):
// our status from Ceres' termination type, the iterations it recorded and what the run saw, never
// from the message, which is for people.
#pragma once

#include <ceres/iteration_callback.h>
#include <ceres/types.h>

#include <optional>

#include <Eigen/Dense>

#include "optimize/levenberg_marquardt.h"

namespace homodyne::fit_internal {

// What decides the status of one Ceres run (ceres::Solver::Summary, Solver::Options and facts of
// the run Ceres does not record). Points are Ceres' (scaled) parameters.
struct CeresTermination {
  ceres::TerminationType type = ceres::FAILURE;
  // The last of Solver::Summary::iterations; none when Ceres recorded none (nothing to optimise,
  // or its first evaluation failed).
  std::optional<ceres::IterationSummary> last_iteration;
  bool accepted_step = false;  // some recorded iteration after the 0th was successful
  // Solver::Options of the run.
  double gradient_tolerance = 0.0;
  double parameter_tolerance = 0.0;
  double min_trust_region_radius = 0.0;
  bool bounded = false;            // a free parameter has a finite bound (Ceres: is_constrained)
  Eigen::VectorXd result;          // the point Ceres returned (its best)
  Eigen::VectorXd last_evaluated;  // the point of Ceres' last evaluation
  // Ceres' last evaluation asked for the Jacobian, and a residual or Jacobian entry there is not
  // finite (Ceres fails such an evaluation).
  bool jacobian_evaluation_failed = false;
};

// Ceres 2.1 reports every tolerance as CONVERGENCE (internal/ceres/trust_region_minimizer.cc):
// the gradient tolerance (on a successful step) and the minimum trust region radius, in that
// order, stop it after an iteration it records, so its last IterationSummary shows them; the
// parameter and function tolerances stop it on the trial step of an iteration it does not record,
// the parameter test first: |x - trial| <= xtol (|x| + xtol), the trial being the last point
// evaluated (cost only) and |x| -1 ("not computed") before the first accepted step of a problem
// without bounds. NO_CONVERGENCE: the iteration limit. FAILURE: an evaluation that failed (at the
// start or an accepted point: kFailedNonFinite) or anything else Ceres gives up on (consecutive
// invalid steps, the linear solver: kFailedRejections). USER_*: our callback stopped it.
LevenbergMarquardtStatus StatusOfCeresTermination(const CeresTermination& termination);

}  // namespace homodyne::fit_internal
