// LoadConfig / ParseConfig: YAML text -> Config (include/homodyne/config.h).
//
// Contract: every key of the reference templates is accepted; keys the engine uses are parsed and
// validated; a broken rule throws ConfigError "<source>: <yaml.path> = <value>: <rule>"; malformed
// YAML or a missing file throws InputError naming the file (and line and column). Unknown keys
// and deprecated spellings become Config::warnings, never errors. yaml-cpp stays in this folder.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "config/config_parse.h"
#include "config/config_schema.h"
#include "config/path_checks.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "model/mode_catalog.h"

namespace homodyne {
namespace {

// The largest optimization.nlsq.anti_degeneracy.fourier_order accepted.
constexpr int64_t kMaxFourierOrder = 1000;

using config_internal::ClassifyKey;
using config_internal::ClosestKnownKey;
using config_internal::HasNoEffect;
using config_internal::KeyKind;

// The largest counts the global phase accepts (docs/configuration.md, Global phase): starts,
// refined minima and CMA-ES population (1e5 local fits or evaluations per generation is already
// days of passes on large data), CMA-ES generations and restarts.
constexpr int kMaxSearchCount = 100000;
constexpr int kMaxSearchGenerations = 10000000;
constexpr int kMaxSearchRestarts = 1000;

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool Present(const YAML::Node& node) { return node.IsDefined() && !node.IsNull(); }

// A value as the user wrote it: numbers and booleans bare, other scalars quoted, collections in
// flow style.
std::string Show(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "null";
  if (node.IsScalar()) {
    double number = 0.0;
    bool flag = false;
    if (node.Tag() != "!" &&
        (YAML::convert<double>::decode(node, number) || YAML::convert<bool>::decode(node, flag))) {
      return node.Scalar();
    }
    return "'" + node.Scalar() + "'";
  }
  YAML::Emitter emitter;
  emitter << YAML::Flow << node;
  return emitter.c_str();
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::string FormatNumber(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// Reads typed values out of the document and reports broken rules with the source name.
class ConfigReader {
 public:
  ConfigReader(YAML::Node root, std::string source, std::vector<std::string>* warnings)
      : root_(std::move(root)), source_(std::move(source)), warnings_(warnings) {}

  [[noreturn]] void Fail(const std::string& path, const YAML::Node& value,
                         const std::string& rule) const {
    throw ConfigError(source_ + ": " + path + " = " + Show(value) + ": " + rule);
  }
  [[noreturn]] void FailText(const std::string& message) const {
    throw ConfigError(source_ + ": " + message);
  }
  void Warn(const std::string& message) const { warnings_->push_back(source_ + ": " + message); }

  // The node at a dot path; undefined when absent or below a null section. A non-mapping on
  // the way is an error.
  YAML::Node Find(const std::string& path) const {
    YAML::Node current;
    current.reset(root_);
    std::string walked;
    std::istringstream parts(path);
    std::string part;
    while (std::getline(parts, part, '.')) {
      if (!Present(current)) return YAML::Node(YAML::NodeType::Undefined);
      if (!current.IsMap()) Fail(walked, current, "must be a mapping");
      const YAML::Node& const_current = current;
      YAML::Node next = const_current[part];
      if (!next.IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      current.reset(next);
      walked += (walked.empty() ? "" : ".") + part;
    }
    return current;
  }

  double NumberOf(const YAML::Node& node, const std::string& path) const {
    double value = 0.0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value)) {
      Fail(path, node, "must be a number");
    }
    return value;
  }
  // An integer of at most kMaxConfigInteger in magnitude; each other value is an error whose rule
  // says what is wrong with it (not a number, not finite, a fraction, too large).
  int64_t IntegerOf(const YAML::Node& node, const std::string& path) const {
    constexpr double kMaxConfigInteger = 9.0e15;  // exact in a double, far beyond any count
    double value = 0.0;
    if (!node.IsScalar() || !YAML::convert<double>::decode(node, value)) {
      Fail(path, node, "must be an integer");
    }
    if (!std::isfinite(value)) Fail(path, node, "must be a finite integer");
    if (value != std::floor(value)) Fail(path, node, "must be an integer, not a fraction");
    if (std::fabs(value) > kMaxConfigInteger) {
      Fail(path, node, "is beyond the largest integer a config takes (9e15)");
    }
    return static_cast<int64_t>(value);
  }
  bool BoolOf(const YAML::Node& node, const std::string& path) const {
    bool value = false;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
      Fail(path, node, "must be true or false");
    }
    return value;
  }
  std::string StringOf(const YAML::Node& node, const std::string& path) const {
    if (!node.IsScalar()) Fail(path, node, "must be a string");
    return node.Scalar();
  }
  std::vector<double> NumbersOf(const YAML::Node& node, const std::string& path) const {
    if (!node.IsSequence()) Fail(path, node, "must be a list of numbers");
    std::vector<double> values;
    for (size_t i = 0; i < node.size(); ++i) {
      values.push_back(NumberOf(node[i], path + "[" + std::to_string(i) + "]"));
    }
    return values;
  }
  std::vector<std::string> StringsOf(const YAML::Node& node, const std::string& path) const {
    if (!node.IsSequence()) Fail(path, node, "must be a list of names");
    std::vector<std::string> values;
    for (size_t i = 0; i < node.size(); ++i) {
      values.push_back(StringOf(node[i], path + "[" + std::to_string(i) + "]"));
    }
    return values;
  }

  // Typed reads by path; std::nullopt when the key is absent or null.
  std::optional<double> Number(const std::string& path) const {
    YAML::Node node = Find(path);
    if (!Present(node)) return std::nullopt;
    return NumberOf(node, path);
  }
  std::optional<int64_t> Integer(const std::string& path) const {
    YAML::Node node = Find(path);
    if (!Present(node)) return std::nullopt;
    return IntegerOf(node, path);
  }
  std::optional<bool> Bool(const std::string& path) const {
    YAML::Node node = Find(path);
    if (!Present(node)) return std::nullopt;
    return BoolOf(node, path);
  }
  std::optional<std::string> String(const std::string& path) const {
    YAML::Node node = Find(path);
    if (!Present(node)) return std::nullopt;
    return StringOf(node, path);
  }

  // Rule checks: the value (read from `path`) must satisfy `ok`, else "<path> = <v>: <rule>".
  void Require(bool ok, const std::string& path, const std::string& rule) const {
    if (!ok) Fail(path, Find(path), rule);
  }

  const std::string& source() const { return source_; }

 private:
  YAML::Node root_;
  std::string source_;
  std::vector<std::string>* warnings_;
};

// Walks the document and warns about every key the schema does not know.
// An unknown key whose value is a mapping is an unknown section (a misspelt `scattering:` takes
// every key below it out of the config): its path is added to unknown_sections as well.
// Known keys without effect (HasNoEffect) go to no_effect instead, a section or free-form one as
// "path.*", and are not walked further.
void CheckKnownKeys(const ConfigReader& reader, const YAML::Node& map,
                    const std::string& display_path, const std::string& schema_path,
                    std::vector<std::string>& unknown_sections,
                    std::vector<std::string>& no_effect) {
  for (const auto& entry : map) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : Show(entry.first);
    const std::string display = display_path.empty() ? key : display_path + "." + key;
    const std::string schema = schema_path.empty() ? key : schema_path + "." + key;
    const YAML::Node& value = entry.second;
    const KeyKind kind = ClassifyKey(schema);
    if (kind != KeyKind::kUnknown && HasNoEffect(schema)) {
      no_effect.push_back(kind == KeyKind::kLeaf ? display : display + ".*");
      continue;
    }
    switch (kind) {
      case KeyKind::kUnknown:
        if (value.IsMap()) {
          reader.Warn("unknown section '" + display + "' (did you mean '" +
                      ClosestKnownKey(schema) + "'?); ignored with every key in it");
          unknown_sections.push_back(display);
        } else {
          reader.Warn("unknown key '" + display + "' (did you mean '" + ClosestKnownKey(schema) +
                      "'?); ignored");
        }
        break;
      case KeyKind::kLeaf:
      case KeyKind::kFreeForm:
        break;
      case KeyKind::kSection:
        if (value.IsMap()) {
          CheckKnownKeys(reader, value, display, schema, unknown_sections, no_effect);
        } else if (value.IsSequence()) {
          for (size_t i = 0; i < value.size(); ++i) {
            if (value[i].IsMap()) {
              CheckKnownKeys(reader, value[i], display + "[" + std::to_string(i) + "]",
                             schema + "[]", unknown_sections, no_effect);
            }
          }
        } else if (!value.IsNull()) {
          reader.Fail(display, value, "must be a mapping");
        }
        break;
    }
  }
}

bool IsPhysicalName(const std::string& name, AnalysisMode mode) {
  const auto& names = PhysicalParameterNames(mode);
  return std::find(names.begin(), names.end(), name) != names.end();
}
// A physical parameter of any mode of the mode catalog, or a per-angle scaling name.
bool IsKnownParameterName(const std::string& name) {
  return FindParameterDefinition(name) != nullptr;
}
// A physical parameter of some mode other than `mode` (laminar_flow's shear terms in a static
// config, two_component's names in a laminar_flow one): accepted where names are read, and
// dropped.
bool IsOtherModesParameter(const std::string& name, AnalysisMode mode) {
  return !IsPhysicalName(name, mode) && name != "contrast" && name != "offset" &&
         IsKnownParameterName(name);
}
// Every known parameter name: each mode's physical names in catalog order (a name shared by modes
// once), then contrast and offset.
std::string AllParameterNames() {
  std::vector<std::string> names;
  for (const ModeDefinition& mode : AllModeDefinitions()) {
    for (const ParameterDefinition& parameter : mode.physical) {
      if (std::find(names.begin(), names.end(), parameter.name) == names.end()) {
        names.emplace_back(parameter.name);
      }
    }
  }
  for (const ParameterDefinition& parameter : ScalingParameterDefinitions()) {
    names.emplace_back(parameter.name);
  }
  return JoinNames(names);
}
// The definitions of the parameters fitted in `mode`: its physical ones in model order, then
// contrast and offset.
std::vector<const ParameterDefinition*> FittedParameterDefinitions(AnalysisMode mode) {
  std::vector<const ParameterDefinition*> definitions;
  for (const ParameterDefinition& parameter : DefinitionOf(mode).physical) {
    definitions.push_back(&parameter);
  }
  for (const ParameterDefinition& parameter : ScalingParameterDefinitions()) {
    definitions.push_back(&parameter);
  }
  return definitions;
}

// The file's analysis_mode (checked even when `mode` overrides it), or `mode` when given.
void ParseMode(const ConfigReader& reader, std::optional<AnalysisMode> mode, Config& config) {
  YAML::Node node = reader.Find("analysis_mode");
  if (!Present(node)) {
    if (!mode) reader.Warn("analysis_mode is not set; using laminar_flow");
    config.analysis_mode = mode.value_or(AnalysisMode::kLaminarFlow);
    return;
  }
  const std::string text = reader.StringOf(node, "analysis_mode");
  try {
    config.analysis_mode = ParseAnalysisMode(text);
  } catch (const Error&) {
    reader.Fail("analysis_mode", node, "must be one of " + AnalysisModeNames());
  }
  if (mode) config.analysis_mode = *mode;
}

// Reads the first of several paths that is present; returns the path used ("" if none).
std::string FirstPresent(const ConfigReader& reader, std::initializer_list<const char*> paths) {
  for (const char* path : paths) {
    if (Present(reader.Find(path))) return path;
  }
  return "";
}

void WarnLegacyKey(const ConfigReader& reader, const std::string& key, const std::string& modern) {
  if (Present(reader.Find(key))) {
    reader.Warn("'" + key + "' is a deprecated flat key; use " + modern);
  }
}

// A {min, max} pair of data_filtering (q_range, phi_range): both required and finite.
std::pair<double, double> RangeOf(const ConfigReader& reader, const std::string& path) {
  const YAML::Node range = reader.Find(path);
  if (!range.IsMap()) reader.Fail(path, range, "must be a mapping {min, max}");
  double ends[2] = {0.0, 0.0};
  for (int k = 0; k < 2; ++k) {
    const std::string end = k == 0 ? "min" : "max";
    const YAML::Node value = range[end];
    if (!Present(value)) reader.Fail(path + "." + end, value, "is required");
    ends[k] = reader.NumberOf(value, path + "." + end);
    if (!std::isfinite(ends[k])) reader.Fail(path + "." + end, value, "must be finite");
  }
  return {ends[0], ends[1]};
}

// data_filtering (docs/configuration.md, Several q rings): read when enabled; q_range and
// phi_range select rings and angles, fallback_on_empty says what an empty selection does. The
// reference's other keys of the section (quality_threshold, frame_filtering, combine_criteria,
// validation_level) are accepted and not used: the two ranges always combine as AND.
void ParseDataFiltering(const ConfigReader& reader, DataSelection& data) {
  if (!reader.Bool("data_filtering.enabled").value_or(false)) return;
  if (Present(reader.Find("data_filtering.q_range"))) {
    const auto [min, max] = RangeOf(reader, "data_filtering.q_range");
    reader.Require(min >= 0.0 && max >= min, "data_filtering.q_range",
                   "must have 0 <= min <= max [1/Angstrom]");
    data.data_q_range = std::make_pair(min, max);
  }
  if (Present(reader.Find("data_filtering.phi_range"))) {
    const auto [min, max] = RangeOf(reader, "data_filtering.phi_range");
    data.data_phi_range = PhiRange{min, max};  // min > max wraps through 180
  }
  data.data_filtering_fallback_on_empty =
      reader.Bool("data_filtering.fallback_on_empty").value_or(true);
}

void ParseDataAndGeometry(const ConfigReader& reader, Config& config) {
  DataSelection& data = config.data;
  WarnLegacyKey(reader, "data_file", "experimental_data.data_folder_path + data_file_name");
  WarnLegacyKey(reader, "dt", "analyzer_parameters.dt");
  WarnLegacyKey(reader, "start_frame", "analyzer_parameters.start_frame");
  WarnLegacyKey(reader, "end_frame", "analyzer_parameters.end_frame");

  // Data file: folder + name, else file_path, else legacy data_file (docs/configuration.md, Model
  // and data).
  const auto folder = reader.String("experimental_data.data_folder_path");
  const auto name = reader.String("experimental_data.data_file_name");
  if (folder && name) {
    data.file_path = (std::filesystem::path(*folder) / *name).string();
    // A template whose file_path alone was edited still reads the pair: say which file is read.
    if (const auto file_path = reader.String("experimental_data.file_path");
        file_path && std::filesystem::path(*file_path).lexically_normal() !=
                         std::filesystem::path(data.file_path).lexically_normal()) {
      reader.Warn("experimental_data.file_path = '" + *file_path +
                  "' is ignored: data_folder_path + data_file_name name the data file, '" +
                  data.file_path + "' (remove the pair to use file_path)");
    }
  } else if (const auto file_path = reader.String("experimental_data.file_path")) {
    data.file_path = *file_path;
  } else if (name) {
    data.file_path = *name;
  } else if (const auto legacy = reader.String("data_file")) {
    data.file_path = *legacy;
  }

  // The diagonal of the result files and plots (docs/model.md, Diagonal correction).
  DiagonalCorrectionOptions& diagonal = data.diagonal_correction;
  if (const auto apply = reader.Bool("experimental_data.apply_diagonal_correction")) {
    diagonal.apply = *apply;
  }
  if (const auto method = reader.String("experimental_data.diagonal_correction.method")) {
    diagonal.method = *method;
    reader.Require(diagonal.method == "basic" || diagonal.method == "statistical" ||
                       diagonal.method == "interpolation",
                   "experimental_data.diagonal_correction.method",
                   "must be basic, statistical or interpolation");
  }
  if (const auto estimator = reader.String("experimental_data.diagonal_correction.estimator")) {
    diagonal.estimator = *estimator;
    reader.Require(diagonal.estimator == "median" || diagonal.estimator == "mean" ||
                       diagonal.estimator == "trimmed_mean",
                   "experimental_data.diagonal_correction.estimator",
                   "must be median, mean or trimmed_mean");
  }
  if (const auto window = reader.Integer("experimental_data.diagonal_correction.window")) {
    reader.Require(*window >= 1 && *window <= 1000, "experimental_data.diagonal_correction.window",
                   "must be an integer from 1 to 1000");
    diagonal.window = static_cast<int>(*window);
  }
  if (const auto trim = reader.Number("experimental_data.diagonal_correction.trim_fraction")) {
    reader.Require(std::isfinite(*trim) && *trim >= 0.0 && *trim < 0.5,
                   "experimental_data.diagonal_correction.trim_fraction", "must be in [0, 0.5)");
    diagonal.trim_fraction = *trim;
  }

  const std::string dt_path =
      FirstPresent(reader, {"analyzer_parameters.dt", "experimental_data.dt", "dt"});
  if (!dt_path.empty()) {
    const double dt = *reader.Number(dt_path);
    // Frame times of XPCS detectors run from microseconds to minutes; far outside, the model's
    // rates times dt under- or overflow and the fit stays at its start.
    reader.Require(std::isfinite(dt) && dt >= 1e-9 && dt <= 1e5, dt_path,
                   "must be from 1e-9 to 1e5 [s] (the time between two frames)");
    data.dt_seconds = dt;
  }
  config.dt_source = dt_path;
  config.geometry.dt_seconds = data.dt_seconds;

  const std::string start_path =
      FirstPresent(reader, {"analyzer_parameters.start_frame", "start_frame"});
  if (!start_path.empty()) {
    const int64_t start = *reader.Integer(start_path);
    reader.Require(start >= 1 && start <= std::numeric_limits<int>::max(), start_path,
                   "must be >= 1 (frames are 1-based)");
    data.start_frame = static_cast<int>(start);
  }
  const std::string end_path = FirstPresent(reader, {"analyzer_parameters.end_frame", "end_frame"});
  if (!end_path.empty()) {
    const int64_t end = *reader.Integer(end_path);
    reader.Require(end == -1 || (end >= data.start_frame && end <= std::numeric_limits<int>::max()),
                   end_path,
                   "must be -1 (to the last frame) or >= start_frame (" +
                       std::to_string(data.start_frame) + ")");
    data.end_frame = static_cast<int>(end);
  }

  // A number (one ring), a list of numbers or `all` (docs/configuration.md, Several q rings).
  const std::string q_path = "analyzer_parameters.scattering.wavevector_q";
  const YAML::Node q_node = reader.Find(q_path);
  if (Present(q_node) && q_node.IsSequence()) {
    if (q_node.size() == 0) reader.Fail(q_path, q_node, "must list at least one q [1/Angstrom]");
    for (size_t i = 0; i < q_node.size(); ++i) {
      const std::string item = q_path + "[" + std::to_string(i) + "]";
      const double q = reader.NumberOf(q_node[i], item);
      if (!(std::isfinite(q) && q > 0.0)) {
        reader.Fail(item, q_node[i], "must be a finite number > 0 [1/Angstrom]");
      }
      data.wavevector_q_list.push_back(q);
    }
    data.wavevector_q_target = data.wavevector_q_list.front();
  } else if (Present(q_node) && q_node.IsScalar() && Lower(q_node.Scalar()) == "all") {
    data.all_q_rings = true;
  } else if (Present(q_node)) {
    double q = 0.0;
    if (!q_node.IsScalar() || !YAML::convert<double>::decode(q_node, q)) {
      reader.Fail(q_path, q_node, "must be a number, a list of numbers or all");
    }
    reader.Require(std::isfinite(q) && q > 0.0, q_path, "must be a finite number > 0 [1/Angstrom]");
    data.wavevector_q_target = q;
  }
  config.geometry.q_inv_angstrom = data.wavevector_q_target;
  if (const auto q_fit = reader.String("analyzer_parameters.scattering.q_fit")) {
    const std::string lower = Lower(*q_fit);
    reader.Require(lower == "independent" || lower == "joint",
                   "analyzer_parameters.scattering.q_fit", "must be independent or joint");
    data.q_fit = lower == "joint" ? QFitMode::kJoint : QFitMode::kIndependent;
  }

  // L and its fallbacks (docs/configuration.md, Model and data).
  const std::string gap_path =
      FirstPresent(reader, {"analyzer_parameters.geometry.stator_rotor_gap",
                            "experimental_data.geometry.stator_rotor_gap",
                            "experimental_data.sample_detector_distance"});
  if (!gap_path.empty()) {
    const double gap = *reader.Number(gap_path);
    reader.Require(std::isfinite(gap) && gap > 0.0, gap_path,
                   "must be a finite number > 0 [Angstrom]");
    config.geometry.gap_angstrom = gap;
  }

  if (const auto tolerance = reader.Number("q_tolerance_fraction")) {
    reader.Require(std::isfinite(*tolerance) && *tolerance > 0.0, "q_tolerance_fraction",
                   "must be a finite number > 0");
    data.q_tolerance_fraction = *tolerance;
  }

  data.phi_filtering_enabled = reader.Bool("phi_filtering.enabled").value_or(false);
  const YAML::Node ranges = reader.Find("phi_filtering.target_ranges");
  if (Present(ranges)) {
    if (!ranges.IsSequence()) {
      reader.Fail("phi_filtering.target_ranges", ranges,
                  "must be a list of {min_angle, max_angle}");
    }
    for (size_t i = 0; i < ranges.size(); ++i) {
      const std::string path = "phi_filtering.target_ranges[" + std::to_string(i) + "]";
      const YAML::Node range = ranges[i];
      if (!range.IsMap()) reader.Fail(path, range, "must be a mapping {min_angle, max_angle}");
      PhiRange phi_range;
      for (const char* end : {"min_angle", "max_angle"}) {
        const YAML::Node value = range[end];
        if (!Present(value)) reader.Fail(path + "." + end, value, "is required [degrees]");
        const double degrees = reader.NumberOf(value, path + "." + end);
        if (!std::isfinite(degrees)) reader.Fail(path + "." + end, value, "must be finite");
        (std::string(end) == "min_angle" ? phi_range.min_angle_degrees
                                         : phi_range.max_angle_degrees) = degrees;
      }
      data.phi_ranges.push_back(phi_range);
    }
  }
  ParseDataFiltering(reader, data);
}

void ParseBounds(const ConfigReader& reader, Config& config) {
  // Defaults from the mode catalog (docs/model.md, Bounds and start values).
  const std::vector<const ParameterDefinition*> definitions =
      FittedParameterDefinitions(config.analysis_mode);
  std::vector<std::string> names;
  for (const ParameterDefinition* definition : definitions) {
    names.emplace_back(definition->name);
    config.bounds.push_back(
        {std::string(definition->name), definition->default_min, definition->default_max});
  }
  std::vector<std::string> source_path(names.size());  // bounds entry that set it ("" default)

  const YAML::Node entries = reader.Find("parameter_space.bounds");
  if (Present(entries)) {
    if (!entries.IsSequence()) {
      reader.Fail("parameter_space.bounds", entries, "must be a list of {name, min, max}");
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string path = "parameter_space.bounds[" + std::to_string(i) + "]";
      const YAML::Node entry = entries[i];
      if (!entry.IsMap()) reader.Fail(path, entry, "must be a mapping {name, min, max}");
      if (!Present(entry["name"])) reader.Fail(path + ".name", entry["name"], "is required");
      const std::string given = reader.StringOf(entry["name"], path + ".name");
      const std::string name = CanonicalParameterName(given);
      const auto it = std::find(names.begin(), names.end(), name);
      if (it == names.end()) {
        if (!IsKnownParameterName(name)) {
          reader.Warn(path + ".name = '" + given + "': not a parameter (" + AllParameterNames() +
                      "); ignored");
        }
        continue;  // a parameter of another mode: accepted, unused
      }
      const size_t index = static_cast<size_t>(it - names.begin());
      if (!source_path[index].empty()) {
        reader.FailText(path + ".name = '" + given + "': " + name + " already has its bounds in " +
                        source_path[index] + "; give each parameter one entry");
      }
      ParameterBound& bound = config.bounds[index];
      if (Present(entry["min"])) bound.min = reader.NumberOf(entry["min"], path + ".min");
      if (Present(entry["max"])) bound.max = reader.NumberOf(entry["max"], path + ".max");
      source_path[index] = path;
    }
  }
  for (size_t i = 0; i < config.bounds.size(); ++i) {
    const ParameterBound& bound = config.bounds[i];
    if (std::isfinite(bound.min) && std::isfinite(bound.max) && bound.min < bound.max) continue;
    const std::string path = source_path[i].empty() ? "parameter_space.bounds" : source_path[i];
    reader.FailText(path + ".min = " + FormatNumber(bound.min) + ": must be finite and < max (" +
                    FormatNumber(bound.max) + ") for " + bound.name);
  }
  // The physical domains a bound may not leave (docs/configuration.md, Parameters): a fit outside
  // them returns numbers that mean nothing (a negative D0 is floored to no diffusion at all).
  for (size_t i = 0; i < config.bounds.size(); ++i) {
    const ParameterBound& bound = config.bounds[i];
    const ParameterDefinition& domain = *definitions[i];
    if (domain.domain_meaning.empty()) continue;
    const bool low = bound.min < domain.domain_min;
    if (!low && bound.max <= domain.domain_max) continue;
    const std::string limit =
        low ? ">= " + FormatNumber(domain.domain_min) : "<= " + FormatNumber(domain.domain_max);
    reader.FailText(source_path[i] + (low ? ".min = " : ".max = ") +
                    FormatNumber(low ? bound.min : bound.max) + ": " + bound.name + " must be " +
                    limit + " (" + std::string(domain.domain_meaning) +
                    "; docs/configuration.md, Model and data)");
  }
}

// A list of parameter names mapped to canonical names; unknown names are errors.
std::vector<std::string> CanonicalNames(const ConfigReader& reader, const YAML::Node& node,
                                        const std::string& path) {
  std::vector<std::string> names = reader.StringsOf(node, path);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string element = path + "[" + std::to_string(i) + "]";
    names[i] = CanonicalParameterName(names[i]);
    if (!IsKnownParameterName(names[i])) {
      reader.Fail(element, node[i], "unknown parameter; expected one of " + AllParameterNames());
    }
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) reader.Fail(element, node[i], "appears twice");
    }
  }
  return names;
}

