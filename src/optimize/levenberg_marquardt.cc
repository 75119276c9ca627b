// The Levenberg-Marquardt core (docs/design.md section 4): Marquardt-scaled damping, gain-ratio
// acceptance, Nielsen's damping update, bounds by projection with an active set. One trial step
// per iteration; each trial costs exactly one pass (Cost or speculative Accumulate), plus one
// Accumulate after an accepted step in kCostOnlyPass mode.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "optimize/bounds.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/number_text.h"
#include "optimize/scaled_pseudo_inverse.h"

namespace homodyne {
namespace {

// Marquardt scaling uses D_ii = max(H_ii, floor) with floor = this times max_j H_jj, so that a
// parameter the data do not constrain (H_ii = 0) is still damped instead of making the damped
// system singular.
constexpr double kDiagonalFloorRelative = 1e-12;
// Nielsen's update can shrink mu geometrically; below this it only loses digits.
constexpr double kMinDamping = 1e-20;

std::string FormatShort(double value) {
  std::ostringstream out;
  out.precision(4);
  out << value;
  return out.str();
}

bool IsPositiveFinite(double value) { return std::isfinite(value) && value > 0.0; }

// Parameters a step may move (docs/design.md section 4 active set): all but those at a bound whose
// descent direction -g_i points out of the box.
std::vector<int> FreeParameters(const Eigen::VectorXd& jtr, const Eigen::VectorXd& theta,
                                const Eigen::VectorXd& lower, const Eigen::VectorXd& upper) {
  std::vector<int> free;
  for (int i = 0; i < static_cast<int>(theta.size()); ++i) {
    const double g = jtr[i];
    const bool frozen = (theta[i] <= lower[i] && g > 0.0) || (theta[i] >= upper[i] && g < 0.0);
    if (!frozen) free.push_back(i);
  }
  return free;
}

// Removes from `free` each parameter that sits on a bound and takes part in a direction the
// normal equations do not determine (an eigenvalue of the Jacobi-scaled H_FF below
// kPseudoInverseRcond times the largest, with a component of at least a tenth of the
// eigenvector's largest on it). Such a parameter is interchangeable with free ones: two_component's
// f0 and f2 enter only as f0 exp(-f1 f2), so with f2 on its bound f0 alone can take every value
// of the product. Left free, the bound parameter's gradient is zero up to rounding, its freezing
// flips from one iteration to the next, and each flip changes the step: on
// configs/simulate_two_component.yaml (f2 ends on its bound) the final fit crawled for 960
// iterations, against 1 when f2 is held (docs/design.md section 4). No change where H_FF
// determines every direction or no free parameter is on a bound. Applied when
// LevenbergMarquardtOptions::hold_bound_parameters_on_undetermined_directions says so.
void HoldBoundParametersOnUndeterminedDirections(const Eigen::MatrixXd& jtj,
                                                 const Eigen::VectorXd& theta,
                                                 const Eigen::VectorXd& lower,
                                                 const Eigen::VectorXd& upper,
                                                 std::vector<int>& free) {
  const auto on_bound = [&](int i) { return theta[i] <= lower[i] || theta[i] >= upper[i]; };
  if (std::none_of(free.begin(), free.end(), on_bound)) return;
  const int n = static_cast<int>(free.size());
  Eigen::VectorXd scale(n);
  for (int a = 0; a < n; ++a) {
    const double diagonal = jtj(free[a], free[a]);
    scale[a] = diagonal > 0.0 ? 1.0 / std::sqrt(diagonal) : 0.0;
  }
  Eigen::MatrixXd scaled(n, n);
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) scaled(a, b) = scale[a] * jtj(free[a], free[b]) * scale[b];
  }
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(scaled);
  if (eigen.info() != Eigen::Success || !(eigen.eigenvalues()[n - 1] > 0.0)) return;
  const double cutoff = kPseudoInverseRcond * eigen.eigenvalues()[n - 1];
  std::vector<bool> hold(static_cast<size_t>(n), false);
  for (int k = 0; k < n && eigen.eigenvalues()[k] < cutoff; ++k) {
    const Eigen::VectorXd v = eigen.eigenvectors().col(k).cwiseAbs();
    for (int a = 0; a < n; ++a) {
      if (on_bound(free[a]) && v[a] >= 0.1 * v.maxCoeff()) hold[static_cast<size_t>(a)] = true;
    }
  }
  std::vector<int> kept;
  for (int a = 0; a < n; ++a) {
    if (!hold[static_cast<size_t>(a)]) kept.push_back(free[a]);
  }
  if (!kept.empty()) free = std::move(kept);
}

