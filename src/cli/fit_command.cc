// `homodyne --config FILE` (fit_command.h): a shell over the library's Fit (homodyne/fit.h).
#include "fit_command.h"

#include "plots.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "homodyne/process_group.h"
#include "homodyne/results.h"

namespace homodyne::cli {
namespace {

// A progress bar for the chunks of a pass, on a terminal only (log files get the iteration lines).
class PassProgressBar {
 public:
  explicit PassProgressBar(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO) != 0) {}
  void Update(const PassProgress& progress) {
    if (!enabled_ || progress.num_batches <= 1) return;
    constexpr int kWidth = 30;
    const int filled = kWidth * progress.batches_done / progress.num_batches;
    std::fprintf(stderr, "\r  pass %lld %s [%s%s] %3d%%", static_cast<long long>(progress.pass),
                 progress.full_pass ? "(J)" : "(c)", std::string(filled, '#').c_str(),
                 std::string(kWidth - filled, '.').c_str(),
                 100 * progress.batches_done / progress.num_batches);
    if (progress.batches_done == progress.num_batches) std::fprintf(stderr, "\r%60s\r", "");
    std::fflush(stderr);
  }

 private:
  bool enabled_;
};

// The result as the CLI prints it: the global phase's minima, the final fit's line, the
// parameters with their uncertainties, per-angle scaling, the totals and, when the quality flag
// is not good, the flag with its reasons (docs/results.md, Quality flag).
void PrintResult(const FitOutcome& outcome, std::ostream& out) {
  const FitResult& result = outcome.result;
  char line[160];
  if (result.global_search.chosen >= 0) {
    const GlobalSearchRecord& global = result.global_search;
    std::snprintf(line, sizeof(line),
                  "global search %s: %zu distinct minima from %d local fits (%d candidates), "
                  "chose chi2 %.8g (%.2f s)\n",
                  global.method.c_str(), global.minima.size(), global.local_fits, global.candidates,
                  global.minima.front().chi2, global.seconds);
    out << line;
    for (size_t i = 0; i < global.minima.size() && i < 5; ++i) {
      std::string values;
      for (size_t p = 0; p < global.minima[i].names.size(); ++p) {
        char value[64];
        std::snprintf(value, sizeof(value), " %s=%.4g", global.minima[i].names[p].c_str(),
                      global.minima[i].values[p]);
        values += value;
      }
      out << (static_cast<int>(i) == global.chosen ? "  * " : "    ") << "chi2 "
          << global.minima[i].chi2 << values << "\n";
    }
  }
  out << outcome.final_fit_report << "\n";
  // A fit that exits 1 says why (docs/results.md, Convergence status).
  if (outcome.exit_code != kExitSuccess) {
    out << "  fit " << result.convergence_status << ": " << result.termination_reason << "\n";
  }
  // " (at lower bound)" after a value the bound, not the data, holds (docs/results.md, Parameters
  // at a bound).
  const auto bound_mark = [](const ParameterEstimate& estimate) {
    return estimate.at_bound.empty() ? std::string() : " (at " + estimate.at_bound + " bound)";
  };
  for (const ParameterEstimate& estimate : result.physical) {
    std::snprintf(line, sizeof(line), "  %-20s %14.6g +- %.3g", estimate.name.c_str(),
                  estimate.value, estimate.uncertainty);
    out << line;
    // The 68 % profile interval relative to the value (docs/results.md, Profile intervals).
    if (estimate.interval_68.size() == 2) {
      std::snprintf(line, sizeof(line), "  [%+.3g, %+.3g]", estimate.interval_68[0] - estimate.value,
                    estimate.interval_68[1] - estimate.value);
      out << line;
    }
    out << bound_mark(estimate) << "\n";
  }
  // A joint fit of several q (docs/design.md section 2d): the matrices grouped by ring, ascending
  // q, each ring under its q; one q: in data order, as always.
  std::vector<size_t> order(result.per_angle.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  const bool several_q =
      std::any_of(result.per_angle.begin(), result.per_angle.end(), [&](const AngleScaling& angle) {
        return angle.q_inv_angstrom != result.per_angle.front().q_inv_angstrom;
      });
  if (several_q) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return result.per_angle[a].q_inv_angstrom < result.per_angle[b].q_inv_angstrom;
    });
  }
  for (size_t position = 0; position < order.size(); ++position) {
    const AngleScaling& angle = result.per_angle[order[position]];
    if (several_q && (position == 0 || result.per_angle[order[position - 1]].q_inv_angstrom !=
                                           angle.q_inv_angstrom)) {
      std::snprintf(line, sizeof(line), "  q %.6g 1/A\n", angle.q_inv_angstrom);
      out << line;
    }
    std::snprintf(line, sizeof(line), "  phi %8.2f deg      contrast %.6f +- %.2g",
                  angle.phi_degrees, angle.contrast.value, angle.contrast.uncertainty);
    out << line << bound_mark(angle.contrast);
    std::snprintf(line, sizeof(line), "   offset %.6f +- %.2g", angle.offset.value,
                  angle.offset.uncertainty);
    out << line << bound_mark(angle.offset) << "\n";
  }
  // What the +- are (docs/results.md, What the uncertainties mean).
  if (result.uncertainty_method == "jackknife") {
    out << "  uncertainties: frame-block jackknife over " << result.uncertainty_blocks
        << " blocks (residuals correlated over about " << result.noise_correlation_frames
        << (result.noise_correlation_frames == 1 ? " frame)\n" : " frames)\n");
  } else if (result.uncertainty_method == "standard") {
    out << "  uncertainties: standard errors of independent noise\n";
  } else if (result.uncertainty_method == "curvature") {
    out << "  uncertainties: curvature, the reference's numbers\n";
  }
  // Under a robust loss the final fit's line above reports the robust cost; the totals below are
  // of the plain chi2 (docs/model.md, Robust loss).
  if (!result.loss.empty() && result.loss != "linear") {
    out << "  loss " << result.loss
        << ": the fit minimised a robust cost; the chi2 below is the plain sum of squares\n";
  }
  // %.6f up to 1e6; beyond, %.6g: a reduced chi2 of 1e78 (data no model describes) in fixed
  // notation would overflow the line and cut its newline.
  std::snprintf(line, sizeof(line),
                result.reduced_chi_squared < 1e6
                    ? "  chi2 %.6g, reduced chi2 %.6f, %lld points, %d iterations, %lld passes, "
                      "%.2f s (load %.2f s)\n"
                    : "  chi2 %.6g, reduced chi2 %.6g, %lld points, %d iterations, %lld passes, "
                      "%.2f s (load %.2f s)\n",
                result.chi_squared, result.reduced_chi_squared,
                static_cast<long long>(result.n_points), result.iterations,
                static_cast<long long>(result.passes), result.total_seconds, result.load_seconds);
  out << line;
  if (result.quality_flag != "good") {
    std::string reasons;
    for (const std::string& reason : result.quality_reasons) {
      reasons += (reasons.empty() ? "" : "; ") + reason;
    }
    out << "  quality " << result.quality_flag << (reasons.empty() ? "" : ": ") << reasons << "\n";
  }
}

}  // namespace

