#include "fit_command.h"

#include "fit_plan.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <Eigen/Dense>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <ostream>
#include <string>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/initial_values.h"
#include "homodyne/lm.h"
#include "homodyne/objective.h"
#include "homodyne/results.h"

namespace homodyne::cli {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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

// Per-angle starting contrast and offset: per_angle_scaling lists, else scalar contrast/offset of
// initial_parameters replicated, else the quantile estimator on the data (reference 2.3, 2.4).
std::vector<ScalingEstimate> InitialScaling(const Config& config,
                                            const PackedDataObjective::PackedData& data,
                                            int n_times) {
  const int n_angles = static_cast<int>(data.size());
  std::vector<ScalingEstimate> scaling(static_cast<size_t>(n_angles));
  std::optional<double> scalar_contrast, scalar_offset;
  if (config.initial.values) {
    for (size_t k = 0; k < config.initial.parameter_names.size(); ++k) {
      if (config.initial.parameter_names[k] == "contrast") {
        scalar_contrast = (*config.initial.values)[k];
      }
      if (config.initial.parameter_names[k] == "offset") {
        scalar_offset = (*config.initial.values)[k];
      }
    }
  }
  for (int k = 0; k < n_angles; ++k) {
    ScalingEstimate& start = scaling[static_cast<size_t>(k)];
    start = EstimateScalingFromData(data[static_cast<size_t>(k)], n_times,
                                    config.BoundOf("contrast"), config.BoundOf("offset"));
    if (config.initial.per_angle_contrast) {
      start.contrast = (*config.initial.per_angle_contrast)[static_cast<size_t>(k)];
    } else if (scalar_contrast) {
      start.contrast = *scalar_contrast;
    }
    if (config.initial.per_angle_offset) {
      start.offset = (*config.initial.per_angle_offset)[static_cast<size_t>(k)];
    } else if (scalar_offset) {
      start.offset = *scalar_offset;
    }
  }
  return scaling;
}

}  // namespace

