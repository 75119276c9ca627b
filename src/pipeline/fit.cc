// Fit (include/homodyne/fit.h): the whole fit, from a config and a data source to a result, as a
// list of steps in the order the data flows (docs/design.md section 9): config -> plan -> source
// -> strategy -> global phase -> final fit -> result.
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
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "config/config_for_data.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/results.h"
#include "objective/backend_selection.h"
#include "objective/batched_objective.h"
#include "optimize/global_search.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
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

// One fit, step by step. Each step reads what the steps before it resolved (the members they
// filled) and only the config fields that no step resolved; Run calls them in order, once.
// Members are destroyed in reverse order: the global phase's data and the strategy go before the
// checkpoints, the model and the angles (a streaming objective gives the source back).
class FitRun {
 public:
  FitRun(const Config& config, BatchSource& source, const FitObserver& observer)
      : config_(config), source_(source), observer_(observer) {}

  FitOutcome Run() {
    SelectBackendStep();
    PlanStep();
    SetUpStrategyStep();
    BuildParametersStep();
    OpenCheckpointsStep();
    GlobalPhaseStep();
    FinalFitStep();
    return ResultStep();
  }

 private:
  void ReportPhase(const std::string& phase, double seconds) const {
    if (observer_.on_phase) observer_.on_phase(FitPhaseReport{phase, seconds});
  }

  // docs/design.md section 5: a backend this build or machine lacks is an error, not a silent
  // CPU run.
  void SelectBackendStep() {
    result_.analysis_mode = config_.analysis_mode;
    backend_ = SelectBackendFor(config_);
    if (config_.performance.backend == BackendKind::kAuto) spdlog::info("{}", backend_.reason);
  }

  // The plan (memory, batch size, threads, strategy) for the data's shape, and the config checked
  // against that shape.
  void PlanStep() {
    const DatasetInfo& info = source_.info();
    for (const std::string& warning : info.warnings) spdlog::warn("{}", warning);
    plan_ = PlanFit(config_, info);
    ValidateConfigForData(config_, {info.num_angles(), plan_.strategy.kind});
    if (!plan_.scaling_warning.empty()) {
      spdlog::warn("{}", plan_.scaling_warning);
      result_.warnings.push_back(plan_.scaling_warning);
    }
    omp_set_num_threads(plan_.size.threads);
    result_.strategy_reason = plan_.strategy.reason;
    spdlog::info("strategy {} ({})", ToString(plan_.strategy.kind), plan_.strategy.reason);
  }

  // The model of the data, the chosen strategy (on an allocation failure, the next leaner one:
  // docs/design.md section 3) and, with a global phase, its subsample of the data.
  void SetUpStrategyStep() {
    const DatasetInfo& info = source_.info();
    model_.emplace(
        config_.analysis_mode,
        ScatteringGeometry{info.q_inv_angstrom, config_.geometry.gap_angstrom, info.dt_seconds},
        info.FittedTimes());
    for (const AngleInfo& angle : info.angles) phi_.push_back(angle.phi_degrees);
    on_chunk_ = [this](const PassProgress& progress) {
      if (observer_.on_pass_chunk) observer_.on_pass_chunk(progress);
      if (checkpoints_) checkpoints_->OnChunk(progress);
    };
    const StrategyInputs inputs{config_,    source_,   *model_,         phi_,
                                plan_.size, on_chunk_, backend_.backend};
    strategy_ = SetUpStrategy(plan_.strategy.kind, inputs, result_.recovery_actions);
    search_row_stride_ = SearchRowStride(UpperTriangleSize(info.num_times()) * info.num_angles(),
                                         config_.nlsq.global_search.max_points);
    if (config_.nlsq.global_search.method != GlobalSearchMethod::kOff) {
      search_data_ = strategy_->SearchData(search_row_stride_);
    }
    result_.strategy = std::string(ToString(strategy_->kind()));
    result_.load_seconds = SecondsSince(start_);
    ReportPhase("load", result_.load_seconds);
  }

