// `homodyne --config FILE` (fit_command.h): a shell over the library's Fit (homodyne/fit.h).
#include "fit_command.h"

#include "plots.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
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
  // at a bound), and " (not determined within the bounds)" after one whose 68 % interval is its
  // bounds (docs/results.md, Intervals).
  const auto bound_mark = [](const ParameterEstimate& estimate) {
    return (estimate.at_bound.empty() ? std::string() : " (at " + estimate.at_bound + " bound)") +
           (NotDeterminedWithinBounds(estimate) ? " (not determined within the bounds)" : "");
  };
  // The unit after the uncertainty (docs/model.md, Symbols and units) and " (fixed)" after a
  // parameter held by initial_parameters.fixed_parameters.
  const auto unit_and_fixed = [](const ParameterEstimate& estimate) {
    return (estimate.unit.empty() ? std::string() : " " + estimate.unit) +
           (estimate.fixed ? " (fixed)" : "");
  };
  for (const ParameterEstimate& estimate : result.physical) {
    std::snprintf(line, sizeof(line), "  %-20s %14.6g +- %.3g", estimate.name.c_str(),
                  estimate.value, estimate.uncertainty);
    out << line << unit_and_fixed(estimate);
    // The 68 % profile interval relative to the value (docs/results.md, Profile intervals).
    if (estimate.interval_68.size() == 2 && estimate.interval_method == "profile") {
      std::snprintf(line, sizeof(line), "  [%+.3g, %+.3g]",
                    estimate.interval_68[0] - estimate.value,
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
    out << line << (angle.contrast.fixed ? " (fixed)" : "") << bound_mark(angle.contrast);
    std::snprintf(line, sizeof(line), "   offset %.6f +- %.2g", angle.offset.value,
                  angle.offset.uncertainty);
    out << line << (angle.offset.fixed ? " (fixed)" : "") << bound_mark(angle.offset) << "\n";
  }
  // What the +- are (docs/results.md, What the uncertainties mean).
  if (result.uncertainty_method == "jackknife") {
    out << "  uncertainties: frame-block jackknife over " << result.uncertainty_blocks
        << " blocks (residuals correlated over about " << result.noise_correlation_frames
        << (result.noise_correlation_frames == 1 ? " frame" : " frames");
    const std::vector<double>& ratios = result.uncertainty_ratio_to_standard;
    if (!ratios.empty()) {
      std::snprintf(line, sizeof(line), "; %.2g to %.2g times the independent-noise ones",
                    *std::min_element(ratios.begin(), ratios.end()),
                    *std::max_element(ratios.begin(), ratios.end()));
      out << line;
    }
    out << ")\n";
  } else if (result.uncertainty_method == "standard") {
    out << "  uncertainties: standard errors of independent noise";
    if (std::isfinite(result.residual_lag1_correlation)) {
      std::snprintf(line, sizeof(line),
                    " (residuals uncorrelated along frames: lag-1 correlation %.3f)",
                    result.residual_lag1_correlation);
      out << line;
    }
    out << "\n";
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

// One fit into output_dir (its nlsq/ folder): the single-ring run, and each ring of several.
int RunOneFit(const Config& config, const CommandLineOptions& options,
              const std::string& output_dir, std::ostream& out) {
  std::unique_ptr<BatchSource> source = OpenBatchSource(config.data);
  // Rank 0 of an MPI job alone shows progress (the ranks make the same passes).
  PassProgressBar progress_bar(config.performance.enable_progress &&
                               CurrentProcessGroup()->is_root());
  FitObserver observer;
  observer.on_pass_chunk = [&progress_bar](const PassProgress& progress) {
    progress_bar.Update(progress);
  };
  FitJobOptions job;
  job.output_dir = output_dir;
  const std::optional<OutputFormat> format =
      options.output_format ? ParseOutputFormat(*options.output_format) : std::nullopt;
  job.write_npz = format && format->npz;
  job.on_fitted = [&out](const FitOutcome& outcome) {
    PrintResult(outcome, out);
    out.flush();  // before the files are written: a full disk loses no computed number
  };
  const FitOutcome outcome = RunFitJob(config, *source, job, observer);
  if (!CurrentProcessGroup()->is_root()) return outcome.exit_code;  // rank 0 prints and writes
  if (options.save_plots) SavePlots(output_dir);                    // a failure only warns
  out << "  results in " << output_dir << "/nlsq/\n";
  if (format && format->legacy_summary) {
    out << "  legacy summary in "
        << WriteLegacySummary(outcome.result, *format->legacy_summary, output_dir) << "\n";
  }
  return outcome.exit_code;
}

bool SelectsSeveralRings(const DataSelection& data) {
  return data.all_q_rings || !data.wavevector_q_list.empty();
}

std::string RingText(const RingInfo& ring) {
  char text[160];
  std::snprintf(text, sizeof(text), "q = %.8g 1/A: %zu angle%s (", ring.q_inv_angstrom,
                ring.phi_degrees.size(), ring.phi_degrees.size() == 1 ? "" : "s");
  std::string line = text;
  for (size_t k = 0; k < ring.phi_degrees.size(); ++k) {
    std::snprintf(text, sizeof(text), "%s%g", k ? ", " : "", ring.phi_degrees[k]);
    line += text;
  }
  std::snprintf(text, sizeof(text), " deg), %lld points",
                static_cast<long long>(ring.num_fit_points()));
  return line + text;
}

// The config of ring `ring` of several fitted independently: its selection alone, its q, and
// its checkpoint folder checkpoint_dir/q_<q>.
Config ConfigOfRing(const Config& config, const RingInfo& ring) {
  Config ring_config = config;
  ring_config.data = SelectionOfRing(config.data, ring);
  ring_config.geometry.q_inv_angstrom = ring.q_inv_angstrom;
  ring_config.streaming.checkpoint_dir =
      (std::filesystem::path(config.streaming.checkpoint_dir) / RingFolderName(ring.q_inv_angstrom))
          .string();
  return ring_config;
}

// The rings of the config, with --q-index checked against them (a UsageError naming the flag).
std::vector<RingInfo> RingsToRun(const Config& config, const CommandLineOptions& options,
                                 std::vector<RingInfo>& all_rings) {
  all_rings = ListSelectedRings(config.data);
  if (!options.q_index) return all_rings;
  const int k = *options.q_index;
  if (k < 0 || k >= static_cast<int>(all_rings.size())) {
    throw UsageError("--q-index " + std::to_string(k) + ": the config selects " +
                     std::to_string(all_rings.size()) + " ring(s), indices 0 to " +
                     std::to_string(all_rings.size() - 1) +
                     " (analyzer_parameters.scattering.wavevector_q)");
  }
  return {all_rings[static_cast<size_t>(k)]};
}

// Independent fits of several rings (docs/configuration.md, Several q rings): one after the other,
// each with all the threads, into output_dir/q_<q>/ with its own checkpoint folder
// checkpoint_dir/q_<q>/ (so that a ring resumes its own fit, and rings run by separate processes
// never share a folder's lock); then the summary of every ring of the config found on disk.
int RunIndependentRings(const Config& config, const CommandLineOptions& options,
                        std::ostream& out) {
  std::vector<RingInfo> all_rings;
  const std::vector<RingInfo> rings = RingsToRun(config, options, all_rings);
  std::vector<double> all_qs;
  for (const RingInfo& ring : all_rings) all_qs.push_back(ring.q_inv_angstrom);
  int exit_code = kExitSuccess;
  if (!options.q_summary_only) {
    for (size_t k = 0; k < rings.size(); ++k) {
      const RingInfo& ring = rings[k];
      const std::string folder = RingFolderName(ring.q_inv_angstrom);
      out << "ring " << (options.q_index ? *options.q_index : static_cast<int>(k)) + 1 << " of "
          << all_rings.size() << ", " << RingText(ring) << "\n";
      out.flush();
      const Config ring_config = ConfigOfRing(config, ring);
      const std::string ring_output = (std::filesystem::path(options.output_dir) / folder).string();
      const int ring_exit = RunOneFit(ring_config, options, ring_output, out);
      if (ring_exit != kExitSuccess) exit_code = ring_exit;
    }
  }
  if (!CurrentProcessGroup()->is_root()) return exit_code;
  if (options.q_index) {
    // One ring of a SLURM array: the others may not be done; the summary comes after them.
    out << "ring " << *options.q_index + 1 << " of " << all_rings.size()
        << " done; when every ring is, write the summary with --q-summary\n";
    return exit_code;
  }
  out << "q summary in " << WriteRingSummary(options.output_dir, all_qs)
      << " (and q_summary.csv)\n";
  if (options.save_plots) SaveRingSummaryPlot(options.output_dir);  // a failure only warns
  return exit_code;
}

int RunFit(const Config& config, const CommandLineOptions& options, std::ostream& out) {
  if (!SelectsSeveralRings(config.data)) {
    if (options.q_index || options.q_summary_only) {
      throw UsageError(std::string(options.q_index ? "--q-index" : "--q-summary") +
                       " needs several q rings: analyzer_parameters.scattering.wavevector_q is "
                       "one number (give a list or all)");
    }
    return RunOneFit(config, options, options.output_dir, out);
  }
  if (config.data.q_fit == QFitMode::kIndependent) return RunIndependentRings(config, options, out);
  if (options.q_index || options.q_summary_only) {
    throw UsageError(std::string(options.q_index ? "--q-index" : "--q-summary") +
                     " is for independent fits of several rings; this config has q_fit: joint");
  }
  // Joint: every selected ring's matrices in one data set, one fit (ResolveJointSelection).
  Config joint = config;
  joint.data = JointSelection(config.data);
  return RunOneFit(joint, options, options.output_dir, out);
}

int RunDryRun(const Config& config, const CommandLineOptions& options, std::ostream& out) {
  if (!SelectsSeveralRings(config.data)) {
    std::unique_ptr<BatchSource> source = OpenBatchSource(config.data);
    DescribeFitPlan(config, *source, out);
    return kExitSuccess;
  }
  // The rings, their angles and points; then the plan of the first ring (independent: each
  // ring's plan is the same but for its q) or of the joint data set.
  std::vector<RingInfo> all_rings;
  const std::vector<RingInfo> rings = config.data.q_fit == QFitMode::kIndependent
                                          ? RingsToRun(config, options, all_rings)
                                          : ListSelectedRings(config.data);
  const size_t total =
      config.data.q_fit == QFitMode::kIndependent ? all_rings.size() : rings.size();
  int64_t points = 0;
  for (const RingInfo& ring : rings) points += ring.num_fit_points();
  out << "q rings: " << total << " selected, q_fit: " << ToString(config.data.q_fit)
      << (options.q_index ? ", this run: --q-index " + std::to_string(*options.q_index) : "")
      << "\n";
  for (size_t k = 0; k < rings.size(); ++k) {
    out << "  ring " << (options.q_index ? *options.q_index : static_cast<int>(k)) + 1 << ": "
        << RingText(rings[k]) << "\n";
  }
  out << "  points, all rings listed: " << points << "\n";
  Config first = config;
  if (config.data.q_fit == QFitMode::kJoint) {
    first.data = JointSelection(config.data);
    out << "plan of the joint fit:\n";
  } else {
    first = ConfigOfRing(config, rings.front());
    out << "plan of ring " << (options.q_index ? *options.q_index : 0) + 1
        << " (every ring is planned alike):\n";
  }
  std::unique_ptr<BatchSource> source = OpenBatchSource(first.data);
  DescribeFitPlan(first, *source, out);
  return kExitSuccess;
}

}  // namespace homodyne::cli