void ParseInitialParameters(const ConfigReader& reader, Config& config) {
  InitialParameterOptions& initial = config.initial;
  const std::string names_path = "initial_parameters.parameter_names";
  const YAML::Node names_node = reader.Find(names_path);
  initial.parameter_names = Present(names_node) ? CanonicalNames(reader, names_node, names_path)
                                                : PhysicalParameterNames(config.analysis_mode);

  const YAML::Node values_node = reader.Find("initial_parameters.values");
  if (Present(values_node)) {
    std::vector<double> values = reader.NumbersOf(values_node, "initial_parameters.values");
    if (values.size() != initial.parameter_names.size()) {
      reader.Fail("initial_parameters.values", values_node,
                  "must have " + std::to_string(initial.parameter_names.size()) +
                      " values, one per " + names_path + " entry");
    }
    for (size_t i = 0; i < values.size(); ++i) {
      if (!std::isfinite(values[i])) {
        reader.Fail("initial_parameters.values[" + std::to_string(i) + "]", values_node[i],
                    "must be finite");
      }
    }
    initial.values = std::move(values);
  }

  // Names of another mode (laminar names in a static config) are dropped with their values.
  for (size_t i = initial.parameter_names.size(); i-- > 0;) {
    const std::string& name = initial.parameter_names[i];
    if (name == "contrast" || name == "offset" || IsPhysicalName(name, config.analysis_mode)) {
      continue;
    }
    reader.Warn(names_path + " lists '" + name + "', not a parameter of " +
                std::string(ToString(config.analysis_mode)) + " mode; ignored");
    initial.parameter_names.erase(initial.parameter_names.begin() + static_cast<long>(i));
    if (initial.values) initial.values->erase(initial.values->begin() + static_cast<long>(i));
  }

  for (const char* key : {"contrast", "offset"}) {
    const std::string path = std::string("initial_parameters.per_angle_scaling.") + key;
    const YAML::Node node = reader.Find(path);
    if (!Present(node)) continue;
    std::vector<double> values = reader.NumbersOf(node, path);
    if (values.empty()) reader.Fail(path, node, "must have one value per angle (or be null)");
    (std::string(key) == "contrast" ? initial.per_angle_contrast : initial.per_angle_offset) =
        std::move(values);
  }
  if (initial.per_angle_contrast && initial.per_angle_offset &&
      initial.per_angle_contrast->size() != initial.per_angle_offset->size()) {
    reader.Fail("initial_parameters.per_angle_scaling.offset",
                reader.Find("initial_parameters.per_angle_scaling.offset"),
                "must have as many values as per_angle_scaling.contrast (" +
                    std::to_string(initial.per_angle_contrast->size()) + ")");
  }

  const std::string fixed_path = "initial_parameters.fixed_parameters";
  const YAML::Node fixed = reader.Find(fixed_path);
  if (Present(fixed)) initial.fixed_parameters = CanonicalNames(reader, fixed, fixed_path);
}