// d = sqrt(g_F^T H_FF^-1 g_F / s2), the Gauss-Newton step in standard errors
// (levenberg_marquardt.h, LevenbergMarquardtSummary::final_step_standard_errors), as
// (D g_F)^T S^+ (D g_F) / s2. A gradient component along a dropped eigenvector does not count: no
// step along it is determined by the data. 0 when nothing is free or g_F^T H^-1 g_F = 0 (chi2 = 0
// included); +inf when that is positive but s2 is 0.
// The free block H_FF of J^T J and its Jacobi-scaled pseudo-inverse (scaled_pseudo_inverse.h):
// the covariance and the statistical stopping test both use it, so they agree to the bit.
double StepInStandardErrors(const ScaledPseudoInverse& inverse, const Eigen::VectorXd& jtr,
                            const std::vector<int>& free, double s2) {
  const int num_free = static_cast<int>(free.size());
  if (num_free == 0) return 0.0;
  Eigen::VectorXd scaled_gradient(num_free);
  for (int a = 0; a < num_free; ++a) scaled_gradient[a] = inverse.scale[a] * jtr[free[a]];
  const double quadratic_form = scaled_gradient.dot(inverse.scaled_inverse * scaled_gradient);
  if (!(quadratic_form > 0.0)) return 0.0;  // S^+ is positive semi-definite: < 0 is rounding
  if (!(s2 > 0.0)) return std::numeric_limits<double>::infinity();
  return std::sqrt(quadratic_form / s2);
}

class LevenbergMarquardtMinimizer {
 public:
  LevenbergMarquardtMinimizer(const LevenbergMarquardtOptions& options,
                              LeastSquaresProblem& problem)
      : options_(options),
        problem_(problem),
        num_parameters_(problem.num_parameters()),
        damping_(options.initial_damping),
        start_time_(std::chrono::steady_clock::now()) {}

  LevenbergMarquardtSummary Run(Eigen::VectorXd theta0) {
    const bool running = options_.resume_state ? RestoreState(*options_.resume_state)
                                               : IterationZero(std::move(theta0));
    if (running) {
      while (!Finished()) {
        if (summary_.iterations >= options_.max_iterations) {
          Stop(LevenbergMarquardtStatus::kMaxIterations,
               "stopped after max_iterations = " + std::to_string(options_.max_iterations) +
                   " trial steps without meeting ftol, xtol or gtol" + StatisticalNote());
          break;
        }
        ++summary_.iterations;
        const bool step_solved = ComputeStep();
        if (step_solved) EvaluateTrial();
        if (step_solved && IsStepSuccessful()) {
          AcceptStep();
        } else {
          RejectStep();
        }
        ReportIteration();
      }
    }
    ComputeCovariance();
    summary_.theta = theta_;
    summary_.final_damping = damping_.mu();
    summary_.seconds = SecondsSinceStart();
    return std::move(summary_);
  }

 private:
  // Lower and upper bounds from the options (+-inf when none).
  void SetBounds() {
    ParameterBounds bounds =
        BoundsOrUnbounded(options_.lower_bounds, options_.upper_bounds, num_parameters_);
    lower_ = std::move(bounds.lower);
    upper_ = std::move(bounds.upper);
    HOMODYNE_CHECK(lower_.size() == num_parameters_ && upper_.size() == num_parameters_);
    HOMODYNE_CHECK(options_.parameter_names.empty() ||
                   static_cast<int>(options_.parameter_names.size()) == num_parameters_);
  }

  // Step 1 of a resumed run: the state saved after an iteration of an earlier run. Everything the
  // next iteration reads is restored bit for bit; the active set is recomputed from it.
  bool RestoreState(const LevenbergMarquardtState& state) {
    HOMODYNE_CHECK(num_parameters_ > 0);
    HOMODYNE_CHECK(state.theta.size() == num_parameters_ && state.jtr.size() == num_parameters_);
    HOMODYNE_CHECK(state.jtj.rows() == num_parameters_ && state.jtj.cols() == num_parameters_);
    SetBounds();
    theta_ = state.theta;
    current_.jtj = state.jtj;
    current_.jtr = state.jtr;
    current_.chi2 = state.chi2;
    current_.num_points = state.num_points;
    damping_ = NielsenDamping(state.damping_mu, state.damping_nu);
    consecutive_rejections_ = state.consecutive_rejections;
    summary_.iterations = state.iterations;
    summary_.accepted_steps = state.accepted_steps;
    summary_.rejected_steps = state.rejected_steps;
    summary_.passes = state.passes;
    summary_.cost_passes = state.cost_passes;
    summary_.initial_chi2 = state.initial_chi2;
    summary_.chi2_history = state.chi2_history;
    summary_.resumed = true;
    ComputeActiveSet();
    UpdateStepStandardErrors();
    // Nothing free: the state is one where the uninterrupted run stopped (the gradient test
    // after the step that froze the last parameter); it stops here the same way, with no step
    // to compute.
    if (free_.empty()) HasConvergedByGradient();
    return true;
  }

