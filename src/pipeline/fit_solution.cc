#include "fit_solution.h"

#include <spdlog/spdlog.h>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "homodyne/errors.h"
#include "homodyne/model.h"

namespace homodyne {
namespace {

// Peak resident memory of this process (VmHWM), MB; 0 if unknown.
double PeakResidentMb() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      double kb = 0;
      status >> kb;
      return kb / 1024.0;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0.0;
}

// "a, b, c": the items in order, for the names in a warning or a quality reason.
std::string CommaList(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// The bounds the fit ran with of the parameter `name` ({-inf, +inf} on a side lm has none);
// nullopt when lm does not fit it (held fixed).
std::optional<std::pair<double, double>> BoundsByName(const LevenbergMarquardtOptions& lm,
                                                      const std::string& name) {
  const auto at = std::find(lm.parameter_names.begin(), lm.parameter_names.end(), name);
  if (at == lm.parameter_names.end()) return std::nullopt;
  const double infinity = std::numeric_limits<double>::infinity();
  const auto r = static_cast<Eigen::Index>(at - lm.parameter_names.begin());
  return std::pair{lm.lower_bounds.size() > r ? lm.lower_bounds[r] : -infinity,
                   lm.upper_bounds.size() > r ? lm.upper_bounds[r] : infinity};
}

}  // namespace

std::vector<std::string> ResultBoundWarnings(const LevenbergMarquardtSummary& summary,
                                             const LevenbergMarquardtOptions& options) {
  std::vector<std::string> warnings;
  const Eigen::Index n = summary.theta.size();
  const bool has_covariance = summary.covariance.rows() == n && summary.covariance.cols() == n;
  for (const int i : summary.parameters_at_bound) {
    const double lower = options.lower_bounds[i];
    const double upper = options.upper_bounds[i];
    if (lower == upper) continue;
    const double value = summary.theta[i];
    std::ostringstream text;
    text << options.parameter_names[static_cast<size_t>(i)] << " = " << value << " ended at its "
         << (value <= lower ? "lower" : "upper") << " bound";
    // The parameter most correlated with it (the bound released): beyond 0.99 the data do not
    // separate the pair, and a wider bound only lets both slide along their valley.
    int partner = -1;
    double partner_correlation = 0.0;
    for (Eigen::Index j = 0; has_covariance && j < n; ++j) {
      if (j == i) continue;
      const double scale = std::sqrt(summary.covariance(i, i) * summary.covariance(j, j));
      const double r = scale > 0.0 ? summary.covariance(i, j) / scale : 0.0;
      if (std::isfinite(r) && std::abs(r) > 0.99 && std::abs(r) > std::abs(partner_correlation)) {
        partner = static_cast<int>(j);
        partner_correlation = r;
      }
    }
    if (partner >= 0) {
      char correlation[32];
      std::snprintf(correlation, sizeof(correlation), "%.4f", partner_correlation);
      const std::string& other = options.parameter_names[static_cast<size_t>(partner)];
      text << " inside a correlation of " << correlation << " with " << other
           << ": the data do not separate the two, so the bound, not the data, holds "
           << options.parameter_names[static_cast<size_t>(i)]
           << ", and a wider bound only moves both along their valley; hold one of them fixed "
              "(initial_parameters.fixed_parameters: "
           << other << " or " << options.parameter_names[static_cast<size_t>(i)] << ")";
    } else {
      text << ": the optimum may lie beyond it (widen parameter_space.bounds)";
    }
    warnings.push_back(text.str());
  }
  return warnings;
}

namespace {

// The covariance's warning (always given: it says how to read the uncertainties): parameters
// along which J^T J is singular at the result (summary.undetermined_parameters), whose
// uncertainties are lower bounds. Empty when there are none. options: the names the fit ran with.
std::vector<std::string> UndeterminedWarnings(const LevenbergMarquardtSummary& summary,
                                              const LevenbergMarquardtOptions& options) {
  if (summary.undetermined_parameters.empty()) return {};
  std::string names;
  for (const int i : summary.undetermined_parameters) {
    if (!names.empty()) names += ", ";
    names += options.parameter_names[static_cast<size_t>(i)];
  }
  const bool one = summary.undetermined_parameters.size() == 1;
  return {"the data do not determine " + names + " (J^T J is singular along " +
          (one ? "it" : "a combination of them") + " at the result): " +
          (one ? "its uncertainty is a lower bound, not an estimate"
               : "their uncertainties are lower bounds, not estimates") +
          "; hold one fixed (initial_parameters.fixed_parameters) if the "
          "physics allows"};
}

}  // namespace

std::vector<std::string> StrongCorrelations(const FitResult& result, int n_physical) {
  std::vector<std::string> pairs;
  const size_t n = result.covariance_names.size();
  // No covariance (the fit failed before one was computed, or it could not be inverted), or
  // one that does not match the names: nothing to judge.
  if (n_physical <= 0 || static_cast<size_t>(n_physical) > n || result.covariance.size() != n * n) {
    return pairs;
  }
  const std::vector<double> correlation = CorrelationMatrix(result.covariance, n);
  for (int i = 0; i < n_physical; ++i) {
    for (int j = i + 1; j < n_physical; ++j) {
      const double r = correlation[static_cast<size_t>(i) * n + static_cast<size_t>(j)];
      // A correlation that is not a number (an infinite variance) says nothing about the pair.
      if (!std::isfinite(r) || std::abs(r) <= 0.99) continue;
      char value[32];
      std::snprintf(value, sizeof(value), "%.4f", r);
      pairs.push_back(result.covariance_names[static_cast<size_t>(i)] + " and " +
                      result.covariance_names[static_cast<size_t>(j)] + " (" + value + ")");
    }
  }
  return pairs;
}

namespace {

// A number in a quality reason, e.g. "2.137".
std::string ReasonNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.4g", value);
  return text;
}

// Half the width of AddStudentIntervals' interval at `probability` (its upper quantile): t u, t
// Student's quantile with the jackknife's blocks - 1 degrees of freedom, else the normal's.
double StudentHalfWidth(const FitResult& result, double uncertainty, double probability) {
  const int dof = result.uncertainty_method == "jackknife" ? result.uncertainty_blocks - 1 : 0;
  return StudentQuantile(probability, dof) * uncertainty;
}

// Whether `names` holds `name`.
bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Appends `name` to `names` unless it is there already.
void AddName(const std::string& name, std::vector<std::string>& names) {
  if (!Contains(names, name)) names.push_back(name);
}

// Whether no fitted parameter was free to move at the result: every one held on a bound with its
// gradient pointing out, or by equal bounds (ComputeCovarianceAtSolution lists them all).
bool NothingFree(const LevenbergMarquardtSummary& summary) {
  return summary.theta.size() > 0 &&
         static_cast<Eigen::Index>(summary.parameters_at_bound.size()) == summary.theta.size();
}

// The quality inputs of a solution: the physical parameters (IsPhysicalParameter; the reduced
// layout may hold fewer of them, with fixed_parameters) that ended on a bound of a range wider
// than a point, and the undetermined parameters. lm: the reduced bounds and names the final fit
// ran with.
FitQualityInputs QualityInputs(const LevenbergMarquardtSummary& summary,
                               const LevenbergMarquardtOptions& lm, const FitResult& result) {
  FitQualityInputs inputs;
  inputs.reduced_chi_squared = result.reduced_chi_squared;
  inputs.degrees_of_freedom = result.degrees_of_freedom;
  inputs.convergence_status = result.convergence_status;
  for (const int i : summary.parameters_at_bound) {
    const std::string& name = lm.parameter_names[static_cast<size_t>(i)];
    if (!IsPhysicalParameter(result.analysis_mode, name) ||
        lm.lower_bounds[i] == lm.upper_bounds[i]) {
      continue;
    }
    (summary.theta[i] <= lm.lower_bounds[i] ? inputs.at_lower_bound : inputs.at_upper_bound)
        .push_back(name);
  }
  for (const int i : summary.undetermined_parameters) {
    inputs.undetermined.push_back(lm.parameter_names[static_cast<size_t>(i)]);
  }
  inputs.nothing_free = NothingFree(summary);
  return inputs;
}

// The side of the bound each full-layout parameter ended held by ("lower", "upper" or ""): a
// reduced parameter frozen on a bound of a range wider than a point marks the full parameters
// that equal it (a unit row of the map: a physical parameter, an individual or averaged contrast
// or offset; a Fourier coefficient moves no single angle's value onto a bound).
std::vector<std::string> FullLayoutBoundMarks(const LevenbergMarquardtSummary& summary,
                                              const LevenbergMarquardtOptions& lm,
                                              const ScalingMap& map) {
  std::vector<std::string> marks(static_cast<size_t>(map.num_full()));
  for (const int r : summary.parameters_at_bound) {
    if (lm.lower_bounds[r] == lm.upper_bounds[r]) continue;
    const char* side = summary.theta[r] <= lm.lower_bounds[r] ? "lower" : "upper";
    for (int f = 0; f < map.num_full(); ++f) {
      const bool unit_row = map.matrix(f, r) == 1.0 && map.matrix.row(f).cwiseAbs().sum() == 1.0;
      if (unit_row) marks[static_cast<size_t>(f)] = side;
    }
  }
  return marks;
}

}  // namespace

