// The reference's JSON result files (docs/results.md, Fields shared with the reference):
// parameters.json, analysis_results_nlsq.json, convergence_metrics.json, with our additions; and
// the set that publishes them with fitted_data.h5, all or nothing (docs/results.md, How the files
// are written).
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/results.h"
#include "io/derived_rates.h"
#include "io/durable_file.h"
#include "io/result_files.h"
#include "model/mode_catalog.h"

namespace homodyne {
namespace {

using nlohmann::ordered_json;

// NaN -> null, +-Inf -> "Infinity"/"-Infinity" (the reference's JSON convention).
ordered_json Number(double value) {
  if (std::isnan(value)) return nullptr;
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return value;
}

// convergence_metrics.json's device_info: the backend and threads, and after a GPU run's self-check
// (docs/backends.md, The self-check) its outcome; a CPU run writes only the first two.
ordered_json DeviceInfo(const FitResult& result) {
  ordered_json info = {{"backend", result.backend}, {"threads", result.threads}};
  const BackendSelfCheckRecord& check = result.backend_self_check;
  if (check.ran) {
    info["self_check"] = {{"passed", check.passed},
                          {"largest_difference", Number(check.largest_difference)},
                          {"where", check.where},
                          {"seconds", Number(check.seconds)},
                          {"report", check.report}};
  }
  return info;
}

// {"value", "uncertainty"} as the reference writes them, and "at_bound" ("lower"/"upper") only for
// a parameter that ended held by a bound (docs/results.md, Parameters at a bound).
ordered_json Estimate(const ParameterEstimate& estimate) {
  ordered_json json = {{"value", Number(estimate.value)},
                       {"uncertainty", Number(estimate.uncertainty)}};
  // Its unit (docs/model.md, Symbols and units; "" dimensionless) and "fixed": true for a
  // parameter held by initial_parameters.fixed_parameters.
  json["unit"] = estimate.unit;
  if (estimate.fixed) json["fixed"] = true;
  if (!estimate.at_bound.empty()) json["at_bound"] = estimate.at_bound;
  // Intervals (docs/results.md, Intervals), when the fit computed them.
  const auto interval = [](const std::vector<double>& ends) {
    return ordered_json::array({Number(ends[0]), Number(ends[1])});
  };
  if (estimate.interval_68.size() == 2) json["interval_68"] = interval(estimate.interval_68);
  if (estimate.interval_95.size() == 2) json["interval_95"] = interval(estimate.interval_95);
  if (!estimate.interval_note.empty()) json["interval_note"] = estimate.interval_note;
  if (!estimate.interval_method.empty()) json["interval_method"] = estimate.interval_method;
  if (!estimate.profile_values.empty() && std::isfinite(estimate.profile_quadratic)) {
    ordered_json values = ordered_json::array();
    ordered_json rises = ordered_json::array();
    for (size_t i = 0; i < estimate.profile_values.size(); ++i) {
      values.push_back(Number(estimate.profile_values[i]));
      rises.push_back(Number(estimate.profile_delta_chi2[i]));
    }
    json["profile"] = {{"values", std::move(values)},
                       {"delta_chi2", std::move(rises)},
                       {"quadratic", Number(estimate.profile_quadratic)}};
  }
  return json;
}

// ISO 8601 local time, seconds precision.
std::string Timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%S", &local);
  return text;
}

// Mean of the per-angle values (NaN ignored) and RMS of their uncertainties, as the reference
// reports the scalar `contrast` and `offset`.
ParameterEstimate MeanOverAngles(const std::vector<AngleScaling>& angles, bool contrast) {
  double sum = 0.0;
  double sum_squared_uncertainty = 0.0;
  int count = 0;
  for (const AngleScaling& angle : angles) {
    const ParameterEstimate& estimate = contrast ? angle.contrast : angle.offset;
    if (std::isnan(estimate.value)) continue;
    sum += estimate.value;
    sum_squared_uncertainty += estimate.uncertainty * estimate.uncertainty;
    ++count;
  }
  ParameterEstimate mean{contrast ? "contrast" : "offset", std::nan(""), std::nan("")};
  if (count > 0) {
    mean.value = sum / count;
    mean.uncertainty = std::sqrt(sum_squared_uncertainty / count);
  }
  return mean;
}

ordered_json BatchStatisticsJson(const BatchStatisticsSummary& statistics) {
  const double success_rate =
      statistics.batches > 0 ? static_cast<double>(statistics.batches - statistics.read_failures) /
                                   static_cast<double>(statistics.batches)
                             : 1.0;
  return {{"batches", statistics.batches},
          {"retries", statistics.retries},
          {"failures",
           {{"read", statistics.read_failures}, {"checkpoint", statistics.checkpoint_failures}}},
          {"success_rate", Number(success_rate)},
          {"checkpoints_saved", statistics.checkpoints_saved}};
}

ordered_json GlobalSearchJson(const GlobalSearchRecord& global) {
  ordered_json minima = ordered_json::array();
  for (const GlobalSearchRecord::Minimum& minimum : global.minima) {
    ordered_json parameters = ordered_json::object();
    for (size_t i = 0; i < minimum.names.size() && i < minimum.values.size(); ++i) {
      parameters[minimum.names[i]] = Number(minimum.values[i]);
    }
    minima.push_back({{"chi2", Number(minimum.chi2)},
                      {"parameters", std::move(parameters)},
                      {"start", minimum.start},
                      {"status", minimum.status},
                      {"iterations", minimum.iterations},
                      {"passes", minimum.passes},
                      {"reached_by", minimum.reached_by}});
  }
  return {{"method", global.method},
          {"reason", global.reason},
          {"starts", global.candidates},
          {"local_fits", global.local_fits},
          {"generations", global.generations},
          {"cmaes_runs", global.cmaes_runs},
          {"moved_fits", global.moved_fits},
          {"refined_fits", global.refined_fits},
          {"joined_local_fits", global.joined_local_fits},
          {"joined_refinements", global.joined_refinements},
          {"starts_left_out", global.starts_left_out},
          {"passes", global.passes},
          {"passes_by_stage",
           {{"screening", global.screening_passes},
            {"local_fits", global.local_fit_passes},
            {"moved_fits", global.moved_fit_passes},
            {"refinements", global.refine_passes}}},
          {"replayed_passes", global.replayed_passes},
          {"point_evaluations", global.point_evaluations},
          {"search_points", global.search_points},
          {"row_stride", global.row_stride},
          {"coarse_points", global.coarse_points},
          {"coarse_row_stride", global.coarse_row_stride},
          {"seconds", Number(global.seconds)},
          {"minima", std::move(minima)},
          {"chosen", global.chosen}};
}

// Fields every file of ours carries beyond the reference's.
ordered_json RunDetails(const FitResult& result) {
  return {
      {"strategy",
       {{"name", result.strategy},
        {"reason", result.strategy_reason},
        {"fallbacks", result.recovery_actions}}},
      {"per_angle_mode", result.per_angle_mode},
      {"backend", result.backend},
      {"threads", result.threads},
      {"n_points", result.n_points},
      {"iterations", result.iterations},
      {"passes", result.passes},
      {"point_evaluations", result.point_evaluations},
      {"timings_s",
       {{"load", Number(result.load_seconds)},
        {"optimization", Number(result.optimization_seconds)},
        {"uncertainty", Number(result.uncertainty_seconds)},
        {"total", Number(result.total_seconds)}}},
      {"memory_peak_mb", Number(result.memory_peak_mb)},
      {"batch_statistics", BatchStatisticsJson(result.batch_statistics)},
      {"global_search", GlobalSearchJson(result.global_search)},
      {"termination_reason", result.termination_reason},
  };
}

// The robust loss beside chi2 (docs/results.md): loss, f_scale and robust_cost, only when the
// fit's loss is not linear, so a linear fit's files are what they were before.
void AddRobustLoss(const FitResult& result, ordered_json& json) {
  if (result.loss == "linear") return;
  json["loss"] = result.loss;
  json["f_scale"] = Number(result.f_scale);
  json["robust_cost"] = Number(result.robust_cost);
}

// What the uncertainties are (docs/results.md, What the uncertainties mean): the method and, for
// the frame-block jackknife, its blocks and the residuals' correlation length [frames].
ordered_json UncertaintyJson(const FitResult& result) {
  ordered_json json = {{"method", result.uncertainty_method}};
  if (std::isfinite(result.residual_lag1_correlation)) {
    json["residual_lag1_correlation"] = Number(result.residual_lag1_correlation);
  }
  if (result.uncertainty_method == "jackknife") {
    json["blocks"] = result.uncertainty_blocks;
    json["noise_correlation_frames"] = result.noise_correlation_frames;
    if (result.uncertainty_ratio_to_standard.size() == result.physical.size()) {
      ordered_json ratios = ordered_json::object();
      for (size_t p = 0; p < result.physical.size(); ++p) {
        ratios[result.physical[p].name] = Number(result.uncertainty_ratio_to_standard[p]);
      }
      json["ratio_to_standard"] = std::move(ratios);
    }
  }
  return json;
}

ordered_json FitQualityJson(const FitResult& result) {
  ordered_json json = {{"chi_squared", Number(result.chi_squared)},
                       {"reduced_chi_squared", Number(result.reduced_chi_squared)}};
  AddRobustLoss(result, json);
  json["degrees_of_freedom"] = result.degrees_of_freedom;
  json["uncertainty"] = UncertaintyJson(result);
  json["quality_flag"] = result.quality_flag;
  json["quality_reasons"] = result.quality_reasons;
  json["sigma"] = {{"value", Number(result.sigma)}, {"source", result.sigma_source}};
  return json;
}

ordered_json ParametersJson(const FitResult& result, const std::string& timestamp) {
  ordered_json parameters = ordered_json::object();
  parameters["contrast"] = Estimate(MeanOverAngles(result.per_angle, true));
  parameters["offset"] = Estimate(MeanOverAngles(result.per_angle, false));
  for (const ParameterEstimate& estimate : result.physical) {
    parameters[estimate.name] = Estimate(estimate);
  }
  ordered_json per_angle = ordered_json::array();
  for (const AngleScaling& angle : result.per_angle) {
    per_angle.push_back({{"phi", Number(angle.phi_degrees)},
                         {"q", Number(angle.q_inv_angstrom)},
                         {"contrast", Estimate(angle.contrast)},
                         {"offset", Estimate(angle.offset)}});
  }
  ordered_json matrix = ordered_json::array();
  ordered_json correlation = ordered_json::array();
  const size_t n = result.covariance_names.size();
  const std::vector<double> correlations = CorrelationMatrix(result.covariance, n);
  for (size_t i = 0; i < n && result.covariance.size() == n * n; ++i) {
    ordered_json row = ordered_json::array();
    ordered_json correlation_row = ordered_json::array();
    for (size_t j = 0; j < n; ++j) {
      row.push_back(Number(result.covariance[i * n + j]));
      correlation_row.push_back(Number(correlations[i * n + j]));
    }
    matrix.push_back(std::move(row));
    correlation.push_back(std::move(correlation_row));
  }
  ordered_json json = {
      {"timestamp", timestamp},
      {"analysis_mode", std::string(ToString(result.analysis_mode))},
      {"chi_squared", Number(result.chi_squared)},
      {"reduced_chi_squared", Number(result.reduced_chi_squared)},
  };
  AddRobustLoss(result, json);
  json["convergence_status"] = result.convergence_status;
  json["uncertainty"] = UncertaintyJson(result);
  json["parameters"] = std::move(parameters);
  json["per_angle"] = std::move(per_angle);
  json["covariance"] = {{"parameter_names", result.covariance_names},
                        {"matrix", std::move(matrix)}};
  json["correlation"] = {{"parameter_names", result.covariance_names},
                         {"matrix", std::move(correlation)}};
  // The phi0 mirror check (docs/results.md, The phi0 mirror check), when it ran.
  if (const Phi0MirrorRecord& mirror = result.phi0_mirror; mirror.checked) {
    json["phi0_mirror"] = {{"angles_degrees", mirror.angles_degrees},
                           {"measure", mirror.measure},
                           {"fit",
                            {{"phi0", Number(mirror.phi0)},
                             {"uncertainty", Number(mirror.phi0_uncertainty)},
                             {mirror.measure, Number(mirror.cost)}}},
                           {"mirror",
                            {{"phi0", Number(mirror.mirror_phi0)},
                             {"uncertainty", Number(mirror.mirror_uncertainty)},
                             {mirror.measure, Number(mirror.mirror_cost)}}},
                           {"tie", mirror.tie},
                           {"note", mirror.note}};
  }
  return json;
}

ordered_json AnalysisResultsJson(const FitResult& result, const std::string& timestamp) {
  ordered_json dataset_info = {
      {"n_angles", result.n_angles},
      {"n_time_points", static_cast<int64_t>(result.n_times) * result.n_times},
      {"total_data_points",
       static_cast<int64_t>(result.n_angles) * result.n_times * result.n_times},
      {"q_value", Number(result.q_inv_angstrom)}};
  if (!result.data_file.empty()) dataset_info["data_file"] = result.data_file;
  ordered_json json = {
      {"method", "nlsq"},
      {"timestamp", timestamp},
      {"analysis_mode", std::string(ToString(result.analysis_mode))},
      {"fit_quality", FitQualityJson(result)},
      {"dataset_info", std::move(dataset_info)},
      {"optimization_summary",
       {{"convergence_status", result.convergence_status},
        {"iterations", result.iterations},
        {"execution_time", Number(result.total_seconds)}}},
  };
  json.update(RunDetails(result));
  return json;
}

ordered_json ConvergenceMetricsJson(const FitResult& result) {
  const double reduced = result.reduced_chi_squared;
  ordered_json json = {
      {"convergence",
       {{"status", result.convergence_status},
        {"iterations", result.iterations},
        {"execution_time", Number(result.total_seconds)},
        {"final_chi_squared", Number(result.chi_squared)},
        {"chi_squared_reduction", Number(reduced < 1.0 ? 1.0 - reduced : 0.0)}}},
      {"recovery_actions", result.recovery_actions},
      {"quality_flag", result.quality_flag},
      {"quality_reasons", result.quality_reasons},
      {"device_info", DeviceInfo(result)},
      {"quality_validation_passed", result.warnings.empty()},
      {"quality_warnings", result.warnings},
      {"quality_checks",
       {{"converged", result.convergence_status == "converged"},
        {"reduced_chi_squared_finite", std::isfinite(reduced)}}},
  };
  json.update(RunDetails(result));
  return json;
}

// Writes `json` into the temporary file of the set's file `name`.
void AddJson(io_internal::DurableFileSet& set, std::string_view name, const ordered_json& json) {
  io_internal::DurableFile& file = set.Add(std::string(name));
  try {
    file.Write(json.dump(2) + "\n");
  } catch (const std::runtime_error& failure) {
    throw std::runtime_error(file.final_path().string() + ": cannot write the file (" +
                             failure.what() + ")" + set.NothingPublished());
  }
}

// The result files as one set (io/durable_file.h, DurableFileSet), in kResultFileNames' order:
// fitted_data.h5 when `fitted_data` is set, then the JSON files, parameters.json last. Every
// previous result file is replaced, fitted_data.h5 included when this set has none.
struct FittedDataInputs {
  BatchSource& source;
  const ModelEvaluation& evaluation;
  bool npz = false;  // fitted_data.npz too
};
void WriteResultSet(const FitResult& result, const FittedDataInputs* fitted_data,
                    const std::string& output_dir) {
  const std::filesystem::path folder = io_internal::CreateResultsFolder(output_dir);
  std::vector<std::string> previous_names;
  for (const std::string_view name : kResultFileNames) previous_names.emplace_back(name);
  // An earlier run's history goes with its result files (WriteConvergenceHistory, after the set),
  // and its derived rates (written with fitted_data.h5, from the same time grid).
  previous_names.emplace_back(kConvergenceHistoryFileName);
  previous_names.emplace_back(io_internal::kDerivedRatesFileName);
  previous_names.emplace_back(kFittedDataNpzFileName);
  try {
    io_internal::DurableFileSet set(folder, std::move(previous_names));
    if (fitted_data != nullptr) {
      const std::filesystem::path h5 = io_internal::AddFittedData(
          set, fitted_data->source, fitted_data->evaluation, result.per_angle);
      if (fitted_data->npz) {
        io_internal::AddFittedDataNpz(set, h5, fitted_data->evaluation, result.per_angle,
                                      fitted_data->source.info().FittedTimes(),
                                      fitted_data->source.info().q_inv_angstrom, result.sigma);
      }
      AddJson(
          set, io_internal::kDerivedRatesFileName,
          io_internal::DerivedRatesJson(result, fitted_data->evaluation.model().times_seconds()));
    }
    const std::string timestamp = Timestamp();
    AddJson(set, kConvergenceMetricsFileName, ConvergenceMetricsJson(result));
    AddJson(set, kAnalysisResultsFileName, AnalysisResultsJson(result, timestamp));
    AddJson(set, kParametersFileName, ParametersJson(result, timestamp));
    set.Commit();
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& failure) {
    throw InputError(failure.what());
  }
}

}  // namespace