  // The state after the current iteration (LevenbergMarquardtIteration::state).
  LevenbergMarquardtState State() const {
    LevenbergMarquardtState state;
    state.theta = theta_;
    state.jtj = current_.jtj;
    state.jtr = current_.jtr;
    state.chi2 = current_.chi2;
    state.num_points = current_.num_points;
    state.damping_mu = damping_.mu();
    state.damping_nu = damping_.nu();
    state.consecutive_rejections = consecutive_rejections_;
    state.iterations = summary_.iterations;
    state.accepted_steps = summary_.accepted_steps;
    state.rejected_steps = summary_.rejected_steps;
    state.passes = summary_.passes;
    state.cost_passes = summary_.cost_passes;
    state.initial_chi2 = summary_.initial_chi2;
    state.chi2_history = summary_.chi2_history;
    return state;
  }

  // Step 1: clip the start into the bounds (one warning per clipped parameter), first full pass,
  // finiteness of the start, active set and the gradient test at the start. False if the run
  // already ended (non-finite start or converged there).
  bool IterationZero(Eigen::VectorXd theta0) {
    HOMODYNE_CHECK(num_parameters_ > 0);
    HOMODYNE_CHECK(theta0.size() == num_parameters_);
    SetBounds();

    theta_ = std::move(theta0);
    if (const std::optional<std::string> non_finite = ClipStartIntoBounds(
            theta_, lower_, upper_, options_.parameter_names, summary_.warnings)) {
      Stop(LevenbergMarquardtStatus::kFailedNonFinite, *non_finite);
      return false;
    }

    current_ = AccumulateAt(theta_);
    summary_.initial_chi2 = current_.chi2;
    if (!IsFiniteAccumulation(current_)) {
      Stop(LevenbergMarquardtStatus::kFailedNonFinite,
           "chi2 or its gradient is not finite at the starting point (chi2 = " +
               FormatNumber(current_.chi2) + ")");
      return false;
    }
    ComputeActiveSet();
    UpdateStepStandardErrors();
    ReportIteration();
    if (Finished()) return false;
    return !HasConvergedByGradient();
  }

  // Step 2: the bound-constrained damped Gauss-Newton step. Solves
  //   (H_FF + mu D_FF) delta_F = -g_F   on the free parameters F (frozen ones do not move),
  // projects theta + delta onto the bounds, and predicts the chi2 reduction of the projected step
  // s from the quadratic model: pred = -(2 g^T s + s^T H s). False if the solve failed (no pass).
  bool ComputeStep() {
    const int num_free = static_cast<int>(free_.size());
    HOMODYNE_CHECK(num_free > 0);
    Eigen::MatrixXd damped(num_free, num_free);
    Eigen::VectorXd minus_gradient(num_free);
    double max_diagonal = 0.0;
    for (int a = 0; a < num_free; ++a) {
      max_diagonal = std::max(max_diagonal, current_.jtj(free_[a], free_[a]));
    }
    const double floor = max_diagonal > 0.0 ? kDiagonalFloorRelative * max_diagonal : 1.0;
    for (int a = 0; a < num_free; ++a) {
      for (int b = 0; b < num_free; ++b) damped(a, b) = current_.jtj(free_[a], free_[b]);
      damped(a, a) += damping_.mu() * std::max(damped(a, a), floor);
      minus_gradient[a] = -current_.jtr[free_[a]];
    }
    const Eigen::LDLT<Eigen::MatrixXd> ldlt(damped);
    const Eigen::VectorXd delta = ldlt.solve(minus_gradient);

    trial_theta_ = theta_;
    step_ = Eigen::VectorXd::Zero(num_parameters_);
    trial_chi2_ = std::numeric_limits<double>::quiet_NaN();
    gain_ratio_ = 0.0;
    step_below_resolution_ = false;
    if (ldlt.info() != Eigen::Success || !delta.allFinite()) return false;
    bool moves_theta = false;
    for (int a = 0; a < num_free; ++a) {
      const int i = free_[a];
      moves_theta = moves_theta || theta_[i] + delta[a] != theta_[i];
      trial_theta_[i] = std::clamp(theta_[i] + delta[a], lower_[i], upper_[i]);
      step_[i] = trial_theta_[i] - theta_[i];
    }
    step_below_resolution_ = !moves_theta;
    predicted_reduction_ = -(2.0 * current_.jtr.dot(step_) + step_.dot(current_.jtj * step_));
    return true;
  }