void ParseNlsq(const ConfigReader& reader, Config& config) {
  NlsqOptions& nlsq = config.nlsq;
  const std::string base = "optimization.nlsq.";
  if (const auto iterations = reader.Integer(base + "max_iterations")) {
    reader.Require(*iterations > 0, base + "max_iterations", "must be > 0");
    reader.Require(*iterations <= std::numeric_limits<int>::max(), base + "max_iterations",
                   "must be at most 2147483647");
    nlsq.max_iterations = static_cast<int>(*iterations);
  }
  auto positive = [&](const std::string& key, double& field) {
    if (const auto value = reader.Number(base + key)) {
      reader.Require(std::isfinite(*value) && *value > 0.0, base + key, "must be > 0");
      field = *value;
    }
  };
  // `tolerance` (templates) and `ftol` (code) both set ftol; the template key wins.
  double ftol = nlsq.tolerance;
  positive("ftol", ftol);
  positive("tolerance", nlsq.tolerance);
  const auto tolerance_given = reader.Number(base + "tolerance");
  if (!tolerance_given) {
    nlsq.tolerance = ftol;
  } else if (reader.Number(base + "ftol") && ftol != nlsq.tolerance) {
    reader.Warn(base + "ftol = " + FormatNumber(ftol) + " differs from " + base +
                "tolerance = " + FormatNumber(nlsq.tolerance) + "; using tolerance");
  }
  positive("xtol", nlsq.xtol);
  positive("gtol", nlsq.gtol);
  // sigma scales every residual: c2 values are about 1 and a correlator's noise 1e-4 to 1e-1, so
  // outside [1e-12, 1e3] chi2 overflows (sigma 1e-155: +inf) or vanishes and measures nothing.
  if (const YAML::Node node = reader.Find(base + "sigma");
      node && node.IsScalar() && node.Scalar() == "auto") {
    nlsq.sigma_auto = true;  // the first fit runs at the default sigma
  } else if (const auto sigma = reader.Number(base + "sigma")) {
    reader.Require(std::isfinite(*sigma) && *sigma >= 1e-12 && *sigma <= 1e3, base + "sigma",
                   "must be from 1e-12 to 1e3 (the noise of c2 values of about 1)");
    nlsq.sigma = *sigma;
  }

  const std::string ad = base + "anti_degeneracy.";
  nlsq.anti_degeneracy_enabled = reader.Bool(ad + "enable").value_or(nlsq.anti_degeneracy_enabled);
  if (const auto text = reader.String(ad + "per_angle_mode")) {
    // fixed_constant (the reference's resolved spelling) reads as constant.
    const std::optional<PerAngleModeRequest> mode = ParsePerAngleModeRequest(*text);
    if (!mode) {
      reader.Fail(ad + "per_angle_mode", reader.Find(ad + "per_angle_mode"),
                  "must be one of individual, constant, auto, fourier (fixed_constant is accepted "
                  "as constant; auto_averaged is what auto resolves to with >= "
                  "constant_scaling_threshold angles)");
    }
    nlsq.per_angle_mode = *mode;
    nlsq.per_angle_mode_from_config = true;
  }
  auto at_least_one = [&](const std::string& path, int& field) {
    if (const auto value = reader.Integer(path)) {
      reader.Require(*value >= 1 && *value <= std::numeric_limits<int>::max(), path,
                     "must be >= 1");
      field = static_cast<int>(*value);
    }
  };
  at_least_one(ad + "constant_scaling_threshold", nlsq.constant_scaling_threshold);
  if (const auto order = reader.Integer(ad + "fourier_order")) {
    // 1 + 2 order coefficients per scaling parameter; beyond this no data set determines them.
    reader.Require(*order >= 1 && *order <= kMaxFourierOrder, ad + "fourier_order",
                   "must be in [1, " + std::to_string(kMaxFourierOrder) + "]");
    nlsq.fourier_order = static_cast<int>(*order);
  }

  if (reader.Bool("optimization.fast_chi2_mode").value_or(false)) {
    reader.Warn(
        "optimization.fast_chi2_mode = true: accepted but not used (a subsampled chi2 would "
        "change the objective); performance.fast_mode skips validation checks instead");
  }
}

