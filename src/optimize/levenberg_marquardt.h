// The Levenberg-Marquardt core shared by the large, chunked and streaming strategies
// (docs/design.md section 4). It works on accumulated normal equations only, so the Jacobian is
// never stored. The problem it minimises, its normal equations and their sign convention (used
// everywhere in this header): src/objective/least_squares_problem.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Dense>

#include "checkpoint/checkpoint_state.h"
#include "homodyne/fit_events.h"
#include "objective/least_squares_problem.h"

namespace homodyne {

// How a trial point is judged (docs/design.md section 4).
enum class TrialEvaluation {
  // A full Accumulate at the trial point; if the step is accepted it is the next iteration's
  // normal equations, so an accepted step costs one pass and a rejected one one pass.
  kSpeculativeFullPass,
  // A Cost pass at the trial point, then an Accumulate only if the step is accepted: an accepted
  // step costs two passes (one cheap), a rejected one a single cheap pass.
  kCostOnlyPass,
};

// What the per-iteration callback sees: the public part (IterationProgress, fit_events.h) and
// the point and state a checkpoint saves. Iteration 0 is the starting point.
struct LevenbergMarquardtIteration : IterationProgress {
  Eigen::VectorXd theta;  // the current point (after this iteration)
  // The core's full state after this iteration: what a checkpoint saves so that Minimize can
  // continue from here (LevenbergMarquardtOptions::resume_state) exactly as if never stopped.
  LevenbergMarquardtState state;
  // True when this iteration ended the fit (a convergence test or a failure stopped it). `state`
  // then cannot continue it as if never stopped: the tests that stopped it (ftol, xtol) compare
  // with the step just taken, which the state does not hold, so a run resumed from it would take
  // another step. Checkpoints skip such a state (src/pipeline/fit_checkpoints.cc).
  bool ended_fit = false;
};

// Defaults follow optimization.nlsq (config.h NlsqOptions) and docs/design.md section 4.
struct LevenbergMarquardtOptions {
  int max_iterations = 100;  // optimization.nlsq.max_iterations: trial steps (each one pass), > 0
  double ftol = 1e-8;  // optimization.nlsq.tolerance: stop when an accepted step with gain ratio
                       // > 0.25 lowers chi2 by <= ftol * chi2 (relative), > 0
  double xtol = 1e-8;  // optimization.nlsq.xtol: stop when |step| <= xtol * (|theta| + xtol)
                       // (2-norms, as scipy), > 0. Tested on accepted steps and, as scipy's
                       // trf, on rejected ones (no smaller step can lower chi2 then)
  double gtol = 1e-8;  // optimization.nlsq.gtol: stop when max_i |g_i| / sqrt(H_ii * chi2) <=
                       // gtol over the free parameters (MINPACK's cosine between r and column i of
                       // J; scale invariant; 0 when chi2 = 0), > 0
  // docs/design.md section 4: ftol/xtol may stop the fit only when the Gauss-Newton step is <=
  // this many standard errors; 0 disables (optimization.nlsq.statistical_tolerance, >= 0). The
  // step is measured at the point the fit would return (LevenbergMarquardtSummary::
  // final_step_standard_errors); while it is larger the loop goes on, one pass per trial.
  // gtol, max_iterations and the failures are not affected, and neither is xtol on a rejected
  // trial (no smaller step lowers chi2 there: the fit stops as before, the reason says so).
  double statistical_tolerance = 1e-3;
  double initial_damping = 1e-3;  // mu_0, relative to diag(J^T J) (Marquardt scaling), > 0
  double max_damping = 1e16;      // fail (kFailedDamping) when mu exceeds this, > initial_damping
  int max_consecutive_rejections = 16;  // fail (kFailedRejections) after this many in a row, > 0
  TrialEvaluation trial_evaluation = TrialEvaluation::kSpeculativeFullPass;
  // Bounds per parameter (may be -inf / +inf); both empty = unbounded; else both of length P.
  Eigen::VectorXd lower_bounds;  // parameter_space.bounds[NAME].min
  Eigen::VectorXd upper_bounds;  // parameter_space.bounds[NAME].max
  // Names for messages and reports; empty = "#i". Else of length P.
  std::vector<std::string> parameter_names;
  // Full validation (docs/design.md section 7): theta, J^T J and J^T r checked finite at every
  // accepted point and at the start. Fast mode turns it off; non-finite trial chi2 is rejected
  // either way.
  // Hold a parameter on its bound when it takes part in a direction J^T J does not determine
  // (HoldBoundParametersOnUndeterminedDirections, levenberg_marquardt.cc): for modes whose model
  // has exact degeneracies (ModeDefinition::exact_degeneracies, src/model/mode_catalog.h). Off
  // for the homodyne modes, whose fits stay bitwise what they were.
  bool hold_bound_parameters_on_undetermined_directions = false;
  bool validate_numerics = true;
  // Called after iteration 0 and after every trial (progress lines, checkpoints). Return false to
  // stop the run (status kStoppedByCallback), e.g. on a signal (docs/design.md section 6); may
  // be empty.
  std::function<bool(const LevenbergMarquardtIteration&)> callback;
  // Resume (docs/design.md section 6): continue from this state (saved by the callback of an
  // earlier run with the same options and problem) instead of starting at theta0, which is then
  // ignored. The run returns bitwise what the uninterrupted one would have.
  std::optional<LevenbergMarquardtState> resume_state;

