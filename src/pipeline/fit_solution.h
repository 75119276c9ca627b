// The final fit's solution as the result reports it (results.h): the parameters, uncertainties
// and covariance in the full layout (a contrast and an offset per angle), chi2 and dof with the
// reference's effective parameter count (docs/results.md, Degrees of freedom), the convergence
// status, and the warnings on how far to trust them (docs/design.md section 7).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "fit_parameters.h"
#include "homodyne/dataset.h"
#include "homodyne/results.h"
#include "objective/backend_selection.h"
#include "objective/batched_objective.h"
#include "objective/pass_backend.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"
#include "pipeline/fit_uncertainty.h"

namespace homodyne {

// The result's convergence status (docs/results.md, Convergence status), as the fit's
// convergence_status reads it:
//   converged                    the final fit met ftol, xtol or gtol
//   max_iterations               it stopped at optimization.nlsq.max_iterations first
//   no_progress                  it accepted no step and its reduced chi2 is above
//                                kNoProgressReducedChi2, whatever test stopped it
//   failed_non_finite_objective  chi2 is not finite at the start or at the result
//   failed                       no step lowers chi2 (damping, rejections), or it never ran
// The last three are failures: exit code 1 (FitExitCode), quality flag poor.
struct ConvergenceOutcome {
  std::string status;
  std::string reason;  // one sentence or more: what happened (termination_reason)
};
// Above this reduced chi2 the residuals are a thousand sigma wide on average: the model does not
// describe the data at all (damaged or foreign data), or sigma is wrong by that factor.
inline constexpr double kNoProgressReducedChi2 = 1e6;
// Below this reduced chi2 (0 included) sigma is absurdly large for the data's scatter: chi2 and the
// quality flag's chi2 level measure nothing (the covariance, scaled by the reduced chi2, does not
// depend on sigma).
inline constexpr double kNegligibleReducedChi2 = 1e-12;
// summary: the final fit; chi_squared and reduced_chi_squared: the result's (the plain chi2,
// whatever the loss); sigma: optimization.nlsq.sigma, for the messages.
ConvergenceOutcome ConvergenceStatusOf(const LevenbergMarquardtSummary& summary, double chi_squared,
                                       double reduced_chi_squared, double sigma);
// Full validation's bounds warnings (docs/design.md section 7; fast mode skips them): a fitted
// parameter held on a bound with its gradient pointing out (summary.parameters_at_bound, from
// ComputeCovarianceAtSolution), where the optimum may lie beyond it; when its correlation with
// another parameter (the bound released, summary.covariance) exceeds 0.99 in magnitude, the
// warning names that parameter and says to hold one of the two fixed instead (a wider bound only
// moves both along their valley). Parameters held by equal bounds are not reported. options:
// the reduced bounds and names the fit ran with.
std::vector<std::string> ResultBoundWarnings(const LevenbergMarquardtSummary& summary,
                                             const LevenbergMarquardtOptions& options);

// The exit code of a finished fit with this convergence_status: kExitSuccess for converged and
// max_iterations, kExitFailure for every other status (docs/results.md, Convergence status).
int FitExitCode(const std::string& convergence_status);
// The warning of a reduced chi2 whose chi2 level is not good (QualityFlag: below 0.5 or from 1.5
// on) and above kNegligibleReducedChi2: the sigma that would make it 1, sigma * sqrt(reduced chi2)
// (docs/results.md, Quality flag). nullopt otherwise, and for dof <= 0 or a reduced chi2 that is
// not finite.
std::optional<std::string> SigmaAdvice(double reduced_chi_squared, int64_t degrees_of_freedom,
                                       double sigma);

// What the quality flag is judged from (docs/results.md, Quality flag).
struct FitQualityInputs {
  double reduced_chi_squared = 0.0;
  int64_t degrees_of_freedom = 0;           // with the reference's effective parameter count
  std::string convergence_status;           // ConvergenceOutcome::status
  std::vector<std::string> at_lower_bound;  // physical parameters held on their lower bound
  std::vector<std::string> at_upper_bound;  // ... on their upper bound
  std::vector<std::string> undetermined;    // parameters the data do not determine
  bool nothing_free = false;                // every fitted parameter ended held on a bound
  // Profile intervals (docs/results.md, Profile intervals) that end at a bound or could not be
  // computed: the data do not bound these parameters within the bounds.
  std::vector<std::string> unbounded_intervals;
  // Physical parameters whose jackknife uncertainty lies further below the standard error of
  // independent noise than the jackknife's own scatter allows (UncertaintyDisagreements).
  std::vector<std::string> methods_disagree;
};

struct FitQuality {
  std::string flag;                  // good | marginal | poor
  std::vector<std::string> reasons;  // empty exactly when flag is good
};

// The quality flag (docs/results.md, Quality flag): the reduced chi2's level (QualityFlag;
// poor when dof <= 0 or the reduced chi2 is below kNegligibleReducedChi2), then one level lower
// (poor at most) for each kind of problem the solution has: physical parameters on a bound,
// undetermined parameters, profile intervals that reach a bound, uncertainty methods that
// disagree, a stop at max_iterations; a fit with nothing free and every status
// but converged and max_iterations (a failure) is poor. Every problem that set or lowered the
// level adds a reason, so a converged fit that is not good always says why.
FitQuality AssessFitQuality(const FitQualityInputs& inputs);

// The check of the uncertainties against the global phase's other minima (docs/design.md
// section 7), part of full validation: a minimum whose chi2, scaled from the search data to
// all the data (num_points / result.global_search.search_points), is within 16 reduced chi2
// (at least 16) of the chosen one lies inside the 4-standard-error contour. On a quadratic chi2
// surface such a minimum, delta above, is at most sqrt(delta / reduced chi2) standard errors
// from the result in any parameter; a physical parameter that differs there by more than that
// plus 2 (the search's minima are fitted to a row subsample) is determined less well than its
// uncertainty says (the surface is far from quadratic).
// Returns the warning naming them (empty when none) and appends their names to `undetermined`.
// Reads result.physical, reduced_chi_squared (under a robust loss robust_cost and
// degrees_of_freedom) and global_search.
std::vector<std::string> OtherMinimumWarnings(const FitResult& result, int64_t num_points,
                                              std::vector<std::string>& undetermined);

// The strongly correlated pairs of physical parameters (docs/results.md, What the uncertainties
// mean), for the log's information line, not a warning: each pair of the first n_physical
// parameters of result.covariance (named result.covariance_names) whose correlation exceeds 0.99
// in magnitude, as "P1 and P2 (-0.9950)". Such a pair is what the uncertainties of each already
// say (they are large along the pair's valley); what the data fail to determine is warned about
// by the checks that measure it (UndeterminedWarnings, ProfileWarnings, the bound warnings,
// profile intervals). None when the covariance is empty or does not match the names (a fit that
// failed before its covariance), and none for a pair whose correlation is not finite.
std::vector<std::string> StrongCorrelations(const FitResult& result, int n_physical);

// The jackknife's check against the standard error (docs/results.md, What the uncertainties
// mean): the physical parameters whose ratio (result.uncertainty_ratio_to_standard) is below
// 1 - 3 / sqrt(2 (B - 1)), three times the relative scatter of a B-block jackknife's standard
// error, so below what chance gives when the noise is independent; correlated noise raises the
// ratio, it does not lower it. Returns the warning naming them with their ratios (empty when
// none, and for another method) and appends their names to `disagree`.
std::vector<std::string> UncertaintyDisagreements(const FitResult& result,
                                                  std::vector<std::string>& disagree);

// chi2 of the fit with the named physical parameter held at `value` and every other fitted
// parameter refitted from the solution (a profile point); the fit may stop as soon as its chi2
// is below `enough` (then returns that chi2). NaN when it cannot be computed (the value is
// outside the parameter's bounds, the parameter is not fitted, or the fit failed).
using ProfileProbe = std::function<double(const std::string& name, double value, double enough)>;

// The profile check of the uncertainties (docs/results.md, What the uncertainties mean), part of
// full validation: each physical parameter that is fitted, off its bounds, not named
// undetermined yet (`undetermined`), and correlated with another physical parameter by
// kProfileCorrelation or more in magnitude is held kProfileStandardErrors standard errors from
// the result, on each side, and the rest refitted (probe). On a quadratic chi2 surface chi2 rises
// by kProfileStandardErrors^2 s^2 there (s^2: the reduced chi2, at least 1); a rise below
// kProfileRise s^2 means the surface is flatter along that profile than the curvature at the
// result says, so the uncertainty understates how far the data let the parameter move.
// Returns the warning naming those parameters (empty when none) and appends them to
// `undetermined`. Reads result.physical, covariance, chi_squared and reduced_chi_squared.
inline constexpr double kProfileCorrelation = 0.9;
inline constexpr double kProfileStandardErrors = 4.0;
inline constexpr double kProfileRise = 12.0;
std::vector<std::string> ProfileWarnings(const FitResult& result, const ProfileProbe& probe,
                                         std::vector<std::string>& undetermined);

// One end of a profile interval to find (AddProfileIntervals): FindProfileEnd's arguments for
// the physical parameter `name` at `value`.
struct ProfileEndSearch {
  std::string name;
  double value = 0.0;
  double first_step = 0.0;
  int direction = 1;
  double bound = 0.0;
  double target = 0.0;
};
// What finding one end gave: the end, and every profile point on the way (value held, chi2 less
// the minimum), in the order they were computed.
struct ProfileEndFound {
  ProfileEnd end;
  std::vector<std::pair<double, double>> points;
};
// Finds ends 0 .. count - 1 (find(i) finds end i, independently of the others) and returns them in
// that order. Whoever computes them (this process one after the other, or the ranks of a job,
// docs/design.md section 5b), the results must be bitwise find's.
using ProfileEndsRunner = std::function<std::vector<ProfileEndFound>(
    size_t count, const std::function<ProfileEndFound(size_t)>& find)>;

// The uncertainties a result reports (optimization.nlsq.uncertainty as the fit could give it;
// docs/results.md, What the uncertainties mean).
struct ReportedUncertainty {
  UncertaintyMethod method = UncertaintyMethod::kCurvature;
  std::optional<FrameBlockJackknife> jackknife;  // set for kJackknife
  // The residuals' lag-1 correlation along rows when measured (RowCorrelationAtLag1; the
  // jackknife's pass measures it), else NaN.
  double residual_lag1_correlation = std::numeric_limits<double>::quiet_NaN();
  // Whether the frame-block sums' pass over the data ran (auto and the jackknife make it).
  bool sums_pass = false;
  // Set: each physical parameter's profile intervals are computed with it (chi2 at a held value,
  // `enough` -inf: a full refit; docs/results.md, Profile intervals). Null: none.
  ProfileProbe intervals;
  // Who finds the intervals' ends (AddProfileIntervals); null: this process, one after the other.
  ProfileEndsRunner interval_ends;
  // Set (and `intervals` null): the physical parameters the data do not determine (J^T J singular
  // along them at the result) get profile intervals with it instead of value +- t u, which their
  // lower-bound u would make far too narrow (docs/results.md, Intervals). Null: none.
  ProfileProbe undetermined_intervals;
};

// The profile-likelihood intervals of result.physical (docs/results.md, Profile intervals): for
// each parameter with a finite reported uncertainty u and curvature uncertainty c (curvature:
// one per full-layout parameter, the covariance RecordSolution's checks read), the ends where
// chi2, the parameter held and the others refitted (probe), rises above result.chi_squared by
// z^2 s^2 u^2 / c^2 (s^2: the reduced chi2; z = 1 and 1.96), which on a quadratic chi2 is +-z u:
// the profile's shape with the reported method's scale. An end that the bound (lm's, by name)
// comes before is the bound, and the parameter's interval_note says so; returns the names of the
// parameters with such an end (or an end that could not be computed), for the caller's warning. The
// ends are independent: `runner` finds them (null: one after the other, here). only: the parameters
// to profile (all of result.physical when null). undetermined: parameters the data do not determine
// (J^T J singular along them): their reported u is a lower bound, so their ratio u / c is taken
// as UndeterminedUncertaintyRatio's instead (the profile then follows their valley on the scale
// of the correlated noise, not of the lower bound).
std::vector<std::string> AddProfileIntervals(const ProfileProbe& probe,
                                             const Eigen::VectorXd& curvature,
                                             const LevenbergMarquardtOptions& lm, FitResult& result,
                                             const ProfileEndsRunner& runner = nullptr,
                                             const std::vector<std::string>* only = nullptr,
                                             const std::vector<std::string>& undetermined = {});

// The ratio u / c of reported to curvature uncertainty that the profile intervals of undetermined
// parameters take (AddProfileIntervals): the largest of the other physical parameters' (those
// with finite, positive u and c, not named in `undetermined`), the widest scale of chi2 the
// reported method found in the data; NaN when none has one (each then keeps its own u / c).
// curvature: as AddProfileIntervals'.
double UndeterminedUncertaintyRatio(const FitResult& result, const Eigen::VectorXd& curvature,
                                    const std::vector<std::string>& undetermined);

// The intervals' check against the global phase's other minima (docs/results.md, Intervals): a
// minimum whose chi2, scaled from the search data to all the data (num_points /
// result.global_search.search_points), lies within a level's threshold z^2 s^2 u^2 / c^2 of the
// chosen one (AddProfileIntervals' threshold, with s^2 the reduced value of what the global phase
// minimised: the reduced chi2, or 2 cost / dof under a robust loss; not floored at 1 as
// OtherMinimumWarnings' contour is) lies inside that level's profile-likelihood region: with the
// parameter held at the minimum's value, chi2 is at most that minimum's. So each physical
// parameter's interval at that level (68 %: z = 1, 95 %: z = 1.96) is widened to hold the minimum's
// value, and its interval_note says so. Only parameters that have intervals and a curvature
// uncertainty c (curvature: one per full-layout parameter, in result.physical's order) change.
// Returns the names of the parameters widened, in result.physical's order.
std::vector<std::string> WidenIntervalsToOtherMinima(const Eigen::VectorXd& curvature,
                                                     int64_t num_points, FitResult& result);

// The probability below +1 standard deviation of a normal distribution, Phi(1): a 68 % interval
// runs from its 1 - p to its p quantile.
inline constexpr double kOneSigmaProbability = 0.8413447460685429;
// The p quantile of Student's t with `degrees_of_freedom` (the normal's when it is <= 0).
double StudentQuantile(double probability, int degrees_of_freedom);

// The intervals of the physical parameters that have none yet (no profile intervals asked for,
// or a parameter they skipped), for the statistical methods (result.uncertainty_method
// jackknife or standard; curvature gets none): value +- t u at 68 % and 95 %, t Student's
// quantile with the jackknife's blocks - 1 degrees of freedom (its variance estimate has that
// many), the normal's for the standard error; clipped to lm's bounds (by name; parameters not in
// lm are held and get none), interval_method "student_t" (docs/results.md, Intervals).
// widen: parameters whose intervals are profiles of a lower-bound u (the data do not determine
// them): each level becomes the hull of the profile's interval and value +- t u, the wider of two
// answers neither of which is sure, with interval_note saying so where value +- t u widened it.
void AddStudentIntervals(const LevenbergMarquardtOptions& lm, FitResult& result,
                         const std::vector<std::string>& widen = {});
// Whether the physical parameter `name`'s 68 % value +- t u (AddStudentIntervals' t, unclipped)
// reaches both of its bounds in lm (false for a parameter not in lm or not in result.physical; a
// NaN u reaches neither).
bool StudentIntervalSpansBounds(const LevenbergMarquardtOptions& lm, const FitResult& result,
                                const std::string& name);

// Fills result.physical, per_angle, covariance_names, covariance, per_angle_mode, chi_squared,
// reduced_chi_squared, degrees_of_freedom, convergence_status and termination_reason
// (ConvergenceStatusOf), quality_flag and quality_reasons (AssessFitQuality, in fast mode too),
// and appends to result.warnings (each also logged): the optimiser's own, undetermined
// parameters, no parameter free at the result, a reduced chi2 below kNegligibleReducedChi2
// (always) and,
// with full_validation (not fast mode), parameters ended on a bound, OtherMinimumWarnings and
// ProfileWarnings (their parameters also count as undetermined in the quality flag), then the
// reported uncertainty's UncertaintyDisagreements and profile intervals' bounds (both in the
// quality flag too); pairs correlated beyond 0.99 are logged as information (StrongCorrelations).
// lm: the reduced bounds and names the final fit ran with; objective: the fit's (its residual count
// and full layout); phi_degrees: the data's angles; result.analysis_mode names the physical
// parameters. Under a robust loss (objective.loss() not linear) summary.final_chi2 is the robust
// objective 2 cost; sum_of_squares then holds the plain chi2 at the solution (BatchedObjective::
// SumOfSquares; absent: NaN), which becomes chi_squared, and result.loss, f_scale and robust_cost
// are set. The
// covariance is the LM core's, s^2 (J^T J)^-1 of the rescaled Jacobian with s^2 = 2 cost / dof,
// as scipy's curve_fit reports it under a loss (docs/model.md, Robust loss). Every check above
// reads that curvature covariance; the uncertainties and covariance then become those of
// `uncertainty` (result.uncertainty_method): standard scales it by (2n - p) / (n - p), n the
// finite stored points and p the effective parameter count (the stored points counted once);
// jackknife replaces it with uncertainty.jackknife's.
// Returns the fitted physical parameters, in the model's order.
std::vector<double> RecordSolution(
    const LevenbergMarquardtSummary& summary, const LevenbergMarquardtOptions& lm,
    const FitParameters& parameters, const ResolvedScaling& scaling,
    const BatchedObjective& objective, const std::vector<double>& phi_degrees, bool full_validation,
    FitResult& result, std::optional<double> sum_of_squares = std::nullopt,
    const ProfileProbe& profile = nullptr, const ReportedUncertainty& uncertainty = {});

// What the result's totals are counted from, at the end of a fit.
struct FitTotals {
  const LevenbergMarquardtSummary& summary;      // the final fit
  const DatasetInfo& info;                       // the data (points, angles, times, q)
  const BatchedObjective& objective;             // its read retries and points per pass
  const BatchStatistics& checkpoint_statistics;  // batches counted by the checkpoints
  int64_t checkpoint_saves = 0;
  const PassBackend& backend;  // that computed the passes
  int threads = 1;
  double total_seconds = 0.0;  // wall time of the whole fit [s]
};
// Fills result.optimization_seconds, batch_statistics, n_points, n_angles,
// n_times, q_inv_angstrom, iterations, passes (full and cost), point_evaluations, backend,
// threads, total_seconds and memory_peak_mb (this process's peak resident memory, VmHWM; 0 when
// unknown).
void RecordTotals(const FitTotals& totals, FitResult& result);

// Fills result.backend_self_check from the CUDA backend's self-check when it ran
// (docs/backends.md, The self-check); a failed check that made backend auto fall back to the CPU
// is also a warning of the result.
void RecordBackendSelfCheck(const BackendChoice& choice, FitResult& result);

}  // namespace homodyne
