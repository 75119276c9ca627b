// ResolveConfig (include/homodyne/config.h): a config file plus a shell's overrides -> the Config
// a fit runs with. The analysis mode is settled first and the file parsed for it, so nothing that
// depends on the mode (bounds, default initial values, custom starts) is built for a mode the
// command line then replaces; the other overrides follow, checked by CheckOverrides
// (include/homodyne/override_checks.h), the CLI's check of its flags.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "config/config_parse.h"
#include "config/path_checks.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "homodyne/override_checks.h"
#include "model/mode_catalog.h"

namespace homodyne {
namespace {

std::string Lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

template <typename T>
std::string Show(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// An override's name as each shell spells it (OverrideSpelling).
struct OverrideName {
  const char* flag;     // the CLI's: "--memory-limit-gb"
  const char* keyword;  // Python's: "memory_limit_gb"
};

// UsageError "<override> <value>: <rule>" (command line) or "<override> = <value>: <rule>"
// (keyword) unless ok; text values are quoted in the keyword spelling, and when empty.
class OverrideChecker {
 public:
  explicit OverrideChecker(OverrideSpelling spelling) : spelling_(spelling) {}

  template <typename T>
  void Require(bool ok, const OverrideName& name, const T& value, const std::string& rule) const {
    RequireNamed(ok, Spelled(name), value, rule);
  }
  // The same with the override's name as the user wrote it (an initial value's origin).
  template <typename T>
  void RequireNamed(bool ok, const std::string& name, const T& value,
                    const std::string& rule) const {
    if (ok) return;
    std::string shown;
    if constexpr (std::is_convertible_v<T, std::string>) {
      const std::string text(value);
      shown = spelling_ == OverrideSpelling::kKeyword || text.empty() ? "'" + text + "'" : text;
    } else {
      shown = Show(value);
    }
    throw UsageError(name + (spelling_ == OverrideSpelling::kKeyword ? " = " : " ") + shown + ": " +
                     rule);
  }
  // A path with no NUL character (path_checks.h), else UsageError naming the override.
  void RequireNoNul(const OverrideName& name, const std::string& path) const {
    if (HasNul(path)) throw UsageError(NulInPathMessage(Spelled(name), path));
  }
  // `text` one of `allowed` (any case: the parsers ignore it).
  void RequireOneOf(const OverrideName& name, const std::string& text,
                    const std::vector<std::string>& allowed) const {
    const bool known = std::find(allowed.begin(), allowed.end(), Lower(text)) != allowed.end();
    Require(known, name, text, "must be one of " + JoinNames(allowed));
  }

 private:
  const char* Spelled(const OverrideName& name) const {
    return spelling_ == OverrideSpelling::kKeyword ? name.keyword : name.flag;
  }
  OverrideSpelling spelling_;
};

// Sets the start value of physical parameter `name` (canonical, of the config's mode) in
// initial_parameters, keeping the others; without values in the config, every physical
// parameter starts from its bound midpoint (docs/model.md, Bounds and start values) and `name`
// from `value`.
void SetInitialValue(Config& config, const std::string& name, double value) {
  InitialParameterOptions& initial = config.initial;
  if (!initial.values || initial.parameter_names.empty()) {
    const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
    initial.parameter_names = names;
    std::vector<double> midpoints;
    for (const std::string& each : names) {
      const ParameterBound& bound = config.BoundOf(each);
      midpoints.push_back(0.5 * (bound.min + bound.max));
    }
    initial.values = midpoints;
  }
  for (size_t k = 0; k < initial.parameter_names.size(); ++k) {
    if (initial.parameter_names[k] == name) {
      (*initial.values)[k] = value;
      return;
    }
  }
  initial.parameter_names.push_back(name);
  initial.values->push_back(value);
}

// One --initial-* flag or initial_params entry (checked by CheckOverrides): a physical
// parameter of the final mode.
void ApplyInitialValue(const ConfigOverrides::InitialValue& given, Config& config) {
  const std::string name = CanonicalParameterName(given.name);
  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  const std::string mode(ToString(config.analysis_mode));
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    // A parameter of other modes of the catalog: name them ("applies to laminar_flow only").
    std::vector<std::string> modes_with_it;
    for (const ModeDefinition& other : AllModeDefinitions()) {
      const std::vector<std::string>& other_names = PhysicalParameterNames(other.mode);
      if (std::find(other_names.begin(), other_names.end(), name) != other_names.end()) {
        modes_with_it.emplace_back(other.name);
      }
    }
    if (!modes_with_it.empty()) {
      std::string listed;
      for (size_t k = 0; k < modes_with_it.size(); ++k) {
        listed += (k == 0 ? "" : k + 1 == modes_with_it.size() ? " and " : ", ") + modes_with_it[k];
      }
      throw UsageError(given.origin + " applies to " + listed + " only; the analysis mode is " +
                       mode);
    }
    throw UsageError(given.origin + ": '" + given.name + "' is not a parameter of " + mode +
                     " (expected " + JoinNames(names) + ")");
  }
  SetInitialValue(config, name, given.value);
}

// The overrides, checked by CheckOverrides, into config.
void ApplyOverrides(const ConfigOverrides& overrides, Config& config) {
  if (overrides.data_file) config.data.file_path = *overrides.data_file;
  if (overrides.max_iterations) config.nlsq.max_iterations = *overrides.max_iterations;
  if (overrides.tolerance) config.nlsq.tolerance = *overrides.tolerance;
  for (const ConfigOverrides::InitialValue& given : overrides.initial_values) {
    ApplyInitialValue(given, config);
  }
  if (!overrides.phi_angles.empty()) config.data.phi_selected_degrees = overrides.phi_angles;
  if (overrides.multi_start_n) config.nlsq.multi_start.n_starts = *overrides.multi_start_n;

  PerformanceOptions& performance = config.performance;
  if (overrides.cpu_threads) performance.cpu_threads = *overrides.cpu_threads;
  if (overrides.strategy) performance.strategy_override = ParseStrategyKind(*overrides.strategy);
  if (overrides.backend) performance.backend = *ParseBackendKind(*overrides.backend);
  if (overrides.fast_mode) performance.fast_mode = *overrides.fast_mode;
  if (overrides.solver) config.nlsq.solver = *ParseLmSolver(*overrides.solver);
  if (overrides.uncertainty) {
    config.nlsq.uncertainty = *ParseUncertaintyMethod(*overrides.uncertainty);
  }
  if (overrides.profile_intervals) config.nlsq.profile_intervals = *overrides.profile_intervals;
  if (overrides.variable_projection) {
    config.nlsq.variable_projection = *overrides.variable_projection;
  }

  StreamingOptions& streaming = config.streaming;
  if (overrides.checkpoint_dir) streaming.checkpoint_dir = *overrides.checkpoint_dir;
  if (overrides.enable_checkpoints) streaming.enable_checkpoints = *overrides.enable_checkpoints;
  if (overrides.checkpoint_frequency) {
    streaming.checkpoint_frequency = *overrides.checkpoint_frequency;
  }
  if (overrides.checkpoint_min_interval_seconds) {
    streaming.checkpoint_min_interval_seconds = *overrides.checkpoint_min_interval_seconds;
  }
  if (overrides.resume_from_checkpoint) {
    streaming.resume_from_checkpoint = *overrides.resume_from_checkpoint;
  }
  if (overrides.memory_limit_gb) {
    performance.memory_limit_gb = *overrides.memory_limit_gb;
    performance.memory_limit_from_command_line = true;
  }
}

// --global-search's spelling (ConfigOverrides::global_search) as the config's ('-' for '_'),
// kept only in the case the config's spelling has; std::nullopt for any other text.
std::optional<GlobalSearchMethod> ParseGlobalSearchOverride(const std::string& text) {
  std::string spelling = text;
  std::replace(spelling.begin(), spelling.end(), '-', '_');
  const std::optional<GlobalSearchMethod> method = ParseGlobalSearchMethod(spelling);
  if (!method || ToString(*method) != spelling) return std::nullopt;
  return method;
}

// The method the global phase runs and why (GlobalSearchOptions::method, method_reason): the
// command line's (`command_line` as the user wrote it; "" = not given), else the config's method
// when it set one other than auto, else cmaes.enable (first, as the reference), else
// multi_start.enable, else auto. The command line's spelling is checked by CheckOverrides.
void SettleGlobalSearchMethod(const std::string& command_line,
                              const std::optional<int>& multi_start_n, NlsqOptions& nlsq) {
  GlobalSearchOptions& global = nlsq.global_search;
  if (command_line.empty() && multi_start_n) {
    global.method = GlobalSearchMethod::kMultiStart;
    global.method_reason = "--multistart-n " + std::to_string(*multi_start_n);
  } else if (!command_line.empty()) {
    global.method = *ParseGlobalSearchOverride(command_line);  // CheckOverrides checked it
    global.method_reason = "--global-search " + command_line;
  } else if (global.method_from_config && global.method != GlobalSearchMethod::kAuto) {
    global.method_reason =
        "optimization.nlsq.global_search.method = " + std::string(ToString(global.method));
  } else if (nlsq.cmaes.enable) {
    global.method = GlobalSearchMethod::kCmaes;
    global.method_reason = "optimization.nlsq.cmaes.enable = true";
  } else if (nlsq.multi_start.enable) {
    global.method = GlobalSearchMethod::kMultiStart;
    global.method_reason = "optimization.nlsq.multi_start.enable = true";
  } else {
    global.method = GlobalSearchMethod::kAuto;
    global.method_reason = "default (optimization.nlsq.global_search.method = auto)";
  }
}

// False when `text` has nothing but blank lines, comments and the document markers '---' and
// '...' (ReadConfigFile).
bool HasYamlContent(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t first = line.find_first_not_of(" \t\r\f\v");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string rest = line.substr(first);
    if (rest.compare(0, 3, "---") == 0 || rest.compare(0, 3, "...") == 0) {
      const size_t after = rest.find_first_not_of(" \t\r", 3);  // a marker, a comment after it
      if (after == std::string::npos || (after > 3 && rest[after] == '#')) continue;
    }
    return true;
  }
  return false;
}

}  // namespace

