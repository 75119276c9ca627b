// RunFitJob (include/homodyne/fit.h): what both shells do around a fit, in one place.
#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/fault_injection.h"
#include "checkpoint/checkpoint_lock.h"
#include "config/path_checks.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "homodyne/process_group.h"
#include "performance_log.h"

namespace homodyne {
namespace {

// When the library was loaded: the program's start for the command-line programs (static
// initialisation), the module's import for Python. The run's "start" phase is from here to the
// fit's start (PerformanceLog::LogWallByPhase).
const std::chrono::steady_clock::time_point kLoaded = std::chrono::steady_clock::now();

// The lock of output_dir/nlsq for the whole job (fit.h, RunFitJob step 0), on rank 0; the ranks
// learn together whether rank 0 holds it, so that none of them starts a fit the others refused.
// A folder that cannot be created or locked only warns: the write at the end reports it.
std::shared_ptr<FolderLock> LockResultsFolder(const std::string& output_dir, bool root) {
  std::shared_ptr<FolderLock> lock;
  std::string refusal;
  if (root) {
    try {
      std::string note;
      lock = FolderLock::Acquire((std::filesystem::path(output_dir) / "nlsq").string(),
                                 LockedFolder::kResults, note);
      if (!note.empty()) spdlog::warn("{}", note);
    } catch (const InputError& error) {
      refusal = error.what();
    }
  }
  if (CurrentProcessGroup()->BroadcastFromRoot(refusal.empty() ? 0 : 1) != 0) {
    throw InputError(root ? refusal
                          : "rank 0 could not lock the results folder " + output_dir + "/nlsq");
  }
  return lock;
}

}  // namespace

FitOutcome RunFitJob(const Config& config, BatchSource& source, const FitJobOptions& options,
                     const FitObserver& observer) {
  CheckJobPaths(config, options.output_dir);
  // The ranks of a job (process_group.h) fit in lock step; rank 0 alone logs, reports and writes.
  const bool root = CurrentProcessGroup()->is_root();
  const std::shared_ptr<FolderLock> results_lock =
      options.output_dir ? LockResultsFolder(*options.output_dir, root) : nullptr;
  // logging.performance: <output_dir>/<filename>, only when there is an output_dir to put it in;
  // a log that cannot be written only warns.
  PerformanceLogOptions log_options = config.logging.performance;
  if (!root) log_options.enabled = false;
  if (log_options.enabled && !options.output_dir) {
    spdlog::warn("logging.performance.enabled = true but no output_dir given: no performance log");
    log_options.enabled = false;
  }
  PerformanceLog performance_log(log_options, options.output_dir.value_or(""));
  const double start_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - kLoaded).count();
  // The final fit's iterations, for nlsq/convergence_history.json (the convergence plot).
  std::vector<IterationProgress> history;
  FitObserver recording = observer;
  recording.on_iteration = [&history,
                            inner = observer.on_iteration](const IterationProgress& iteration) {
    history.push_back(iteration);
    if (inner) inner(iteration);
  };
  FitOutcome outcome = [&] {
    try {
      return Fit(config, source, performance_log.Observe(recording));
    } catch (const std::exception& error) {
      performance_log.LogFailure(error.what());
      throw;
    }
  }();
  outcome.results_lock = results_lock;
  performance_log.LogTotal(outcome.result);
  if (!root) {
    outcome.held_data.reset();  // FitOutcome::held_data: for the writer alone
    return outcome;             // rank 0 writes the files and removes the checkpoints
  }
  if (options.on_fitted) options.on_fitted(outcome);
  if (options.output_dir) {
    const auto write_start = std::chrono::steady_clock::now();
    WriteFitResults(outcome, source, *options.output_dir, options.write_npz);
    outcome.held_data.reset();  // written: the fit's data in memory are freed
    const double write_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - write_start).count();
    performance_log.LogOperation("results written to " + *options.output_dir + "/nlsq",
                                 write_seconds);
    performance_log.LogWallByPhase(start_seconds, outcome.result, write_seconds);
    // Only the plots read the history: a failure to write it warns and costs the convergence plot.
    try {
      // The sigma the final fit divided by (sigma auto: the estimate).
      WriteConvergenceHistory(history, outcome.result,
                              outcome.result.sigma > 0.0 ? outcome.result.sigma : config.nlsq.sigma,
                              *options.output_dir);
    } catch (const std::exception& error) {
      spdlog::warn("{}; the result files are complete", error.what());
    }
  }
  outcome.held_data.reset();  // no result files written: freed all the same
  // The results are durable: only now may the checkpoints go (a kill up to here resumes and
  // writes the same results again), and then the folder's lock.
  KillIfInjectedAt("before_checkpoint_removal");
  RemoveCheckpoints(outcome);
  outcome.checkpoint_lock.reset();
  return outcome;
}

}  // namespace homodyne
