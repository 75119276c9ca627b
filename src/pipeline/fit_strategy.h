// The fitting strategies of docs/design.md section 3 as objects: each owns its data (an objective
// that reads them), knows the start its data suggest, when its checkpoints are written and which
// optimiser runs its final fit. Fit (fit.cc) drives every strategy through FitStrategy only: it
// never branches on the strategy kind or casts to a concrete objective.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "fit_checkpoints.h"
#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "objective/pass_backend.h"
#include "optimize/initial_values.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"
#include "pipeline/memory_budget.h"

namespace homodyne {

// A strategy that gave way to a leaner one in the middle of the final fit (FitStrategy::
// MinimizeFinal); what the fit does from now on.
struct StrategyFallback {
  StrategyKind kind = StrategyKind::kLarge;  // the strategy the fit continues as
  CheckpointPolicy checkpoint_policy;        // ... and the policy its checkpoints follow
  std::string action;                        // for the log and result's recovery_actions
};

class FitStrategy {
 public:
  virtual ~FitStrategy() = default;
  FitStrategy(const FitStrategy&) = delete;
  FitStrategy& operator=(const FitStrategy&) = delete;

  StrategyKind kind() const { return kind_; }
  // The optimiser of the final fit, and so the kind of state its checkpoints hold.
  virtual StateSolver solver() const { return StateSolver::kLmCore; }
  virtual CheckpointPolicy checkpoint_policy() const = 0;

  // The data, as the objective of the full parameter layout (batched_objective.h).
  virtual BatchedObjective& objective() = 0;
  // Per-angle contrast and offset estimated from the data (the default start;
  // docs/model.md, Bounds and start values).
  const std::vector<ScalingEstimate>& scaling_from_data() const { return scaling_from_data_; }

  // The global phase's data: every row_stride-th row of each angle's upper triangle, the same
  // rows and floats whatever the strategy (so every strategy searches alike, bitwise). On several
  // ranks its passes are shared by them, each rank holding its share of the rows;
  // whole_on_every_rank: every rank holds every row instead and passes run on this process alone
  // (the coarse level, whose work the global phase spreads over the ranks by candidates:
  // global_search.h).
  virtual std::unique_ptr<BatchedObjective> SearchData(int row_stride,
                                                       bool whole_on_every_rank = false) const = 0;

  // Every row of the data on this rank, in an objective bitwise the single process's
  // objective() (the same batches, reduced in batch order), whose passes run on this process
  // alone: no other rank takes part, no chunk callback (no checkpoint, no batch counted), and a
  // pass stops for a signal that reached this rank (InterruptSignalHere; PassInterrupted). What
  // the ranks of a job spread the profile intervals' ends over (docs/design.md section 5b).
  // Null where the strategy cannot hold the data in memory (streaming). Reads the source.
  virtual std::unique_ptr<BatchedObjective> WholeDataHere() const { return nullptr; }

  // Every angle's whole packed triangle as this process holds it in memory (FitOutcome::held_data),
  // or null: streamed data, or a rank's share of them.
  virtual const std::vector<std::vector<float>>* WholeDataInMemory() const { return nullptr; }

  // On several ranks (include/homodyne/process_group.h): frees the data of the batches other
  // ranks compute (BatchedObjective::KeepOwnShare), once SearchData has run. The in-memory
  // strategies read only this rank's rows in the first place (nothing to free); a strategy whose
  // final fit reads all the data itself (Ceres) keeps them.
  virtual void KeepOwnShare() { objective().KeepOwnShare(); }

  // The final fit (docs/design.md section 4) of the objective reparametrised by `map`, from
  // `start` (reduced layout); lm holds the reduced bounds, tolerances, callback and any resume
  // state (which must be of solver()). A strategy that must give way mid-fit calls on_fallback
  // before the leaner fit starts (its checkpoints must already follow the new policy), then runs
  // it. Throws what the objective throws (DataError for an unreadable batch, FitInterrupted from
  // the callbacks).
  virtual LevenbergMarquardtSummary MinimizeFinal(
      const LevenbergMarquardtOptions& lm, const ScalingMap& map, const Eigen::VectorXd& start,
      const std::function<void(const StrategyFallback&)>& on_fallback);

 protected:
  FitStrategy(StrategyKind kind, std::vector<ScalingEstimate> scaling_from_data)
      : kind_(kind), scaling_from_data_(std::move(scaling_from_data)) {}

 private:
  StrategyKind kind_;
  std::vector<ScalingEstimate> scaling_from_data_;
};

// What every strategy is built from. The references must outlive the strategy (a streaming
// strategy reads `source` on every pass; Ceres evaluates `model`).
struct StrategyInputs {
  const Config& config;
  BatchSource& source;
  const HomodyneModel& model;
  const std::vector<double>& phi_degrees;
  const ProblemSize& size;  // batch size and threads
  // Called after every chunk of a pass (progress, checkpoints, signals); may be empty.
  std::function<void(const PassProgress&)> on_chunk;
  std::shared_ptr<PassBackend> backend;  // computes the passes (never null)
  std::shared_ptr<ProcessGroup> group;   // the ranks that share the passes (never null)
};

// Sets up `kind` (the standard strategy with optimization.nlsq.solver ceres runs Ceres). If it
// runs out of memory while setting up, the next leaner strategy is set up instead (standard ->
// large -> streaming; docs/design.md section 3), each change logged and appended to
// recovery_actions. Throws std::bad_alloc only when streaming itself does not fit;
// DataError/InputError from reading.
std::unique_ptr<FitStrategy> SetUpStrategy(StrategyKind kind, const StrategyInputs& inputs,
                                           std::vector<std::string>& recovery_actions);

}  // namespace homodyne
