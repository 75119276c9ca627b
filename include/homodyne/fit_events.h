// What a running fit tells its observer (fit.h FitObserver), and where it keeps its checkpoints.
//
// These are plain reports: they run on the fitting thread, between chunks, candidates and
// iterations, and only observe. Two fields point at the fit's internal state (PassProgress::state,
// GlobalSearchProgress::trail): the fit's own checkpoints read them; an observer outside the
// library sees them as opaque and must not keep them past the call.
#pragma once

#include <cstdint>
#include <string>

namespace homodyne {

struct PassState;          // a pass's partial sums (internal: what an in-pass checkpoint saves)
struct GlobalSearchTrail;  // the global phase's work so far (internal: for checkpoints)

// Progress of a pass, after each chunk (docs/design.md section 3: chunked progress and the
// checkpoint hook).
struct PassProgress {
  int64_t pass = 0;          // passes started so far (1 for the first)
  bool full_pass = true;     // Accumulate (true) or Cost (false)
  int batches_done = 0;      // batches reduced so far in this pass
  int num_batches = 0;       // batches in a pass
  int batches_in_chunk = 0;  // batches computed in the chunk just finished
  // The pass's partial sums after this chunk (what an in-pass checkpoint saves); valid during
  // the callback. The callback may throw to end the pass (e.g. after saving, on a signal).
  const PassState* state = nullptr;
  // Wall times, for performance logs: of this chunk (fetch and compute, not the callbacks), and
  // since this pass began (or resumed) up to this callback (earlier callbacks included) [s].
  double chunk_seconds = 0.0;
  double pass_seconds = 0.0;
};

// Progress of the global phase (docs/design.md section 4b): a line's worth, after every screened
// candidate, local fit and CMA-ES generation.
struct GlobalSearchProgress {
  std::string stage;       // "screening", "local fit", "cmaes", "refine"
  int index = 0;           // 1-based candidate, local fit or generation
  int total = 0;           // how many there will be (0 = unknown, CMA-ES)
  double best_chi2 = 0.0;  // lowest chi2 so far (on the search data)
  int64_t passes = 0;      // passes computed so far (not counting replayed ones)
  int64_t batches = 0;     // batches those passes computed (a coarse level's passes have fewer)
  const GlobalSearchTrail* trail = nullptr;  // everything computed so far (for checkpoints)
  double seconds = 0.0;                      // wall time since the global search began [s]
};

// One iteration of the final fit's Levenberg-Marquardt loop (docs/design.md section 4).
// Iteration 0 is the starting point.
struct IterationProgress {
  int iteration = 0;           // trial number; 0 = the (clipped) starting point
  bool step_accepted = false;  // false for iteration 0 and rejected trials
  double chi2 = 0.0;           // chi2 at the current point (after accepting, the new one)
  double trial_chi2 = 0.0;     // chi2 at the trial point (may be NaN/inf); = chi2 at iteration 0
  double damping = 0.0;        // Marquardt mu after this iteration's update (dimensionless)
  double step_norm = 0.0;      // |theta_trial - theta| (2-norm, parameter units); 0 at iteration 0
  double gain_ratio = 0.0;     // actual / predicted chi2 reduction; 0 at iteration 0
  double seconds = 0.0;        // wall time since the loop started [s]
  int64_t passes = 0;          // full (Accumulate) passes so far
  int64_t cost_passes = 0;     // cost-only passes so far
  // The Gauss-Newton step at the current point in standard errors (see docs/design.md section
  // 4, the statistical stopping test); -1 where it cannot be computed (non-finite chi2, J^T J
  // or J^T r).
  double step_standard_errors = -1.0;
};

// Where a fit keeps its checkpoints (optimization.streaming; docs/checkpoints.md).
struct CheckpointOptions {
  std::string directory = "./checkpoints";  // optimization.streaming.checkpoint_dir
  int keep_last = 3;                        // optimization.streaming.keep_last_checkpoints, >= 1
  bool compression = true;                  // optimization.streaming.enable_compression (deflate)
};

// One checkpoint save, finished.
struct CheckpointSaveReport {
  std::string path;      // the file written
  double seconds = 0.0;  // wall time of the save [s]
  int64_t bytes = 0;     // its size
};

}  // namespace homodyne
