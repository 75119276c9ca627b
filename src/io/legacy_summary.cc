// The legacy summary of --output-format (WriteLegacySummary, include/homodyne/results.h).
#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "homodyne/results.h"
#include "io/durable_file.h"

namespace homodyne {
namespace {

struct NamedVector {
  std::vector<std::string> names;
  std::vector<double> values;
};

// The reference's parameter vector: one contrast per angle, one offset per angle, then the
// physical parameters in model order (docs/model.md, Per-angle scaling).
NamedVector ReferenceParameterVector(const FitResult& result) {
  NamedVector vector;
  for (size_t k = 0; k < result.per_angle.size(); ++k) {
    vector.names.push_back("contrast_" + std::to_string(k));
    vector.values.push_back(result.per_angle[k].contrast.value);
  }
  for (size_t k = 0; k < result.per_angle.size(); ++k) {
    vector.names.push_back("offset_" + std::to_string(k));
    vector.values.push_back(result.per_angle[k].offset.value);
  }
  for (const ParameterEstimate& estimate : result.physical) {
    vector.names.push_back(estimate.name);
    vector.values.push_back(estimate.value);
  }
  return vector;
}

// A YAML scalar for a double: the shortest text that reads back to the same double (as the JSON
// files), .nan / .inf / -.inf when not finite.
std::string YamlNumber(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, end.ptr);
}

std::string YamlText(const FitResult& result, const NamedVector& vector) {
  std::ostringstream out;
  out << "method: nlsq\n"
      << "analysis_mode: " << ToString(result.analysis_mode) << "\n"
      << "success: " << (result.convergence_status == "converged" ? "true" : "false") << "\n"
      << "optimization_time: " << YamlNumber(result.optimization_seconds) << "\n"
      << "device_config:\n"
      << "  backend: " << result.backend << "\n"
      << "  threads: " << result.threads << "\n"
      << "parameter_names:\n";
  for (const std::string& name : vector.names) out << "  - " << name << "\n";
  out << "parameters:\n";
  for (double value : vector.values) out << "  - " << YamlNumber(value) << "\n";
  out << "diagnostics:\n"
      << "  chi_squared: " << YamlNumber(result.chi_squared) << "\n";
  return out.str();
}

std::string JsonText(const FitResult& result, const NamedVector& vector) {
  // nlohmann writes NaN and Inf as null, the reference's json.dump of a NaN aside.
  const nlohmann::ordered_json summary = {
      {"method", "nlsq"},
      {"analysis_mode", std::string(ToString(result.analysis_mode))},
      {"success", result.convergence_status == "converged"},
      {"optimization_time", result.optimization_seconds},
      {"device_config", {{"backend", result.backend}, {"threads", result.threads}}},
      {"parameter_names", vector.names},
      {"parameters", vector.values},
      {"diagnostics", {{"chi_squared", result.chi_squared}}},
  };
  return summary.dump(2) + "\n";
}

}  // namespace

std::optional<LegacySummaryFormat> ParseLegacySummaryFormat(const std::string& text) {
  if (text == "yaml") return LegacySummaryFormat::kYaml;
  if (text == "json") return LegacySummaryFormat::kJson;
  return std::nullopt;
}

std::string WriteLegacySummary(const FitResult& result, LegacySummaryFormat format,
                               const std::string& output_dir) {
  const bool yaml = format == LegacySummaryFormat::kYaml;
  const std::filesystem::path path = std::filesystem::path(output_dir) /
                                     (yaml ? "homodyne_results.yaml" : "homodyne_results.json");
  const NamedVector vector = ReferenceParameterVector(result);
  const std::string text = yaml ? YamlText(result, vector) : JsonText(result, vector);
  std::error_code error;
  std::filesystem::create_directories(output_dir, error);
  try {
    io_internal::WriteFileDurably(path, text);
  } catch (const std::runtime_error& failure) {
    throw InputError(path.string() + ": cannot write the legacy summary (--output-format; " +
                     failure.what() + ")");
  }
  return path.string();
}

}  // namespace homodyne
