// The state a checkpoint keeps (src/checkpoint/checkpoint_store.h, docs/design.md section 6):
// the LM core's between two iterations, a pass's between two chunks, the global phase's work so
// far, the profile intervals' points so far. The optimisers and the objective produce and consume
// these structs and the checkpoint stores them, so they live in a header of their own at the
// checkpoint's layer, below both (docs/design.md section 9, Layers): the checkpoint store then
// includes no optimiser header, and the objective and the optimisers include this one without
// climbing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

namespace homodyne {

// The optimiser that wrote a LevenbergMarquardtState. The LM core and the Ceres standard fit
// (src/optimize/ceres_standard_fit.h) keep different things in it, so a state continues only with
// the optimiser that wrote it (docs/checkpoints.md, How resume picks a file).
enum class StateSolver { kLmCore, kCeres };

// The Levenberg-Marquardt core's state between two iterations (src/optimize/levenberg_marquardt.h):
// with it, Minimize continues exactly as if it had never stopped.
struct LevenbergMarquardtState {
  StateSolver solver = StateSolver::kLmCore;  // who wrote it
  Eigen::VectorXd theta;                      // the current point
  Eigen::MatrixXd jtj;                        // normal equations at theta (P x P)
  Eigen::VectorXd jtr;                        // P
  double chi2 = 0.0;                          // at theta
  int64_t num_points = 0;                     // residuals in chi2
  double damping_mu = 0.0;                    // NielsenDamping mu
  double damping_nu = 2.0;                    // NielsenDamping nu
  // Ceres states only (solver kCeres): trust region radius of the next step. 0 in the LM
  // core's states.
  double trust_region_radius = 0.0;
  int consecutive_rejections = 0;
  int iterations = 0;  // trials made so far
  int accepted_steps = 0;
  int rejected_steps = 0;
  int64_t passes = 0;  // Accumulate passes so far
  int64_t cost_passes = 0;
  double initial_chi2 = 0.0;
  std::vector<double> chi2_history;  // chi2 at theta after each iteration (iteration 0 first)
};

// A pass interrupted between two chunks (src/objective/batched_objective.h): its point, the
// batches already reduced and their partial sums, so the pass continues from the next batch with
// the same result.
struct PassState {
  Eigen::VectorXd theta;      // the point the pass evaluates
  bool full_pass = true;      // Accumulate (true) or Cost (false)
  int next_batch = 0;         // batches [0, next_batch) are in the partial sums
  Eigen::MatrixXd jtj;        // partial J^T J (lower triangle filled; P x P); empty for Cost
  Eigen::VectorXd jtr;        // partial J^T r; empty for Cost
  double chi2 = 0.0;          // partial chi2
  int64_t finite_points = 0;  // finite points counted so far
};

// One distinct local minimum the global search (src/optimize/global_search.h) found.
struct GlobalMinimum {
  Eigen::VectorXd reduced;  // the reduced point [physical, scaling] (ScalingMap layout)
  double chi2 = 0.0;        // on the search data
  int start = -1;           // the candidate it was reached from (screening order), -1 = CMA-ES
  int iterations = 0;       // of its local fit
  std::string status;       // its local fit's LM status, e.g. "converged (ftol)"
  int64_t passes = 0;       // passes over the search data it took
  // Local fits that ended in it (summed by GlobalSearch's Record as fits reach the same minimum;
  // a refinement carries its coarse minimum's count). Not in the trail: a replay recounts it.
  int reached_by = 1;
};

// What the global phase computed so far, in the fixed order of its work. A checkpoint keeps it
// (checkpoint_store.h) and a resumed run replays it (GlobalSearchInputs::replay) instead of
// computing it again: the same values in the same order, so the search takes the same path and
// returns bitwise the uninterrupted run's minima, with only the work after the interruption left
// to do.
struct GlobalSearchTrail {
  std::vector<double> evaluations;    // chi2 of every one-pass evaluation (screening, CMA-ES)
  std::vector<GlobalMinimum> minima;  // every local fit's (or unrefined point's) minimum
  // The projected problem's linear estimate after the last entry (VariableProjectionProblem::
  // linear_estimate). Checkpoints hold it; the search does not need it to continue, since every
  // evaluation and local fit starts from the start's scaling (or a minimum's, refinements).
  Eigen::VectorXd projection_state;
  bool empty() const { return evaluations.empty() && minima.empty(); }
};

// One profile point of the profile-likelihood intervals (docs/results.md, Profile intervals): chi2
// of the fit with physical parameter `parameter` (its index in the mode's order) held at `value`
// and the others refitted.
struct ProfilePointRecord {
  int parameter = 0;
  double value = 0.0;
  double chi2 = 0.0;
};

// The profile points computed so far, in the order they were computed. A checkpoint keeps them
// and a resumed run takes a point's chi2 from here instead of refitting it (a point is found by
// its parameter and the bits of its value): the same numbers, so the intervals end bitwise where
// an uninterrupted run's do, with only the points after the interruption left to compute.
struct ProfileTrail {
  std::vector<ProfilePointRecord> points;
  bool empty() const { return points.empty(); }
};

}  // namespace homodyne
