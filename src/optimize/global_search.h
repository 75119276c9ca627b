// The global phase before the local fit (docs/design.md section 4b). Laminar flow has a wide false
// "no flow" minimum (gamma_dot_t0 on its lower bound) and static fits from the bound midpoints can
// stop with D0 on a bound, so a local fit from an untuned start is not an answer.
//
// Every method searches the physical parameters only, on the variable-projection problem
// (variable_projection.h: each candidate is judged with its best per-angle scaling), in the unit
// box of their bounds with logarithmic coordinates for parameters spanning decades and the axes
// and staged values the mode catalog's search hints give (ParameterSearchHints in
// src/model/mode_catalog.h). One file per method (global_search_internal.h lists them):
//   auto         a staged start: a grid over the decade-spanning parameters and the values the
//                hints stage (laminar_flow: D0, gamma_dot_t0 and phi0), the rest at the start,
//                plus Sobol points; all screened by one pass each; local projected fits from the
//                best few and from the user's start; the mode's moved fits. With a coarse level
//                (GlobalSearchInputs::coarse_data) all of that runs on it, and the best distinct
//                minima are refined on the search data.
//   multi_start  the reference's multi-start (optimization.nlsq.multi_start): sampled and custom
//                starts, screening, local fits, the best refined with refinement_ftol.
//   cmaes        CMA-ES with restarts (pagmo2; optimization.nlsq.cmaes), then a local fit.
// The search runs on the data it is given (all of it, or a row subsample above
// global_search.max_points; batched_objective.h MakeRowSubsampleObjective); the caller refines the
// chosen minimum on all the data with the full problem. Deterministic for a seed: candidates
// are evaluated in a fixed order and each pass is deterministic (batched_objective.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "checkpoint/checkpoint_state.h"
#include "homodyne/config.h"
#include "homodyne/fit_events.h"
#include "homodyne/process_group.h"
#include "objective/batched_objective.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"

namespace homodyne {

// What the global phase did: the global_search section of convergence_metrics.json.
struct GlobalSearchSummary {
  GlobalSearchMethod method = GlobalSearchMethod::kOff;  // the method run; kOff: not run
  std::string reason;    // why this method (the config keys that chose it)
  int candidates = 0;    // starting points screened (auto, multi_start)
  int local_fits = 0;    // projected local fits run
  int generations = 0;   // CMA-ES generations over all runs
  int cmaes_runs = 0;    // CMA-ES runs (1 + restarts)
  int moved_fits = 0;    // of the local fits, those from the mode's search moves
  int refined_fits = 0;  // of the local fits, coarse minima refined on the search data
  // Of the refinements, those stopped once they had joined a minimum refined before them
  // (docs/design.md section 4b, Coarse to fine).
  int joined_refinements = 0;
  // Method auto's local fits from the screened candidates (docs/design.md section 4b): those
  // stopped once they had joined a minimum found before them, and the ranked starts left out
  // once the best minimum had been reached from kAutoArrivals starts.
  int joined_local_fits = 0;
  int skipped_starts = 0;
  int64_t passes = 0;  // passes over the search data (replayed ones included)
  // How the passes were spent (replayed ones included): one per screened candidate or CMA-ES
  // evaluation, the local fits from screened candidates (or CMA-ES points), the moved fits.
  int64_t screening_passes = 0;
  int64_t local_fit_passes = 0;
  int64_t moved_fit_passes = 0;
  int64_t refine_passes = 0;      // the refinements (on the search data; the rest on the coarse)
  int64_t batches = 0;            // batches computed (not replayed): each level's passes x batches
  int64_t replayed_passes = 0;    // of which replayed from GlobalSearchInputs::replay
  int64_t point_evaluations = 0;  // passes x points of the data each ran on
  int64_t search_points = 0;      // upper-triangle points of the search data (all angles)
  int row_stride = 1;             // 1 = all rows; s = every s-th row (subsample)
  // The coarse level (method auto with GlobalSearchInputs::coarse_data): its points and rows
  // (set by the caller); 0 = none.
  int64_t coarse_points = 0;
  int coarse_row_stride = 0;
  double seconds = 0.0;
  std::vector<GlobalMinimum> minima;  // distinct minima on the search data, lowest chi2 first
  int chosen = -1;                    // index into minima; -1 = not run
  std::vector<std::string> warnings;  // degenerate minima
  bool stopped = false;               // the progress callback asked to stop (a signal)
  GlobalSearchTrail trail;            // all its work (the replay included), for checkpoints

  // One line for logs: method, candidates / generations, minima, chosen chi2, passes, time.
  std::string BriefReport() const;
};

struct GlobalSearchInputs {
  BatchedObjective* data = nullptr;  // the search data (not owned; must outlive the call)
  // Method auto only (the others ignore it): a coarse level, fewer rows of the same data (not
  // owned; must outlive the call). Screening, local fits and moved fits run on it; the distinct
  // minima within a few reduced chi2 of its best are then refined on `data` (coarse to fine,
  // docs/design.md section 4b). Null: everything runs on `data`.
  BatchedObjective* coarse_data = nullptr;
  ScalingMap map;                   // the fit's reduced layout (after FixParameters)
  BoundBox bounds;                  // reduced bounds; physical ones must be finite
  Eigen::VectorXd start;            // the reduced start (initial_parameters and the scaling)
  LevenbergMarquardtOptions local;  // tolerances and max_iterations of the local fits
  // A trail saved by an interrupted run of the same method, config and data, replayed before
  // any new work (empty: none). A longer run's trail is not checked against this one's work:
  // the checkpoint identity (config and data hashes) guarantees they are the same search.
  GlobalSearchTrail replay;
  // Called after every screened candidate, local fit and CMA-ES generation (spread: after every
  // round); return false to stop (summary.stopped; the best point so far is still returned).
  // Optional.
  std::function<bool(const GlobalSearchProgress&)> on_progress;
  // Method auto on several ranks (docs/design.md section 5b): the coarse level's screening, local
  // fits and moved fits are spread over the ranks of this group instead of sharing each pass.
  // Item i of a stage runs on rank i mod K, in rounds of K items; after each round the ranks
  // exchange its results and every rank records them in item order, so the search takes
  // bitwise the single process's path (each item is independent of the others: every screening
  // and local fit starts from the start's scaling). on_progress is called once per round. Needs
  // coarse_data held whole by every rank, with passes of its own (no group); the refinements
  // on `data` share its passes as before. Null, one rank or no coarse level: nothing spread.
  ProcessGroup* spread_group = nullptr;
  // With spread_group: whether a signal reached this rank (not collective). A spread local fit
  // stops when it is true; the round then ends (the ranks agree in on_progress). Required then.
  std::function<bool()> stop_requested_here;
};

// Runs the method (not kOff: std::invalid_argument) and returns the summary;
// summary.minima[summary.chosen].reduced is where the final fit starts. Throws ConfigError for a
// search box with an infinite or inverted physical bound, and for invalid method options (naming
// the YAML path).
GlobalSearchSummary RunGlobalSearch(GlobalSearchMethod method, const NlsqOptions& nlsq,
                                    const GlobalSearchInputs& inputs);

}  // namespace homodyne
