// The global phase (global_phase.h).
#include "global_phase.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <string>

#include "homodyne/process_group.h"
#include "interrupts.h"
#include "optimize/variable_projection.h"

namespace homodyne {

int SearchRowStride(int64_t points, int64_t max_points) {
  return static_cast<int>(std::max<int64_t>(1, (points + max_points - 1) / max_points));
}

int CoarseRowStride(int num_times, int64_t points, int search_row_stride) {
  const int stride = std::min(SearchRowStride(points, kCoarseSearchPoints),
                              std::max(1, (num_times - 1) / kMinCoarseRows));
  return stride >= 2 * search_row_stride ? stride : 0;
}

GlobalSearchSummary RunGlobalPhase(const GlobalPhaseContext& context) {
  const GlobalSearchMethod method = context.nlsq.global_search.method;
  BatchedObjective& data = context.data;
  const int row_stride = context.row_stride;
  FitCheckpoints& checkpoints = context.checkpoints;
  spdlog::info("global search {}: {} points{}{}", ToString(method), data.num_points(),
               row_stride > 1 ? " (every " + std::to_string(row_stride) + " rows)" : "",
               context.coarse_data != nullptr
                   ? ", screening and local fits on " +
                         std::to_string(context.coarse_data->num_points()) + " (every " +
                         std::to_string(context.coarse_row_stride) + " rows)"
                   : "");
  GlobalSearchInputs inputs;
  inputs.data = &data;
  inputs.coarse_data = context.coarse_data;
  inputs.map = context.parameters.map;
  inputs.bounds = context.parameters.reduced_bounds;
  inputs.start = context.parameters.reduced_start;
  inputs.local = context.lm;
  inputs.local.resume_state.reset();
  inputs.local.callback = [](const LevenbergMarquardtIteration&) { return InterruptSignal() == 0; };
  // On several ranks the coarse level is held whole by each (fit.cc, SearchDataStep): its
  // candidates and local fits are spread over the ranks.
  if (ProcessGroup& group = *CurrentProcessGroup(); group.size() > 1 && context.coarse_data) {
    inputs.spread_group = &group;
    inputs.stop_requested_here = [] { return InterruptSignalHere() != 0; };
    spdlog::info(
        "global search {}: the coarse level's candidates and local fits spread over {} "
        "ranks",
        ToString(method), group.size());
  }
  inputs.replay = checkpoints.global_search_trail();
  if (!inputs.replay.empty()) {
    spdlog::info("global search {}: replaying {} evaluations and {} local fits from the checkpoint",
                 ToString(method), inputs.replay.evaluations.size(), inputs.replay.minima.size());
  }
  int64_t passes_seen = 0;
  int64_t batches_seen = 0;
  std::string last_stage;
  inputs.on_progress = [&](const GlobalSearchProgress& progress) {
    // A line when a stage starts, after every local fit, at the end of screening and every
    // 20th CMA-ES generation.
    const bool new_stage = progress.stage != last_stage;
    last_stage = progress.stage;
    const bool each = progress.stage == "local fit" || progress.stage == "refine";
    const bool last = progress.total > 0 && progress.index == progress.total;
    const bool periodic = progress.stage == "cmaes" && progress.index % 20 == 0;
    const bool computed = progress.passes > passes_seen;  // not replayed
    if (computed && (new_stage || each || last || periodic)) {
      // "index/total", or the index alone when the stage has no fixed length.
      std::string counter = std::to_string(progress.index);
      if (progress.total > 0) counter.append("/").append(std::to_string(progress.total));
      spdlog::info("global search {} {}  best chi2 {:.8e}  {} passes", progress.stage, counter,
                   progress.best_chi2, progress.passes);
    }
    if (context.observer.on_global_search) context.observer.on_global_search(progress);
    checkpoints.OnGlobalSearchProgress(progress.batches - batches_seen, *progress.trail);
    passes_seen = progress.passes;
    batches_seen = progress.batches;
    return true;
  };
  GlobalSearchSummary summary = RunGlobalSearch(method, context.nlsq, inputs);
  summary.row_stride = row_stride;
  if (summary.coarse_points > 0) summary.coarse_row_stride = context.coarse_row_stride;
  checkpoints.OnGlobalSearchFinished(summary.batches - batches_seen, summary.trail);
  spdlog::info("{}", summary.BriefReport());
  return summary;
}

Eigen::VectorXd ProjectedLocalFit(BatchedObjective& objective, const ScalingMap& map,
                                  const BoundBox& bounds, const Eigen::VectorXd& start,
                                  const LevenbergMarquardtOptions& lm) {
  VariableProjectionProblem projected(objective, map, bounds, start);
  if (projected.linear_indices().empty()) return start;  // nothing to project
  LevenbergMarquardtOptions options = projected.LocalFitOptions(lm);
  options.callback = [](const LevenbergMarquardtIteration&) { return InterruptSignal() == 0; };
  const LevenbergMarquardtSummary fit =
      Minimize(options, projected, projected.NonlinearPart(start));
  spdlog::info("projected local fit: {}", fit.BriefReport());
  return projected.ReducedPoint(fit.theta);
}

double ProfilePoint(BatchedObjective& objective, const ScalingMap& map, const BoundBox& bounds,
                    const Eigen::VectorXd& theta, const Eigen::MatrixXd& covariance, int held,
                    double value, double enough, const LevenbergMarquardtOptions& lm,
                    int max_iterations, bool here_only) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (held < 0 || held >= theta.size() || bounds.lower.size() != theta.size() ||
      !(value >= bounds.lower[held]) || !(value <= bounds.upper[held])) {
    return kNaN;
  }
  BoundBox profile_bounds = bounds;
  profile_bounds.lower[held] = value;
  profile_bounds.upper[held] = value;
  // On a quadratic surface the regression's point is the answer, and the fit only corrects it.
  Eigen::VectorXd start = theta;
  if (covariance.rows() == theta.size() && covariance(held, held) > 0.0) {
    const Eigen::VectorXd moved =
        theta + covariance.col(held) * ((value - theta[held]) / covariance(held, held));
    if ((moved.array() >= bounds.lower.array()).all() &&
        (moved.array() <= bounds.upper.array()).all()) {
      start = moved;
    }
  }
  start[held] = value;
  VariableProjectionProblem projected(objective, map, profile_bounds, start);
  LevenbergMarquardtOptions options = projected.LocalFitOptions(lm);
  options.statistical_tolerance = 0.0;
  options.max_iterations = std::min(options.max_iterations, max_iterations);
  bool below = false;  // stopped once its chi2 was below `enough`
  options.callback = [&below, enough, here_only](const LevenbergMarquardtIteration& iteration) {
    below = iteration.chi2 < enough;
    return !below && (here_only ? InterruptSignalHere() : InterruptSignal()) == 0;
  };
  const LevenbergMarquardtSummary fit =
      Minimize(options, projected, projected.NonlinearPart(start));
  const bool finished =
      below || fit.IsConverged() || fit.status == LevenbergMarquardtStatus::kMaxIterations;
  return finished ? fit.final_chi2 : kNaN;
}