int RunFit(const Config& config, const CommandLineOptions& options, std::ostream& out) {
  std::unique_ptr<BatchSource> source = OpenBatchSource(config.data);
  // Rank 0 of an MPI job alone shows progress (the ranks make the same passes).
  PassProgressBar progress_bar(config.performance.enable_progress &&
                               CurrentProcessGroup()->is_root());
  FitObserver observer;
  observer.on_pass_chunk = [&progress_bar](const PassProgress& progress) {
    progress_bar.Update(progress);
  };
  FitJobOptions job;
  job.output_dir = options.output_dir;
  const std::optional<OutputFormat> format =
      options.output_format ? ParseOutputFormat(*options.output_format) : std::nullopt;
  job.write_npz = format && format->npz;
  job.on_fitted = [&out](const FitOutcome& outcome) {
    PrintResult(outcome, out);
    out.flush();  // before the files are written: a full disk loses no computed number
  };
  const FitOutcome outcome = RunFitJob(config, *source, job, observer);
  if (!CurrentProcessGroup()->is_root()) return outcome.exit_code;  // rank 0 prints and writes
  if (options.save_plots) SavePlots(options.output_dir);  // a failure only warns
  out << "  results in " << options.output_dir << "/nlsq/\n";
  if (format && format->legacy_summary) {
    out << "  legacy summary in "
        << WriteLegacySummary(outcome.result, *format->legacy_summary, options.output_dir) << "\n";
  }
  return outcome.exit_code;
}

int RunDryRun(const Config& config, std::ostream& out) {
  std::unique_ptr<BatchSource> source = OpenBatchSource(config.data);
  DescribeFitPlan(config, *source, out);
  return kExitSuccess;
}

}  // namespace homodyne::cli