std::vector<std::string> UncertaintyDisagreements(const FitResult& result,
                                                  std::vector<std::string>& disagree) {
  const std::vector<double>& ratios = result.uncertainty_ratio_to_standard;
  if (result.uncertainty_method != "jackknife" || result.uncertainty_blocks < 2 ||
      ratios.size() != result.physical.size()) {
    return {};
  }
  // The relative standard deviation of a jackknife standard error from B blocks of independent
  // noise is about 1 / sqrt(2 (B - 1)) (its variance has B - 1 degrees of freedom).
  const double scatter = 1.0 / std::sqrt(2.0 * (result.uncertainty_blocks - 1));
  const double lowest = 1.0 - 3.0 * scatter;
  std::string evidence;
  for (size_t p = 0; p < ratios.size(); ++p) {
    if (!(ratios[p] < lowest)) continue;  // NaN: nothing to compare
    disagree.push_back(result.physical[p].name);
    evidence +=
        (evidence.empty() ? "" : ", ") + result.physical[p].name + " " + ReasonNumber(ratios[p]);
  }
  if (evidence.empty()) return {};
  return {"the frame-block jackknife's uncertainties of " + evidence +
          " times the standard errors of independent noise lie below what its " +
          std::to_string(result.uncertainty_blocks) + " blocks give by chance (at least " +
          ReasonNumber(lowest) +
          "): noise correlated along frames raises them, so the blocks do not describe these "
          "residuals (too few points per block, or anticorrelated noise); compare with "
          "--uncertainty standard"};
}

namespace {

// The unit of the global phase's minima's chi2: what the phase minimised is 2 cost under a
// robust loss (docs/design.md section 4c), whose reduced value (the covariance's s^2) is then the
// unit; the reduced chi2 otherwise.
double ReducedObjective(const FitResult& result) {
  return result.loss == "linear"
             ? result.reduced_chi_squared
             : 2.0 * result.robust_cost /
                   static_cast<double>(std::max<int64_t>(result.degrees_of_freedom, 1));
}

// The value of the physical parameter `name` at a minimum of the global phase; nullopt when the
// phase did not search it.
std::optional<double> ValueAtMinimum(const GlobalSearchRecord::Minimum& minimum,
                                     const std::string& name) {
  const auto at = std::find(minimum.names.begin(), minimum.names.end(), name);
  if (at == minimum.names.end()) return std::nullopt;
  return minimum.values[static_cast<size_t>(at - minimum.names.begin())];
}

}  // namespace

std::vector<std::string> OtherMinimumWarnings(const FitResult& result, int64_t num_points,
                                              std::vector<std::string>& undetermined) {
  const GlobalSearchRecord& search = result.global_search;
  if (search.chosen < 0 || search.search_points <= 0 || result.physical.empty()) return {};
  const double scale = static_cast<double>(num_points) / static_cast<double>(search.search_points);
  const double reduced = std::max(ReducedObjective(result), 1.0);
  const double chosen_chi2 = search.minima[static_cast<size_t>(search.chosen)].chi2;
  std::vector<std::string> names;
  std::string evidence;  // the lowest such minimum's differences
  int minima = 0;        // such minima
  for (size_t m = 0; m < search.minima.size(); ++m) {
    const GlobalSearchRecord::Minimum& other = search.minima[m];
    const double delta = (other.chi2 - chosen_chi2) * scale;
    if (static_cast<int>(m) == search.chosen || !(delta <= 16.0 * reduced)) continue;
    std::string differ;
    for (const ParameterEstimate& estimate : result.physical) {
      const std::optional<double> at_other = ValueAtMinimum(other, estimate.name);
      if (!at_other) continue;
      const double value = *at_other;
      // On a quadratic surface a point delta above the minimum is at most sqrt(delta /
      // reduced) standard errors from it in any parameter; 2 more allow for the search's
      // minima being fitted to a row subsample.
      const double distance = std::abs(value - estimate.value);
      const double allowed = std::sqrt(std::max(delta, 0.0) / reduced) + 2.0;
      if (!(distance > allowed * estimate.uncertainty)) continue;
      char text[160];
      std::snprintf(text, sizeof(text), "%s %.4g (%.3g standard errors)", estimate.name.c_str(),
                    value,
                    estimate.uncertainty > 0.0 ? distance / estimate.uncertainty
                                               : std::numeric_limits<double>::infinity());
      differ += (differ.empty() ? "" : ", ") + std::string(text);
      if (std::find(names.begin(), names.end(), estimate.name) == names.end()) {
        names.push_back(estimate.name);
      }
    }
    if (!differ.empty()) ++minima;
    if (!differ.empty() && evidence.empty()) {
      char text[96];
      std::snprintf(text, sizeof(text), "a minimum of chi2 only %.3g higher has ", delta);
      evidence = text + differ;
    }
  }
  if (names.empty()) return {};
  std::string list;
  for (const std::string& name : names) {
    list += (list.empty() ? "" : ", ") + name;
    undetermined.push_back(name);
  }
  return {
      "the data do not determine " + list +
      " (the global phase found other minima inside the 4-standard-error contour): " + evidence +
      (minima > 1 ? " (and " + std::to_string(minima - 1) + " more such minima)" : "") +
      "; the uncertainties understate how far the data let them move"};
}

