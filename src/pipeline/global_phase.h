// The phase before the final fit (docs/design.md section 4b): the global search on a row subsample
// of the data, or, when it is off, a projected local fit from the start. Either gives the reduced
// point the final fit starts from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "fit_checkpoints.h"
#include "homodyne/config.h"
#include "homodyne/fit.h"
#include "optimize/global_search.h"
#include "optimize/levenberg_marquardt.h"
#include "objective/batched_objective.h"
#include "homodyne/results.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// Rows of every angle's upper triangle the global phase reads: every stride-th, so that the
// search sees at most max_points of `points` (1 = all of them).
int SearchRowStride(int64_t points, int64_t max_points);

// The global search `method` (RunGlobalSearch, global_search.h) on `data` (FitStrategy::
// SearchData, every row_stride-th row), in the reduced layout of `map` within `bounds`, from
// `start`; its local fits use lm's tolerances. Logs progress lines, counts its passes as batches
// in `checkpoints`, puts its trail in every checkpoint and sees signals between candidates and
// local fits (checkpoints.OnGlobalSearchProgress throws FitInterrupted after saving). A resumed
// run replays the trail of its checkpoint first. Returns its summary.
GlobalSearchSummary RunGlobalPhase(const Config& config, GlobalSearchMethod method,
                                   BatchedObjective& data, int row_stride, const ScalingMap& map,
                                   const BoundBox& bounds, const Eigen::VectorXd& start,
                                   const LevenbergMarquardtOptions& lm,
                                   FitCheckpoints& checkpoints, const FitObserver& observer);

// A projected local fit of `objective` from `start` (global phase off, variable projection on):
// the reduced point the final fit starts from (`start` itself when nothing is linear).
// Interrupted by a signal, it returns where it stopped (the caller saves and stops).
Eigen::VectorXd ProjectedLocalFit(BatchedObjective& objective, const ScalingMap& map,
                                  const BoundBox& bounds, const Eigen::VectorXd& start,
                                  const LevenbergMarquardtOptions& lm);

// The global phase's summary for the result files (results.h), with the physical parameters of
// each minimum by name (names: the mode's physical parameter names).
GlobalSearchRecord GlobalSearchRecordOf(const GlobalSearchSummary& summary,
                                        const std::string& reason, const ScalingMap& map,
                                        const std::vector<std::string>& names);

}  // namespace homodyne