// A key that holds one of a few names (an enum of config.h): its value, in any case, parsed by
// `parse` (config.h's Parse... function); any other value fails with "must be one of" the names
// of `allowed`, in that order. False when the key is absent.
template <typename Enum>
bool OneOf(const ConfigReader& reader, const std::string& path, Enum& field,
           std::optional<Enum> (*parse)(std::string_view), std::initializer_list<Enum> allowed) {
  const auto text = reader.String(path);
  if (!text) return false;
  if (const std::optional<Enum> value = parse(*text)) {
    field = *value;
    return true;
  }
  std::string list;
  for (Enum name : allowed) list += (list.empty() ? "" : ", ") + std::string(ToString(name));
  reader.Fail(path, reader.Find(path), "must be one of " + list);
}

// An integer key in [minimum, maximum]; the default maximum only keeps it an int. The global
// phase's counts have a real maximum: beyond it a run would exhaust memory or never end.
void IntegerInRange(const ConfigReader& reader, const std::string& path, int minimum, int& field,
                    int maximum = std::numeric_limits<int>::max()) {
  if (const auto value = reader.Integer(path)) {
    reader.Require(*value >= minimum, path, "must be >= " + std::to_string(minimum));
    reader.Require(*value <= maximum, path, "must be <= " + std::to_string(maximum));
    field = static_cast<int>(*value);
  }
}

// A step in the unit coordinates of the search box (width 1): in (0, 1].
void UnitStep(const ConfigReader& reader, const std::string& path, double& field) {
  if (const auto value = reader.Number(path)) {
    reader.Require(std::isfinite(*value) && *value > 0.0 && *value <= 1.0, path,
                   "must be in (0, 1] (unit coordinates: the search box has width 1)");
    field = *value;
  }
}

void PositiveNumber(const ConfigReader& reader, const std::string& path, double& field) {
  if (const auto value = reader.Number(path)) {
    reader.Require(std::isfinite(*value) && *value > 0.0, path, "must be > 0");
    field = *value;
  }
}

// optimization.nlsq.x_scale: "jac", a number > 0 or a list of numbers > 0 (the reference's
// forms); no effect on the steps (config.h NlsqOptions::x_scale).
void ParseXScale(const ConfigReader& reader, NlsqOptions& nlsq) {
  const std::string base = "optimization.nlsq.";
  if (const YAML::Node x_scale = reader.Find(base + "x_scale"); Present(x_scale)) {
    const std::string path = base + "x_scale";
    const std::string rule = "must be 'jac', a number > 0 or a list of numbers > 0";
    if (x_scale.IsSequence()) {
      for (double value : reader.NumbersOf(x_scale, path)) {
        reader.Require(std::isfinite(value) && value > 0.0, path, rule);
      }
      nlsq.x_scale = "list";
    } else if (!x_scale.IsScalar()) {
      reader.Fail(path, x_scale, rule);
    } else if (x_scale.Scalar() == "jac") {
      nlsq.x_scale = "jac";
    } else {
      double value = 0.0;
      if (!YAML::convert<double>::decode(x_scale, value) || !std::isfinite(value) ||
          !(value > 0.0)) {
        reader.Fail(path, x_scale, rule);
      }
      nlsq.x_scale = x_scale.Scalar();
    }
  }
}