  // Step 3: one pass at the trial point, as options.trial_evaluation says.
  void EvaluateTrial() {
    trial_is_finite_ = true;
    if (options_.trial_evaluation == TrialEvaluation::kSpeculativeFullPass) {
      trial_ = AccumulateAt(trial_theta_);
      trial_chi2_ = trial_.chi2;
      trial_is_finite_ = IsFiniteAccumulation(trial_);
    } else {
      trial_chi2_ = problem_.Cost(trial_theta_);
      ++summary_.cost_passes;
      trial_is_finite_ = std::isfinite(trial_chi2_);
    }
  }

  // Step 4: gain ratio rho = actual / predicted reduction; accepted iff rho > 0. A non-finite
  // trial (NaN/inf chi2, or gradient under validate_numerics) or a non-positive prediction is
  // rejected (docs/design.md section 7: never accepted).
  bool IsStepSuccessful() {
    if (!trial_is_finite_ || !(predicted_reduction_ > 0.0)) return false;
    actual_reduction_ = current_.chi2 - trial_chi2_;
    gain_ratio_ = actual_reduction_ / predicted_reduction_;
    return gain_ratio_ > 0.0;
  }

  // Step 5a: move to the trial point, obtain its normal equations (reused speculative pass, or a
  // new one), lower the damping, test ftol, xtol and gtol.
  void AcceptStep() {
    const double previous_chi2 = current_.chi2;
    const double previous_theta_norm = theta_.norm();
    theta_ = trial_theta_;
    if (options_.trial_evaluation == TrialEvaluation::kSpeculativeFullPass) {
      current_ = std::move(trial_);
    } else {
      current_ = AccumulateAt(theta_);
    }
    ++summary_.accepted_steps;
    consecutive_rejections_ = 0;
    damping_.OnAccepted(gain_ratio_);
    step_standard_errors_ = -1.0;
    if (!IsFiniteAccumulation(current_) || (options_.validate_numerics && !theta_.allFinite())) {
      Stop(LevenbergMarquardtStatus::kFailedNonFinite,
           "chi2 or its gradient became non-finite at an accepted point (chi2 = " +
               FormatNumber(current_.chi2) + ")");
      return;
    }
    ComputeActiveSet();
    UpdateStepStandardErrors();
    if (HasConvergedByGradient()) return;
    // ftol and xtol say the last step was small; they stop the fit only if the next one would be
    // too (docs/design.md section 4). Otherwise the loop goes on: one more trial, one more pass.
    const double step_norm = step_.norm();
    if (step_norm <= options_.xtol * (previous_theta_norm + options_.xtol)) {
      if (IsWithinStatisticalTolerance()) {
        Stop(LevenbergMarquardtStatus::kConvergedXtol,
             "the accepted step |dtheta| = " + FormatShort(step_norm) + " is within xtol = " +
                 FormatNumber(options_.xtol) + " of |theta|" + StatisticalNote());
      }
      return;
    }
    const double reduction = previous_chi2 - current_.chi2;
    if (gain_ratio_ > 0.25 && reduction <= options_.ftol * previous_chi2 &&
        IsWithinStatisticalTolerance()) {
      Stop(LevenbergMarquardtStatus::kConvergedFtol,
           "chi2 fell by " + FormatShort(reduction / previous_chi2) +
               " (relative), within ftol = " + FormatNumber(options_.ftol) + StatisticalNote());
    }
  }

  // Step 5b: keep theta, raise the damping; a rejected step smaller than xtol (or too small to
  // change theta at all) means no smaller step can help (converged, whatever the statistical
  // distance: no further trial can shorten it); runaway damping or too many rejections in a row
  // is a failure.
  void RejectStep() {
    ++summary_.rejected_steps;
    ++consecutive_rejections_;
    damping_.OnRejected();
    // Same point, but after a resume this is the first pass that counted the finite points.
    UpdateStepStandardErrors();
    const double step_norm = step_.norm();
    if (step_below_resolution_) {
      Stop(LevenbergMarquardtStatus::kConvergedXtol,
           "the trial step is below the floating-point resolution of theta" + StatisticalNote());
    } else if (step_norm > 0.0 && step_norm <= options_.xtol * (theta_.norm() + options_.xtol)) {
      Stop(LevenbergMarquardtStatus::kConvergedXtol,
           "the trial step |dtheta| = " + FormatShort(step_norm) +
               " is within xtol = " + FormatNumber(options_.xtol) +
               " of |theta| and does not lower chi2" + StatisticalNote());
    } else if (damping_.mu() > options_.max_damping) {
      Stop(LevenbergMarquardtStatus::kFailedDamping,
           "the damping rose to " + FormatShort(damping_.mu()) + " (> " +
               FormatNumber(options_.max_damping) + ") without a step that lowers chi2");
    } else if (consecutive_rejections_ >= options_.max_consecutive_rejections) {
      Stop(LevenbergMarquardtStatus::kFailedRejections,
           std::to_string(consecutive_rejections_) +
               " trial steps in a row were rejected (max_consecutive_rejections)");
    }
  }

