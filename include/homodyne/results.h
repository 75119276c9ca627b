// The result of a fit and the reference's result files (docs/results.md;
// docs/design.md section 8).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "homodyne/fit_events.h"
#include "homodyne/model.h"

namespace homodyne {

struct ParameterEstimate {
  std::string name;
  double value = 0.0;
  double uncertainty = 0.0;  // one standard error; 0 for a parameter held fixed
  // "lower" or "upper" when the fit ended with the parameter held by that bound; its uncertainty
  // is then the data's with the bound released (docs/results.md, Parameters at a bound). "" when
  // the data, not a bound, placed it.
  std::string at_bound{};
  // The 68 % and 95 % intervals {lower, upper} (docs/results.md, Intervals), as interval_method
  // says: "profile" (profile likelihood: where chi2 with this parameter held and the others
  // refitted rises by the levels of the reported uncertainty; docs/results.md, Profile
  // intervals) or "student_t" (value +- t u, t the Student quantile with the jackknife's
  // blocks - 1 degrees of freedom, the normal one for the standard error; clipped to the
  // bounds). Empty, with interval_method "", when not computed. interval_note: "" or why an end
  // is not where chi2 rose (e.g. "upper end at the bound: chi2 rises by less within the bounds").
  std::vector<double> interval_68{};
  std::vector<double> interval_95{};
  std::string interval_note{};
  std::string interval_method{};
  // Profile intervals' points (docs/results.md, Profile intervals): the values the parameter was
  // held at (ascending, the result's own included) and chi2 there less the minimum; and the
  // quadratic's coefficient k, so that a chi2 quadratic at the result rises by k (v - value)^2
  // (k = s^2 / c^2, c the curvature uncertainty). Empty and NaN without profile intervals.
  std::vector<double> profile_values{};
  std::vector<double> profile_delta_chi2{};
  double profile_quadratic = std::numeric_limits<double>::quiet_NaN();
  // Held at its start value by initial_parameters.fixed_parameters (not fitted; uncertainty 0).
  bool fixed = false;
  // Its unit as docs/model.md (Symbols and units) gives it, e.g. "Å²/s^(1+α)"; "" dimensionless.
  std::string unit{};
};

// The interval_note that starts a parameter's note when its 68 % interval reaches both of its
// bounds (a student_t interval clipped at both ends, a profile whose chi2 rises by less than the
// level within the bounds on both sides): the interval is the bounds, not a statement about the
// data (docs/results.md, Intervals).
inline constexpr const char* kNotDeterminedNote = "not determined within parameter_space.bounds";

// Whether the estimate's 68 % interval is its bounds (its interval_note starts with
// kNotDeterminedNote).
inline bool NotDeterminedWithinBounds(const ParameterEstimate& estimate) {
  return estimate.interval_note.rfind(kNotDeterminedNote, 0) == 0;
}

// Contrast and offset of one angle (always one pair per angle, whatever the per-angle mode).
struct AngleScaling {
  double phi_degrees = 0.0;
  ParameterEstimate contrast;
  ParameterEstimate offset;
  double q_inv_angstrom = 0.0;  // the matrix's q (several in a joint fit of q rings)
};

// Everything the result files report. Fields start as "not run" values.
// Batch statistics of a run (docs/design.md section 7).
struct BatchStatisticsSummary {
  int64_t batches = 0;              // batches computed over all passes
  int64_t retries = 0;              // batch reads retried
  int64_t read_failures = 0;        // batch reads that failed after every retry
  int64_t checkpoint_failures = 0;  // checkpoints that could not be written
  int64_t checkpoints_saved = 0;
};

// What the global phase did (global_search.h; docs/design.md section 4b):
// convergence_metrics.json's global_search section.
struct GlobalSearchRecord {
  // One distinct local minimum it found.
  struct Minimum {
    double chi2 = 0.0;               // on the search data
    std::vector<std::string> names;  // physical parameters searched
    std::vector<double> values;      // their values at the minimum
    int start = -1;                  // the candidate it came from; -1 = CMA-ES
    std::string status;              // the local fit's LM status
    int iterations = 0;              // of that local fit
    int64_t passes = 0;              // of that local fit, over the search data
    int reached_by = 1;              // local fits that ended in this minimum
  };
  std::string method = "off";  // off | auto | multi_start | cmaes
  std::string reason;          // the key or flag that chose it
  int candidates = 0;          // starting points screened
  int local_fits = 0;
  int generations = 0;  // CMA-ES
  int cmaes_runs = 0;
  int moved_fits = 0;    // of local_fits, those from the mode's search moves
  int refined_fits = 0;  // of local_fits, coarse minima refined on the search data
  // Method auto: ranked local fits and refinements that stopped on joining a minimum found
  // before them, and ranked starts left out (docs/design.md section 4b).
  int joined_local_fits = 0;
  int joined_refinements = 0;
  int starts_left_out = 0;
  int64_t passes = 0;             // over the search data (and its coarse level)
  int64_t screening_passes = 0;   // of passes: screening (or CMA-ES evaluations)
  int64_t local_fit_passes = 0;   // ... local fits from screened candidates (or CMA-ES points)
  int64_t moved_fit_passes = 0;   // ... moved fits
  int64_t refine_passes = 0;      // ... refinements (on the search data; the others on the coarse
                                  // level when there is one)
  int64_t replayed_passes = 0;    // of which replayed from the checkpoint a run resumed from
  int64_t point_evaluations = 0;  // passes x the points each ran on
  int64_t search_points = 0;      // upper-triangle points the search used
  int row_stride = 1;             // every row_stride-th row (1 = all)
  int64_t coarse_points = 0;      // method auto's coarse level: its points (0 = none)
  int coarse_row_stride = 0;      // ... every coarse_row_stride-th row
  double seconds = 0.0;
  std::vector<Minimum> minima;  // lowest chi2 first
  int chosen = -1;              // index into minima; -1 = none
};

// The CUDA backend's self-check of a fit (docs/backends.md, The self-check): its comparison of
// the device with the CPU on a subsample before the first pass. ran = false on the CPU backend.
struct BackendSelfCheckRecord {
  bool ran = false;
  bool passed = false;
  double largest_difference = 0.0;  // |GPU - CPU| / sqrt(G_aa G_cc) per Gram entry, relative cost
  std::string where;                // the largest difference's sum
  double seconds = 0.0;             // both backends' passes on the subsample
  std::string report;               // the log's line
};

// The phi0 mirror check of a laminar_flow fit (docs/results.md, The phi0 mirror check):
// checked = false when it did not run (other modes, phi0 held, angles that tell phi0 from its
// mirror, a mirror outside the bounds). cost and mirror_cost are chi2, or the robust cost under
// a robust loss (`measure`: "chi2" or "robust_cost"); tie: they differ by at most one unit of
// chi2 noise (the final fit's reduced chi2).
struct Phi0MirrorRecord {
  bool checked = false;
  std::string measure = "chi2";
  std::string angles_degrees;  // the data's angles, "0, 90"
  double phi0 = 0.0;
  double phi0_uncertainty = 0.0;
  double cost = 0.0;
  double mirror_phi0 = 0.0;
  double mirror_uncertainty = 0.0;
  double mirror_cost = 0.0;
  bool tie = false;
  std::string note;
};

struct FitResult {
  AnalysisMode analysis_mode = AnalysisMode::kLaminarFlow;
  std::vector<ParameterEstimate> physical;    // model order (PhysicalParameterNames)
  std::vector<AngleScaling> per_angle;        // in data order
  std::vector<std::string> covariance_names;  // rows/columns of `covariance`
  std::vector<double> covariance;             // row-major, covariance_names.size()^2