// optimization.nlsq.{variable_projection, statistical_tolerance, profile_check,
// profile_intervals, solver, uncertainty, loss, f_scale, x_scale}: the final fit's choices.
void ParseFitChoices(const ConfigReader& reader, NlsqOptions& nlsq) {
  const std::string base = "optimization.nlsq.";
  nlsq.variable_projection =
      reader.Bool(base + "variable_projection").value_or(nlsq.variable_projection);
  if (const auto value = reader.Number(base + "statistical_tolerance")) {
    reader.Require(std::isfinite(*value) && *value >= 0.0, base + "statistical_tolerance",
                   "must be >= 0 (0 disables the check)");
    nlsq.statistical_tolerance = *value;
  }
  nlsq.profile_check = reader.Bool(base + "profile_check");
  nlsq.profile_intervals = reader.Bool(base + "profile_intervals").value_or(nlsq.profile_intervals);

  OneOf(reader, base + "solver", nlsq.solver, ParseLmSolver, {LmSolver::kLmCore, LmSolver::kCeres});
  OneOf(reader, base + "uncertainty", nlsq.uncertainty, ParseUncertaintyMethod,
        {UncertaintyMethod::kAuto, UncertaintyMethod::kJackknife, UncertaintyMethod::kStandard,
         UncertaintyMethod::kCurvature});
  OneOf(reader, base + "loss", nlsq.loss.function, ParseLossFunction,
        {LossFunction::kLinear, LossFunction::kSoftL1, LossFunction::kHuber, LossFunction::kCauchy,
         LossFunction::kArctan});
  PositiveNumber(reader, base + "f_scale", nlsq.loss.f_scale);
  ParseXScale(reader, nlsq);
}

// optimization.nlsq.multi_start.custom_starts: each a list of the mode's physical parameters,
// in order, every value finite and inside its bounds.
void ParseCustomStarts(const ConfigReader& reader, const Config& config, MultiStartOptions& multi) {
  const std::string ms = "optimization.nlsq.multi_start.";
  const YAML::Node custom = reader.Find(ms + "custom_starts");
  if (Present(custom)) {
    if (!custom.IsSequence()) {
      reader.Fail(ms + "custom_starts", custom, "must be a list of parameter lists");
    }
    const size_t expected = PhysicalParameterNames(config.analysis_mode).size();
    for (size_t i = 0; i < custom.size(); ++i) {
      const std::string path = ms + "custom_starts[" + std::to_string(i) + "]";
      std::vector<double> start = reader.NumbersOf(custom[i], path);
      if (start.size() != expected) {  // not Require: it looks the path up, an index included
        reader.Fail(path, custom[i],
                    "must have " + std::to_string(expected) +
                        " values (the physical parameters of " +
                        std::string(ToString(config.analysis_mode)) + ", in order)");
      }
      // Each value finite and inside its bounds (parameter_space.bounds, read before): a start
      // the search box does not hold is a typo, not a start.
      const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
      for (size_t p = 0; p < start.size(); ++p) {
        const ParameterBound& bound = config.BoundOf(names[p]);
        if (!std::isfinite(start[p]) || start[p] < bound.min || start[p] > bound.max) {
          reader.Fail(path, custom[i],
                      names[p] + " = " + FormatNumber(start[p]) + " must be finite and inside " +
                          "its bounds [" + FormatNumber(bound.min) + ", " +
                          FormatNumber(bound.max) + "] (parameter_space.bounds)");
        }
      }
      multi.custom_starts.push_back(std::move(start));
    }
  }
}

// optimization.nlsq.multi_start (config.h MultiStartOptions).
void ParseMultiStart(const ConfigReader& reader, Config& config) {
  const std::string ms = "optimization.nlsq.multi_start.";
  MultiStartOptions& multi = config.nlsq.multi_start;
  multi.enable = reader.Bool(ms + "enable").value_or(multi.enable);
  IntegerInRange(reader, ms + "n_starts", 1, multi.n_starts, kMaxSearchCount);
  if (const auto seed = reader.Integer(ms + "seed")) {
    reader.Require(*seed >= 0, ms + "seed", "must be >= 0");
    multi.seed = static_cast<uint64_t>(*seed);
  }
  OneOf(reader, ms + "sampling_strategy", multi.sampling_strategy, ParseSamplingStrategy,
        {SamplingStrategy::kLatinHypercube, SamplingStrategy::kSobol, SamplingStrategy::kRandom});
  multi.use_screening = reader.Bool(ms + "use_screening").value_or(multi.use_screening);
  // Accepted for the reference's configs and not used (starts run one after another, each pass
  // parallel), but checked like every other number of the section.
  if (const auto workers = reader.Integer(ms + "n_workers")) {
    reader.Require(*workers >= 0, ms + "n_workers", "must be an integer >= 0 (0 = automatic)");
  }
  if (const auto fraction = reader.Number(ms + "screen_keep_fraction")) {
    reader.Require(*fraction > 0.0 && *fraction <= 1.0, ms + "screen_keep_fraction",
                   "must be in (0, 1]");
    multi.screen_keep_fraction = *fraction;
  }
  IntegerInRange(reader, ms + "refine_top_k", 1, multi.refine_top_k, kMaxSearchCount);
  PositiveNumber(reader, ms + "refinement_ftol", multi.refinement_ftol);
  if (const auto threshold = reader.Number(ms + "degeneracy_threshold")) {
    reader.Require(std::isfinite(*threshold) && *threshold >= 0.0, ms + "degeneracy_threshold",
                   "must be >= 0");
    multi.degeneracy_threshold = *threshold;
  }
  ParseCustomStarts(reader, config, multi);
}

// optimization.nlsq.cmaes (config.h CmaesSearchOptions).
void ParseCmaes(const ConfigReader& reader, NlsqOptions& nlsq) {
  const std::string cm = "optimization.nlsq.cmaes.";
  CmaesSearchOptions& cmaes = nlsq.cmaes;
  cmaes.enable = reader.Bool(cm + "enable").value_or(cmaes.enable);
  OneOf(reader, cm + "preset", cmaes.preset, ParseCmaesPreset,
        {CmaesPreset::kCmaesFast, CmaesPreset::kCmaes, CmaesPreset::kCmaesGlobal,
         CmaesPreset::kCmaesHpc});
  if (Present(reader.Find(cm + "max_generations"))) {
    int generations = 1;
    IntegerInRange(reader, cm + "max_generations", 1, generations, kMaxSearchGenerations);
    cmaes.max_generations = generations;
  }
  if (Present(reader.Find(cm + "popsize"))) {
    int popsize = 2;
    IntegerInRange(reader, cm + "popsize", 2, popsize, kMaxSearchCount);
    cmaes.popsize = popsize;
  }
  if (Present(reader.Find(cm + "max_restarts"))) {
    int restarts = 0;
    IntegerInRange(reader, cm + "max_restarts", 0, restarts, kMaxSearchRestarts);
    cmaes.max_restarts = restarts;
  }
  UnitStep(reader, cm + "sigma", cmaes.sigma);
  UnitStep(reader, cm + "sigma_warmstart", cmaes.sigma_warmstart);
  PositiveNumber(reader, cm + "tol_fun", cmaes.tol_fun);
  PositiveNumber(reader, cm + "tol_x", cmaes.tol_x);
  OneOf(reader, cm + "restart_strategy", cmaes.restart_strategy, ParseCmaesRestartStrategy,
        {CmaesRestartStrategy::kIpop, CmaesRestartStrategy::kBipop, CmaesRestartStrategy::kNone});
  cmaes.refine_with_nlsq = reader.Bool(cm + "refine_with_nlsq").value_or(cmaes.refine_with_nlsq);
}

// optimization.nlsq.{variable_projection, statistical_tolerance, profile_check, global_search,
// multi_start, cmaes} (config.h GlobalSearchOptions, MultiStartOptions, CmaesSearchOptions), as
// named steps in the order of their checks: the fit's choices, the global phase's method, its
// multi-start and CMA-ES sections.
void ParseGlobalSearch(const ConfigReader& reader, Config& config) {
  NlsqOptions& nlsq = config.nlsq;
  ParseFitChoices(reader, nlsq);
  const std::string gs = "optimization.nlsq.global_search.";
  GlobalSearchOptions& global = nlsq.global_search;
  global.method_from_config = OneOf(reader, gs + "method", global.method, ParseGlobalSearchMethod,
                                    {GlobalSearchMethod::kAuto, GlobalSearchMethod::kOff,
                                     GlobalSearchMethod::kMultiStart, GlobalSearchMethod::kCmaes});
  if (const auto points = reader.Integer(gs + "max_points")) {
    reader.Require(*points >= 1000, gs + "max_points", "must be >= 1000");
    global.max_points = *points;
  }

  ParseMultiStart(reader, config);
  ParseCmaes(reader, nlsq);
}