  // Step 6: freeze a parameter at a bound whose descent direction -g_i points out of the box.
  void ComputeActiveSet() {
    free_ = FreeParameters(current_.jtr, theta_, lower_, upper_);
    if (options_.hold_bound_parameters_on_undetermined_directions) {
      HoldBoundParametersOnUndeterminedDirections(current_.jtj, theta_, lower_, upper_, free_);
    }
  }

  // d at the current point on the current free set (step_standard_errors_), with s^2 =
  // chi2 / max(dof, 1) as the covariance; -1 where chi2, J^T J or J^T r is not finite. A P x P
  // eigen-decomposition, negligible next to a pass. A function of the saved state (and of the
  // problem's residual count), so a resumed run recomputes it bit for bit: no state of its own.
  void UpdateStepStandardErrors() {
    step_standard_errors_ = -1.0;
    if (!std::isfinite(current_.chi2) || !current_.jtj.allFinite() || !current_.jtr.allFinite()) {
      return;
    }
    ScaledPseudoInverse inverse;
    if (!InvertScaledBlock(current_.jtj, free_, inverse)) return;
    step_standard_errors_ = StepInStandardErrors(inverse, current_.jtr, free_, S2());
  }

  // The statistical test of ftol/xtol (LevenbergMarquardtOptions::statistical_tolerance): off at
  // 0; a step that could not be measured (-1) does not hold the fit.
  bool IsWithinStatisticalTolerance() const {
    return options_.statistical_tolerance == 0.0 ||
           !(step_standard_errors_ > options_.statistical_tolerance);
  }

  // "; Gauss-Newton step 3.2e-05 standard errors" for the stop reasons (empty if not measured);
  // says so when it is above statistical_tolerance.
  std::string StatisticalNote() const {
    if (step_standard_errors_ < 0.0) return "";
    std::string note =
        "; Gauss-Newton step " + FormatShort(step_standard_errors_) + " standard errors";
    if (options_.statistical_tolerance > 0.0 &&
        step_standard_errors_ > options_.statistical_tolerance) {
      note +=
          " (above statistical_tolerance = " + FormatNumber(options_.statistical_tolerance) + ")";
    }
    return note;
  }

  // Asked of the problem each time: a streaming objective knows its finite points only after a pass
  // (batched_objective.h), so the count of the last Accumulate is the one that goes with current_.
  int64_t Dof() const { return problem_.num_residuals() - num_parameters_; }
  double S2() const { return current_.chi2 / static_cast<double>(std::max<int64_t>(Dof(), 1)); }

  // gtol test on the free parameters (see LevenbergMarquardtOptions::gtol). Stops if met.
  bool HasConvergedByGradient() {
    double scaled_gradient = 0.0;
    if (current_.chi2 > 0.0) {
      for (int i : free_) {
        const double g = std::abs(current_.jtr[i]);
        if (g == 0.0) continue;
        const double denominator = std::sqrt(current_.jtj(i, i) * current_.chi2);
        scaled_gradient =
            std::max(scaled_gradient,
                     denominator > 0.0 ? g / denominator : std::numeric_limits<double>::infinity());
      }
    }
    if (scaled_gradient > options_.gtol) return false;
    std::string reason;
    if (free_.empty()) {
      reason = "every parameter is at a bound with its gradient pointing out";
    } else if (current_.chi2 == 0.0) {
      reason = "chi2 is exactly 0";
    } else {
      reason = "the scaled gradient " + FormatShort(scaled_gradient) +
               " is within gtol = " + FormatNumber(options_.gtol);
    }
    Stop(LevenbergMarquardtStatus::kConvergedGtol, reason);
    return true;
  }