void CheckOverrides(const ConfigOverrides& overrides, OverrideSpelling spelling) {
  const OverrideChecker check(spelling);
  if (const auto& iterations = overrides.max_iterations) {
    check.Require(*iterations > 0, {"--max-iterations", "max_iterations"}, *iterations,
                  "must be > 0");
  }
  if (const auto& tolerance = overrides.tolerance) {
    check.Require(std::isfinite(*tolerance) && *tolerance > 0.0, {"--tolerance", "tolerance"},
                  *tolerance, "must be > 0");
  }
  for (const ConfigOverrides::InitialValue& given : overrides.initial_values) {
    check.RequireNamed(std::isfinite(given.value), given.origin, given.value, "must be finite");
    // The parameter's catalog entry says whether its start must be > 0 (D0).
    const ParameterDefinition* definition =
        FindParameterDefinition(CanonicalParameterName(given.name));
    if (definition != nullptr && definition->positive_start) {
      check.RequireNamed(given.value > 0.0, given.origin, given.value, "must be > 0");
    }
  }
  if (const auto& threads = overrides.cpu_threads) {
    check.Require(*threads >= 1, {"--threads", "threads"}, *threads, "must be >= 1");
  }
  if (const auto& strategy = overrides.strategy) {
    check.RequireOneOf({"--strategy", "strategy"}, *strategy,
                       {"standard", "large", "chunked", "streaming"});
  }
  if (const auto& backend = overrides.backend) {
    check.RequireOneOf({"--backend", "backend"}, *backend, {"cpu", "cuda", "auto"});
  }
  if (const auto& solver = overrides.solver) {
    check.RequireOneOf({"--solver", "solver"}, *solver, {"lm", "ceres"});
  }
  if (const auto& uncertainty = overrides.uncertainty) {
    check.RequireOneOf({"--uncertainty", "uncertainty"}, *uncertainty,
                       {"auto", "jackknife", "standard", "curvature"});
  }
  if (const auto& directory = overrides.checkpoint_dir) {
    check.Require(!directory->empty(), {"--checkpoint-dir", "checkpoint_dir"}, *directory,
                  "must be a non-empty folder path");
    check.RequireNoNul({"--checkpoint-dir", "checkpoint_dir"}, *directory);
  }
  if (const auto& frequency = overrides.checkpoint_frequency) {
    check.Require(*frequency > 0, {"--checkpoint-frequency", "checkpoint_frequency"}, *frequency,
                  "must be > 0");
  }
  if (const auto& seconds = overrides.checkpoint_min_interval_seconds) {
    check.Require(std::isfinite(*seconds) && *seconds >= 0.0,
                  {"--checkpoint-min-interval", "checkpoint_min_interval"}, *seconds,
                  "must be >= 0 (seconds)");
  }
  if (const auto& gigabytes = overrides.memory_limit_gb) {
    check.Require(std::isfinite(*gigabytes) && *gigabytes > 0.0,
                  {"--memory-limit-gb", "memory_limit_gb"}, *gigabytes, "must be > 0");
  }
  if (const auto& method = overrides.global_search; method && !method->empty()) {
    check.Require(ParseGlobalSearchOverride(*method).has_value(),
                  {"--global-search", "global_search"}, *method,
                  "must be one of auto, off, multi-start, cmaes");
  }
  for (const double phi : overrides.phi_angles) {
    check.Require(std::isfinite(phi), {"--phi", "phi"}, phi, "must be finite (degrees)");
  }
  if (const auto& starts = overrides.multi_start_n) {
    check.Require(*starts >= 1 && *starts <= 100000, {"--multistart-n", "multistart_n"}, *starts,
                  "must be from 1 to 100000");
    if (const auto& method = overrides.global_search; method && !method->empty()) {
      check.Require(ParseGlobalSearchOverride(*method) == GlobalSearchMethod::kMultiStart,
                    {"--multistart-n", "multistart_n"}, *starts,
                    "sets the multi-start search's starts, but --global-search " + *method +
                        " runs another method");
    }
  }
}