  // True if every field obeys its rule; else false and *error (if not null) names the YAML path,
  // the value and the rule, e.g. "optimization.nlsq.max_iterations = -3: must be > 0".
  bool IsValid(std::string* error) const;
};

enum class LevenbergMarquardtStatus {
  kNotRun,
  kConvergedFtol,      // relative chi2 change below ftol, GN step within statistical_tolerance
  kConvergedXtol,      // relative step below xtol (accepted: GN step within statistical_tolerance)
  kConvergedGtol,      // scaled gradient below gtol (includes chi2 = 0 and all parameters frozen)
  kMaxIterations,      // max_iterations trials without meeting a tolerance
  kFailedNonFinite,    // non-finite chi2/gradient/parameters at an accepted point or the start
  kFailedDamping,      // damping exceeded max_damping: no step lowers chi2
  kFailedRejections,   // max_consecutive_rejections trials in a row were rejected
  kStoppedByCallback,  // the callback asked to stop
};

// "not run", "converged (ftol)", ..., "failed (non-finite)", ...
std::string_view ToString(LevenbergMarquardtStatus status);
// kConvergedFtol, kConvergedXtol or kConvergedGtol.
bool IsConverged(LevenbergMarquardtStatus status);

struct LevenbergMarquardtSummary {
  LevenbergMarquardtStatus status = LevenbergMarquardtStatus::kNotRun;
  std::string reason = "not run";  // one sentence: why it stopped
  int iterations = 0;              // trials made (each one pass of Cost or Accumulate)
  int accepted_steps = 0;
  int rejected_steps = 0;
  int64_t passes = 0;          // full Accumulate passes, including the starting point's
  int64_t cost_passes = 0;     // Cost-only passes
  double initial_chi2 = -1.0;  // at the (clipped) start; -1 = not run
  double final_chi2 = -1.0;    // at theta; -1 = not run
  Eigen::VectorXd theta;       // final parameters (the best point found)
  // s^2 (J^T J)^-1 at theta, s^2 = chi2 / dof (docs/design.md section 4). Computed on the
  // Jacobi-scaled free block; when it is singular (rank-deficient at relative eigenvalue 1e-12)
  // its pseudo-inverse is used and covariance_pseudo_inverse is set, and each dropped direction
  // gets the smallest variance it can have, 1 / cutoff (scaled_pseudo_inverse.h), instead of 0:
  // the uncertainties of undetermined_parameters are then lower bounds, not estimates. Parameters
  // frozen at a bound at the end (parameters_at_bound) are released for it, as the reference
  // reports them: their uncertainty is what the data give them, never 0; only parameters with
  // equal bounds have zero rows and columns.
  Eigen::MatrixXd covariance;
  Eigen::VectorXd uncertainties;  // sqrt(diag(covariance))
  bool covariance_pseudo_inverse = false;
  // Free parameters the data do not determine: J^T J has no curvature along them (a zero
  // column of J) or most of their variance comes from a dropped direction. Ascending indices.
  std::vector<int> undetermined_parameters;
  int64_t dof = 0;                       // num_residuals - num_parameters (>= 1 used for s^2)
  double reduced_chi2 = -1.0;            // chi2 / max(dof, 1); -1 = not run
  std::vector<int> parameters_at_bound;  // frozen at the end: at a bound, gradient pointing out
  std::vector<std::string> warnings;     // clipped start values, dof <= 0, ...
  double final_damping = 0.0;
  std::vector<double> chi2_history;  // chi2 at theta after each iteration, iteration 0 first
  bool resumed = false;              // started from options.resume_state
  double seconds = 0.0;              // wall time of Minimize (this run only, when resumed)
  // d at theta (docs/design.md section 4); -1 = not run (or chi2, J^T J or J^T r not finite at
  // theta). The Gauss-Newton step delta = -H^-1 g over the free parameters, measured with the
  // covariance C = s^2 H^-1: d = sqrt(delta^T C^-1 delta) = sqrt(g^T H^-1 g / s^2),
  // s^2 = chi2 / max(dof, 1), H^-1 the same (pseudo-)inverse of the Jacobi-scaled free block as
  // the covariance. How far, in standard errors, one more full step would still move theta; 0
  // when no parameter is free.
  double final_step_standard_errors = -1.0;