  // Step 7: covariance = s^2 (H_FF)^-1 on the free block at theta, via the eigen-decomposition of
  // the Jacobi-scaled block (pseudo-inverse when rank-deficient); frozen parameters get zero rows
  // and columns (docs/design.md section 4).
  void ComputeCovariance() {
    summary_.dof = Dof();
    if (summary_.passes == 0) return;
    summary_.final_chi2 = current_.chi2;
    if (summary_.dof <= 0) {
      summary_.warnings.push_back("degrees of freedom = " + std::to_string(summary_.dof) +
                                  " (<= 0): covariance uses dof = 1");
    }
    const double s2 = S2();
    summary_.reduced_chi2 = s2;
    if (!IsFiniteAccumulation(current_, /*always_check_matrices=*/true)) {
      summary_.warnings.push_back("no covariance: chi2 or J^T J is not finite at the result");
      return;
    }
    ComputeCovarianceAtSolution(current_, theta_, lower_, upper_, s2, summary_);
  }

  // Step 8: the callback, after iteration 0 and after every trial.
  void ReportIteration() {
    summary_.chi2_history.push_back(current_.chi2);
    if (!options_.callback) return;
    LevenbergMarquardtIteration report;
    report.iteration = summary_.iterations;
    report.step_accepted = summary_.iterations > 0 && consecutive_rejections_ == 0;
    report.chi2 = current_.chi2;
    report.trial_chi2 = summary_.iterations > 0 ? trial_chi2_ : current_.chi2;
    report.damping = damping_.mu();
    report.step_norm = summary_.iterations > 0 ? step_.norm() : 0.0;
    report.gain_ratio = summary_.iterations > 0 ? gain_ratio_ : 0.0;
    report.step_standard_errors = step_standard_errors_;
    report.seconds = SecondsSinceStart();
    report.passes = summary_.passes;
    report.cost_passes = summary_.cost_passes;
    report.theta = theta_;
    report.state = State();
    report.ended_fit = Finished();
    if (!options_.callback(report) && !Finished()) {
      Stop(LevenbergMarquardtStatus::kStoppedByCallback,
           "the iteration callback asked to stop after iteration " +
               std::to_string(summary_.iterations));
    }
  }

  NormalEquations AccumulateAt(const Eigen::VectorXd& theta) {
    NormalEquations result = problem_.Accumulate(theta);
    ++summary_.passes;
    HOMODYNE_CHECK(result.jtj.rows() == num_parameters_ && result.jtj.cols() == num_parameters_);
    HOMODYNE_CHECK(result.jtr.size() == num_parameters_);
    return result;
  }

  // chi2 is always checked; J^T J and J^T r under validate_numerics (docs/design.md section 7).
  bool IsFiniteAccumulation(const NormalEquations& equations,
                            bool always_check_matrices = false) const {
    if (!std::isfinite(equations.chi2)) return false;
    if (!options_.validate_numerics && !always_check_matrices) return true;
    return equations.jtj.allFinite() && equations.jtr.allFinite();
  }

  void Stop(LevenbergMarquardtStatus status, std::string reason) {
    summary_.status = status;
    summary_.reason = std::move(reason);
  }
  bool Finished() const { return summary_.status != LevenbergMarquardtStatus::kNotRun; }

  std::string Name(int i) const { return ParameterName(options_.parameter_names, i); }

  double SecondsSinceStart() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
  }

  const LevenbergMarquardtOptions& options_;
  LeastSquaresProblem& problem_;
  const int num_parameters_;
  NielsenDamping damping_;
  const std::chrono::steady_clock::time_point start_time_;
  LevenbergMarquardtSummary summary_;

  Eigen::VectorXd lower_, upper_;
  Eigen::VectorXd theta_;               // current point, always inside the bounds
  NormalEquations current_;             // at theta_
  std::vector<int> free_;               // parameters the next step may move
  double step_standard_errors_ = -1.0;  // d at theta_ (UpdateStepStandardErrors)
  int consecutive_rejections_ = 0;

  Eigen::VectorXd trial_theta_;
  Eigen::VectorXd step_;   // trial_theta_ - theta_ (after projection)
  NormalEquations trial_;  // speculative pass at trial_theta_
  double trial_chi2_ = 0.0;
  bool trial_is_finite_ = false;
  bool step_below_resolution_ = false;  // the solved step changes no component of theta
  double predicted_reduction_ = 0.0;
  double actual_reduction_ = 0.0;
  double gain_ratio_ = 0.0;
};

}  // namespace

void NielsenDamping::OnAccepted(double gain_ratio) {
  HOMODYNE_CHECK(gain_ratio > 0.0);
  const double t = 2.0 * gain_ratio - 1.0;
  mu_ = std::max(mu_ * std::max(1.0 / 3.0, 1.0 - t * t * t), kMinDamping);
  nu_ = 2.0;
}

