// The phi0 mirror check (phi0_mirror.h; docs/results.md, The phi0 mirror check).
#include "phi0_mirror.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "interrupts.h"
#include "optimize/number_text.h"
#include "optimize/reparametrized_problem.h"

namespace homodyne {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// x modulo `period`, in [0, period).
double Modulo(double x, double period) {
  const double r = std::fmod(x, period);
  return r < 0.0 ? r + period : r;
}

// The signed difference x - y modulo `period`, in [-period/2, period/2).
double CircularDifference(double x, double y, double period) {
  return Modulo(x - y + 0.5 * period, period) - 0.5 * period;
}

std::string AnglesText(const std::vector<double>& phi_degrees) {
  std::string text;
  for (const double phi : phi_degrees) text += (text.empty() ? "" : ", ") + FormatNumber(phi);
  return text;
}

}  // namespace

std::optional<double> Phi0Mirror(const std::vector<double>& phi_degrees, double phi0, double lower,
                                 double upper, double* outside_bounds) {
  if (outside_bounds != nullptr) *outside_bounds = kNaN;
  if (phi_degrees.empty() || !std::isfinite(phi0)) return std::nullopt;
  // The axis a modulo 90: the mean of the angles' offsets from the first, modulo 90.
  const double first = phi_degrees.front();
  double sum = 0.0;
  for (const double phi : phi_degrees) {
    const double offset = CircularDifference(phi, first, 90.0);
    if (std::abs(offset) > kPhi0MirrorAngleToleranceDegrees) return std::nullopt;
    sum += offset;
  }
  const double axis = first + sum / static_cast<double>(phi_degrees.size());
  const double mirror = 2.0 * axis - phi0;  // modulo 180
  // The representative mirror + m 180 nearest to phi0 inside [lower, upper].
  std::optional<double> best;
  double nearest_outside = kNaN;
  const double centre = std::isfinite(lower) && std::isfinite(upper) ? 0.5 * (lower + upper) : phi0;
  const double base = centre + CircularDifference(mirror, centre, 180.0);
  for (int m = -3; m <= 3; ++m) {
    const double candidate = base + 180.0 * m;
    if (candidate >= lower && candidate <= upper) {
      if (!best || std::abs(candidate - phi0) < std::abs(*best - phi0)) best = candidate;
    } else if (std::isnan(nearest_outside) ||
               std::min(std::abs(candidate - lower), std::abs(candidate - upper)) <
                   std::min(std::abs(nearest_outside - lower), std::abs(nearest_outside - upper))) {
      nearest_outside = candidate;
    }
  }
  if (!best && outside_bounds != nullptr) *outside_bounds = nearest_outside;
  return best;
}

std::optional<Phi0MirrorFinding> CheckPhi0Mirror(BatchedObjective& objective, const ScalingMap& map,
                                                 const LevenbergMarquardtOptions& lm,
                                                 const LevenbergMarquardtSummary& solution,
                                                 const std::vector<double>& phi_degrees,
                                                 bool* stopped) {
  if (stopped != nullptr) *stopped = false;
  const auto at = std::find(lm.parameter_names.begin(), lm.parameter_names.end(), "phi0");
  if (at == lm.parameter_names.end() || solution.theta.size() == 0 ||
      static_cast<size_t>(solution.theta.size()) != lm.parameter_names.size()) {
    return std::nullopt;  // no phi0 (static, two_component), phi0 held, or no solution
  }
  const int index = static_cast<int>(at - lm.parameter_names.begin());
  const double phi0 = solution.theta[index];
  const double infinity = std::numeric_limits<double>::infinity();
  const double lower = lm.lower_bounds.size() > index ? lm.lower_bounds[index] : -infinity;
  const double upper = lm.upper_bounds.size() > index ? lm.upper_bounds[index] : infinity;
  if (lower == upper) return std::nullopt;  // held by equal bounds
  double outside = kNaN;
  const std::optional<double> mirror = Phi0Mirror(phi_degrees, phi0, lower, upper, &outside);
  if (!mirror) {
    if (!std::isnan(outside)) {
      spdlog::info(
          "phi0 mirror check: the angles ({} deg) cannot tell phi0 = {} from {}, which "
          "lies outside its bounds [{}, {}]: the bounds chose the sign",
          AnglesText(phi_degrees), FormatNumber(phi0), FormatNumber(outside), FormatNumber(lower),
          FormatNumber(upper));
    }
    return std::nullopt;
  }
  const double standard_error =
      solution.uncertainties.size() > index ? solution.uncertainties[index] : 0.0;
  if (std::abs(*mirror - phi0) <=
      std::max(1e-3, std::isfinite(standard_error) ? standard_error : 0.0)) {
    spdlog::info("phi0 mirror check: phi0 = {} and its mirror {} lie within one standard error",
                 FormatNumber(phi0), FormatNumber(*mirror));
    return std::nullopt;
  }
  // One local fit from the mirror: the other parameters as fitted (the model there is the same).
  LevenbergMarquardtOptions options = lm;
  options.resume_state.reset();
  options.callback = [](const LevenbergMarquardtIteration&) { return InterruptSignal() == 0; };
  Eigen::VectorXd start = solution.theta;
  start[index] = *mirror;
  ReparametrizedProblem problem(objective, map);
  const LevenbergMarquardtSummary fit = Minimize(options, problem, start);
  if (fit.status == LevenbergMarquardtStatus::kStoppedByCallback) {
    if (stopped != nullptr) *stopped = true;
    return std::nullopt;
  }
  if (fit.theta.size() != solution.theta.size() || !std::isfinite(fit.final_chi2)) {
    spdlog::info("phi0 mirror check: the fit from phi0 = {} gave no result ({})",
                 FormatNumber(*mirror), fit.reason);
    return std::nullopt;
  }
  Phi0MirrorFinding finding;
  finding.phi0 = phi0;
  finding.cost = solution.final_chi2;
  finding.mirror_start = *mirror;
  finding.mirror_phi0 = fit.theta[index];
  finding.mirror_cost = fit.final_chi2;
  finding.noise_scale = std::max(solution.reduced_chi2, std::numeric_limits<double>::min());
  finding.status = std::string(ToString(fit.status));
  finding.iterations = fit.iterations;
  finding.passes = fit.passes + fit.cost_passes;
  finding.angles = AnglesText(phi_degrees);
  finding.tie = std::abs(finding.mirror_cost - finding.cost) / finding.noise_scale <= 1.0;
  return finding;
}

