// Fit (include/homodyne/fit.h): the whole fit, from a config and a data source to a result.
#include "homodyne/fit.h"

#include "fit_checkpoints.h"
#include "fit_parameters.h"
#include "fit_plan.h"
#include "fit_solution.h"
#include "fit_strategy.h"
#include "global_phase.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <Eigen/Dense>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include "objective/backend_selection.h"
#include "checkpoint/checkpoint_store.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "optimize/global_search.h"
#include "optimize/levenberg_marquardt.h"
#include "objective/batched_objective.h"
#include "homodyne/results.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void ReportPhase(const FitObserver& observer, const std::string& phase, double seconds) {
  if (observer.on_phase) observer.on_phase(FitPhaseReport{phase, seconds});
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

// SelectBackend (backend.h) for the config's performance.backend; its ConfigError names the
// config, as the fit's other config errors do.
BackendChoice SelectBackendFor(const Config& config) {
  try {
    return SelectBackend(config.performance.backend);
  } catch (const ConfigError& error) {
    throw ConfigError(config.source_path + ": " + error.what());
  }
}

}  // namespace

FitOutcome Fit(const Config& config, BatchSource& source, const FitObserver& observer) {
  const Clock::time_point start = Clock::now();
  FitOutcome outcome;
  FitResult& result = outcome.result;
  result.analysis_mode = config.analysis_mode;
  // docs/design.md section 5: a backend this build or machine lacks is an error, not a silent
  // CPU run.
  const BackendChoice backend = SelectBackendFor(config);
  if (config.performance.backend == BackendKind::kAuto) spdlog::info("{}", backend.reason);

  const DatasetInfo& info = source.info();
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

  const FitPlan plan = PlanFit(config, info);
  if (!plan.scaling_warning.empty()) {
    spdlog::warn("{}", plan.scaling_warning);
    result.warnings.push_back(plan.scaling_warning);
  }
  const ProblemSize& size = plan.size;
  omp_set_num_threads(size.threads);
  const StrategyChoice& choice = plan.strategy;
  result.strategy_reason = choice.reason;
  const std::string& global_reason = config.nlsq.global_search.method_reason;
  const GlobalSearchMethod global_method = config.nlsq.global_search.method;
  if (config.nlsq.solver == LmSolver::kCeres && choice.kind != StrategyKind::kStandard) {
    throw ConfigError(config.source_path +
                      ": optimization.nlsq.solver = ceres needs the standard "
                      "strategy (this fit uses " +
                      std::string(ToString(choice.kind)) +
                      "): use --strategy standard, or solver lm");
  }
  spdlog::info("strategy {} ({})", ToString(choice.kind), choice.reason);

  const HomodyneModel model(
      config.analysis_mode,
      ScatteringGeometry{info.q_inv_angstrom, config.geometry.gap_angstrom, info.dt_seconds},
      info.FittedTimes());
  std::vector<double> phi;
  for (const AngleInfo& angle : info.angles) phi.push_back(angle.phi_degrees);

  // Set up the chosen strategy; on an allocation failure, the next leaner one
  // (docs/design.md section 3).
  std::unique_ptr<FitCheckpoints> checkpoints;  // created once the strategy is set up
  auto on_chunk = [&observer, &checkpoints](const PassProgress& progress) {
    if (observer.on_pass_chunk) observer.on_pass_chunk(progress);
    if (checkpoints) checkpoints->OnChunk(progress);
  };
  const StrategyInputs strategy_inputs{config, source, model, phi, size, on_chunk, backend.backend};
  const std::unique_ptr<FitStrategy> strategy =
      SetUpStrategy(choice.kind, strategy_inputs, result.recovery_actions);
  BatchedObjective& objective = strategy->objective();
  // The global phase's data: every s-th row (all rows up to max_points).
  const int search_row_stride =
      SearchRowStride(UpperTriangleSize(n_times) * n_angles, config.nlsq.global_search.max_points);
  std::unique_ptr<BatchedObjective> search_data;
  if (global_method != GlobalSearchMethod::kOff) {
    search_data = strategy->SearchData(search_row_stride);
  }
  result.strategy = std::string(ToString(strategy->kind()));
  result.load_seconds = SecondsSince(start);
  ReportPhase(observer, "load", result.load_seconds);

  // The parameters: start, bounds and names, full and reduced (fit_parameters.h).
  const int n_full = objective.num_parameters();
  const FitParameters parameters =
      BuildFitParameters(config, plan.scaling, objective, phi, strategy->scaling_from_data());
  const ScalingMap& map = parameters.map;
  const BoundBox& reduced_bounds = parameters.reduced_bounds;
  const Eigen::VectorXd& reduced0 = parameters.reduced_start;
  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  spdlog::info("per-angle scaling {} ({}); {} parameters fitted", ToString(plan.scaling.mode),
               plan.scaling.reason, map.num_reduced());
  LevenbergMarquardtOptions lm;
  lm.lower_bounds = reduced_bounds.lower;
  lm.upper_bounds = reduced_bounds.upper;
  lm.parameter_names = map.reduced_names;
  lm.max_iterations = config.nlsq.max_iterations;
  lm.ftol = config.nlsq.tolerance;
  lm.xtol = config.nlsq.xtol;
  lm.gtol = config.nlsq.gtol;
  lm.statistical_tolerance = config.nlsq.statistical_tolerance;
  lm.validate_numerics = !config.performance.fast_mode;
  lm.callback = [&checkpoints, &observer](const LevenbergMarquardtIteration& iteration) {
    spdlog::info("iteration {:3d}  chi2 {:.8e}  damping {:.2e}  step {:.3e}  {}  {:.2f} s",
                 iteration.iteration, iteration.chi2, iteration.damping, iteration.step_norm,
                 iteration.iteration == 0  ? "start"
                 : iteration.step_accepted ? "accepted"
                                           : "rejected",
                 iteration.seconds);
    if (observer.on_iteration) observer.on_iteration(iteration);
    return checkpoints->OnIteration(iteration);
  };

  // Checkpoints of this config and data set; resume from the newest valid one
  // (docs/design.md section 6).
  const int64_t batch_points_per_angle = objective.batch_points();
  checkpoints = std::make_unique<FitCheckpoints>(
      config, strategy->checkpoint_policy(),
      Sha256Hex(FitIdentityText(config, batch_points_per_angle, global_method)),
      DataFingerprint(source), objective.num_batches(), observer.on_checkpoint_saved);
  if (const std::optional<Checkpoint> checkpoint = checkpoints->LoadForResume()) {
    CheckCheckpointFits(*checkpoint, {map.num_reduced(), n_full, objective.num_batches()},
                        config.streaming.checkpoint_dir);
    // Ceres and the LM core keep different states: a state of the other cannot be continued.
    if (checkpoint->lm.theta.size() > 0 && checkpoint->lm.solver != strategy->solver()) {
      const bool ceres_state = checkpoint->lm.solver == LmSolver::kCeres;
      throw InputError("the checkpoint at batch " + std::to_string(checkpoint->global_batch) +
                       " in " + config.streaming.checkpoint_dir + " was written by the " +
                       (ceres_state ? "Ceres solver" : "LM core") + " and this run uses the " +
                       (ceres_state ? "LM core" : "Ceres solver") + ": resume it with " +
                       (ceres_state ? "--strategy standard --solver ceres" : "--solver lm") +
                       ", or start afresh with --no-resume");
    }
    checkpoints->ContinueFrom(*checkpoint);
    if (checkpoint->lm.theta.size() > 0) lm.resume_state = checkpoint->lm;
    if (checkpoint->pass) objective.ResumePass(*checkpoint->pass);
    const std::string action = "resumed from the checkpoint at batch " +
                               std::to_string(checkpoint->global_batch) + " (iteration " +
                               std::to_string(checkpoint->lm.iterations) + ", written " +
                               checkpoint->timestamp_utc + ")";
    spdlog::info("{}", action);
    result.recovery_actions.push_back(action);
  }

  // The global phase (docs/design.md section 4b), or a projected local fit when it is off; the
  // final fit starts from the minimum chosen. A resumed run replays the phase's trail from its
  // checkpoint and computes only what the interrupted run had not (a SLURM job whose time slot is
  // shorter than the phase still progresses); after a final-fit checkpoint the whole phase is
  // replayed (no passes) and the fit continues from its state.
  Eigen::VectorXd fit_start = reduced0;
  result.global_search.reason = global_reason;
  const Clock::time_point global_start = Clock::now();
  if (global_method != GlobalSearchMethod::kOff) {
    const GlobalSearchSummary global =
        RunGlobalPhase(config, global_method, *search_data, search_row_stride, map, reduced_bounds,
                       reduced0, lm, *checkpoints, observer);
    result.global_search = GlobalSearchRecordOf(global, global_reason, map, names);
    for (const std::string& warning : global.warnings) {
      spdlog::warn("{}", warning);
      result.warnings.push_back(warning);
    }
    if (global.chosen >= 0) fit_start = global.minima[static_cast<size_t>(global.chosen)].reduced;
    ReportPhase(observer, "global search", SecondsSince(global_start));
  } else if (config.nlsq.variable_projection && !lm.resume_state) {
    fit_start = ProjectedLocalFit(objective, map, reduced_bounds, reduced0, lm);
    checkpoints->StopIfInterrupted();
    ReportPhase(observer, "projected local fit", SecondsSince(global_start));
  }
  search_data.reset();

  LevenbergMarquardtSummary summary;
  try {
    // A strategy that gives way mid-fit (Ceres' Jacobian did not fit: the LM core goes on as
    // large) is recorded, and its checkpoints follow the new strategy.
    auto on_fallback = [&](const StrategyFallback& fallback) {
      spdlog::warn("{}", fallback.action);
      result.recovery_actions.push_back(fallback.action);
      result.strategy = std::string(ToString(fallback.kind));
      checkpoints->FollowPolicy(fallback.checkpoint_policy);
    };
    summary = strategy->MinimizeFinal(lm, map, fit_start, on_fallback);
    // Stopped by a signal (FitCheckpoints::OnIteration): save and exit 3.
    if (summary.status == LevenbergMarquardtStatus::kStoppedByCallback) {
      checkpoints->StopIfInterrupted();
    }
  } catch (const DataError& error) {
    // A batch that could not be read even after retries: keep what was computed
    // (docs/design.md section 7).
    const bool saved = checkpoints->SaveAfterFailure();
    throw DataError(std::string(error.what()) +
                    (saved ? "; progress saved in " + config.streaming.checkpoint_dir +
                                 ": run the same command again to resume once the file is readable"
                           : ""));
  }
  ReportPhase(observer, "final fit", summary.seconds);
  for (const std::string& warning : checkpoints->warnings()) result.warnings.push_back(warning);
  const BatchStatistics& statistics = checkpoints->statistics();
  result.batch_statistics = {statistics.batches, statistics.retries + objective.read_retries(),
                             statistics.read_failures, statistics.checkpoint_failures,
                             checkpoints->saves()};
  if (objective.num_nonfinite_points() > 0) {
    const std::string warning = std::to_string(objective.num_nonfinite_points()) +
                                " non-finite data points excluded from the fit";
    spdlog::warn("{}", warning);
    result.warnings.push_back(warning);
  }
  result.optimization_seconds = summary.seconds;
  const std::vector<double> physical = RecordSolution(
      summary, lm, parameters, plan.scaling, objective, phi, !config.performance.fast_mode, result);
  result.termination_reason = summary.reason;
  result.n_points = info.num_fit_points();
  result.n_angles = n_angles;
  result.n_times = n_times;
  result.q_inv_angstrom = info.q_inv_angstrom;
  result.iterations = summary.iterations;
  result.passes = summary.passes + summary.cost_passes;
  result.point_evaluations = result.passes * objective.num_points();
  result.backend = std::string(ToString(backend.backend->kind()));
  result.threads = size.threads;
  result.total_seconds = SecondsSince(start);
  result.memory_peak_mb = PeakResidentMb();

  outcome.final_fit_report = summary.BriefReport();
  outcome.physical = physical;
  outcome.model = model;
  outcome.checkpoints = checkpoints->store_options();
  outcome.checkpoints_enabled = checkpoints->enabled();
  outcome.exit_code = result.convergence_status == "failed" ? kExitFailure : kExitSuccess;
  return outcome;  // the strategy goes first: a streaming objective gives the source back
}

void WriteFitResults(const FitOutcome& outcome, BatchSource& source, const std::string& output_dir) {
  WriteResultFiles(outcome.result, output_dir);
  const ModelEvaluation evaluation(*outcome.model, outcome.physical);
  WriteFittedData(source, evaluation, outcome.result.per_angle, output_dir);
}

void RemoveCheckpoints(const FitOutcome& outcome) {
  if (!outcome.checkpoints_enabled) return;
  for (const std::string& path : CheckpointStore(outcome.checkpoints).List()) {
    std::error_code error;
    std::filesystem::remove(path, error);
  }
}

}  // namespace homodyne