  // What `uncertainty` and `covariance` are (docs/results.md, What the uncertainties mean):
  // "jackknife" (frame blocks), "standard" (independent noise) or "curvature" (the reference's);
  // for the jackknife, its frame blocks and the residuals' correlation length along a row
  // [frames] that chose them.
  std::string uncertainty_method = "curvature";
  int uncertainty_blocks = 0;
  int noise_correlation_frames = 0;
  // For the jackknife: each physical parameter's uncertainty over the standard error of
  // independent noise (model order; empty for another method). Above 1 by more than the
  // jackknife's own scatter is what noise correlated along frames does; below it is flagged
  // (docs/results.md, What the uncertainties mean).
  std::vector<double> uncertainty_ratio_to_standard;
  // The residuals' correlation at lag 1 along a row, when the fit measured it (the default
  // method and the jackknife do), else NaN: what the default method chose by.
  double residual_lag1_correlation = std::numeric_limits<double>::quiet_NaN();
  std::string per_angle_mode = "individual";  // individual | constant | auto_averaged | fourier
  double chi_squared = 0.0;                   // sum r^2 over both triangles, whatever the loss
  double reduced_chi_squared = 0.0;
  int64_t degrees_of_freedom = 0;
  // The robust loss of the fit (docs/model.md, Robust loss): "linear" or scipy's name, f_scale,
  // and the cost the fit minimised, 0.5 f_scale^2 sum rho(z) over both triangles (scipy's `cost`).
  // Written to the result files only for a robust loss (docs/results.md), so a linear fit's files
  // are what they were.
  std::string loss = "linear";
  double f_scale = 1.0;
  double robust_cost = 0.0;
  std::string convergence_status = "not_run";  // "converged", "max_iterations", "failed", ...
  std::string termination_reason = "not run";  // one sentence: why the fit stopped
  // good | marginal | poor: the reduced chi2's level, lowered by what the fit knows about its
  // solution (docs/results.md, Quality flag); "not_run" until a fit records its solution.
  std::string quality_flag = "not_run";
  std::vector<std::string> quality_reasons;  // one sentence per problem that set or lowered it