void RecordPhi0Mirror(const Phi0MirrorFinding& finding, FitResult& result) {
  Phi0MirrorRecord& record = result.phi0_mirror;
  double uncertainty = kNaN;
  for (const ParameterEstimate& estimate : result.physical) {
    if (estimate.name == "phi0") uncertainty = estimate.uncertainty;
  }
  const bool robust = !result.loss.empty() && result.loss != "linear";
  record.checked = true;
  record.measure = robust ? "robust_cost" : "chi2";
  record.phi0 = finding.phi0;
  record.phi0_uncertainty = uncertainty;
  record.cost = finding.cost;
  record.mirror_phi0 = finding.mirror_phi0;
  record.mirror_uncertainty = uncertainty;
  record.mirror_cost = finding.mirror_cost;
  record.tie = finding.tie;
  record.angles_degrees = finding.angles;
  result.passes += finding.passes;
  result.point_evaluations += finding.passes * (result.n_points > 0 ? result.n_points : 0);
  const std::string measure = robust ? "robust cost" : "chi2";
  if (finding.tie) {
    record.note = "the angles cannot tell the two apart: the data fit both equally well";
    const std::string warning =
        "phi0 mirror: the angles (" + finding.angles +
        " deg) cannot tell phi0 = " + FormatNumber(finding.phi0) + " (" + measure + " " +
        FormatNumber(finding.cost) + ") from phi0 = " + FormatNumber(finding.mirror_phi0) + " (" +
        measure + " " + FormatNumber(finding.mirror_cost) +
        "), which fit equally well; its sign is not determined by these data: an angle between "
        "those of the data separates them, or bounds of phi0 on one side of " +
        FormatNumber(std::round(0.5 * (finding.phi0 + finding.mirror_start) * 1e6) / 1e6 + 0.0) +
        " choose one";
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
    // A sign the data do not determine lowers the quality flag one level, as an undetermined
    // parameter does (docs/results.md, Quality flag).
    if (result.quality_flag == "good" || result.quality_flag == "marginal") {
      result.quality_flag = result.quality_flag == "good" ? "marginal" : "poor";
    }
    result.quality_reasons.push_back("the sign of phi0 is not determined: phi0 = " +
                                     FormatNumber(finding.mirror_phi0) + " fits equally well");
    return;
  }
  if (finding.mirror_cost < finding.cost) {
    record.note = "the fit from the mirror reached a lower " + measure;
    const std::string warning =
        "phi0 mirror: the fit from the mirror of phi0 = " + FormatNumber(finding.phi0) +
        " ended at phi0 = " + FormatNumber(finding.mirror_phi0) + " with a lower " + measure +
        " (" + FormatNumber(finding.mirror_cost) + " against " + FormatNumber(finding.cost) +
        "): the result is not the lowest minimum; refit from there (initial_parameters)";
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
    return;
  }
  record.note = "the mirror fits worse";
  spdlog::info(
      "phi0 mirror check: the fit from the mirror phi0 = {} ended at {} with {} {} "
      "against {} at phi0 = {}: the data prefer the result",
      FormatNumber(finding.mirror_start), FormatNumber(finding.mirror_phi0), measure,
      FormatNumber(finding.mirror_cost), FormatNumber(finding.cost), FormatNumber(finding.phi0));
}

}  // namespace homodyne