GlobalSearchRecord GlobalSearchRecordOf(const GlobalSearchSummary& summary,
                                        const std::string& reason, const ScalingMap& map,
                                        const std::vector<std::string>& names) {
  GlobalSearchRecord record;
  record.method = ToString(summary.method);
  record.reason = reason;
  record.candidates = summary.candidates;
  record.local_fits = summary.local_fits;
  record.generations = summary.generations;
  record.cmaes_runs = summary.cmaes_runs;
  record.moved_fits = summary.moved_fits;
  record.refined_fits = summary.refined_fits;
  record.joined_local_fits = summary.joined_local_fits;
  record.joined_refinements = summary.joined_refinements;
  record.starts_left_out = summary.skipped_starts;
  record.passes = summary.passes;
  record.screening_passes = summary.screening_passes;
  record.local_fit_passes = summary.local_fit_passes;
  record.moved_fit_passes = summary.moved_fit_passes;
  record.refine_passes = summary.refine_passes;
  record.replayed_passes = summary.replayed_passes;
  record.point_evaluations = summary.point_evaluations;
  record.search_points = summary.search_points;
  record.row_stride = summary.row_stride;
  record.coarse_points = summary.coarse_points;
  record.coarse_row_stride = summary.coarse_row_stride;
  record.seconds = summary.seconds;
  record.chosen = summary.chosen;
  for (const GlobalMinimum& minimum : summary.minima) {
    GlobalSearchRecord::Minimum entry;
    entry.chi2 = minimum.chi2;
    const Eigen::VectorXd full = map.Expand(minimum.reduced);
    for (size_t p = 0; p < names.size(); ++p) {
      entry.names.push_back(names[p]);
      entry.values.push_back(full[static_cast<Eigen::Index>(p)]);
    }
    entry.start = minimum.start;
    entry.status = minimum.status;
    entry.iterations = minimum.iterations;
    entry.passes = minimum.passes;
    entry.reached_by = minimum.reached_by;
    record.minima.push_back(std::move(entry));
  }
  return record;
}

}  // namespace homodyne