  // The HDF5 file the fit read, absolute; "" when the data came from memory (the Python
  // module's arrays). analysis_results_nlsq.json's dataset_info.data_file when set.
  std::string data_file;
  double sigma = 0.0;  // the noise the residuals were divided by (optimization.nlsq.sigma)
  // Where `sigma` came from: "optimization.nlsq.sigma", or for sigma auto the estimate's source.
  std::string sigma_source = "optimization.nlsq.sigma";
  int64_t n_points = 0;  // points fitted (both triangles, diagonal excluded)
  int n_angles = 0;
  int n_times = 0;  // N of the fitted grid
  double q_inv_angstrom = 0.0;
  int iterations = 0;
  int64_t passes = 0;             // full passes over the data
  int64_t point_evaluations = 0;  // points evaluated over all passes
  std::string strategy = "none";
  std::string strategy_reason;
  std::string backend = "cpu";
  BackendSelfCheckRecord backend_self_check;  // GPU runs only
  int threads = 1;
  double load_seconds = 0.0;
  double optimization_seconds = 0.0;
  double total_seconds = 0.0;
  // Of total_seconds, the uncertainties' own work after the final fit: the jackknife's pass
  // (docs/results.md, What the uncertainties mean) and the profile intervals' refits.
  double uncertainty_seconds = 0.0;
  double memory_peak_mb = 0.0;
  BatchStatisticsSummary batch_statistics;
  GlobalSearchRecord global_search;
  Phi0MirrorRecord phi0_mirror;
  std::vector<std::string> recovery_actions;  // e.g. strategy fallbacks, resume
  std::vector<std::string> warnings;
};

// The reduced chi2's level, where the quality flag starts (docs/results.md, Quality flag): "good"
// for 0.5 <= reduced chi2 < 1.5, "marginal" below 0.5 or from 1.5 to below 3.0, "poor" from 3.0
// on and when it is not finite. The fit's quality_flag may be lower (FitResult).
std::string QualityFlag(double reduced_chi_squared);

// The result files of a fit, in output_dir/nlsq/, in the order they are published: parameters.json
// last, so that it is there only when the whole set is (docs/results.md, How the files are
// written).
inline constexpr std::string_view kResultsFolderName = "nlsq";
inline constexpr std::string_view kFittedDataFileName = "fitted_data.h5";
inline constexpr std::string_view kConvergenceMetricsFileName = "convergence_metrics.json";
inline constexpr std::string_view kAnalysisResultsFileName = "analysis_results_nlsq.json";
inline constexpr std::string_view kParametersFileName = "parameters.json";
inline constexpr std::array<std::string_view, 4> kResultFileNames = {
    kFittedDataFileName, kConvergenceMetricsFileName, kAnalysisResultsFileName,
    kParametersFileName};

// With --output-format npz (FitJobOptions::write_npz), part of the set after fitted_data.h5: the
// successor's arrays (docs/results.md, fitted_data.npz). A set without it removes an earlier one.
inline constexpr std::string_view kFittedDataNpzFileName = "fitted_data.npz";

// Beside the set, not part of it: the final fit's per-iteration record for the convergence plot
// (docs/results.md, Convergence history). The set's writers remove an earlier run's copy with the
// earlier result files, so a history in the folder is of the set there or of none.
inline constexpr std::string_view kConvergenceHistoryFileName = "convergence_history.json";

// Writes output_dir/nlsq/convergence_history.json durably (temporary file, fsync, rename): sigma
// (optimization.nlsq.sigma, the noise the fit assumed), the result's chi_squared and iterations
// (so a reader can check that the history belongs to the result files beside it), and one entry
// per IterationProgress in the order given (iteration, accepted, chi2, trial_chi2, damping,
// step_norm, step_standard_errors, gain_ratio, passes, seconds). Call after the result set is
// published. Also parameter_units: each physical parameter's and contrast's and offset's unit
// from the mode catalog ("" dimensionless), for plot labels. Throws InputError naming the file
// and the reason.
void WriteConvergenceHistory(const std::vector<IterationProgress>& iterations,
                             const FitResult& result, double sigma, const std::string& output_dir);

// Writes nlsq/parameters.json, nlsq/analysis_results_nlsq.json and nlsq/convergence_metrics.json
// under output_dir (created if absent) with the reference's fields plus ours, as one set, all or
// nothing (docs/results.md, How the files are written): a previous nlsq/fitted_data.h5 is removed
// with the previous JSON files, so that the folder never mixes two fits. NaN is written as null,
// +-Inf as "Infinity"/"-Infinity" (as the reference). Throws InputError naming the file, the
// reason and what the folder holds after the failure.
void WriteResultFiles(const FitResult& result, const std::string& output_dir);

// The correlation matrix of a row-major n x n covariance: C_ij / sqrt(C_ii C_jj), 0 where a
// variance is 0 (a fixed parameter or one held at a bound). Empty sizes give zeros.
std::vector<double> CorrelationMatrix(const std::vector<double>& covariance, size_t n);

class BatchSource;

// Writes nlsq/fitted_data.h5 under output_dir (created if absent) via a temporary file and a
// rename: /t (N fitted times [s]), /phi (angles [deg]), /q (scalar [1/A]), /contrast and /offset
// (per angle), and per angle k the group /angles/phi_{k:03d} (attributes phi, contrast, offset)
// with N x N float64 datasets `data` (ReadCorrectedMatrix), `fit` (model c2 with the angle's
// contrast and offset) and `residuals` (data - fit), chunked by row blocks, uncompressed.
// Streams blocks of rows, so memory stays bounded for large N. per_angle holds one entry per
// angle of the source, in data order. Throws InputError naming the path.
void WriteFittedData(BatchSource& source, const ModelEvaluation& evaluation,
                     const std::vector<AngleScaling>& per_angle, const std::string& output_dir);

// Every result file of a fit (kResultFileNames: the JSON files of WriteResultFiles and
// fitted_data.h5 of WriteFittedData) as one set, all or nothing: each is written to its temporary
// file and fsynced, and only then are they renamed together (docs/results.md, How the files are
// written). A failure leaves no temporary file and either the previous set untouched or no result
// file at all, never a mix; it throws InputError naming the file, the reason and which of the two.
// With `npz`, nlsq/fitted_data.npz too (kFittedDataNpzFileName; not written, with a warning, when
// it would exceed 4 GiB, which needs ZIP64).
void WriteAllResultFiles(const FitResult& result, BatchSource& source,
                         const ModelEvaluation& evaluation, const std::string& output_dir,
                         bool npz = false);

// `homodyne --output-format yaml|json`: the reference package's legacy summary file,
// OUTPUT_DIR/homodyne_results.{yaml,json} (docs/results.md, Legacy summary). Its format from the
// value of --output-format; nullopt for any other value ("npz" is not among them: this engine
// writes no NumPy archives).
enum class LegacySummaryFormat { kYaml, kJson };
std::optional<LegacySummaryFormat> ParseLegacySummaryFormat(const std::string& text);

// Writes output_dir/homodyne_results.yaml or .json (output_dir created if absent), durably and
// atomically as every result file, with the reference's fields: method "nlsq", analysis_mode,
// success (convergence_status == "converged"), optimization_time [s], device_config (backend,
// threads), parameters (the reference's vector order: contrasts, offsets, then the physical
// parameters) beside parameter_names, and diagnostics.chi_squared. Returns the path written.
// Throws InputError naming the path when it cannot be written.
std::string WriteLegacySummary(const FitResult& result, LegacySummaryFormat format,
                               const std::string& output_dir);

// Several q rings fitted independently (docs/results.md, Several q rings): ring q's folder is
// output_dir/q_<q> (RingFolderName: q with 8 significant digits, e.g. q_0.0054), an ordinary
// results folder (its nlsq/ holds the usual files).
std::string RingFolderName(double q_inv_angstrom);

// Writes output_dir/nlsq/q_summary.json and q_summary.csv from the result files of each ring's
// folder (nlsq/parameters.json, analysis_results_nlsq.json, derived_rates.json): per ring its q,
// folder, every parameter with its uncertainty, reduced chi2, convergence status, quality flag,
// and the rates (D, and gamma_dot in laminar_flow) at a reference time, the middle of the first
// fitted ring's derived-rates grid. A ring without results (not fitted yet, or failed) is listed
// with "fitted": false. Durable and atomic, as every result file. Returns the JSON's path.
// Throws InputError naming a file that cannot be read or written.
std::string WriteRingSummary(const std::string& output_dir, const std::vector<double>& ring_qs);

}  // namespace homodyne