void ParseStreaming(const ConfigReader& reader, Config& config) {
  // Each key from optimization.streaming (the templates' place), else optimization.nlsq.streaming
  // (where the reference's code reads it). When both are set and differ the first wins
  // (docs/configuration.md, Streaming, checkpoints, fault tolerance).
  auto pick = [&](const std::string& key) -> std::string {
    const std::string primary = "optimization.streaming." + key;
    const std::string secondary = "optimization.nlsq.streaming." + key;
    const YAML::Node a = reader.Find(primary);
    const YAML::Node b = reader.Find(secondary);
    if (Present(a) && Present(b) && Show(a) != Show(b)) {
      reader.Warn(secondary + " = " + Show(b) + " differs from " + primary + " = " + Show(a) +
                  "; using " + primary);
    }
    if (Present(a)) return primary;
    if (Present(b)) return secondary;
    return "";
  };
  StreamingOptions& s = config.streaming;
  auto flag = [&](const std::string& key, bool& field) {
    const std::string path = pick(key);
    if (!path.empty()) field = *reader.Bool(path);
  };
  auto integer = [&](const std::string& key, int& field, int64_t min, const std::string& rule) {
    const std::string path = pick(key);
    if (path.empty()) return;
    const int64_t value = *reader.Integer(path);
    reader.Require(value >= min && value <= std::numeric_limits<int>::max(), path, rule);
    field = static_cast<int>(value);
  };
  flag("enable_checkpoints", s.enable_checkpoints);
  if (const std::string path = pick("checkpoint_dir"); !path.empty()) {
    s.checkpoint_dir = *reader.String(path);
    reader.Require(!s.checkpoint_dir.empty(), path, "must be a non-empty folder path");
    if (HasNul(s.checkpoint_dir)) reader.FailText(NulInPathMessage(path, s.checkpoint_dir));
  }
  integer("checkpoint_frequency", s.checkpoint_frequency, 1, "must be > 0");
  if (const std::string path = pick("checkpoint_min_interval_seconds"); !path.empty()) {
    const double seconds = *reader.Number(path);
    reader.Require(seconds >= 0.0 && std::isfinite(seconds), path, "must be >= 0 (seconds)");
    s.checkpoint_min_interval_seconds = seconds;
  }
  flag("resume_from_checkpoint", s.resume_from_checkpoint);
  integer("keep_last_checkpoints", s.keep_last_checkpoints, 1, "must be >= 1");
  flag("enable_fault_tolerance", s.enable_fault_tolerance);
  integer("max_retries_per_batch", s.max_retries_per_batch, 0, "must be >= 0");
  if (const std::string path = pick("min_success_rate"); !path.empty()) {
    const double rate = *reader.Number(path);
    reader.Require(rate >= 0.0 && rate <= 1.0, path, "must be in [0, 1]");
    s.min_success_rate = rate;
  }
  if (const std::string path = pick("batch_size"); !path.empty()) {
    const int64_t batch = *reader.Integer(path);
    reader.Require(batch >= 1, path, "must be >= 1 (or null for automatic)");
    s.batch_size = batch;
  }
  flag("enable_compression", s.enable_compression);
  if (const std::string path = pick("adaptive_batching"); !path.empty()) {
    (void)*reader.Bool(path);  // accepted, unused
  }
}

void ParsePerformance(const ConfigReader& reader, Config& config) {
  PerformanceOptions& p = config.performance;
  if (const auto text = reader.String("performance.strategy_override")) {
    const std::string lower = Lower(*text);
    if (lower != "auto") {
      p.strategy_override = ParseStrategyKind(lower);
      if (!p.strategy_override) {
        reader.Fail("performance.strategy_override", reader.Find("performance.strategy_override"),
                    "must be one of standard, large, chunked, streaming (or null for automatic)");
      }
    }
  }
  if (const auto limit = reader.Number("performance.memory_limit_gb")) {
    reader.Require(std::isfinite(*limit) && *limit > 0.0, "performance.memory_limit_gb",
                   "must be > 0 [GB] (or null for automatic)");
    p.memory_limit_gb = *limit;
  }
  const auto fast = reader.Bool("performance.fast_mode");
  const auto fast_alias = reader.Bool("fast_mode");
  if (fast && fast_alias && *fast != *fast_alias) {
    reader.Warn("fast_mode differs from performance.fast_mode; using performance.fast_mode");
  }
  p.fast_mode = fast.value_or(fast_alias.value_or(p.fast_mode));
  if (const auto text = reader.String("performance.backend")) {
    const std::optional<BackendKind> backend = ParseBackendKind(*text);
    reader.Require(backend.has_value(), "performance.backend", "must be one of cpu, cuda, auto");
    p.backend = *backend;
  }
  const std::string devices_path = "performance.gpu_devices";
  if (const YAML::Node devices = reader.Find(devices_path); Present(devices)) {
    const std::string rule =
        "must be a list of distinct CUDA device indices (integers >= 0), e.g. [0, 1], or null "
        "for every visible device";
    if (!devices.IsSequence() || devices.size() == 0) reader.Fail(devices_path, devices, rule);
    for (size_t i = 0; i < devices.size(); ++i) {
      double value = 0.0;
      if (!devices[i].IsScalar() || !YAML::convert<double>::decode(devices[i], value) ||
          value != std::floor(value) || value < 0.0 || value > 1.0e6 ||
          std::find(p.gpu_devices.begin(), p.gpu_devices.end(), static_cast<int>(value)) !=
              p.gpu_devices.end()) {
        reader.Fail(devices_path, devices, rule);
      }
      p.gpu_devices.push_back(static_cast<int>(value));
    }
  }
  const std::string threads_path = "performance.computation.cpu_threads";
  const YAML::Node threads = reader.Find(threads_path);
  if (Present(threads) && !(threads.IsScalar() && Lower(threads.Scalar()) == "auto")) {
    double value = 0.0;
    if (!threads.IsScalar() || !YAML::convert<double>::decode(threads, value) ||
        value != std::floor(value) || value < 1.0 || value > 1.0e6) {
      reader.Fail(threads_path, threads, "must be an integer >= 1 or 'auto'");
    }
    p.cpu_threads = static_cast<int>(value);
  }
  p.enable_progress = reader.Bool("performance.enable_progress").value_or(p.enable_progress);
}

// A path that stays inside the folder it is joined to: not empty, not absolute, no '..' part,
// not a folder (trailing '/').
bool IsRelativeFilePath(const std::string& text) {
  if (text.empty() || text.back() == '/') return false;
  const std::filesystem::path path(text);
  if (path.is_absolute() || path.has_root_name()) return false;
  for (const std::filesystem::path& part : path) {
    if (part == "..") return false;
  }
  return true;
}

void ParseLogging(const ConfigReader& reader, Config& config) {
  PerformanceLogOptions& log = config.logging.performance;
  log.enabled = reader.Bool("logging.performance.enabled").value_or(log.enabled);
  const std::string level_path = "logging.performance.level";
  if (const auto level = reader.String(level_path)) {
    const std::string lower = Lower(*level);
    if (lower == "debug") {
      log.level = PerformanceLogLevel::kDebug;
    } else if (lower == "info") {
      log.level = PerformanceLogLevel::kInfo;
    } else if (lower == "warning") {
      log.level = PerformanceLogLevel::kWarning;
    } else {
      reader.Fail(level_path, reader.Find(level_path),
                  "must be one of DEBUG, INFO, WARNING (case-insensitive)");
    }
  }
  const std::string filename_path = "logging.performance.filename";
  if (const auto filename = reader.String(filename_path)) {
    if (HasNul(*filename)) reader.FailText(NulInPathMessage(filename_path, *filename));
    if (const auto clash = PerformanceLogOnResultsMessage(*filename)) reader.FailText(*clash);
    reader.Require(IsRelativeFilePath(*filename), filename_path,
                   "must be a file name or a relative path inside the output folder (not empty, "
                   "not absolute, no '..', not ending in '/')");
    log.filename = *filename;
  }
  const std::string threshold_path = "logging.performance.threshold_seconds";
  if (const auto threshold = reader.Number(threshold_path)) {
    reader.Require(std::isfinite(*threshold) && *threshold >= 0.0, threshold_path,
                   "must be a finite number >= 0 [s]");
    log.threshold_seconds = *threshold;
  }
}