std::vector<std::string> ProfileWarnings(const FitResult& result, const ProfileProbe& probe,
                                         std::vector<std::string>& undetermined) {
  if (!probe || result.covariance.empty() || result.physical.empty()) return {};
  const size_t n = result.covariance_names.size();
  if (result.covariance.size() != n * n) return {};
  const auto index_of = [&result](const std::string& name) -> int {
    const auto at = std::find(result.covariance_names.begin(), result.covariance_names.end(), name);
    return at == result.covariance_names.end()
               ? -1
               : static_cast<int>(at - result.covariance_names.begin());
  };
  const auto covariance = [&result, n](int i, int j) {
    return result.covariance[static_cast<size_t>(i) * n + static_cast<size_t>(j)];
  };
  const double reduced = std::max(result.reduced_chi_squared, 1.0);
  std::vector<std::string> names;
  std::string evidence;
  for (const ParameterEstimate& estimate : result.physical) {
    if (!(estimate.uncertainty > 0.0) || !estimate.at_bound.empty() ||
        std::find(undetermined.begin(), undetermined.end(), estimate.name) != undetermined.end()) {
      continue;
    }
    const int i = index_of(estimate.name);
    if (i < 0 || !(covariance(i, i) > 0.0)) continue;
    double largest = 0.0;  // the largest |correlation| with another physical parameter
    for (const ParameterEstimate& other : result.physical) {
      const int j = index_of(other.name);
      if (j < 0 || j == i || !(covariance(j, j) > 0.0)) continue;
      largest = std::max(
          largest, std::abs(covariance(i, j)) / std::sqrt(covariance(i, i) * covariance(j, j)));
    }
    if (!(largest >= kProfileCorrelation)) continue;
    for (const double side : {-1.0, 1.0}) {
      const double held = estimate.value + side * kProfileStandardErrors * estimate.uncertainty;
      const double enough = result.chi_squared + kProfileRise * reduced;
      const double rise = (probe(estimate.name, held, enough) - result.chi_squared) / reduced;
      if (!(rise < kProfileRise)) continue;  // NaN: no profile point on this side
      names.push_back(estimate.name);
      char text[200];
      std::snprintf(text, sizeof(text), "%s held at %.4g", estimate.name.c_str(), held);
      evidence += (evidence.empty() ? "" : ", ") + std::string(text);
      break;
    }
  }
  if (names.empty()) return {};
  std::string list;
  for (const std::string& name : names) {
    list += (list.empty() ? "" : ", ") + name;
    undetermined.push_back(name);
  }
  char rises[160];
  std::snprintf(rises, sizeof(rises),
                " (%g standard errors from the result, the other parameters refitted, chi2 rises "
                "by less than %g reduced chi2, where a quadratic surface rises by %g: ",
                kProfileStandardErrors, kProfileRise,
                kProfileStandardErrors * kProfileStandardErrors);
  return {"the data do not determine " + list + rises + evidence +
          "): the uncertainties understate how far the data let them move"};
}

ConvergenceOutcome ConvergenceStatusOf(const LevenbergMarquardtSummary& summary, double chi_squared,
                                       double reduced_chi_squared, double sigma) {
  using Status = LevenbergMarquardtStatus;
  const std::string optimiser = " (optimiser: " + summary.reason + ")";
  const bool evaluated = summary.passes > 0;  // a chi2 was computed at the start
  const bool start_finite = !evaluated || std::isfinite(summary.initial_chi2);
  const bool result_finite =
      !evaluated || (std::isfinite(summary.final_chi2) && std::isfinite(chi_squared));
  // Non-finite chi2 at either end: no step could be judged, whatever the optimiser said.
  if (summary.status == Status::kFailedNonFinite || !start_finite || !result_finite) {
    if (!evaluated) return {"failed_non_finite_objective", summary.reason};
    const double shown = !start_finite                        ? summary.initial_chi2
                         : !std::isfinite(summary.final_chi2) ? summary.final_chi2
                                                              : chi_squared;
    return {"failed_non_finite_objective",
            "chi2 is not finite " + std::string(start_finite ? "at the result" : "at the start") +
                " (chi2 = " + ReasonNumber(shown) +
                ", optimization.nlsq.sigma = " + ReasonNumber(sigma) +
                "): the squared residuals (data - model)^2 / sigma^2 overflow or are not "
                "numbers, so no step can be judged; check the data file (values far outside "
                "the model's range) and sigma" +
                optimiser};
  }
  if (summary.IsConverged() || summary.status == Status::kMaxIterations) {
    if (summary.accepted_steps == 0 && reduced_chi_squared > kNoProgressReducedChi2) {
      return {"no_progress",
              "the fit never moved from its start (0 accepted steps in " +
                  std::to_string(summary.iterations) + " iterations) and its reduced chi2 " +
                  ReasonNumber(reduced_chi_squared) + " is above " +
                  ReasonNumber(kNoProgressReducedChi2) +
                  ": residuals over a thousand sigma wide mean that the model does not "
                  "describe the data at all (check the data file) or that "
                  "optimization.nlsq.sigma = " +
                  ReasonNumber(sigma) + " is far too small" + optimiser};
    }
    return {summary.IsConverged() ? "converged" : "max_iterations", summary.reason};
  }
  return {"failed", summary.reason};
}

