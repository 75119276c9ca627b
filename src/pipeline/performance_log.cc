// PerformanceLog (performance_log.h): the lines of logging.performance from the fit's events.
#include "performance_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <utility>

namespace homodyne {
namespace {

// "0.123 s": the guide's style, millisecond resolution.
std::string Seconds(double seconds) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.3f s", seconds);
  return text;
}

// A threshold as written in the config: "0.1", "0", "1e+06".
std::string Compact(double value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

// A chi2 to 9 significant digits: "1.23456789e+04".
std::string Chi2(double value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.8e", value);
  return text;
}

// Local time as the guide shows it: "2026-11-23 06:40:33".
std::string LocalTimestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

// What the steps of a global-search stage are called in its summary line.
const char* StepNoun(const std::string& stage) {
  if (stage == "screening") return "candidates";
  if (stage == "local fit") return "local fits";
  if (stage == "refine") return "refinements";
  if (stage == "cmaes") return "generations";
  return "steps";
}

}  // namespace

PerformanceLog::PerformanceLog(const PerformanceLogOptions& options, const std::string& output_dir)
    : options_(options) {
  if (!options_.enabled) return;
  const std::filesystem::path path =
      std::filesystem::path(output_dir.empty() ? "." : output_dir) / options_.filename;
  path_ = path.string();
  std::error_code error;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), error);
  if (error) {
    GiveUp("cannot create its folder " + path.parent_path().string() + ": " + error.message());
    return;
  }
  file_.reset(std::fopen(path_.c_str(), "a"));
  if (!file_) {
    GiveUp(std::string("cannot open it for writing: ") + std::strerror(errno));
    return;
  }
  Write(PerformanceLogLevel::kInfo, std::string("fit started (level ") + ToString(options_.level) +
                                        ", slow from " + Compact(options_.threshold_seconds) +
                                        " s)");
}

FitObserver PerformanceLog::Observe(FitObserver inner) {
  if (!active()) return inner;
  FitObserver outer;
  outer.on_pass_chunk = [this, first = std::move(inner.on_pass_chunk)](const PassProgress& p) {
    if (first) first(p);
    OnPassChunk(p);
  };
  outer.on_global_search =
      [this, first = std::move(inner.on_global_search)](const GlobalSearchProgress& p) {
        if (first) first(p);
        OnGlobalSearch(p);
      };
  outer.on_iteration = [this, first = std::move(inner.on_iteration)](const IterationProgress& i) {
    if (first) first(i);
    OnIteration(i);
  };
  outer.on_checkpoint_saved =
      [this, first = std::move(inner.on_checkpoint_saved)](const CheckpointSaveReport& r) {
        if (first) first(r);
        OnCheckpointSaved(r);
      };
  outer.on_phase = [this, first = std::move(inner.on_phase)](const FitPhaseReport& r) {
    if (first) first(r);
    OnPhase(r);
  };
  return outer;
}

void PerformanceLog::OnPassChunk(const PassProgress& progress) {
  if (progress.pass != current_pass_) {  // the pass's first chunk: no save yet in this pass
    current_pass_ = progress.pass;
    saved_at_pass_start_ = saved_seconds_;
  }
  const std::string pass =
      "pass " + std::to_string(progress.pass) + (progress.full_pass ? " (J)" : " (c)");
  // A pass of one chunk gets only its pass line.
  if (progress.batches_in_chunk < progress.num_batches) {
    Operation(PerformanceLogLevel::kDebug,
              pass + " batch " + std::to_string(progress.batches_done) + "/" +
                  std::to_string(progress.num_batches) + " completed in " +
                  Seconds(progress.chunk_seconds),
              progress.chunk_seconds);
  }
  if (progress.batches_done == progress.num_batches) {
    // The fit saves after the chunk callbacks, inside the pass's wall time.
    const double seconds =
        std::max(0.0, progress.pass_seconds - (saved_seconds_ - saved_at_pass_start_));
    Operation(PerformanceLogLevel::kInfo,
              pass + " completed in " + Seconds(seconds) + " (" +
                  std::to_string(progress.num_batches) + " batches)",
              seconds);
  }
}

void PerformanceLog::OnCheckpointSaved(const CheckpointSaveReport& report) {
  saved_seconds_ += report.seconds;
  Operation(PerformanceLogLevel::kInfo,
            "checkpoint saved in " + Seconds(report.seconds) + " (" + std::to_string(report.bytes) +
                " bytes, " + report.path + ")",
            report.seconds);
}

void PerformanceLog::OnGlobalSearch(const GlobalSearchProgress& progress) {
  if (progress.stage != stage_) {
    FinishStage(last_step_seconds_);
    stage_ = progress.stage;
    stage_steps_ = 0;
    stage_begin_seconds_ = last_step_seconds_;
  }
  // Items done in the stage: a report follows every item, or every round of items spread over
  // ranks (global_search.h), so the index, not the count of reports.
  stage_steps_ = progress.index;
  // The fit saves after the step callbacks: those saves fall into the next step's wall time.
  const double seconds =
      std::max(0.0, progress.seconds - last_step_seconds_ - (saved_seconds_ - saved_at_last_step_));
  const bool replayed = progress.passes <= last_step_passes_;  // from a checkpoint's trail
  last_step_seconds_ = progress.seconds;
  last_step_passes_ = progress.passes;
  saved_at_last_step_ = saved_seconds_;
  std::string of;  // appended, not "/" + ...: GCC 12 -Wrestrict false positive (105651)
  if (progress.total > 0) of.append("/").append(std::to_string(progress.total));
  Operation(PerformanceLogLevel::kDebug,
            "global search " + progress.stage + " " + std::to_string(progress.index) + of +
                " completed in " + Seconds(seconds) + " (best chi2 " + Chi2(progress.best_chi2) +
                (replayed ? ", replayed" : "") + ")",
            seconds);
}