  // One line for logs: status, iterations, passes, chi2 start -> end, reduced chi2, the final
  // Gauss-Newton step in standard errors ("GN step 3.2e-05 SE"), time.
  std::string BriefReport() const;
  bool IsConverged() const { return homodyne::IsConverged(status); }
};

// Nielsen's damping update (H. B. Nielsen, "Damping parameter in Marquardt's method", IMM DTU
// 1999; Madsen, Nielsen, Tingleff, "Methods for non-linear least squares problems", 2004,
// eq. 3.16):
//   accepted step with gain ratio rho: mu *= max(1/3, 1 - (2 rho - 1)^3), nu = 2
//   rejected step:                     mu *= nu, nu *= 2
// mu never falls below 1e-20 (smaller only loses digits). Marquardt-scaled, so mu is dimensionless.
class NielsenDamping {
 public:
  explicit NielsenDamping(double initial_mu, double initial_nu = 2.0)
      : mu_(initial_mu), nu_(initial_nu) {}
  // Requires rho > 0 (an accepted step).
  void OnAccepted(double gain_ratio);
  void OnRejected();
  double mu() const { return mu_; }
  double nu() const { return nu_; }

 private:
  double mu_;
  double nu_;
};

// Covariance at a solution (docs/design.md section 4), shared by the LM core and the Ceres
// standard strategy: parameters at a bound whose gradient points out are listed in
// summary.parameters_at_bound and released for the covariance (only equal bounds give zero rows
// and columns); that block of J^T J is Jacobi-scaled
// and inverted through its eigen-decomposition, eigenvalues below 1e-12 times the largest
// dropped (summary.covariance_pseudo_inverse) and given their lower-bound variance
// (summary.undetermined_parameters). Fills summary.covariance, uncertainties and
// final_step_standard_errors (over the free parameters only; 0 when none is free); s2 = chi2 /
// dof. Requires finite equations; where their scaled block still overflows, the covariance and
// uncertainties are left empty (none) and a warning says so.
void ComputeCovarianceAtSolution(const NormalEquations& equations, const Eigen::VectorXd& theta,
                                 const Eigen::VectorXd& lower, const Eigen::VectorXd& upper,
                                 double s2, LevenbergMarquardtSummary& summary);

// Minimises chi2(theta) of the problem from theta0 (docs/design.md section 4). Throws ConfigError
// when options.IsValid fails. Bounds and names, if given, must have length
// problem.num_parameters() and theta0 that length too (checked: programming error otherwise). A
// theta0 outside the bounds is clipped with one warning per parameter. Deterministic: the same
// inputs give bitwise the same summary (apart from times) when the problem's passes are
// deterministic.
LevenbergMarquardtSummary Minimize(const LevenbergMarquardtOptions& options,
                                   LeastSquaresProblem& problem, Eigen::VectorXd theta0);

}  // namespace homodyne