void ParseSimulation(const ConfigReader& reader, Config& config) {
  const YAML::Node section = reader.Find("simulation");
  if (!Present(section)) return;
  if (!section.IsMap()) reader.Fail("simulation", section, "must be a mapping");
  SimulationOptions& sim = config.simulation;
  sim.present = true;
  if (const auto output = reader.String("simulation.output")) {
    reader.Require(!output->empty(), "simulation.output", "must be a non-empty file path");
    sim.output = *output;
  }
  if (const auto format = reader.String("simulation.format")) {
    const std::string lower = Lower(*format);
    reader.Require(lower == "aps_u" || lower == "aps_old", "simulation.format",
                   "must be aps_u or aps_old");
    sim.format = lower == "aps_u" ? FileLayout::kApsU : FileLayout::kApsOld;
  }
  if (const auto frames = reader.Integer("simulation.frames")) {
    reader.Require(*frames >= kMinSimulationFrames && *frames <= kMaxSimulationFrames,
                   "simulation.frames",
                   "must be in [" + std::to_string(kMinSimulationFrames) + ", " +
                       std::to_string(kMaxSimulationFrames) +
                       "] (the fitted grid drops frame 0 and needs 2 times)");
    sim.frames = static_cast<int>(*frames);
  }
  const YAML::Node angles = reader.Find("simulation.phi_angles");
  if (Present(angles)) {
    sim.phi_angles_degrees =
        angles.IsSequence() ? reader.NumbersOf(angles, "simulation.phi_angles")
                            : std::vector<double>{reader.NumberOf(angles, "simulation.phi_angles")};
    if (sim.phi_angles_degrees.empty()) {
      reader.Fail("simulation.phi_angles", angles, "must list at least one angle [degrees]");
    }
  }

  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  sim.physical_parameters.clear();
  for (const ParameterDefinition& parameter : DefinitionOf(config.analysis_mode).physical) {
    sim.physical_parameters.push_back(parameter.simulation_default);
  }
  const YAML::Node parameters = reader.Find("simulation.parameters");
  if (Present(parameters)) {
    if (!parameters.IsMap()) {
      reader.Fail("simulation.parameters", parameters, "must be a mapping {name: value}");
    }
    for (const auto& entry : parameters) {
      const std::string given = entry.first.Scalar();
      const std::string path = "simulation.parameters." + given;
      const std::string name = CanonicalParameterName(given);
      const auto it = std::find(names.begin(), names.end(), name);
      if (IsOtherModesParameter(name, config.analysis_mode)) {
        // A parameter of another mode (a laminar_flow config run with --static-mode).
        reader.Warn(path + ": not a parameter of " + std::string(ToString(config.analysis_mode)) +
                    " mode; ignored");
        continue;
      }
      if (it == names.end()) {
        reader.Fail(path, entry.second,
                    "not a parameter of " + std::string(ToString(config.analysis_mode)) +
                        " mode (expected " + JoinNames(names) + ")");
      }
      const double value = reader.NumberOf(entry.second, path);
      if (!std::isfinite(value)) reader.Fail(path, entry.second, "must be finite");
      sim.physical_parameters[static_cast<size_t>(it - names.begin())] = value;
    }
  }

  const size_t n_angles = sim.phi_angles_degrees.size();
  for (const char* key : {"contrast", "offset"}) {
    const std::string path = std::string("simulation.") + key;
    const YAML::Node node = reader.Find(path);
    if (!Present(node)) continue;
    std::vector<double> values = node.IsSequence()
                                     ? reader.NumbersOf(node, path)
                                     : std::vector<double>{reader.NumberOf(node, path)};
    if (values.size() != 1 && values.size() != n_angles) {
      reader.Fail(path, node,
                  "must be one number or one per angle (" + std::to_string(n_angles) + ")");
    }
    for (double value : values) {
      if (!std::isfinite(value)) reader.Fail(path, node, "must be finite");
    }
    (std::string(key) == "contrast" ? sim.contrast : sim.offset) = std::move(values);
  }
  if (const auto sigma = reader.Number("simulation.noise_sigma")) {
    reader.Require(std::isfinite(*sigma) && *sigma >= 0.0, "simulation.noise_sigma",
                   "must be >= 0");
    sim.noise_sigma = *sigma;
  }
  if (const auto model = reader.String("simulation.noise_model")) {
    sim.noise_model = Lower(*model);
    reader.Require(sim.noise_model == "gaussian" || sim.noise_model == "speckle",
                   "simulation.noise_model", "must be gaussian or speckle");
  }
  if (const auto pixels = reader.Integer("simulation.pixels")) {
    reader.Require(*pixels >= 1 && *pixels <= 1000000, "simulation.pixels",
                   "must be an integer in [1, 1000000]");
    sim.pixels = static_cast<int>(*pixels);
  }
  if (const auto modes = reader.Integer("simulation.modes")) {
    reader.Require(*modes >= 1 && *modes <= 100, "simulation.modes",
                   "must be an integer in [1, 100]");
    sim.modes = static_cast<int>(*modes);
  }
  if (const auto seed = reader.Integer("simulation.seed")) {
    reader.Require(*seed >= 0, "simulation.seed", "must be >= 0");
    sim.seed = static_cast<uint64_t>(*seed);
  }
  if (const auto dtype = reader.String("simulation.dtype")) {
    sim.dtype = Lower(*dtype);
    reader.Require(sim.dtype == "float32" || sim.dtype == "float64", "simulation.dtype",
                   "must be float32 or float64");
  }
  if (const auto compression = reader.String("simulation.compression")) {
    sim.compression = Lower(*compression);
    reader.Require(
        sim.compression == "none" || sim.compression == "gzip" || sim.compression == "lzf",
        "simulation.compression", "must be one of none, gzip, lzf");
  }
}

}  // namespace

std::string CanonicalParameterName(const std::string& name) {
  // The reference's aliases (docs/configuration.md, Parameters).
  static const std::map<std::string, std::string> kAliases = {
      {"gamma_dot_0", "gamma_dot_t0"},
      {"gamma_dot_t_0", "gamma_dot_t0"},
      {"gamma_dot_offset", "gamma_dot_t_offset"},
      {"phi_0", "phi0"},
  };
  const auto it = kAliases.find(name);
  return it == kAliases.end() ? name : it->second;
}

const char* ToString(PerformanceLogLevel level) {
  switch (level) {
    case PerformanceLogLevel::kDebug:
      return "DEBUG";
    case PerformanceLogLevel::kInfo:
      return "INFO";
    case PerformanceLogLevel::kWarning:
      return "WARNING";
  }
  return "INFO";
}

const ParameterBound& Config::BoundOf(const std::string& name) const {
  const std::string canonical = CanonicalParameterName(name);
  for (const ParameterBound& bound : bounds) {
    if (bound.name == canonical) return bound;
  }
  throw ConfigError("no bounds for parameter '" + name + "' in " +
                    std::string(ToString(analysis_mode)) + " mode");
}

namespace {

// The most nodes and levels a config's tree may have (its text is bounded by kMaxConfigBytes). A
// config is a few KB of a few hundred nodes (the templates of homodyne-config: under 30 KB);
// aliases (*name) make yaml-cpp share nodes, so that a self-referencing alias is a cycle and a
// "billion laughs" file of a few hundred bytes expands to 1e9 nodes: every walk of the tree would
// recurse for ever or take minutes. These limits stop both, and a huge file, with an error.
constexpr int64_t kMaxConfigNodes = 100000;
constexpr int kMaxConfigDepth = 64;

// The nodes visited so far by CheckDuplicateKeys (alias repeats counted each time).
struct TreeWalk {
  const std::string& source_name;
  int64_t nodes = 0;
};

// A key given twice in one mapping is an error naming both lines: yaml-cpp keeps both and
// operator[] reads the first, so the second would be ignored in silence. `path` is the YAML path
// of `node` ("" at the root); sequences are entered too (parameter_space.bounds is a list of maps).
// The first walk of a parsed tree: a tree deeper than kMaxConfigDepth or with more than
// kMaxConfigNodes nodes as expanded (aliases repeated) is an error naming the limit and the path
// where it was reached, so that later walks are bounded.
void CheckDuplicateKeys(const YAML::Node& node, const std::string& path, TreeWalk& walk,
                        int depth = 0) {
  const std::string& source_name = walk.source_name;
  const std::string shown = path.empty() ? std::string("the top level") : path.substr(0, 200);
  if (depth > kMaxConfigDepth) {
    throw ConfigError(source_name + ": YAML nested deeper than " + std::to_string(kMaxConfigDepth) +
                      " levels at " + shown +
                      ": a self-referencing alias (&name ... *name inside it)?");
  }
  if (++walk.nodes > kMaxConfigNodes) {
    throw ConfigError(source_name + ": the YAML tree expands to more than " +
                      std::to_string(kMaxConfigNodes) + " nodes (reached at " + shown +
                      "): aliases (*name) repeated into a huge tree, or a list far longer than "
                      "a config needs");
  }
  if (node.IsMap()) {
    std::map<std::string, int> first_line;  // key -> 1-based line of its first appearance
    for (const auto& entry : node) {
      // A key that is itself a list or mapping is walked first: Show would print a cycle for ever.
      if (!entry.first.IsScalar()) {
        CheckDuplicateKeys(entry.first, (path.empty() ? "" : path + ".") + "(a key)", walk,
                           depth + 1);
      }
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : Show(entry.first);
      const std::string key_path = path.empty() ? key : path + "." + key;
      const int line = entry.first.Mark().line + 1;
      const auto [where, inserted] = first_line.emplace(key, line);
      if (!inserted) {
        throw ConfigError(source_name + ": " + key_path + " is given twice (lines " +
                          std::to_string(where->second) + " and " + std::to_string(line) +
                          "): keep one");
      }
      CheckDuplicateKeys(entry.second, key_path, walk, depth + 1);
    }
  } else if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      CheckDuplicateKeys(node[i], path + "[" + std::to_string(i) + "]", walk, depth + 1);
    }
  }
}

}  // namespace

