// The performance log of logging.performance (config.h PerformanceLogOptions;
// docs/configuration.md, Performance log): timestamped lines about a fit's operations and phases,
//   2026-11-23 06:40:33 [INFO] pass 12 (J) completed in 0.123 s (50 batches)
//   2026-11-23 06:40:33 [INFO] checkpoint saved in 0.004 s (12345 bytes, ./checkpoints/...)
//   2026-11-23 06:40:34 [WARNING] slow: iteration 7 accepted in 0.412 s (...) (threshold 0.1 s)
// driven only by the fit's observer events (fit.h FitObserver), so it cannot change a fit.
//
// Operations (chunks of a pass, passes, checkpoint saves, global-search steps, final-fit
// iterations, the caller's own, e.g. writing the results) taking threshold_seconds or longer are
// written as "[WARNING] slow: ..." whatever the level; the others at their severity: chunks and
// global-search steps DEBUG, the rest INFO. An operation's time leaves out the checkpoint saves
// made during it (the fit saves from its observer callbacks; the saves have their own lines).
// Summaries (global-search stages, phases, the total) are wall times, INFO, never marked slow. The
// CLI and the Python module write it to <output folder>/<filename>, appending (each fit starts with
// a "fit started" line).
//
// Failure contract: writing never fails the fit. A file that cannot be opened or written gives one
// warning (spdlog) and the log goes quiet; nothing here throws. Not thread-safe: the observer
// events arrive on the fitting thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "homodyne/config.h"
#include "homodyne/fit.h"
#include "homodyne/results.h"

namespace homodyne {

class PerformanceLog {
 public:
  // When options.enabled, opens output_dir/options.filename for appending (creating its folders)
  // and writes the "fit started" line; else the log stays inactive and every call does nothing.
  PerformanceLog(const PerformanceLogOptions& options, const std::string& output_dir);
  PerformanceLog(const PerformanceLog&) = delete;
  PerformanceLog& operator=(const PerformanceLog&) = delete;

  // True while the file is open and writable.
  bool active() const { return file_ != nullptr; }
  // output_dir/filename ("" when not enabled).
  const std::string& path() const { return path_; }

  // `inner` with this log's handlers run after each of inner's own; `inner` itself when the log
  // is inactive. The returned observer refers to this log, which must outlive the fit.
  FitObserver Observe(FitObserver inner);

  // The observer events (Observe wires them).
  void OnPassChunk(const PassProgress& progress);
  void OnCheckpointSaved(const CheckpointSaveReport& report);
  void OnGlobalSearch(const GlobalSearchProgress& progress);
  void OnPhase(const FitPhaseReport& report);
  void OnIteration(const IterationProgress& iteration);

  // An operation the caller timed (e.g. "results written"): its line, or slow.
  void LogOperation(const std::string& what, double seconds);
  // The line of a finished fit: its total time, status, iterations, passes and memory.
  void LogTotal(const FitResult& result);
  // The run's wall time by phase, once the results are written (docs/performance.md, Where a
  // run's time goes): start (before the fit: start_seconds, e.g. the program's start-up and the
  // file's inspection), load, fit (total_seconds less load and uncertainties), error bars
  // (uncertainty_seconds) and writing (write_seconds).
  void LogWallByPhase(double start_seconds, const FitResult& result, double write_seconds);
  // The line of a fit that threw (WARNING): how long it ran and the message.
  void LogFailure(const std::string& message);

 private:
  struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };

  // One timestamped line at `severity`, when the level lets it through.
  void Write(PerformanceLogLevel severity, const std::string& text);
  // An operation: "[WARNING] slow: text (threshold T s)" when seconds >= threshold, else text at
  // `severity`.
  void Operation(PerformanceLogLevel severity, const std::string& text, double seconds);
  // Closes the log after a failed write or open, with the one warning.
  void GiveUp(const std::string& why);
  // The INFO line of the global-search stage in progress, if any, ending at end_seconds.
  void FinishStage(double end_seconds);

  PerformanceLogOptions options_;
  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  // Checkpoint save time so far [s]: left out of the operations the saves happened in.
  double saved_seconds_ = 0.0;
  // The pass in progress and the save time when its first chunk was reported.
  int64_t current_pass_ = -1;
  double saved_at_pass_start_ = 0.0;
  // Global phase: the stage in progress, where it began, the last step's time, passes and the
  // save time then.
  std::string stage_;
  int stage_steps_ = 0;
  double stage_begin_seconds_ = 0.0;
  double last_step_seconds_ = 0.0;
  int64_t last_step_passes_ = 0;
  double saved_at_last_step_ = 0.0;
  // Final fit: the previous iteration's number, time (Minimize restarts its clock at iteration
  // 0) and the save time then.
  int last_iteration_ = -1;
  double last_iteration_seconds_ = 0.0;
  double saved_at_last_iteration_ = 0.0;
};

}  // namespace homodyne
