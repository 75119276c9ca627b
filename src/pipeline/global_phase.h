// The phase before the final fit (docs/design.md section 4b): the global search on a row subsample
// of the data, or, when it is off, a projected local fit from the start. Either gives the reduced
// point the final fit starts from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "fit_checkpoints.h"
#include "fit_parameters.h"
#include "homodyne/config.h"
#include "homodyne/fit.h"
#include "homodyne/results.h"
#include "objective/batched_objective.h"
#include "optimize/global_search.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// Rows of every angle's upper triangle the global phase reads: every stride-th, so that the
// search sees at most max_points of `points` (1 = all of them).
int SearchRowStride(int64_t points, int64_t max_points);

// The coarse level of method auto (global_search.h GlobalSearchInputs::coarse_data): the row
// stride that leaves about kCoarseSearchPoints of `points` (num_times rows per angle), or 0 when
// that is not at least 2x fewer rows than search_row_stride leaves, or leaves fewer than
// kMinCoarseRows rows. Why that many points: two candidates whose models differ by delta
// (root mean square, in units of the noise sigma) differ in expected chi2 by n delta^2 over n
// points, with a spread of 2 delta sqrt(n); at 5e4 points the screening ranks such a pair right
// at 3 spreads down to delta = 0.027 sigma, well below any two basins worth telling apart.
// Every kept row has all its lags (MakeRowSubsampleObjective), so all the time dependence stays.
inline constexpr int64_t kCoarseSearchPoints = 50000;
inline constexpr int kMinCoarseRows = 16;
int CoarseRowStride(int num_times, int64_t points, int search_row_stride);

// What the global phase reads and reports to; every reference outlives the phase.
struct GlobalPhaseContext {
  // The settled method (GlobalSearchOptions::method, not kOff) and its options.
  const NlsqOptions& nlsq;
  BatchedObjective& data;  // FitStrategy::SearchData: every row_stride-th row
  int row_stride = 1;
  // Method auto: its coarse level (GlobalSearchInputs::coarse_data), every coarse_row_stride-th
  // row (CoarseRowStride); null = none. On several ranks every rank holds it whole, with passes
  // of its own (FitStrategy::SearchData, whole_on_every_rank): the phase spreads its work there.
  BatchedObjective* coarse_data = nullptr;
  int coarse_row_stride = 0;
  // The reduced layout (map), its bounds and the start; lm: the final fit's tolerances, which
  // the phase's local fits use.
  const FitParameters& parameters;
  const LevenbergMarquardtOptions& lm;
  FitCheckpoints& checkpoints;  // counts the phase's passes, holds its trail, sees signals
  const FitObserver& observer;  // on_global_search
};

// The global search (RunGlobalSearch, global_search.h) of context.nlsq.global_search.method.
// Logs progress lines, counts its passes as batches in the checkpoints, puts its trail in every
// checkpoint and sees signals between candidates and local fits (FitCheckpoints::
// OnGlobalSearchProgress throws FitInterrupted after saving). A resumed run replays the trail of
// its checkpoint first. Returns its summary.
GlobalSearchSummary RunGlobalPhase(const GlobalPhaseContext& context);

// A projected local fit of `objective` from `start` (global phase off, variable projection on):
// the reduced point the final fit starts from (`start` itself when nothing is linear).
// Interrupted by a signal, it returns where it stopped (the caller saves and stops).
Eigen::VectorXd ProjectedLocalFit(BatchedObjective& objective, const ScalingMap& map,
                                  const BoundBox& bounds, const Eigen::VectorXd& start,
                                  const LevenbergMarquardtOptions& lm);

// A profile point of the solution `theta` (reduced layout; `covariance` its covariance, or empty):
// a projected local fit of `objective` with reduced parameter `held` fixed at `value` and the
// others free (at most max_iterations iterations, statistical hold off), from where the
// covariance's regression on that parameter puts them when that lies inside `bounds`, else from
// theta. It stops as soon as its chi2 is below `enough`. Returns that chi2, or the fit's at
// convergence or max_iterations; NaN when `value` is outside the bounds or the fit failed or was
// stopped by a signal (src/pipeline/fit_solution.h ProfileProbe). here_only: `objective`'s passes
// run on this rank alone (FitStrategy::WholeDataHere), so the fit checks only this rank's signal
// (InterruptSignalHere), not the ranks' agreed one.
double ProfilePoint(BatchedObjective& objective, const ScalingMap& map, const BoundBox& bounds,
                    const Eigen::VectorXd& theta, const Eigen::MatrixXd& covariance, int held,
                    double value, double enough, const LevenbergMarquardtOptions& lm,
                    int max_iterations, bool here_only = false);

// The global phase's summary for the result files (results.h), with the physical parameters of
// each minimum by name (names: the mode's physical parameter names).
GlobalSearchRecord GlobalSearchRecordOf(const GlobalSearchSummary& summary,
                                        const std::string& reason, const ScalingMap& map,
                                        const std::vector<std::string>& names);

}  // namespace homodyne