std::optional<std::string> SigmaAdvice(double reduced_chi_squared, int64_t degrees_of_freedom,
                                       double sigma) {
  if (degrees_of_freedom <= 0 || !std::isfinite(reduced_chi_squared) ||
      reduced_chi_squared < kNegligibleReducedChi2 || QualityFlag(reduced_chi_squared) == "good") {
    return std::nullopt;
  }
  const double scatter = std::sqrt(reduced_chi_squared);  // the residuals' rms in sigmas
  return "reduced chi2 " + ReasonNumber(reduced_chi_squared) + ": the residuals scatter by " +
         ReasonNumber(scatter) +
         " sigma; optimization.nlsq.sigma = " + ReasonNumber(sigma * scatter) + " (now " +
         ReasonNumber(sigma) +
         ") would make it 1 if the model describes the data (the uncertainties are scaled by the "
         "reduced chi2 already and do not change)";
}

int FitExitCode(const std::string& convergence_status) {
  return convergence_status == "converged" || convergence_status == "max_iterations" ? kExitSuccess
                                                                                     : kExitFailure;
}

FitQuality AssessFitQuality(const FitQualityInputs& inputs) {
  static const char* const kLevels[] = {"good", "marginal", "poor"};
  constexpr int kPoor = 2;
  FitQuality quality;
  int level = 0;
  const double reduced = inputs.reduced_chi_squared;
  if (inputs.degrees_of_freedom <= 0) {
    level = kPoor;
    quality.reasons.push_back(
        "no degrees of freedom (dof = " + std::to_string(inputs.degrees_of_freedom) +
        "): the reduced chi2 measures nothing");
  } else if (std::isfinite(reduced) && reduced < kNegligibleReducedChi2) {
    level = kPoor;
    quality.reasons.push_back("reduced chi2 " + ReasonNumber(reduced) + " is below " +
                              ReasonNumber(kNegligibleReducedChi2) +
                              ": sigma (optimization.nlsq.sigma) is far larger than the data's "
                              "scatter, so chi2 measures nothing");
  } else {
    const std::string chi2_level = QualityFlag(reduced);
    level = chi2_level == "good" ? 0 : chi2_level == "marginal" ? 1 : kPoor;
    if (!std::isfinite(reduced)) {
      quality.reasons.push_back("the reduced chi2 is not finite");
    } else if (reduced >= 1.5) {
      quality.reasons.push_back("reduced chi2 " + ReasonNumber(reduced) + " is at least " +
                                (reduced >= 3.0 ? "3.0" : "1.5") +
                                ": the model or sigma does not describe the data");
    } else if (reduced < 0.5) {
      quality.reasons.push_back("reduced chi2 " + ReasonNumber(reduced) +
                                " is below 0.5: sigma overestimates the noise (the uncertainties "
                                "are too large) or the model fits the noise");
    }
  }
  // Each kind of problem lowers the level once, however many parameters it concerns.
  const auto lower_once = [&level] { level = level < kPoor ? level + 1 : kPoor; };
  if (!inputs.at_lower_bound.empty() || !inputs.at_upper_bound.empty()) {
    lower_once();
    for (const std::string& name : inputs.at_lower_bound) {
      quality.reasons.push_back(name + " ended on its lower bound");
    }
    for (const std::string& name : inputs.at_upper_bound) {
      quality.reasons.push_back(name + " ended on its upper bound");
    }
  }
  if (!inputs.undetermined.empty()) {
    lower_once();
    quality.reasons.push_back("the data do not determine " + CommaList(inputs.undetermined));
  }
  if (!inputs.unbounded_intervals.empty()) {
    lower_once();
    quality.reasons.push_back("the profile intervals of " + CommaList(inputs.unbounded_intervals) +
                              " reach a bound or could not be computed");
  }
  if (!inputs.methods_disagree.empty()) {
    lower_once();
    quality.reasons.push_back("the jackknife's uncertainties of " +
                              CommaList(inputs.methods_disagree) +
                              " lie below the standard errors of independent noise");
  }
  if (inputs.nothing_free) {
    level = kPoor;
    quality.reasons.push_back(
        "no fitted parameter was free to move: the bounds, not the data, hold every one");
  }
  if (inputs.convergence_status == "max_iterations") {
    lower_once();
    quality.reasons.push_back("stopped at max_iterations before converging");
  } else if (inputs.convergence_status == "failed_non_finite_objective") {
    level = kPoor;
    quality.reasons.push_back("chi2 is not finite (failed_non_finite_objective)");
  } else if (inputs.convergence_status == "no_progress") {
    level = kPoor;
    quality.reasons.push_back("the fit never moved from its start (no_progress)");
  } else if (inputs.convergence_status != "converged") {
    level = kPoor;
    quality.reasons.push_back("the optimiser did not converge (" + inputs.convergence_status + ")");
  }
  quality.flag = kLevels[level];
  return quality;
}

namespace {

// The variance factor from the curvature covariance (both triangles counted: s^2 = chi2 /
// (2n - p) over 2 J^T J) to the standard error of n independent stored points (s^2 = chi2_upper /
// (n - p) over J^T J): (2n - p) / (n - p).
double StandardErrorScale(int64_t stored_points, int effective_parameters) {
  const double n = static_cast<double>(stored_points);
  const double p = static_cast<double>(effective_parameters);
  return n > p ? (2.0 * n - p) / (n - p) : 2.0;
}

// Replaces the result's curvature uncertainties and covariance with those of `uncertainty`
// (RecordSolution's contract); standard_scale: the standard method's scale of the reduced
// covariance, the dof rescaling included. A parameter the data do not determine (undetermined:
// reduced indices) keeps the standard method's row and column, whose variance is the lower bound
// of a dropped direction: the jackknife's pseudo-inverse gives it none. Bound marks stay.
void ReportUncertainty(const ReportedUncertainty& uncertainty, const ScalingMap& map,
                       const Eigen::VectorXd& theta, const Eigen::MatrixXd& curvature,
                       const std::vector<int>& undetermined, double standard_scale,
                       FitResult& result) {
  result.uncertainty_method = std::string(ToString(uncertainty.method));
  result.residual_lag1_correlation = uncertainty.residual_lag1_correlation;
  if (uncertainty.method == UncertaintyMethod::kCurvature || curvature.size() == 0) return;
  const bool jackknife =
      uncertainty.method == UncertaintyMethod::kJackknife && uncertainty.jackknife.has_value();
  if (!jackknife) result.uncertainty_method = std::string(ToString(UncertaintyMethod::kStandard));
  const Eigen::MatrixXd standard = standard_scale * curvature;
  Eigen::MatrixXd reduced = standard;
  if (jackknife) {
    reduced = uncertainty.jackknife->covariance;
    for (int u : undetermined) {
      reduced.row(u) = standard.row(u);
      reduced.col(u) = standard.col(u);
    }
  }
  const ExpandedSolution reported = ExpandSolution(map, theta, reduced, 1.0);
  const int n_physical = static_cast<int>(result.physical.size());
  if (jackknife) {
    result.uncertainty_blocks = uncertainty.jackknife->blocks;
    result.noise_correlation_frames = uncertainty.jackknife->correlation_frames;
    const ExpandedSolution independent = ExpandSolution(map, theta, standard, 1.0);
    result.uncertainty_ratio_to_standard.clear();
    for (int p = 0; p < n_physical; ++p) {
      result.uncertainty_ratio_to_standard.push_back(reported.uncertainties[p] /
                                                     independent.uncertainties[p]);
    }
  }
  const int n_angles = static_cast<int>(result.per_angle.size());
  for (int p = 0; p < n_physical; ++p)
    result.physical[static_cast<size_t>(p)].uncertainty = reported.uncertainties[p];
  for (int k = 0; k < n_angles; ++k) {
    result.per_angle[static_cast<size_t>(k)].contrast.uncertainty =
        reported.uncertainties[n_physical + k];
    result.per_angle[static_cast<size_t>(k)].offset.uncertainty =
        reported.uncertainties[n_physical + n_angles + k];
  }
  result.covariance.clear();
  for (int i = 0; i < reported.covariance.rows(); ++i) {
    for (int j = 0; j < reported.covariance.cols(); ++j) {
      result.covariance.push_back(reported.covariance(i, j));
    }
  }
}

}  // namespace