std::string QualityFlag(double reduced_chi_squared) {
  if (!std::isfinite(reduced_chi_squared)) return "poor";
  if (reduced_chi_squared < 0.5) return "marginal";
  if (reduced_chi_squared < 1.5) return "good";
  if (reduced_chi_squared < 3.0) return "marginal";
  return "poor";
}

std::vector<double> CorrelationMatrix(const std::vector<double>& covariance, size_t n) {
  std::vector<double> correlation(covariance.size(), 0.0);
  if (covariance.size() != n * n) return correlation;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      const double variance = covariance[i * n + i] * covariance[j * n + j];
      correlation[i * n + j] = variance > 0.0 ? covariance[i * n + j] / std::sqrt(variance) : 0.0;
    }
  }
  return correlation;
}

void WriteConvergenceHistory(const std::vector<IterationProgress>& iterations,
                             const FitResult& result, double sigma, const std::string& output_dir) {
  ordered_json entries = ordered_json::array();
  for (const IterationProgress& iteration : iterations) {
    entries.push_back({{"iteration", iteration.iteration},
                       {"accepted", iteration.step_accepted},
                       {"chi2", Number(iteration.chi2)},
                       {"trial_chi2", Number(iteration.trial_chi2)},
                       {"damping", Number(iteration.damping)},
                       {"step_norm", Number(iteration.step_norm)},
                       {"step_standard_errors", Number(iteration.step_standard_errors)},
                       {"gain_ratio", Number(iteration.gain_ratio)},
                       {"passes", iteration.passes + iteration.cost_passes},
                       {"seconds", Number(iteration.seconds)}});
  }
  // The catalog's units (mode_catalog.h), for plot labels: the physical parameters, then the
  // per-angle scaling ones; "" = dimensionless.
  ordered_json units = ordered_json::object();
  for (const ParameterEstimate& estimate : result.physical) {
    const ParameterDefinition* definition = FindParameterDefinition(estimate.name);
    units[estimate.name] = definition == nullptr ? "" : std::string(definition->unit);
  }
  for (const ParameterDefinition& definition : ScalingParameterDefinitions()) {
    units[std::string(definition.name)] = std::string(definition.unit);
  }
  const ordered_json json = {
      {"analysis_mode", std::string(ToString(result.analysis_mode))},
      {"sigma", Number(sigma)},
      {"parameter_units", std::move(units)},
      {"chi_squared", Number(result.chi_squared)},
      {"iterations", result.iterations},
      {"history", std::move(entries)},
  };
  const std::filesystem::path folder = io_internal::CreateResultsFolder(output_dir);
  const std::filesystem::path path = folder / std::string(kConvergenceHistoryFileName);
  try {
    io_internal::DurableFile file(path);
    file.Write(json.dump(2) + "\n");
    file.Commit();
  } catch (const std::runtime_error& failure) {
    throw InputError(path.string() + ": cannot write the file (" + failure.what() + ")");
  }
}

void WriteResultFiles(const FitResult& result, const std::string& output_dir) {
  WriteResultSet(result, nullptr, output_dir);
}

void WriteAllResultFiles(const FitResult& result, BatchSource& source,
                         const ModelEvaluation& evaluation, const std::string& output_dir,
                         bool npz) {
  const FittedDataInputs fitted_data{source, evaluation, npz};
  WriteResultSet(result, &fitted_data, output_dir);
}

namespace io_internal {

std::filesystem::path CreateResultsFolder(const std::string& output_dir) {
  const std::filesystem::path folder =
      std::filesystem::path(output_dir) / std::string(kResultsFolderName);
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  if (!std::filesystem::is_directory(folder)) {
    throw InputError(folder.string() + ": cannot create the results folder" +
                     (error ? ": " + error.message() : std::string()));
  }
  return folder;
}

}  // namespace io_internal
}  // namespace homodyne