void NielsenDamping::OnRejected() {
  mu_ *= nu_;
  nu_ *= 2.0;
}

std::string_view ToString(LevenbergMarquardtStatus status) {
  switch (status) {
    case LevenbergMarquardtStatus::kNotRun:
      return "not run";
    case LevenbergMarquardtStatus::kConvergedFtol:
      return "converged (ftol)";
    case LevenbergMarquardtStatus::kConvergedXtol:
      return "converged (xtol)";
    case LevenbergMarquardtStatus::kConvergedGtol:
      return "converged (gtol)";
    case LevenbergMarquardtStatus::kMaxIterations:
      return "max iterations";
    case LevenbergMarquardtStatus::kFailedNonFinite:
      return "failed (non-finite)";
    case LevenbergMarquardtStatus::kFailedDamping:
      return "failed (damping)";
    case LevenbergMarquardtStatus::kFailedRejections:
      return "failed (rejections)";
    case LevenbergMarquardtStatus::kStoppedByCallback:
      return "stopped by callback";
  }
  return "unknown";
}

bool IsConverged(LevenbergMarquardtStatus status) {
  return status == LevenbergMarquardtStatus::kConvergedFtol ||
         status == LevenbergMarquardtStatus::kConvergedXtol ||
         status == LevenbergMarquardtStatus::kConvergedGtol;
}

bool LevenbergMarquardtOptions::IsValid(std::string* error) const {
  auto fail = [error](const std::string& message) {
    if (error != nullptr) *error = message;
    return false;
  };
  if (max_iterations <= 0) {
    return fail("optimization.nlsq.max_iterations = " + std::to_string(max_iterations) +
                ": must be > 0");
  }
  if (!IsPositiveFinite(ftol)) {
    return fail("optimization.nlsq.tolerance = " + FormatNumber(ftol) + ": must be > 0");
  }
  if (!IsPositiveFinite(xtol)) {
    return fail("optimization.nlsq.xtol = " + FormatNumber(xtol) + ": must be > 0");
  }
  if (!IsPositiveFinite(gtol)) {
    return fail("optimization.nlsq.gtol = " + FormatNumber(gtol) + ": must be > 0");
  }
  if (!(std::isfinite(statistical_tolerance) && statistical_tolerance >= 0.0)) {
    return fail("optimization.nlsq.statistical_tolerance = " + FormatNumber(statistical_tolerance) +
                ": must be finite and >= 0 (0 disables)");
  }
  if (!IsPositiveFinite(initial_damping)) {
    return fail("LevenbergMarquardtOptions.initial_damping = " + FormatNumber(initial_damping) +
                ": must be > 0");
  }
  if (!(max_damping > initial_damping)) {
    return fail("LevenbergMarquardtOptions.max_damping = " + FormatNumber(max_damping) +
                ": must be > initial_damping = " + FormatNumber(initial_damping));
  }
  if (max_consecutive_rejections <= 0) {
    return fail("LevenbergMarquardtOptions.max_consecutive_rejections = " +
                std::to_string(max_consecutive_rejections) + ": must be > 0");
  }
  if (lower_bounds.size() != upper_bounds.size()) {
    return fail("parameter_space.bounds: " + std::to_string(lower_bounds.size()) +
                " lower bounds but " + std::to_string(upper_bounds.size()) + " upper bounds");
  }
  if (!parameter_names.empty() && lower_bounds.size() > 0 &&
      static_cast<Eigen::Index>(parameter_names.size()) != lower_bounds.size()) {
    return fail("parameter_space.bounds: " + std::to_string(lower_bounds.size()) + " bounds but " +
                std::to_string(parameter_names.size()) + " parameter names");
  }
  for (Eigen::Index i = 0; i < lower_bounds.size(); ++i) {
    const std::string path =
        "parameter_space.bounds[" +
        (parameter_names.empty() ? "#" + std::to_string(i) : parameter_names[i]) + "]";
    const double min = lower_bounds[i];
    const double max = upper_bounds[i];
    if (std::isnan(min) || std::isnan(max)) {
      return fail(path + ": min " + FormatNumber(min) + ", max " + FormatNumber(max) +
                  ": must be numbers (+-inf allowed)");
    }
    if (min > max) return fail(path + ": min " + FormatNumber(min) + " > max " + FormatNumber(max));
    if (min == std::numeric_limits<double>::infinity() ||
        max == -std::numeric_limits<double>::infinity()) {
      return fail(path + ": min " + FormatNumber(min) + ", max " + FormatNumber(max) +
                  ": leaves no finite value");
    }
  }
  return true;
}

