// The summary of independent fits of several q rings (WriteRingSummary, include/homodyne/results.h;
// docs/results.md, Several q rings): read back from each ring's result files, so that rings fitted
// by separate runs (a SLURM array, `homodyne --q-index K`) are summarised the same way.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/results.h"
#include "io/durable_file.h"
#include "io/result_files.h"

namespace homodyne {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

// The JSON of a file, or null when the file does not exist. Throws InputError naming a file that
// exists but cannot be read or parsed.
ordered_json ReadJsonIfPresent(const fs::path& path) {
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return nullptr;
  std::ifstream in(path);
  if (!in) throw InputError(path.string() + ": cannot read the file");
  try {
    return ordered_json::parse(in);
  } catch (const ordered_json::exception& failure) {
    throw InputError(path.string() + ": not valid JSON (" + failure.what() + ")");
  }
}

double NumberOr(const ordered_json& json, const char* key, double fallback) {
  if (!json.is_object() || !json.contains(key) || !json[key].is_number()) return fallback;
  return json[key].get<double>();
}

std::string StringOr(const ordered_json& json, const char* key, const std::string& fallback) {
  if (!json.is_object() || !json.contains(key) || !json[key].is_string()) return fallback;
  return json[key].get<std::string>();
}

// A number for CSV and JSON: nan when absent.
ordered_json Number(double value) {
  return std::isfinite(value) ? ordered_json(value) : ordered_json(nullptr);
}

std::string CsvNumber(double value) {
  if (!std::isfinite(value)) return "";
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", value);
  return text;
}

// A rate of derived_rates.json at grid index `index`: value and half the 68 % interval.
ordered_json RateAt(const ordered_json& rates, const std::string& name, size_t index) {
  if (!rates.is_object() || !rates.contains(name) || !rates[name].is_array() ||
      index >= rates[name].size() || !rates[name][index].is_number()) {
    return nullptr;
  }
  double uncertainty = NAN;
  const std::string interval_key = name + "_interval_68";
  if (rates.contains(interval_key) && rates[interval_key].is_array() &&
      index < rates[interval_key].size()) {
    const ordered_json& interval = rates[interval_key][index];
    if (interval.is_array() && interval.size() == 2 && interval[0].is_number() &&
        interval[1].is_number()) {
      uncertainty = 0.5 * (interval[1].get<double>() - interval[0].get<double>());
    }
  }
  return {{"value", rates[name][index]}, {"uncertainty", Number(uncertainty)}};
}

}  // namespace

std::string RingFolderName(double q_inv_angstrom) {
  char text[48];
  std::snprintf(text, sizeof(text), "q_%.8g", q_inv_angstrom);
  return text;
}

