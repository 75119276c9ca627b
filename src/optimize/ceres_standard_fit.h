// The "standard" strategy (docs/design.md section 3): packed data in memory, the full Jacobian
// stored, Levenberg-Marquardt with parameter bounds solved by Ceres Solver (DENSE_QR). For data
// sets of fewer than about 1e6 points, where storing N x P doubles is cheap.
//
// It minimises exactly the chi2 of docs/design.md section 1 (batched_objective.h): the strict upper
// triangle of every angle, residuals r = (data - model) / sigma, each point counted twice,
// non-finite data points skipped. Ceres sees one residual sqrt(2) r per finite point, so its cost
// (half the sum of squares) is chi2 / 2; every chi2 reported here is in our convention, sum over
// both triangles of r^2, and equals PackedDataObjective::Cost at the same full parameters up to
// rounding.
#pragma once

#include <vector>

#include <Eigen/Dense>

#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// Fits theta_reduced (the parameters of `map`, per_angle_mode.h) to the packed data with Ceres'
// Levenberg-Marquardt (trust region strategy LEVENBERG_MARQUARDT, linear solver DENSE_QR,
// OpenMP's thread count), with the model evaluated at theta_full = map.Expand(theta). Ceres sees
// theta / s, s = Ceres' Jacobi scaling 1 / (1 + |column of J|) at the clipped start rounded to a
// power of two (exact both ways; one extra Jacobian pass), so that a resumed run scales the same.
//
// Inputs:
//   model:        the fitted time grid (N = model.num_times()); must outlive the call.
//   phi_degrees:  one angle per data angle (data angle order).
//   sigma:        the per-point noise, > 0 (optimization.nlsq.sigma).
//   data:         one packed strict upper triangle per angle (dataset.h order,
//                 UpperTriangleSize(N) values each); NaN and +-inf points are skipped.
//   map:          num_full() = model.num_physical() + 2 n_angles (batched_objective.h layout).
//   theta0_reduced: the start, num_reduced() values; values outside the bounds are clipped with
//                 one warning per parameter (as Minimize); a non-finite value ends the run at
//                 once with kFailedNonFinite. A parameter with lower = upper is held there.
//   options:      bounds and names in the reduced layout (both bounds empty = unbounded).
//                 Used: max_iterations (Ceres max_num_iterations), ftol (function_tolerance),
//                 xtol (parameter_tolerance: Minimize's test on theta / s), gtol
//                 (gradient_tolerance: Ceres tests max_i |y_i - Project(y - grad_y chi2/2)_i|
//                 in y = theta / s), initial_damping (initial trust region radius
//                 1 / initial_damping), max_damping (minimum radius 1 / max_damping), callback
//                 (after every Ceres iteration but a resumed run's iteration 0; returning false
//                 stops with kStoppedByCallback; `state` is the state after the last accepted
//                 step or the start: point, trust region radius, counters, chi2 history, with
//                 jtj and jtr empty), resume_state (a callback's `state` from an earlier run
//                 with the same inputs: the run continues from its point with its radius and
//                 the iterations left, and returns what the uninterrupted run returns; theta0
//                 still sets the scale s).
//                 Ignored: trial_evaluation (Ceres always judges a trial by a cost-only pass),
//                 max_consecutive_rejections, validate_numerics (Ceres always rejects
//                 non-finite residuals and Jacobians).
// Resume is exact as far as Ceres is deterministic: its cost sums over residual blocks in thread
// order, so a step whose acceptance or convergence test ties to the last bit could go either way
// in any two runs with more than one thread; the states, steps and our chi2 are exact.
// Throws ConfigError when options.IsValid fails, DataError when no data point is finite,
// std::invalid_argument on inconsistent sizes or values, or a resume_state that is not one of
// this fit (wrong size, no trust region radius, more iterations than max_iterations).
// Memory: Ceres holds the Jacobian (one row of num_reduced doubles per finite point) and its copy
// in the QR system; an allocation failure propagates as std::bad_alloc.
//
// The summary is filled as Minimize fills it: status from Ceres' termination (function,
// parameter, gradient tolerance -> kConvergedFtol/Xtol/Gtol; maximum iterations ->
// kMaxIterations; minimum trust region radius -> kFailedDamping; failed evaluations ->
// kFailedNonFinite; other failures -> kFailedRejections; stopped by the callback ->
// kStoppedByCallback), reason with Ceres' message, iterations = trial steps, passes = Ceres'
// Jacobian evaluations + 2 (the scaling pass at the start, the covariance pass at the result),
// all continued from a resumed state's counters, cost_passes = Ceres' cost-only
// evaluations, chi2 (our convention), theta (reduced), covariance s^2 (J^T J)^-1 at theta with
// s^2 = chi2 / dof by the same Jacobi-scaled eigen-decomposition as Minimize (pseudo-inverse when
// rank-deficient, zero rows and columns for parameters at a bound with the gradient pointing
// out), dof = 2 (finite points) - num_reduced, final_damping = 1 / (final trust region radius).
LevenbergMarquardtSummary FitStandardWithCeres(const LevenbergMarquardtOptions& options,
                                               const HomodyneModel& model,
                                               const std::vector<double>& phi_degrees, double sigma,
                                               const PackedDataObjective::PackedData& data,
                                               const ScalingMap& map,
                                               const Eigen::VectorXd& theta0_reduced);

}  // namespace homodyne