  // The parameters (start, bounds and names, full and reduced: fit_parameters.h) and the final
  // fit's options, whose callback logs, observes and checkpoints every iteration.
  void BuildParametersStep() {
    parameters_.emplace(BuildFitParameters(config_, plan_.scaling, strategy_->objective(), phi_,
                                           strategy_->scaling_from_data()));
    spdlog::info("per-angle scaling {} ({}); {} parameters fitted", ToString(plan_.scaling.mode),
                 plan_.scaling.reason, parameters_->map.num_reduced());
    lm_ = FinalFitOptions(config_, *parameters_);
    lm_.callback = [this](const LevenbergMarquardtIteration& iteration) {
      spdlog::info("iteration {:3d}  chi2 {:.8e}  damping {:.2e}  step {:.3e}  {}  {:.2f} s",
                   iteration.iteration, iteration.chi2, iteration.damping, iteration.step_norm,
                   iteration.iteration == 0  ? "start"
                   : iteration.step_accepted ? "accepted"
                                             : "rejected",
                   iteration.seconds);
      if (observer_.on_iteration) observer_.on_iteration(iteration);
      return checkpoints_->OnIteration(iteration);
    };
  }

  // Checkpoints of this config and data set; resume from the newest valid one
  // (docs/design.md section 6).
  void OpenCheckpointsStep() {
    BatchedObjective& objective = strategy_->objective();
    checkpoints_ = std::make_unique<FitCheckpoints>(
        config_, strategy_->checkpoint_policy(),
        Sha256Hex(
            FitIdentityText(config_, objective.batch_points(), config_.nlsq.global_search.method)),
        DataFingerprint(source_), objective.num_batches(), observer_.on_checkpoint_saved);
    const std::optional<Checkpoint> checkpoint = checkpoints_->LoadForResume();
    if (!checkpoint) return;
    CheckCheckpointFits(
        *checkpoint,
        {parameters_->map.num_reduced(), objective.num_parameters(), objective.num_batches()},
        config_.streaming.checkpoint_dir);
    CheckCheckpointSolver(*checkpoint, strategy_->solver(), config_.streaming.checkpoint_dir);
    checkpoints_->ContinueFrom(*checkpoint);
    if (checkpoint->lm.theta.size() > 0) lm_.resume_state = checkpoint->lm;
    if (checkpoint->pass) objective.ResumePass(*checkpoint->pass);
    const std::string action = "resumed from the checkpoint at batch " +
                               std::to_string(checkpoint->global_batch) + " (iteration " +
                               std::to_string(checkpoint->lm.iterations) + ", written " +
                               checkpoint->timestamp_utc + ")";
    spdlog::info("{}", action);
    result_.recovery_actions.push_back(action);
  }

  // The global phase (docs/design.md section 4b), or a projected local fit when it is off; the
  // final fit starts from the minimum chosen. A resumed run replays the phase's trail from its
  // checkpoint and computes only what the interrupted run had not (a SLURM job whose time slot is
  // shorter than the phase still progresses); after a final-fit checkpoint the whole phase is
  // replayed (no passes) and the fit continues from its state.
  void GlobalPhaseStep() {
    const GlobalSearchOptions& global_search = config_.nlsq.global_search;
    const FitParameters& parameters = *parameters_;
    fit_start_ = parameters.reduced_start;
    result_.global_search.reason = global_search.method_reason;
    const Clock::time_point phase_start = Clock::now();
    if (global_search.method != GlobalSearchMethod::kOff) {
      const GlobalSearchSummary global =
          RunGlobalPhase({config_.nlsq, *search_data_, search_row_stride_, parameters, lm_,
                          *checkpoints_, observer_});
      result_.global_search =
          GlobalSearchRecordOf(global, global_search.method_reason, parameters.map,
                               PhysicalParameterNames(config_.analysis_mode));
      for (const std::string& warning : global.warnings) {
        spdlog::warn("{}", warning);
        result_.warnings.push_back(warning);
      }
      if (global.chosen >= 0)
        fit_start_ = global.minima[static_cast<size_t>(global.chosen)].reduced;
      ReportPhase("global search", SecondsSince(phase_start));
    } else if (config_.nlsq.variable_projection && !lm_.resume_state) {
      fit_start_ = ProjectedLocalFit(strategy_->objective(), parameters.map,
                                     parameters.reduced_bounds, parameters.reduced_start, lm_);
      checkpoints_->StopIfInterrupted();
      ReportPhase("projected local fit", SecondsSince(phase_start));
    }
    search_data_.reset();
  }

