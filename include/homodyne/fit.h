// A whole fit as one library call (docs/design.md section 9): the CLI (`homodyne`) and the Python
// module (`homodyne_cpp`) are shells over it. Data flow one way:
//   config -> plan (fit_plan.h) -> source -> strategy -> global phase -> final fit -> result.
// Fit() neither prints nor writes result files: the caller does (WriteFitResults below), then
// calls RemoveCheckpoints once they are safe. On a group of several ranks (process_group.h) every
// rank calls the same functions in lock step and gets the same outcome; rank 0 alone writes
// checkpoints and files (WriteFitResults and RemoveCheckpoints do nothing on the others).
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/fit_events.h"
#include "homodyne/interrupts.h"
#include "homodyne/model.h"
#include "homodyne/results.h"

namespace homodyne {

// A phase of the fit, finished: "load" (data read, strategy set up), "global search" (or
// "projected local fit" when the global phase is off), "final fit" and "uncertainties" (the
// error bars' work after the final fit: FitResult::uncertainty_seconds).
struct FitPhaseReport {
  std::string phase;
  double seconds = 0.0;  // its wall time [s]
};

// Events of a running fit, for progress display and performance logs (performance_log.h); each
// may be empty. They run on the fitting thread, between chunks, local fits and iterations, and
// only observe: the fit's numbers do not depend on them. An observer that wants to stop the fit
// calls RequestInterrupt (the fit then saves a checkpoint and throws FitInterrupted).
struct FitObserver {
  std::function<void(const PassProgress&)> on_pass_chunk;                // chunks of every pass
  std::function<void(const GlobalSearchProgress&)> on_global_search;     // the global phase
  std::function<void(const IterationProgress&)> on_iteration;            // the final fit
  std::function<void(const CheckpointSaveReport&)> on_checkpoint_saved;  // after each save
  std::function<void(const FitPhaseReport&)> on_phase;                   // after each phase
};

// What a fit returns: the result files' content and what a caller needs to show or extend it.
struct FitOutcome {
  FitResult result;                    // parameters, uncertainties, covariance, chi2, warnings
  std::string final_fit_report;        // one line: status, iterations, passes, chi2, time
  std::vector<double> physical;        // fitted physical parameters, model order
  std::optional<HomodyneModel> model;  // the model the fit used (times, q, L, mode)
  CheckpointOptions checkpoints;       // where this fit kept its checkpoints
  bool checkpoints_enabled = false;
  // The lock of the checkpoint folder (docs/checkpoints.md, The folder lock), taken when the fit
  // opened its checkpoints and held while this pointer or a copy lives: RunFitJob releases it once
  // the results are durable and the checkpoints removed. Null without checkpoints.
  std::shared_ptr<void> checkpoint_lock;
  // The lock of the results folder output_dir/nlsq (docs/checkpoints.md, The folder lock), taken
  // by RunFitJob before the fit starts and held while this pointer or a copy lives, so that a
  // caller writes its plots into the folder before another fit may. Null without output_dir.
  std::shared_ptr<void> results_lock;
  // The data the fit held in memory, every angle's packed strict upper triangle as float32 read
  // from the source (dataset.h order): set by the in-memory strategies of one process, null where
  // the fit streamed its data or held a share of them. WriteFitResults writes fitted_data.h5's
  // data from them instead of reading the file again where they are the file's values (float32
  // matrices). It keeps the fit's data objects alive: RunFitJob resets it once the results are
  // written; a caller of Fit resets it when it does not write them.
  std::shared_ptr<const std::vector<std::vector<float>>> held_data;
  int exit_code = 0;  // 0 converged or max_iterations, 1 the optimiser failed
};

// Fits `source` (a file's BatchSource, or data in memory) with config's settings (a config from
// ResolveConfig: the shells' overrides, --memory-limit-gb and --global-search included, are in
// it). Throws
// ConfigError / InputError / DataError for bad input (the message names what and where),
// FitInterrupted after a signal or RequestInterrupt (with a checkpoint saved when enabled).
// Checkpoints of the same config and data are resumed from when optimization.streaming says so.
// Runs on the plan's threads (OpenMP) and gives the caller's thread count back on every exit.
FitOutcome Fit(const Config& config, BatchSource& source, const FitObserver& observer = {});

// The result files of a finished fit under output_dir/nlsq/, as one set, all or nothing
// (results.h WriteAllResultFiles): the JSON files and fitted_data.h5 (data, fit and residuals per
// angle, streamed by row blocks from `source`, the data the fit read). Throws InputError naming
// the file on a write failure.
void WriteFitResults(const FitOutcome& outcome, BatchSource& source, const std::string& output_dir,
                     bool npz = false);

// Deletes the checkpoints of a finished fit (call once its results are durable); the folder's
// lock stays with outcome.checkpoint_lock.
void RemoveCheckpoints(const FitOutcome& outcome);

// The job both shells run (the CLI's `homodyne` and the Python module's fit_nlsq), in order:
//   0. the paths checked (CheckJobPaths, src/config/path_checks.h: no NUL in checkpoint_dir,
//      output_dir or logging.performance.filename, no performance log on a result file), and
//      the results folder output_dir/nlsq locked for the whole job (rank 0; outcome.results_lock):
//      a second job on the same folder is refused before it fits, naming the holder;
//   1. Fit, with the config's performance log (logging.performance) attached to the observer,
//      the log written under output_dir (no output_dir: no log, with a warning when enabled);
//   2. on_fitted(outcome), when set (the CLI prints the result here, so that a failed write
//      loses no computed number); steps 2 to 4 and the log run on rank 0 of a job only;
//   3. when output_dir is set, the result files (WriteFitResults), logged;
//   4. the checkpoints removed (the result files, or the caller, now hold everything), then the
//      checkpoint folder's lock released. A failure or a kill before this step leaves the
//      checkpoints, so that a rerun resumes and writes bitwise the same results
//      (docs/checkpoints.md, Result files and checkpoints).
// Throws ConfigError naming the key for a path of step 0, InputError naming the holder when the
// results folder is locked by another fit, and what Fit and WriteFitResults throw
// (the lock released, the checkpoints kept); a failure of the fit is logged first.
struct FitJobOptions {
  std::optional<std::string> output_dir;  // result files and the performance log
  bool write_npz = false;  // nlsq/fitted_data.npz in the set too (--output-format npz)
  std::function<void(const FitOutcome&)> on_fitted;  // between the fit and the files; optional
};
FitOutcome RunFitJob(const Config& config, BatchSource& source, const FitJobOptions& options,
                     const FitObserver& observer = {});

// `homodyne --dry-run`: what a fit of `source` with this config would do, without fitting. It
// runs the fit's own steps before the first pass (the backend, the plan checked against the data,
// the strategy set up with its data, the parameters with fixed_parameters and the per-angle mode,
// the checkpoint lookup) and describes them: the data, the backend, the fitted parameters by
// name, those held fixed, the start values with their bounds and each start the fit will clip
// into them, the memory available and per strategy, the batch size, the threads, the strategy,
// and the checkpoint a fit would resume from (or none, or --no-resume). Writes the report to
// `out`; throws what Fit throws before its first pass, with the same message (ConfigError,
// InputError, DataError). Writes and removes nothing, and gives the caller's thread count back.
void DescribeFitPlan(const Config& config, BatchSource& source, std::ostream& out);

// ---------------------------------------------------------------------------------------------
// Interruption: the process-wide flag and its signal handlers are in interrupts.h.

// Thrown after the interruption checkpoint is written (or when none could be): ends the fit.
// The CLI maps it to exit code 3 when a checkpoint was saved (docs/design.md section 7), else 1.
class FitInterrupted : public std::runtime_error {
 public:
  FitInterrupted(const std::string& message, bool checkpoint_saved)
      : std::runtime_error(message), checkpoint_saved_(checkpoint_saved) {}
  bool checkpoint_saved() const { return checkpoint_saved_; }

 private:
  bool checkpoint_saved_;
};

}  // namespace homodyne
