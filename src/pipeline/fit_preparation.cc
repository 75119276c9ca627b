// PrepareFit (fit_preparation.h): the fit's steps before its first pass, for Fit and the dry run.
#include "fit_preparation.h"

#include "fit_data_check.h"
#include "homodyne/backend.h"
#include "homodyne/process_group.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <Eigen/Dense>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config_for_data.h"
#include "homodyne/errors.h"
#include "homodyne/process_group.h"
#include "objective/batched_objective.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {
namespace {

// Step 1. SelectBackend (backend_selection.h) for the config's performance.backend; its
// ConfigError names the config, as the fit's other config errors do.
void SelectBackendStep(PreparedFit& fit) {
  fit.result.analysis_mode = fit.config.analysis_mode;
  try {
    fit.backend = SelectBackend(fit.config.performance.backend, fit.config.performance.gpu_devices);
  } catch (const ConfigError& error) {
    throw ConfigError(fit.config.source_path + ": " + error.what());
  }
  if (fit.config.performance.backend == BackendKind::kAuto) {
    spdlog::info("{}", fit.backend.reason);
  }
  // docs/design.md section 2b: the pass kernel's instruction-set level; an invalid HOMODYNE_ISA
  // stops the fit (and the dry run) here.
  spdlog::info("{}", CpuKernelDescription());
}

// Step 2. The plan for the data's shape, and the config checked against that shape.
void PlanStep(PreparedFit& fit) {
  const DatasetInfo& info = fit.source.info();
  for (const std::string& warning : info.warnings) spdlog::warn("{}", warning);
  fit.plan = PlanFit(fit.config, info);
  // The ranks of a job (process_group.h) must split the same batches into the same chunks: every
  // rank runs rank 0's plan (each rank's memory and cores could suggest another).
  if (ProcessGroup& group = *CurrentProcessGroup(); group.size() > 1) {
    fit.plan.strategy.kind = static_cast<StrategyKind>(
        group.BroadcastFromRoot(static_cast<int64_t>(fit.plan.strategy.kind)));
    fit.plan.size.batch_points = group.BroadcastFromRoot(fit.plan.size.batch_points);
    fit.plan.size.threads = static_cast<int>(group.BroadcastFromRoot(fit.plan.size.threads));
  }
  ValidateConfigForData(fit.config, {info.num_angles(), fit.plan.strategy.kind});
  if (!fit.plan.scaling_warning.empty()) {
    spdlog::warn("{}", fit.plan.scaling_warning);
    fit.result.warnings.push_back(fit.plan.scaling_warning);
  }
  omp_set_num_threads(fit.plan.size.threads);
  fit.result.strategy_reason = fit.plan.strategy.reason;
  spdlog::info("strategy {} ({})", ToString(fit.plan.strategy.kind), fit.plan.strategy.reason);
}

// Step 3. The model of the data and the chosen strategy (on an allocation failure, the next
// leaner one: docs/design.md section 3). result.load_seconds: from `start` to the strategy set up.
void SetUpStrategyStep(PreparedFit& fit, std::chrono::steady_clock::time_point start) {
  const DatasetInfo& info = fit.source.info();
  // Each matrix at its own q: the matrices of one q (one ring) give today's one-q model, several
  // rings a joint fit (docs/design.md section 2d).
  std::vector<double> angle_q;
  for (const AngleInfo& angle : info.angles) angle_q.push_back(angle.q_inv_angstrom);
  fit.model.emplace(
      fit.config.analysis_mode,
      ScatteringGeometry{info.q_inv_angstrom, fit.config.geometry.gap_angstrom, info.dt_seconds},
      info.FittedTimes(), std::move(angle_q));
  if (fit.model->num_rings() > 1) {
    spdlog::info(
        "joint fit of {} q rings ({} matrices): physical parameters shared, contrast and "
        "offset per matrix",
        fit.model->num_rings(), info.num_angles());
  }
  for (const AngleInfo& angle : info.angles) fit.phi_degrees.push_back(angle.phi_degrees);
  PreparedFit* prepared = &fit;  // not moved (PreparedFit): the pointer stays valid
  fit.on_chunk = [prepared](const PassProgress& progress) {
    if (prepared->observer.on_pass_chunk) prepared->observer.on_pass_chunk(progress);
    if (prepared->checkpoints) prepared->checkpoints->OnChunk(progress);
  };
  const StrategyInputs inputs{fit.config,          fit.source,           *fit.model,
                              fit.phi_degrees,     fit.plan.size,        fit.on_chunk,
                              fit.backend.backend, CurrentProcessGroup()};
  fit.strategy = SetUpStrategy(fit.plan.strategy.kind, inputs, fit.result.recovery_actions);
  fit.result.strategy = std::string(ToString(fit.strategy->kind()));
  fit.result.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Step 4. The parameters (start, bounds and names, full and reduced: fit_parameters.h), the
// start values clipped into their bounds, and the data checked against them (fit_data_check.h).
void BuildParametersStep(PreparedFit& fit) {
  fit.parameters.emplace(BuildFitParameters(fit.config, fit.plan.scaling, fit.strategy->objective(),
                                            fit.phi_degrees, fit.strategy->scaling_from_data()));
  const FitParameters& parameters = *fit.parameters;
  spdlog::info("per-angle scaling {} ({}); {} parameters fitted", ToString(fit.plan.scaling.mode),
               fit.plan.scaling.reason, parameters.map.num_reduced());
  // Data in memory are counted now; streamed data again after the final fit (fit.cc).
  CheckDataCanBeFitted(fit.strategy->objective(), fit.source.info().file_path,
                       fit.plan.scaling.mode, parameters.map.num_reduced());
}

// Step 5. Checkpoints of this config and data set, and the one to resume from (docs/design.md
// section 6), checked against this fit before anything uses it.
void LookUpCheckpointStep(PreparedFit& fit) {
  const Config& config = fit.config;
  const BatchedObjective& objective = fit.strategy->objective();
  fit.checkpoints = std::make_unique<FitCheckpoints>(
      config, fit.strategy->checkpoint_policy(),
      Sha256Hex(
          FitIdentityText(config, objective.batch_points(), config.nlsq.global_search.method)),
      [sampled = DataFingerprint(fit.source), path = fit.source.info().file_path] {
        return sampled + DataContentFingerprintLine(path);
      },
      objective.num_batches(), fit.observer.on_checkpoint_saved);
  // With --no-resume, LoadForResume removes the folder's checkpoints: Fit calls it, not this.
  if (!config.streaming.resume_from_checkpoint) return;
  std::optional<Checkpoint> checkpoint = fit.checkpoints->LoadForResume();
  if (!checkpoint) return;
  CheckCheckpointFits(
      *checkpoint,
      {fit.parameters->map.num_reduced(), objective.num_parameters(), objective.num_batches()},
      config.streaming.checkpoint_dir);
  CheckCheckpointSolver(*checkpoint, fit.strategy->solver(), config.streaming.checkpoint_dir);
  const std::string path =
      CheckpointStore(fit.checkpoints->store_options()).PathOf(checkpoint->global_batch);
  fit.resume_point = ResumePoint{std::move(*checkpoint), path};
}

}  // namespace

CallersThreadCount::CallersThreadCount() : threads_(omp_get_max_threads()) {}
CallersThreadCount::~CallersThreadCount() { omp_set_num_threads(threads_); }

std::unique_ptr<PreparedFit> PrepareFit(const Config& config, BatchSource& source,
                                        const FitObserver& observer) {
  const auto start = std::chrono::steady_clock::now();
  auto fit = std::make_unique<PreparedFit>(config, source, observer);
  SelectBackendStep(*fit);
  PlanStep(*fit);
  SetUpStrategyStep(*fit, start);
  BuildParametersStep(*fit);
  LookUpCheckpointStep(*fit);
  return fit;
}

}  // namespace homodyne