  // The final fit from the global phase's minimum. A strategy that gives way mid-fit (Ceres'
  // Jacobian did not fit: the LM core goes on as large) is recorded, and its checkpoints follow
  // the new strategy. A signal stops it with a checkpoint (FitInterrupted); a batch that cannot
  // be read even after retries keeps what was computed (docs/design.md section 7).
  void FinalFitStep() {
    auto on_fallback = [this](const StrategyFallback& fallback) {
      spdlog::warn("{}", fallback.action);
      result_.recovery_actions.push_back(fallback.action);
      result_.strategy = std::string(ToString(fallback.kind));
      checkpoints_->FollowPolicy(fallback.checkpoint_policy);
    };
    try {
      summary_ = strategy_->MinimizeFinal(lm_, parameters_->map, fit_start_, on_fallback);
      // Stopped by a signal (FitCheckpoints::OnIteration): save and exit 3.
      if (summary_.status == LevenbergMarquardtStatus::kStoppedByCallback) {
        checkpoints_->StopIfInterrupted();
      }
    } catch (const DataError& error) {
      const bool saved = checkpoints_->SaveAfterFailure();
      throw DataError(std::string(error.what()) +
                      (saved ? "; progress saved in " + config_.streaming.checkpoint_dir +
                                   ": run the same command again to resume once the file is "
                                   "readable"
                             : ""));
    }
    ReportPhase("final fit", summary_.seconds);
  }

  // The result: warnings, the solution (fit_solution.h) and the totals; what a caller needs
  // beside it.
  FitOutcome ResultStep() {
    const BatchedObjective& objective = strategy_->objective();
    for (const std::string& warning : checkpoints_->warnings()) result_.warnings.push_back(warning);
    if (objective.num_nonfinite_points() > 0) {
      const std::string warning = std::to_string(objective.num_nonfinite_points()) +
                                  " non-finite data points excluded from the fit";
      spdlog::warn("{}", warning);
      result_.warnings.push_back(warning);
    }
    outcome_.physical = RecordSolution(summary_, lm_, *parameters_, plan_.scaling, objective, phi_,
                                       !config_.performance.fast_mode, result_);
    RecordTotals(
        {summary_, source_.info(), objective, checkpoints_->statistics(), checkpoints_->saves(),
         *backend_.backend, plan_.size.threads, SecondsSince(start_)},
        result_);
    outcome_.final_fit_report = summary_.BriefReport();
    outcome_.model = *model_;
    outcome_.checkpoints = checkpoints_->store_options();
    outcome_.checkpoints_enabled = checkpoints_->enabled();
    outcome_.checkpoint_lock = checkpoints_->folder_lock();
    outcome_.exit_code = result_.convergence_status == "failed" ? kExitFailure : kExitSuccess;
    return std::move(outcome_);
  }

  const Config& config_;
  BatchSource& source_;
  const FitObserver& observer_;
  const Clock::time_point start_ = Clock::now();
  FitOutcome outcome_;
  FitResult& result_ = outcome_.result;
  BackendChoice backend_;                              // SelectBackendStep
  FitPlan plan_;                                       // PlanStep
  std::optional<HomodyneModel> model_;                 // SetUpStrategyStep
  std::vector<double> phi_;                            // the data's angles [deg]
  std::function<void(const PassProgress&)> on_chunk_;  // every chunk of every pass
  std::unique_ptr<FitCheckpoints> checkpoints_;        // OpenCheckpointsStep
  std::unique_ptr<FitStrategy> strategy_;              // SetUpStrategyStep
  int search_row_stride_ = 1;                          // the global phase's rows
  std::unique_ptr<BatchedObjective> search_data_;      // until GlobalPhaseStep ends
  std::optional<FitParameters> parameters_;            // BuildParametersStep
  LevenbergMarquardtOptions lm_;                       // the final fit's options
  Eigen::VectorXd fit_start_;                          // GlobalPhaseStep
  LevenbergMarquardtSummary summary_;                  // FinalFitStep
};

}  // namespace

FitOutcome Fit(const Config& config, BatchSource& source, const FitObserver& observer) {
  return FitRun(config, source, observer).Run();
}

void WriteFitResults(const FitOutcome& outcome, BatchSource& source, const std::string& output_dir) {
  const ModelEvaluation evaluation(*outcome.model, outcome.physical);
  WriteAllResultFiles(outcome.result, source, evaluation, output_dir);
}

void RemoveCheckpoints(const FitOutcome& outcome) {
  if (!outcome.checkpoints_enabled) return;
  for (const std::string& path : CheckpointStore(outcome.checkpoints).List()) {
    std::error_code error;
    std::filesystem::remove(path, error);
  }
}

}  // namespace homodyne