ConfigSource ReadConfigFile(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw InputError(path + ": config file not found");
  }
  if (std::filesystem::is_directory(path, error)) {
    throw InputError(path + ": is a folder, not a config file");
  }
  // The size is bounded before anything is read or parsed; a file whose size the file system does
  // not know (a pipe, a device such as /dev/zero) is read up to the limit.
  using config_internal::kMaxConfigBytes;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (!error && size > kMaxConfigBytes) {
    throw InputError(config_internal::ConfigTooLargeMessage(path, size));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the config file for reading");
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxConfigBytes) {
    throw InputError(config_internal::ConfigTooLargeMessage(path, std::nullopt));
  }
  // A file of blank lines and comments is a truncated or wrong file, not a config: the loader
  // would read it as all defaults (text from code may still be empty).
  if (!HasYamlContent(text)) {
    throw InputError(path + " is empty: " +
                     (text.empty() ? std::string("0 bytes")
                                   : "only blank lines, comments and document markers") +
                     "; a config holds at least analysis_mode (homodyne-config --mode MODE "
                     "--output FILE writes a template)");
  }
  return ConfigSource{std::move(text), path, path};
}

Config ResolveConfig(const ConfigSource& source, const ConfigOverrides& overrides) {
  Config config =
      config_internal::ParseConfigText(source.yaml_text, source.name, overrides.analysis_mode);
  config.source_path = source.path;
  CheckOverrides(overrides, OverrideSpelling::kKeyword);
  ApplyOverrides(overrides, config);
  SettleGlobalSearchMethod(overrides.global_search.value_or(""), overrides.multi_start_n,
                           config.nlsq);
  return config;
}

Config LoadConfig(const std::string& path) { return ResolveConfig(ReadConfigFile(path)); }

Config ParseConfig(const std::string& yaml_text, const std::string& source_name) {
  return ResolveConfig(ConfigSource{yaml_text, source_name, ""});
}

}  // namespace homodyne