std::string WriteRingSummary(const std::string& output_dir, const std::vector<double>& ring_qs) {
  ordered_json rings = ordered_json::array();
  std::vector<std::string> parameter_names;  // of the first fitted ring, in its order
  std::vector<std::string> rate_names;
  std::string analysis_mode;
  double reference_time = NAN;
  size_t reference_index = 0;
  for (const double q : ring_qs) {
    const std::string folder = RingFolderName(q);
    const fs::path results = fs::path(output_dir) / folder / "nlsq";
    const ordered_json parameters = ReadJsonIfPresent(results / "parameters.json");
    const ordered_json analysis = ReadJsonIfPresent(results / "analysis_results_nlsq.json");
    const ordered_json rates = ReadJsonIfPresent(results / "derived_rates.json");
    ordered_json ring = {{"q", q}, {"folder", folder}, {"fitted", !parameters.is_null()}};
    if (parameters.is_null()) {
      rings.push_back(std::move(ring));
      continue;
    }
    if (analysis_mode.empty()) analysis_mode = StringOr(parameters, "analysis_mode", "");
    ring["convergence_status"] = StringOr(parameters, "convergence_status", "");
    ring["reduced_chi_squared"] = Number(NumberOr(parameters, "reduced_chi_squared", NAN));
    const ordered_json quality = analysis.is_object() && analysis.contains("fit_quality")
                                     ? analysis["fit_quality"]
                                     : ordered_json(nullptr);
    ring["quality_flag"] = StringOr(quality, "quality_flag", "");
    ordered_json values = ordered_json::object();
    if (parameters.contains("parameters") && parameters["parameters"].is_object()) {
      for (const auto& [name, estimate] : parameters["parameters"].items()) {
        values[name] = {{"value", Number(NumberOr(estimate, "value", NAN))},
                        {"uncertainty", Number(NumberOr(estimate, "uncertainty", NAN))}};
        if (std::find(parameter_names.begin(), parameter_names.end(), name) ==
            parameter_names.end()) {
          parameter_names.push_back(name);
        }
      }
    }
    ring["parameters"] = std::move(values);
    // The rates at the reference time: the middle of the first fitted ring's grid (the rings of
    // one file share the frame window, hence the grid).
    if (rates.is_object() && rates.contains("t") && rates["t"].is_array() && !rates["t"].empty()) {
      if (!std::isfinite(reference_time)) {
        reference_index = rates["t"].size() / 2;
        reference_time = rates["t"][reference_index].get<double>();
      }
      size_t index = 0;
      for (size_t k = 0; k < rates["t"].size(); ++k) {
        if (std::abs(rates["t"][k].get<double>() - reference_time) <
            std::abs(rates["t"][index].get<double>() - reference_time)) {
          index = k;
        }
      }
      ordered_json at_reference = ordered_json::object();
      for (const char* name : {"D", "gamma_dot"}) {
        ordered_json rate = RateAt(rates, name, index);
        if (rate.is_null()) continue;
        at_reference[name] = std::move(rate);
        if (std::find(rate_names.begin(), rate_names.end(), name) == rate_names.end()) {
          rate_names.push_back(name);
        }
      }
      ring["rates_at_reference_time"] = std::move(at_reference);
    }
    rings.push_back(std::move(ring));
  }
  const ordered_json summary = {{"analysis_mode", analysis_mode},
                                {"n_rings", ring_qs.size()},
                                {"reference_time_s", Number(reference_time)},
                                {"rings", rings}};

  std::ostringstream csv;
  csv << "q,folder,fitted,convergence_status,quality_flag,reduced_chi_squared";
  for (const std::string& name : parameter_names)
    csv << "," << name << "," << name << "_uncertainty";
  for (const std::string& name : rate_names) {
    csv << "," << name << "_at_reference_time," << name << "_at_reference_time_uncertainty";
  }
  csv << "\n";
  for (const ordered_json& ring : rings) {
    csv << CsvNumber(ring["q"].get<double>()) << "," << ring["folder"].get<std::string>() << ","
        << (ring["fitted"].get<bool>() ? "true" : "false") << ","
        << StringOr(ring, "convergence_status", "") << "," << StringOr(ring, "quality_flag", "")
        << "," << CsvNumber(NumberOr(ring, "reduced_chi_squared", NAN));
    const ordered_json none = ordered_json::object();
    const ordered_json& values = ring.contains("parameters") ? ring["parameters"] : none;
    for (const std::string& name : parameter_names) {
      const ordered_json& estimate = values.contains(name) ? values[name] : none;
      csv << "," << CsvNumber(NumberOr(estimate, "value", NAN)) << ","
          << CsvNumber(NumberOr(estimate, "uncertainty", NAN));
    }
    const ordered_json& at =
        ring.contains("rates_at_reference_time") ? ring["rates_at_reference_time"] : none;
    for (const std::string& name : rate_names) {
      const ordered_json& rate = at.contains(name) ? at[name] : none;
      csv << "," << CsvNumber(NumberOr(rate, "value", NAN)) << ","
          << CsvNumber(NumberOr(rate, "uncertainty", NAN));
    }
    csv << "\n";
  }

  const fs::path folder = io_internal::CreateResultsFolder(output_dir);
  const fs::path json_path = folder / "q_summary.json";
  try {
    io_internal::DurableFile csv_file(folder / "q_summary.csv");
    csv_file.Write(csv.str());
    csv_file.Commit();
    io_internal::DurableFile json_file(json_path);
    json_file.Write(summary.dump(2) + "\n");
    json_file.Commit();
  } catch (const std::runtime_error& failure) {
    throw InputError(json_path.string() + ": cannot write the q summary (" + failure.what() + ")");
  }
  return json_path.string();
}

}  // namespace homodyne
