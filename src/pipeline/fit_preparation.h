// The fit up to its first pass (docs/design.md section 9), one function shared by Fit, which
// continues the prepared fit (fit.cc), and `homodyne --dry-run`, which describes it and stops
// (dry_run.cc; DescribeFitPlan in include/homodyne/fit.h). Both run the same steps on the same
// config, so the dry run shows what the fit will do and refuses what the fit refuses, with the
// same message and exit code.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_store.h"
#include "fit_checkpoints.h"
#include "fit_parameters.h"
#include "fit_plan.h"
#include "fit_strategy.h"
#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/fit.h"
#include "homodyne/model.h"
#include "homodyne/results.h"
#include "objective/backend_selection.h"

namespace homodyne {

// A checkpoint the fit resumes from: the newest valid one of this config and data set
// (FitCheckpoints::LoadForResume), already checked against the prepared fit's layout and
// optimiser (CheckCheckpointFits, CheckCheckpointSolver).
struct ResumePoint {
  Checkpoint checkpoint;
  std::string path;  // its file (CheckpointStore::PathOf)
};

// OpenMP's thread count when constructed, set again when destroyed: the plan sets the fit's own
// (PrepareFit, step 2), and the caller gets its count back however the fit or the dry run ends.
class CallersThreadCount {
 public:
  CallersThreadCount();
  ~CallersThreadCount();
  CallersThreadCount(const CallersThreadCount&) = delete;
  CallersThreadCount& operator=(const CallersThreadCount&) = delete;

 private:
  int threads_;
};

// Everything the steps before the first pass resolved. Neither copied nor moved: the strategy's
// chunk callback (on_chunk) points into it. Members are destroyed in reverse order: the strategy
// goes before the checkpoints, the model and the angles (a streaming objective gives the source
// back).
struct PreparedFit {
  PreparedFit(const Config& fit_config, BatchSource& data, const FitObserver& fit_observer)
      : config(fit_config), source(data), observer(fit_observer) {}
  PreparedFit(const PreparedFit&) = delete;
  PreparedFit& operator=(const PreparedFit&) = delete;

  const CallersThreadCount callers_threads;  // given back when the prepared fit ends
  const Config& config;  // a config from ResolveConfig (the shells' overrides are in it)
  BatchSource& source;
  const FitObserver& observer;
  // The result so far: analysis mode, strategy and its reason, the scaling warning, recovery
  // actions of a strategy fallback, load_seconds (from PrepareFit's start to the strategy set
  // up). Fit completes it.
  FitResult result;
  BackendChoice backend;                              // step 1
  FitPlan plan;                                       // step 2
  std::optional<HomodyneModel> model;                 // step 3
  std::vector<double> phi_degrees;                    // the data's angles [deg]
  std::function<void(const PassProgress&)> on_chunk;  // every chunk of every pass
  std::unique_ptr<FitCheckpoints> checkpoints;        // step 5
  std::unique_ptr<FitStrategy> strategy;              // step 3 (after a fallback: the leaner one)
  // Step 4; its start_warnings (a start clipped into its bounds) Fit logs and adds to the
  // result's warnings, and the dry run lists.
  std::optional<FitParameters> parameters;
  std::optional<ResumePoint> resume_point;  // step 5; none with --no-resume
};

// Prepares a fit of `source` with `config`, in the order the data flow (each step reads what the
// steps before it resolved):
//   1. backend: SelectBackend for performance.backend; a backend this build or machine lacks is a
//      ConfigError naming the config (docs/design.md section 5);
//   2. plan: PlanFit for the data's shape (memory, batch size, threads, strategy), the config
//      checked against that shape (ValidateConfigForData: per-angle list lengths, Ceres needs
//      standard), the data's and the per-angle mode's warnings logged, OpenMP's threads set;
//   3. strategy: the model of the data and the plan's strategy set up with its data
//      (SetUpStrategy: the data read into memory, or a sample of them for streaming; the next
//      leaner strategy after an allocation failure, in result.recovery_actions);
//   4. parameters: start, bounds and the reduced layout with the per-angle map and
//      fixed_parameters (BuildFitParameters: ConfigError when nothing is left to fit; the start
//      values clipped into their bounds, with a warning each), and the data checked against the
//      fitted parameters (CheckDataCanBeFitted: DataError for data that cannot be fitted);
//   5. checkpoints: the fit's FitCheckpoints and, when resuming, the checkpoint it resumes from,
//      checked (InputError for one of another config, data set or optimiser).
// Writes and removes nothing (with --no-resume the earlier checkpoints stay until Fit removes
// them) and runs no pass. Throws ConfigError, InputError and DataError (the message names what
// and where). config, source and observer must outlive the result.
std::unique_ptr<PreparedFit> PrepareFit(const Config& config, BatchSource& source,
                                        const FitObserver& observer);

}  // namespace homodyne