void PerformanceLog::FinishStage(double end_seconds) {
  if (stage_.empty()) return;
  Write(PerformanceLogLevel::kInfo, "global search stage " + stage_ + " completed in " +
                                        Seconds(end_seconds - stage_begin_seconds_) + " (" +
                                        std::to_string(stage_steps_) + " " + StepNoun(stage_) +
                                        ")");
  stage_.clear();
}

void PerformanceLog::OnPhase(const FitPhaseReport& report) {
  if (report.phase == "global search") FinishStage(last_step_seconds_);
  // The global phase and the final fit start their clocks after this: saves before are not theirs.
  saved_at_last_step_ = saved_seconds_;
  saved_at_last_iteration_ = saved_seconds_;
  Write(PerformanceLogLevel::kInfo,
        report.phase + " phase completed in " + Seconds(report.seconds));
}

void PerformanceLog::OnIteration(const IterationProgress& iteration) {
  if (iteration.iteration <= last_iteration_) {  // a new Minimize: its clock starts again
    last_iteration_seconds_ = 0.0;
  }
  // Saves after an iteration's callback and inside its passes are in its wall time.
  const double seconds = std::max(0.0, iteration.seconds - last_iteration_seconds_ -
                                           (saved_seconds_ - saved_at_last_iteration_));
  last_iteration_ = iteration.iteration;
  last_iteration_seconds_ = iteration.seconds;
  saved_at_last_iteration_ = saved_seconds_;
  const char* outcome = iteration.iteration == 0  ? " (start)"
                        : iteration.step_accepted ? " accepted"
                                                  : " rejected";
  Operation(PerformanceLogLevel::kInfo,
            "iteration " + std::to_string(iteration.iteration) + outcome + " completed in " +
                Seconds(seconds) + " (chi2 " + Chi2(iteration.chi2) + ", " +
                std::to_string(iteration.passes + iteration.cost_passes) + " passes so far)",
            seconds);
}

void PerformanceLog::LogOperation(const std::string& what, double seconds) {
  Operation(PerformanceLogLevel::kInfo, what + " in " + Seconds(seconds), seconds);
}

void PerformanceLog::LogTotal(const FitResult& result) {
  Write(PerformanceLogLevel::kInfo,
        "fit completed in " + Seconds(result.total_seconds) + " total (" +
            result.convergence_status + ", " + std::to_string(result.iterations) + " iterations, " +
            std::to_string(result.passes) + " passes, strategy " + result.strategy + ", load " +
            Seconds(result.load_seconds) + ", final fit " + Seconds(result.optimization_seconds) +
            ", peak memory " + std::to_string(std::lround(result.memory_peak_mb)) + " MB)");
}

void PerformanceLog::LogWallByPhase(double start_seconds, const FitResult& result,
                                    double write_seconds) {
  const double fit =
      std::max(0.0, result.total_seconds - result.load_seconds - result.uncertainty_seconds);
  Write(PerformanceLogLevel::kInfo,
        "wall by phase: start " + Seconds(start_seconds) + ", load " +
            Seconds(result.load_seconds) + ", fit " + Seconds(fit) + ", error bars " +
            Seconds(result.uncertainty_seconds) + ", writing " + Seconds(write_seconds) +
            " (total " + Seconds(start_seconds + result.total_seconds + write_seconds) + ")");
}

void PerformanceLog::LogFailure(const std::string& message) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  Write(PerformanceLogLevel::kWarning, "fit stopped after " + Seconds(seconds) + ": " + message);
}

void PerformanceLog::Operation(PerformanceLogLevel severity, const std::string& text,
                               double seconds) {
  if (seconds >= options_.threshold_seconds) {
    Write(PerformanceLogLevel::kWarning,
          "slow: " + text + " (threshold " + Compact(options_.threshold_seconds) + " s)");
  } else {
    Write(severity, text);
  }
}

void PerformanceLog::Write(PerformanceLogLevel severity, const std::string& text) {
  if (!file_ || severity < options_.level) return;
  const std::string line = LocalTimestamp() + " [" + ToString(severity) + "] " + text + "\n";
  // Flushed line by line: the log of a killed job ends at its last operation.
  if (std::fputs(line.c_str(), file_.get()) < 0 || std::fflush(file_.get()) != 0) {
    GiveUp(std::string("cannot write to it: ") + std::strerror(errno));
  }
}

void PerformanceLog::GiveUp(const std::string& why) {
  spdlog::warn("performance log {}: {}; the fit goes on without it", path_, why);
  file_.reset();
}

}  // namespace homodyne