std::vector<double> RecordSolution(const LevenbergMarquardtSummary& summary,
                                   const LevenbergMarquardtOptions& lm,
                                   const FitParameters& parameters, const ResolvedScaling& scaling,
                                   const BatchedObjective& objective,
                                   const std::vector<double>& phi_degrees, bool full_validation,
                                   FitResult& result, std::optional<double> sum_of_squares,
                                   const ProfileProbe& profile,
                                   const ReportedUncertainty& uncertainty) {
  const ScalingMap& map = parameters.map;
  const std::vector<std::string>& names = PhysicalParameterNames(result.analysis_mode);
  const int n_physical = static_cast<int>(names.size());
  const int n_angles = static_cast<int>(phi_degrees.size());
  std::vector<std::string> warnings = summary.warnings;
  const std::vector<std::string> undetermined = UndeterminedWarnings(summary, lm);
  warnings.insert(warnings.end(), undetermined.begin(), undetermined.end());
  if (full_validation) {
    const std::vector<std::string> at_bounds = ResultBoundWarnings(summary, lm);
    warnings.insert(warnings.end(), at_bounds.begin(), at_bounds.end());
  }
  for (const std::string& warning : warnings) {
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }

  // Results in the full layout: one contrast and one offset per angle (docs/model.md, Per-angle
  // scaling), dof with the reference's effective parameter count (docs/results.md, Degrees of
  // freedom).
  const int n_effective =
      EffectiveParameterCount(scaling.mode, n_physical, n_angles, map.num_reduced());
  const int64_t dof = objective.num_residuals() - n_effective;
  const double covariance_scale = static_cast<double>(std::max<int64_t>(summary.dof, 1)) /
                                  static_cast<double>(std::max<int64_t>(dof, 1));
  const ExpandedSolution full =
      ExpandSolution(map, summary.theta, summary.covariance, covariance_scale);
  // No covariance (a fit that failed before one, docs/results.md, Convergence status): the
  // uncertainties are unknown, NaN (null in the JSON files), not a claim of exactness.
  const bool has_uncertainties = full.uncertainties.size() > 0;
  const std::vector<std::string> bound_marks = FullLayoutBoundMarks(summary, lm, map);
  const auto estimate = [&](const std::string& name, int f) {
    return ParameterEstimate{
        name, full.theta[f],
        has_uncertainties ? full.uncertainties[f] : std::numeric_limits<double>::quiet_NaN(),
        bound_marks[static_cast<size_t>(f)]};
  };
  for (int p = 0; p < n_physical; ++p) {
    result.physical.push_back(estimate(names[static_cast<size_t>(p)], p));
  }
  for (int k = 0; k < n_angles; ++k) {
    result.per_angle.push_back(
        {phi_degrees[static_cast<size_t>(k)], estimate("contrast", objective.ContrastIndex(k)),
         estimate("offset", objective.OffsetIndex(k)), objective.model().AngleQ(k)});
  }
  result.covariance_names = parameters.full_names;
  for (int i = 0; i < full.covariance.rows(); ++i) {
    for (int j = 0; j < full.covariance.cols(); ++j) {
      result.covariance.push_back(full.covariance(i, j));
    }
  }
  if (full_validation) {
    const std::string list = CommaList(StrongCorrelations(result, n_physical));
    if (!list.empty()) {
      spdlog::info(
          "correlated beyond 0.99 (each one's uncertainty is large along the pair; "
          "`correlation` in parameters.json): {}",
          list);
    }
  }
  result.per_angle_mode = std::string(ToString(scaling.mode));
  result.chi_squared = summary.final_chi2;
  if (!objective.loss().is_linear()) {
    result.loss = std::string(ToString(objective.loss().function));
    result.f_scale = objective.loss().f_scale;
    result.robust_cost = 0.5 * summary.final_chi2;
    // No solution to evaluate (the fit never computed a point): not a number, as chi2 would be.
    result.chi_squared = sum_of_squares.value_or(std::numeric_limits<double>::quiet_NaN());
  }
  result.reduced_chi_squared = result.chi_squared / static_cast<double>(std::max<int64_t>(dof, 1));
  result.degrees_of_freedom = dof;
  ConvergenceOutcome outcome = ConvergenceStatusOf(summary, result.chi_squared,
                                                   result.reduced_chi_squared, objective.sigma());
  result.convergence_status = std::move(outcome.status);
  result.termination_reason = std::move(outcome.reason);
  std::vector<std::string> solution_warnings;
  if (NothingFree(summary)) {
    solution_warnings.push_back(
        "no fitted parameter was free to move at the result: each is held on a bound with its "
        "gradient pointing out (or by equal bounds), so the bounds, not the data, set the values "
        "(widen parameter_space.bounds)");
  }
  if (dof > 0 && std::isfinite(result.reduced_chi_squared) &&
      result.reduced_chi_squared < kNegligibleReducedChi2) {
    solution_warnings.push_back(
        "reduced chi2 " + ReasonNumber(result.reduced_chi_squared) + " is below " +
        ReasonNumber(kNegligibleReducedChi2) +
        ": optimization.nlsq.sigma = " + ReasonNumber(objective.sigma()) +
        " is far larger than the data's scatter, so chi2 and the quality flag's chi2 level "
        "measure nothing (the uncertainties, scaled by the reduced chi2, do not depend on sigma)");
  }
  if (const std::optional<std::string> advice =
          SigmaAdvice(result.reduced_chi_squared, dof, objective.sigma())) {
    solution_warnings.push_back(*advice);
  }
  for (const std::string& warning : solution_warnings) {
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  FitQualityInputs quality_inputs = QualityInputs(summary, lm, result);
  // Named by the checks against other minima and profile points: their chi2 surface is far from
  // quadratic, so their intervals come from profiles when a probe is at hand (below).
  std::vector<std::string> loosely_determined;
  if (full_validation) {
    for (const std::string& warning :
         OtherMinimumWarnings(result, objective.num_points(), loosely_determined)) {
      spdlog::warn("{}", warning);
      result.warnings.push_back(warning);
    }
    // The profile check skips what is named undetermined already.
    std::vector<std::string> named = quality_inputs.undetermined;
    named.insert(named.end(), loosely_determined.begin(), loosely_determined.end());
    const size_t before = named.size();
    for (const std::string& warning : ProfileWarnings(result, profile, named)) {
      spdlog::warn("{}", warning);
      result.warnings.push_back(warning);
    }
    loosely_determined.insert(loosely_determined.end(), named.begin() + static_cast<long>(before),
                              named.end());
    for (const std::string& name : loosely_determined) AddName(name, quality_inputs.undetermined);
  }
  const int64_t stored_points = objective.num_residuals() / 2;
  ReportUncertainty(uncertainty, map, summary.theta, summary.covariance,
                    summary.undetermined_parameters,
                    covariance_scale * StandardErrorScale(stored_points, n_effective), result);
  for (const std::string& warning :
       UncertaintyDisagreements(result, quality_inputs.methods_disagree)) {
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  const bool statistical =
      result.uncertainty_method == "jackknife" || result.uncertainty_method == "standard";
  // The physical parameters along which J^T J is singular: their u is a lower bound.
  std::vector<std::string> singular;
  for (const int i : summary.undetermined_parameters) {
    const std::string& name = lm.parameter_names[static_cast<size_t>(i)];
    if (Contains(names, name)) singular.push_back(name);
  }
  // The profiled parameters with an end at a bound or not computed, over every call below.
  std::vector<std::string> unbounded;
  if (uncertainty.intervals && has_uncertainties) {
    quality_inputs.unbounded_intervals =
        AddProfileIntervals(uncertainty.intervals, full.uncertainties, lm, result,
                            uncertainty.interval_ends, nullptr, singular);
    unbounded = quality_inputs.unbounded_intervals;
  } else if (has_uncertainties && statistical) {
    // Profiles where value +- t u would claim the curvature's shape (docs/results.md, Intervals):
    // what the checks found far from quadratic (the profile check's probe) and what the data do
    // not determine, each parameter once (a singular one on the undetermined parameters' scale
    // whichever probe profiles it). The quality flag counts both as undetermined already.
    const bool checked = profile && !loosely_determined.empty();
    if (checked) {
      unbounded = AddProfileIntervals(profile, full.uncertainties, lm, result, nullptr,
                                      &loosely_determined, singular);
    }
    // Not those whose value +- t u spans the bounds already: the hull is the bounds anyway.
    std::vector<std::string> to_profile;
    for (const std::string& name : singular) {
      if (checked && Contains(loosely_determined, name)) continue;
      if (!StudentIntervalSpansBounds(lm, result, name)) to_profile.push_back(name);
    }
    if (uncertainty.undetermined_intervals && !to_profile.empty()) {
      for (const std::string& name :
           AddProfileIntervals(uncertainty.undetermined_intervals, full.uncertainties, lm, result,
                               nullptr, &to_profile, singular)) {
        AddName(name, unbounded);
      }
    }
  }
  if (!unbounded.empty()) {
    std::vector<std::string> in_order;  // the mode's order
    for (const ParameterEstimate& physical_estimate : result.physical) {
      if (Contains(unbounded, physical_estimate.name)) in_order.push_back(physical_estimate.name);
    }
    const std::string warning = "the profile intervals of " + CommaList(in_order) +
                                " reach a bound or could not be computed: the data do not bound "
                                "them within parameter_space.bounds (interval_note)";
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  AddStudentIntervals(lm, result, singular);
  if (full_validation && has_uncertainties) {
    WidenIntervalsToOtherMinima(full.uncertainties, objective.num_points(), result);
  }
  // Intervals that are the bounds: the parameter is undetermined within them.
  std::vector<std::string> spanning;
  for (const ParameterEstimate& physical_estimate : result.physical) {
    if (!NotDeterminedWithinBounds(physical_estimate)) continue;
    spanning.push_back(physical_estimate.name);
    AddName(physical_estimate.name, quality_inputs.undetermined);
  }
  if (full_validation && !spanning.empty()) {
    const std::string warning = "the 68 % intervals of " + CommaList(spanning) +
                                " span parameter_space.bounds: the data do not determine them "
                                "within the bounds (interval_note)";
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  FitQuality quality = AssessFitQuality(quality_inputs);
  result.quality_flag = std::move(quality.flag);
  result.quality_reasons = std::move(quality.reasons);
  return std::vector<double>(full.theta.data(), full.theta.data() + n_physical);
}

namespace {

// The four ends of one parameter's intervals, ends[first .. first + 3] (68 % lower and upper,
// 95 % lower and upper, as AddProfileIntervals orders its searches), made consistent: each end
// widened to the profile points of all four searches below its level (WidenProfileEnd), and each
// 95 % end at least as far out as the 68 % one, so that the 68 % interval lies inside the 95 %.
void NestProfileEnds(const std::vector<ProfileEndSearch>& searches, size_t first,
                     std::vector<ProfileEndFound>& ends) {
  std::vector<std::pair<double, double>> points;
  for (size_t i = first; i < first + 4; ++i) {
    points.insert(points.end(), ends[i].points.begin(), ends[i].points.end());
  }
  for (size_t i = first; i < first + 4; ++i) {
    const ProfileEndSearch& search = searches[i];
    ends[i].end = WidenProfileEnd(ends[i].end, search.value, search.direction, search.bound,
                                  search.target, points);
  }
  for (size_t side = 0; side < 2; ++side) {
    const ProfileEnd& inner = ends[first + side].end;
    ProfileEnd& outer = ends[first + 2 + side].end;
    const int direction = searches[first + side].direction;
    if (inner.note == "failed" || outer.note == "failed") continue;
    if (direction * (inner.value - outer.value) > 0.0) outer = inner;
  }
}

}  // namespace

std::vector<std::string> AddProfileIntervals(const ProfileProbe& probe,
                                             const Eigen::VectorXd& curvature,
                                             const LevenbergMarquardtOptions& lm, FitResult& result,
                                             const ProfileEndsRunner& runner,
                                             const std::vector<std::string>* only,
                                             const std::vector<std::string>& undetermined) {
  const double infinity = std::numeric_limits<double>::infinity();
  const double chi2_min = result.chi_squared;
  const double s2 = result.reduced_chi_squared;
  const double undetermined_ratio = UndeterminedUncertaintyRatio(result, curvature, undetermined);
  // Every end to find, parameter by parameter: the 68 % lower and upper, then the 95 % ones.
  std::vector<ProfileEndSearch> searches;
  std::vector<size_t> first_search(result.physical.size(), 0);
  std::vector<bool> profiled(result.physical.size(), false);
  for (size_t p = 0; p < result.physical.size(); ++p) {
    const ParameterEstimate& estimate = result.physical[p];
    const double reported = estimate.uncertainty;
    const double curved = static_cast<Eigen::Index>(p) < curvature.size()
                              ? curvature[static_cast<Eigen::Index>(p)]
                              : 0.0;
    const std::optional<std::pair<double, double>> bounds = BoundsByName(lm, estimate.name);
    if (!(reported > 0.0) || !(curved > 0.0) || !std::isfinite(reported) || !std::isfinite(s2) ||
        !bounds || (only && std::find(only->begin(), only->end(), estimate.name) == only->end())) {
      continue;
    }
    const auto [lower, upper] = *bounds;
    profiled[p] = true;
    first_search[p] = searches.size();
    const double ratio = Contains(undetermined, estimate.name) && std::isfinite(undetermined_ratio)
                             ? undetermined_ratio
                             : reported / curved;
    for (const double z : {1.0, 1.96}) {
      const double target = z * z * s2 * ratio * ratio;
      const double first_step = z * ratio * curved;
      searches.push_back({estimate.name, estimate.value, first_step, -1, lower, target});
      searches.push_back({estimate.name, estimate.value, first_step, +1, upper, target});
    }
  }
  const std::function<ProfileEndFound(size_t)> find = [&](size_t i) {
    const ProfileEndSearch& search = searches[i];
    ProfileEndFound found;
    const auto rise = [&](double value) {
      const double delta = probe(search.name, value, -infinity) - chi2_min;
      found.points.emplace_back(value, delta);
      return delta;
    };
    found.end = FindProfileEnd(rise, search.value, search.first_step, search.direction,
                               search.bound, search.target);
    return found;
  };
  std::vector<ProfileEndFound> ends;
  if (runner) {
    ends = runner(searches.size(), find);
  } else {
    for (size_t i = 0; i < searches.size(); ++i) ends.push_back(find(i));
  }
  HOMODYNE_CHECK(ends.size() == searches.size());
  for (size_t p = 0; p < result.physical.size(); ++p) {
    if (profiled[p]) NestProfileEnds(searches, first_search[p], ends);
  }

  std::vector<std::string> reached;
  for (size_t p = 0; p < result.physical.size(); ++p) {
    if (!profiled[p]) continue;
    ParameterEstimate& estimate = result.physical[p];
    const double curved = curvature[static_cast<Eigen::Index>(p)];
    // Every profile point, for the figure of the profiles (docs/results.md, Profile intervals).
    std::vector<std::pair<double, double>> points{{estimate.value, 0.0}};
    std::vector<std::string> notes;
    for (int level = 0; level < 2; ++level) {
      const ProfileEndFound& low = ends[first_search[p] + 2 * static_cast<size_t>(level)];
      const ProfileEndFound& high = ends[first_search[p] + 2 * static_cast<size_t>(level) + 1];
      for (const ProfileEndFound* found : {&low, &high}) {
        points.insert(points.end(), found->points.begin(), found->points.end());
      }
      (level == 0 ? estimate.interval_68 : estimate.interval_95) = {low.end.value, high.end.value};
      estimate.interval_method = "profile";
      const std::string level_name = level == 0 ? "68 %" : "95 %";
      for (const auto& [end, side] : {std::pair{low.end, "lower"}, std::pair{high.end, "upper"}}) {
        if (end.note == "bound") {
          notes.push_back(level_name + " " + side + " end at the " + side +
                          " bound (chi2 rises by less within the bounds)");
        } else if (end.note == "failed") {
          notes.push_back(level_name + " " + side + " end not computed (a profile fit failed)");
        }
      }
    }
    const bool spans_bounds =
        ends[first_search[p]].end.note == "bound" && ends[first_search[p] + 1].end.note == "bound";
    if (spans_bounds) notes.insert(notes.begin(), kNotDeterminedNote);
    for (size_t n = 0; n < notes.size(); ++n) {
      estimate.interval_note += (n ? "; " : "") + notes[n];
    }
    if (!notes.empty()) reached.push_back(estimate.name);
    std::sort(points.begin(), points.end());
    // A value two searches held (a bound both reached) is the same refit: once.
    points.erase(std::unique(points.begin(), points.end(),
                             [](const auto& a, const auto& b) { return a.first == b.first; }),
                 points.end());
    estimate.profile_values.clear();
    estimate.profile_delta_chi2.clear();
    for (const auto& [value, delta] : points) {
      if (!std::isfinite(delta)) continue;
      estimate.profile_values.push_back(value);
      estimate.profile_delta_chi2.push_back(delta);
    }
    estimate.profile_quadratic = s2 / (curved * curved);
  }
  return reached;
}

double UndeterminedUncertaintyRatio(const FitResult& result, const Eigen::VectorXd& curvature,
                                    const std::vector<std::string>& undetermined) {
  double largest = std::numeric_limits<double>::quiet_NaN();
  for (size_t p = 0; p < result.physical.size() && static_cast<Eigen::Index>(p) < curvature.size();
       ++p) {
    const double reported = result.physical[p].uncertainty;
    const double curved = curvature[static_cast<Eigen::Index>(p)];
    if (Contains(undetermined, result.physical[p].name) || !(reported > 0.0) || !(curved > 0.0) ||
        !std::isfinite(reported) || !std::isfinite(curved)) {
      continue;
    }
    const double ratio = reported / curved;
    if (!(ratio <= largest)) largest = ratio;
  }
  return largest;
}

std::vector<std::string> WidenIntervalsToOtherMinima(const Eigen::VectorXd& curvature,
                                                     int64_t num_points, FitResult& result) {
  const GlobalSearchRecord& search = result.global_search;
  if (search.chosen < 0 || search.search_points <= 0) return {};
  const double scale = static_cast<double>(num_points) / static_cast<double>(search.search_points);
  const double s2 = ReducedObjective(result);
  const double chosen_chi2 = search.minima[static_cast<size_t>(search.chosen)].chi2;
  std::vector<std::string> widened;
  for (size_t p = 0; p < result.physical.size(); ++p) {
    ParameterEstimate& estimate = result.physical[p];
    const double reported = estimate.uncertainty;
    const double curved = static_cast<Eigen::Index>(p) < curvature.size()
                              ? curvature[static_cast<Eigen::Index>(p)]
                              : 0.0;
    const auto finite = [](const std::vector<double>& interval) {
      return interval.size() == 2 && std::isfinite(interval[0]) && std::isfinite(interval[1]);
    };
    // An end a profile could not compute stays as it is (its note says so).
    if (!finite(estimate.interval_68) || !finite(estimate.interval_95) || !(reported > 0.0) ||
        !(curved > 0.0) || !std::isfinite(reported) || !std::isfinite(s2)) {
      continue;
    }
    std::string note;
    for (size_t m = 0; m < search.minima.size(); ++m) {
      const GlobalSearchRecord::Minimum& other = search.minima[m];
      const std::optional<double> at_other = ValueAtMinimum(other, estimate.name);
      if (static_cast<int>(m) == search.chosen || !at_other) continue;
      const double value = *at_other;
      const double delta = (other.chi2 - chosen_chi2) * scale;
      if (!std::isfinite(value) || !std::isfinite(delta)) continue;
      for (const double z : {1.0, 1.96}) {
        std::vector<double>& interval = z == 1.0 ? estimate.interval_68 : estimate.interval_95;
        const double threshold = z * z * s2 * (reported * reported) / (curved * curved);
        if (!(delta <= threshold) || (value >= interval[0] && value <= interval[1])) continue;
        interval[0] = std::min(interval[0], value);
        interval[1] = std::max(interval[1], value);
        char text[160];
        std::snprintf(text, sizeof(text),
                      "%s widened to %.4g, another minimum of the global phase (chi2 %.3g higher)",
                      z == 1.0 ? "68 %" : "95 %", value, delta);
        note += (note.empty() ? "" : "; ") + std::string(text);
      }
    }
    if (note.empty()) continue;
    estimate.interval_note += (estimate.interval_note.empty() ? "" : "; ") + note;
    widened.push_back(estimate.name);
  }
  return widened;
}

double StudentQuantile(double probability, int degrees_of_freedom) {
  if (degrees_of_freedom <= 0) {
    return boost::math::quantile(boost::math::normal_distribution<double>(), probability);
  }
  return boost::math::quantile(
      boost::math::students_t_distribution<double>(static_cast<double>(degrees_of_freedom)),
      probability);
}

bool StudentIntervalSpansBounds(const LevenbergMarquardtOptions& lm, const FitResult& result,
                                const std::string& name) {
  const std::optional<std::pair<double, double>> bounds = BoundsByName(lm, name);
  if (!bounds) return false;
  for (const ParameterEstimate& estimate : result.physical) {
    if (estimate.name != name) continue;
    const double half = StudentHalfWidth(result, estimate.uncertainty, kOneSigmaProbability);
    return estimate.value - half <= bounds->first && estimate.value + half >= bounds->second;
  }
  return false;
}

void AddStudentIntervals(const LevenbergMarquardtOptions& lm, FitResult& result,
                         const std::vector<std::string>& widen) {
  if (result.uncertainty_method != "jackknife" && result.uncertainty_method != "standard") return;
  for (ParameterEstimate& estimate : result.physical) {
    const bool hull = !estimate.interval_68.empty() && !estimate.interval_95.empty() &&
                      Contains(widen, estimate.name);
    if ((!estimate.interval_68.empty() && !hull) || !(estimate.uncertainty > 0.0) ||
        !std::isfinite(estimate.uncertainty)) {
      continue;
    }
    const std::optional<std::pair<double, double>> bounds = BoundsByName(lm, estimate.name);
    if (!bounds) continue;  // held fixed
    const auto [lower, upper] = *bounds;
    bool clipped = false;
    bool widened = false;
    for (const double probability : {kOneSigmaProbability, 0.975}) {
      const double half = StudentHalfWidth(result, estimate.uncertainty, probability);
      const double low = std::max(lower, estimate.value - half);
      const double high = std::min(upper, estimate.value + half);
      clipped = clipped || low > estimate.value - half || high < estimate.value + half;
      std::vector<double>& interval =
          probability == 0.975 ? estimate.interval_95 : estimate.interval_68;
      if (!hull) {
        interval = {low, high};
        continue;
      }
      // A profile end that could not be computed (NaN) stays unknown.
      widened = widened || low < interval[0] || high > interval[1];
      interval = {std::min(interval[0], low), std::max(interval[1], high)};
    }
    const bool spans = estimate.interval_68[0] <= lower && estimate.interval_68[1] >= upper;
    if (hull) {
      std::string note = estimate.interval_note;
      if (widened) note += std::string(note.empty() ? "" : "; ") + "widened to value +- t u";
      if (spans && note.rfind(kNotDeterminedNote, 0) != 0) {
        note = kNotDeterminedNote + (note.empty() ? "" : "; " + note);
      }
      estimate.interval_note = note;
      continue;
    }
    estimate.interval_method = "student_t";
    if (spans) {
      estimate.interval_note = kNotDeterminedNote;
    } else if (clipped) {
      estimate.interval_note = "clipped to parameter_space.bounds";
    }
  }
}

void RecordTotals(const FitTotals& totals, FitResult& result) {
  const LevenbergMarquardtSummary& summary = totals.summary;
  const BatchStatistics& statistics = totals.checkpoint_statistics;
  result.batch_statistics = {
      statistics.batches, statistics.retries + totals.objective.read_retries(),
      statistics.read_failures, statistics.checkpoint_failures, totals.checkpoint_saves};
  result.optimization_seconds = summary.seconds;
  result.n_points = totals.info.num_fit_points();
  result.n_angles = totals.info.num_angles();
  result.n_times = totals.info.num_times();
  result.q_inv_angstrom = totals.info.q_inv_angstrom;
  result.iterations = summary.iterations;
  result.passes = summary.passes + summary.cost_passes;
  result.point_evaluations = result.passes * totals.objective.num_points();
  result.backend = std::string(ToString(totals.backend.kind()));
  result.threads = totals.threads;
  result.total_seconds = totals.total_seconds;
  result.memory_peak_mb = PeakResidentMb();
}

void RecordBackendSelfCheck(const BackendChoice& choice, FitResult& result) {
  if (choice.self_check == nullptr || !choice.self_check->ran) return;
  const SelfCheckReport& report = *choice.self_check;
  BackendSelfCheckRecord& record = result.backend_self_check;
  record.ran = true;
  record.passed = report.passed;
  record.largest_difference = report.largest_difference;
  record.where = report.failure.empty() ? report.where : report.failure;
  record.seconds = report.seconds;
  record.report = report.Describe();
  if (!report.passed) result.warnings.push_back(record.report + "; computed on the CPU instead");
}

}  // namespace homodyne