namespace config_internal {

std::string ConfigTooLargeMessage(const std::string& source_name, std::optional<uintmax_t> bytes) {
  std::ostringstream size;
  if (bytes) {
    size.precision(3);
    size << static_cast<double>(*bytes) / (1024.0 * 1024.0) << " MiB (" << *bytes << " bytes)";
  } else {
    size << "more than " << kMaxConfigBytes << " bytes";
  }
  return source_name + ": " + size.str() + " is larger than a config file may be (" +
         std::to_string(kMaxConfigBytes) +
         " bytes; the templates are under 30 KB): is it the "
         "right file?";
}

Config ParseConfigText(const std::string& yaml_text, const std::string& source_name,
                       std::optional<AnalysisMode> mode) {
  if (yaml_text.size() > kMaxConfigBytes) {
    throw InputError(ConfigTooLargeMessage(source_name, yaml_text.size()));
  }
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(yaml_text);
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp's own guard (about 1000 levels) says only "bad file".
    throw InputError(source_name + ": YAML nested deeper than " + std::to_string(kMaxConfigDepth) +
                     " levels at line " + std::to_string(e.mark.line + 1) + ", column " +
                     std::to_string(e.mark.column + 1));
  } catch (const YAML::ParserException& e) {
    throw InputError(source_name + ": invalid YAML at line " + std::to_string(e.mark.line + 1) +
                     ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
  }
  // One config per file: a second document ("---" followed by content) would be ignored.
  for (size_t d = 1; d < documents.size(); ++d) {
    if (!documents[d].IsNull()) {
      throw ConfigError(source_name + ": a second YAML document starts at line " +
                        std::to_string(documents[d].Mark().line + 1) +
                        " (after '---'): a config file holds one document");
    }
  }
  YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
  if (root.IsNull()) root.reset(YAML::Node(YAML::NodeType::Map));  // empty file: all defaults
  TreeWalk walk{source_name};
  CheckDuplicateKeys(root, "", walk);
  Config config;
  ConfigReader reader(root, source_name, &config.warnings);
  if (!root.IsMap()) {
    throw ConfigError(source_name + ": the document must be a mapping of sections, got " +
                      Show(root));
  }
  CheckKnownKeys(reader, root, "", "", config.unknown_sections, config.ignored_keys);
  ParseMode(reader, mode, config);
  ParseDataAndGeometry(reader, config);
  ParseBounds(reader, config);
  ParseInitialParameters(reader, config);
  ParseNlsq(reader, config);
  ParseGlobalSearch(reader, config);
  ParseStreaming(reader, config);
  ParsePerformance(reader, config);
  ParseLogging(reader, config);
  ParseSimulation(reader, config);
  return config;
}

}  // namespace config_internal

std::string LossText(const LossOptions& loss) {
  if (loss.is_linear()) return "linear loss (chi2 of (data - c2) / sigma)";
  std::ostringstream text;
  text << ToString(loss.function) << " loss, f_scale " << loss.f_scale
       << " (optimization.nlsq.loss: a robust cost, not chi2, is minimised)";
  return text.str();
}

std::string DtSourceNote(const Config& config) {
  if (!config.dt_source.empty()) return "(" + config.dt_source + ")";
  return "(the default: the config gives no analyzer_parameters.dt, and beamline files carry no "
         "frame time; set it to the time between two frames)";
}

std::string IgnoredKeysText(const Config& config) {
  if (config.ignored_keys.empty()) return "";
  // Neighbours with one parent section as "parent.{a, b.*}", to keep the line readable.
  const auto split = [](const std::string& key) {
    const std::string path = key.ends_with(".*") ? key.substr(0, key.size() - 2) : key;
    const size_t dot = path.rfind('.');
    if (dot == std::string::npos) return std::pair<std::string, std::string>("", key);
    return std::pair<std::string, std::string>(key.substr(0, dot), key.substr(dot + 1));
  };
  std::string keys;
  for (size_t i = 0; i < config.ignored_keys.size();) {
    const std::string parent = split(config.ignored_keys[i]).first;
    size_t end = i + 1;
    while (end < config.ignored_keys.size() && !parent.empty() &&
           split(config.ignored_keys[end]).first == parent) {
      ++end;
    }
    std::string group;
    if (end - i == 1) {
      group = config.ignored_keys[i];
    } else {
      group = parent + ".{";
      for (size_t k = i; k < end; ++k)
        group += (k == i ? "" : ", ") + split(config.ignored_keys[k]).second;
      group += "}";
    }
    keys += (keys.empty() ? "" : ", ") + group;
    i = end;
  }
  return "accepted and ignored (no effect in homodyne-cpp; docs/configuration.md, Accepted but "
         "not used): " +
         keys;
}

std::string BriefReport(const Config& config) {
  std::ostringstream out;
  const DataSelection& d = config.data;
  out << "mode: " << ToString(config.analysis_mode) << "\n";
  out << "data file: " << (d.file_path.empty() ? "(none; give --data-file)" : d.file_path) << "\n";
  if (d.all_q_rings || !d.wavevector_q_list.empty()) {
    out << "q targets: ";
    if (d.all_q_rings) {
      out << "all rings of the file";
    } else {
      for (size_t k = 0; k < d.wavevector_q_list.size(); ++k) {
        out << (k ? ", " : "") << d.wavevector_q_list[k];
      }
      out << " 1/A";
    }
    out << " (q_fit: " << ToString(d.q_fit) << "), gap L: " << config.geometry.gap_angstrom
        << " A\n";
  } else {
    out << "q target: " << d.wavevector_q_target << " 1/A, gap L: " << config.geometry.gap_angstrom
        << " A\n";
  }
  out << "dt: " << d.dt_seconds << " s " << DtSourceNote(config) << "\n";
  out << "frames: " << d.start_frame << ".."
      << (d.end_frame == -1 ? "last" : std::to_string(d.end_frame)) << "\n";
  out << "phi filtering: ";
  if (!d.phi_selected_degrees.empty()) {
    out << "--phi";
    for (size_t i = 0; i < d.phi_selected_degrees.size(); ++i) {
      out << (i ? ", " : " ") << d.phi_selected_degrees[i];
    }
    out << " deg (the file's nearest angle within " << kPhiSelectionToleranceDegrees
        << " deg each; phi_filtering not applied)\n";
  } else if (!d.phi_filtering_enabled || d.phi_ranges.empty()) {
    out << "off (all angles)\n";
  } else {
    for (size_t i = 0; i < d.phi_ranges.size(); ++i) {
      out << (i ? ", " : "") << "[" << d.phi_ranges[i].min_angle_degrees << ", "
          << d.phi_ranges[i].max_angle_degrees << "]";
    }
    out << " deg\n";
  }
  out << "nlsq: max_iterations " << config.nlsq.max_iterations << ", ftol " << config.nlsq.tolerance
      << ", xtol " << config.nlsq.xtol << ", gtol " << config.nlsq.gtol << ", sigma "
      << (config.nlsq.sigma_auto ? "auto (from the residuals of a first fit at " +
                                       FormatNumber(config.nlsq.sigma) + ")"
                                 : FormatNumber(config.nlsq.sigma))
      << ", per_angle_mode " << ToString(config.nlsq.per_angle_mode) << "\n";
  // The objective itself: a robust loss changes what is minimised (docs/model.md, Robust loss).
  out << "objective: " << LossText(config.nlsq.loss) << "\n";
  if (!config.initial.fixed_parameters.empty()) {
    std::string fixed;
    for (const std::string& name : config.initial.fixed_parameters) {
      fixed += (fixed.empty() ? "" : ", ") + name;
    }
    out << "fixed parameters: " << fixed
        << " (initial_parameters.fixed_parameters: held at their start values)\n";
  }
  const PerformanceOptions& p = config.performance;
  out << "strategy: "
      << (p.strategy_override ? std::string(ToString(*p.strategy_override)) : "automatic")
      << ", backend " << ToString(p.backend) << ", memory limit "
      << (p.memory_limit_gb ? FormatNumber(*p.memory_limit_gb) + " GB" : "automatic")
      << ", cpu threads " << (p.cpu_threads ? std::to_string(*p.cpu_threads) : "auto")
      << ", fast mode " << (p.fast_mode ? "on" : "off") << "\n";
  const StreamingOptions& s = config.streaming;
  out << "checkpoints: " << (s.enable_checkpoints ? "on" : "off") << " in " << s.checkpoint_dir
      << " every " << s.checkpoint_frequency << " batches and at least "
      << FormatNumber(s.checkpoint_min_interval_seconds) << " s, keep " << s.keep_last_checkpoints
      << ", resume " << (s.resume_from_checkpoint ? "yes" : "no") << ", batch size "
      << (s.batch_size ? std::to_string(*s.batch_size) : "automatic") << "\n";
  const PerformanceLogOptions& log = config.logging.performance;
  if (log.enabled) {
    out << "performance log: " << log.filename << " in the output folder, level "
        << ToString(log.level) << ", slow above " << FormatNumber(log.threshold_seconds) << " s\n";
  }
  if (!config.ignored_keys.empty()) out << IgnoredKeysText(config) << "\n";
  if (config.simulation.present) {
    out << "simulation: " << config.simulation.output << ", " << config.simulation.frames
        << " frames, " << config.simulation.phi_angles_degrees.size() << " angles\n";
  }
  return out.str();
}

}  // namespace homodyne