std::string LevenbergMarquardtSummary::BriefReport() const {
  if (status == LevenbergMarquardtStatus::kNotRun) return "LM: not run";
  std::ostringstream out;
  out.precision(6);
  out << "LM " << ToString(status) << ": " << iterations << " iterations (" << accepted_steps
      << " accepted), " << passes << " passes + " << cost_passes << " cost passes, chi2 "
      << initial_chi2 << " -> " << final_chi2 << ", reduced chi2 " << reduced_chi2 << " (dof "
      << dof << ")";
  if (final_step_standard_errors >= 0.0) {
    out.precision(2);
    out << ", GN step " << final_step_standard_errors << " SE";
  }
  if (!parameters_at_bound.empty()) out << ", " << parameters_at_bound.size() << " at bound";
  if (covariance_pseudo_inverse) {
    out << ", covariance by pseudo-inverse (" << undetermined_parameters.size() << " undetermined)";
  }
  if (!warnings.empty()) out << ", " << warnings.size() << " warnings";
  out.precision(3);
  out << ", " << seconds << " s";
  return out.str();
}

void ComputeCovarianceAtSolution(const NormalEquations& equations, const Eigen::VectorXd& theta,
                                 const Eigen::VectorXd& lower, const Eigen::VectorXd& upper,
                                 double s2, LevenbergMarquardtSummary& summary) {
  const int p = static_cast<int>(theta.size());
  const std::vector<int> free = FreeParameters(equations.jtr, theta, lower, upper);
  // The covariance releases the bounds (as the reference reports it): every parameter whose
  // range is wider than a point, including those frozen at a bound, so a parameter held by its
  // bound gets the uncertainty the data give it, not 0.
  std::vector<int> released;
  for (int i = 0, a = 0; i < p; ++i) {
    const bool is_free = a < static_cast<int>(free.size()) && free[a] == i;
    if (is_free) {
      ++a;
    } else {
      summary.parameters_at_bound.push_back(i);
    }
    if (is_free || lower[i] < upper[i]) released.push_back(i);
  }
  const int num_released = static_cast<int>(released.size());
  summary.covariance = Eigen::MatrixXd::Zero(p, p);
  summary.uncertainties = Eigen::VectorXd::Zero(p);
  summary.final_step_standard_errors = 0.0;
  if (num_released == 0) return;

  ScaledPseudoInverse inverse;
  if (!InvertScaledBlock(equations.jtj, released, inverse)) {
    // Finite equations whose scaled block still overflows: no covariance rather than a wrong one
    // (the result's consumers take an empty covariance as "none": fit_solution.h).
    summary.covariance.resize(0, 0);
    summary.uncertainties.resize(0);
    summary.final_step_standard_errors = -1.0;
    summary.warnings.push_back(
        "no covariance: the scaled J^T J of the released parameters is not finite at the result");
    return;
  }
  if (inverse.pseudo_inverse) summary.covariance_pseudo_inverse = true;
  for (int a = 0; a < num_released; ++a) {
    for (int b = 0; b < num_released; ++b) {
      const double scaled = inverse.scaled_inverse(a, b) + inverse.undetermined_floor(a, b);
      summary.covariance(released[a], released[b]) =
          s2 * inverse.scale[a] * scaled * inverse.scale[b];
    }
    if (inverse.scale[a] == 0.0 ||
        inverse.undetermined_floor(a, a) > inverse.scaled_inverse(a, a)) {
      summary.undetermined_parameters.push_back(released[a]);
    }
  }
  summary.uncertainties = summary.covariance.diagonal().cwiseMax(0.0).cwiseSqrt();
  // The step test moves only the free parameters (a frozen one cannot move past its bound).
  if (released.size() == free.size()) {
    summary.final_step_standard_errors = StepInStandardErrors(inverse, equations.jtr, free, s2);
  } else if (!free.empty()) {
    ScaledPseudoInverse free_inverse;
    summary.final_step_standard_errors =
        InvertScaledBlock(equations.jtj, free, free_inverse)
            ? StepInStandardErrors(free_inverse, equations.jtr, free, s2)
            : -1.0;
  }
}

LevenbergMarquardtSummary Minimize(const LevenbergMarquardtOptions& options,
                                   LeastSquaresProblem& problem, Eigen::VectorXd theta0) {
  std::string error;
  if (!options.IsValid(&error)) throw ConfigError(error);
  LevenbergMarquardtMinimizer minimizer(options, problem);
  return minimizer.Run(std::move(theta0));
}

}  // namespace homodyne