int RunFit(const Config& config, const CommandLineOptions& options, std::ostream& out) {
  const Clock::time_point start = Clock::now();
  FitResult result;
  result.analysis_mode = config.analysis_mode;

  std::unique_ptr<BatchSource> source = OpenBatchSource(config.data);
  const DatasetInfo& info = source->info();  // the source stays open until the end
  for (const std::string& warning : info.warnings) spdlog::warn("{}", warning);
  const int n_angles = info.num_angles();
  const int n_times = info.num_times();
  // initial_parameters.per_angle_scaling lists must have one value per kept angle.
  const std::pair<const std::optional<std::vector<double>>*, const char*> per_angle_lists[] = {
      {&config.initial.per_angle_contrast, "contrast"},
      {&config.initial.per_angle_offset, "offset"}};
  for (const auto& [list, name] : per_angle_lists) {
    if (*list && static_cast<int>((*list)->size()) != n_angles) {
      throw ConfigError(config.source_path + ": initial_parameters.per_angle_scaling." + name +
                        " has " + std::to_string((*list)->size()) + " values but the data has " +
                        std::to_string(n_angles) + " angles");
    }
  }

  const FitPlan plan = PlanFit(config, info, options.memory_limit_gb);
  if (!plan.scaling_warning.empty()) {
    spdlog::warn("{}", plan.scaling_warning);
    result.warnings.push_back(plan.scaling_warning);
  }
  const int n_physical = plan.num_physical;
  const int n_parameters = plan.num_parameters;
  const ProblemSize& size = plan.size;
  omp_set_num_threads(size.threads);
  // The in-memory pass serves standard, large and chunked; streaming is not built yet.
  const StrategyChoice& choice = plan.strategy;
  if (choice.kind == StrategyKind::kStreaming) {
    throw Error("the data set needs the streaming strategy (" + choice.reason +
                "), which is not available in this build yet; raise --memory-limit-gb so it fits "
                "in memory");
  }
  result.strategy = "large";
  result.strategy_reason = choice.reason;
  if (choice.kind != StrategyKind::kLarge) {
    result.strategy_reason += "; " + std::string(ToString(choice.kind)) +
                              " runs as the in-memory large pass in this build";
  }
  spdlog::info("strategy {} ({})", result.strategy, result.strategy_reason);

  // Load the data (float32, packed strict upper triangles) and build the problem.
  PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);
  const HomodyneModel model(
      config.analysis_mode,
      ScatteringGeometry{info.q_inv_angstrom, config.geometry.gap_angstrom, info.dt_seconds},
      info.FittedTimes());
  std::vector<double> phi;
  for (const AngleInfo& angle : info.angles) phi.push_back(angle.phi_degrees);
  const std::vector<ScalingEstimate> initial_scaling = InitialScaling(config, data, n_times);
  PackedDataObjective objective(model, phi, config.nlsq.sigma, std::move(data), size.batch_points);
  if (objective.num_nonfinite_points() > 0) {
    const std::string warning = std::to_string(objective.num_nonfinite_points()) +
                                " non-finite data points excluded from the fit";
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  result.load_seconds = SecondsSince(start);

  // Starting point and bounds, in the objective's parameter order.
  Eigen::VectorXd theta0(n_parameters);
  LevenbergMarquardtOptions lm;
  lm.lower_bounds.resize(n_parameters);
  lm.upper_bounds.resize(n_parameters);
  const std::vector<double> physical0 = InitialPhysicalParameters(config);
  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  for (int p = 0; p < n_physical; ++p) {
    theta0[p] = physical0[static_cast<size_t>(p)];
    lm.parameter_names.push_back(names[static_cast<size_t>(p)]);
    lm.lower_bounds[p] = config.BoundOf(names[static_cast<size_t>(p)]).min;
    lm.upper_bounds[p] = config.BoundOf(names[static_cast<size_t>(p)]).max;
  }
  lm.parameter_names.resize(static_cast<size_t>(n_parameters));
  for (int k = 0; k < n_angles; ++k) {
    const int c = objective.ContrastIndex(k);
    const int o = objective.OffsetIndex(k);
    theta0[c] = initial_scaling[static_cast<size_t>(k)].contrast;
    theta0[o] = initial_scaling[static_cast<size_t>(k)].offset;
    lm.parameter_names[static_cast<size_t>(c)] = "contrast[" + std::to_string(k) + "]";
    lm.parameter_names[static_cast<size_t>(o)] = "offset[" + std::to_string(k) + "]";
    lm.lower_bounds[c] = config.BoundOf("contrast").min;
    lm.upper_bounds[c] = config.BoundOf("contrast").max;
    lm.lower_bounds[o] = config.BoundOf("offset").min;
    lm.upper_bounds[o] = config.BoundOf("offset").max;
  }
  lm.max_iterations = config.nlsq.max_iterations;
  lm.ftol = config.nlsq.tolerance;
  lm.xtol = config.nlsq.xtol;
  lm.gtol = config.nlsq.gtol;
  lm.validate_numerics = !config.performance.fast_mode;
  lm.callback = [](const LevenbergMarquardtIteration& iteration) {
    spdlog::info("iteration {:3d}  chi2 {:.8e}  damping {:.2e}  step {:.3e}  {}  {:.2f} s",
                 iteration.iteration, iteration.chi2, iteration.damping, iteration.step_norm,
                 iteration.iteration == 0  ? "start"
                 : iteration.step_accepted ? "accepted"
                                           : "rejected",
                 iteration.seconds);
    return true;
  };

  const LevenbergMarquardtSummary summary = Minimize(lm, objective, theta0);
  for (const std::string& warning : summary.warnings) {
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  result.optimization_seconds = summary.seconds;

  // Results.
  for (int p = 0; p < n_physical; ++p) {
    result.physical.push_back({names[static_cast<size_t>(p)], summary.theta[p],
                               summary.uncertainties.size() ? summary.uncertainties[p] : 0.0});
  }
  for (int k = 0; k < n_angles; ++k) {
    const int c = objective.ContrastIndex(k);
    const int o = objective.OffsetIndex(k);
    const double uc = summary.uncertainties.size() ? summary.uncertainties[c] : 0.0;
    const double uo = summary.uncertainties.size() ? summary.uncertainties[o] : 0.0;
    result.per_angle.push_back({phi[static_cast<size_t>(k)],
                                {"contrast", summary.theta[c], uc},
                                {"offset", summary.theta[o], uo}});
  }
  result.covariance_names = lm.parameter_names;
  for (int i = 0; i < summary.covariance.rows(); ++i) {
    for (int j = 0; j < summary.covariance.cols(); ++j) {
      result.covariance.push_back(summary.covariance(i, j));
    }
  }
  result.chi_squared = summary.final_chi2;
  result.reduced_chi_squared = summary.reduced_chi2;
  result.degrees_of_freedom = summary.dof;
  result.convergence_status = summary.IsConverged() ? "converged"
                              : summary.status == LevenbergMarquardtStatus::kMaxIterations
                                  ? "max_iterations"
                                  : "failed";
  result.termination_reason = summary.reason;
  result.n_points = info.num_fit_points();
  result.n_angles = n_angles;
  result.n_times = n_times;
  result.q_inv_angstrom = info.q_inv_angstrom;
  result.iterations = summary.iterations;
  result.passes = summary.passes + summary.cost_passes;
  result.point_evaluations = result.passes * objective.num_points();
  result.backend = "cpu";
  result.threads = size.threads;
  result.total_seconds = SecondsSince(start);
  result.memory_peak_mb = PeakResidentMb();

  out << summary.BriefReport() << "\n";
  char line[160];
  for (const ParameterEstimate& estimate : result.physical) {
    std::snprintf(line, sizeof(line), "  %-20s %14.6g +- %.3g\n", estimate.name.c_str(),
                  estimate.value, estimate.uncertainty);
    out << line;
  }
  for (const AngleScaling& angle : result.per_angle) {
    std::snprintf(line, sizeof(line),
                  "  phi %8.2f deg      contrast %.6f +- %.2g   offset %.6f +- %.2g\n",
                  angle.phi_degrees, angle.contrast.value, angle.contrast.uncertainty,
                  angle.offset.value, angle.offset.uncertainty);
    out << line;
  }
  std::snprintf(line, sizeof(line),
                "  chi2 %.6g, reduced chi2 %.6f, %lld points, %d iterations, %lld passes, "
                "%.2f s (load %.2f s)\n",
                result.chi_squared, result.reduced_chi_squared,
                static_cast<long long>(result.n_points), result.iterations,
                static_cast<long long>(result.passes), result.total_seconds, result.load_seconds);
  out << line;
  // Printed before writing, so a full disk or a bad --output-dir loses no computed number.
  out.flush();
  WriteResultFiles(result, options.output_dir);
  {
    // Data, fit and residuals per angle, streamed by row blocks from the input file.
    const std::vector<double> physical(summary.theta.data(), summary.theta.data() + n_physical);
    const ModelEvaluation evaluation(model, physical);
    WriteFittedData(*source, evaluation, result.per_angle, options.output_dir);
  }
  out << "  results in " << options.output_dir << "/nlsq/\n";
  return result.convergence_status == "failed" ? kExitFailure : kExitSuccess;
}

}  // namespace homodyne::cli
