// ResolveConfig (include/homodyne/config.h): a config file plus a shell's overrides -> the Config
// a fit runs with. The analysis mode is settled first and the file parsed for it, so nothing that
// depends on the mode (bounds, default initial values, custom starts) is built for a mode the
// command line then replaces; the other overrides follow, checked as the loader checks the file.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "config/config_parse.h"
#include "config/path_checks.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "pipeline/memory_budget.h"

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

// UsageError "<name> = <value>: <rule>" unless ok.
template <typename T>
void Require(bool ok, const std::string& name, const T& value, const std::string& rule) {
  if (!ok) throw UsageError(name + " = " + Show(value) + ": " + rule);
}

// `text` (any case) when it is one of `allowed`, else UsageError naming the override.
std::string OneOf(const std::string& name, const std::string& text,
                  const std::vector<std::string>& allowed) {
  const std::string lower = Lower(text);
  if (std::find(allowed.begin(), allowed.end(), lower) == allowed.end()) {
    throw UsageError(name + " = '" + text + "': must be one of " + JoinNames(allowed));
  }
  return lower;
}

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

// One --initial-* flag or initial_params entry: a physical parameter of the final mode.
void ApplyInitialValue(const ConfigOverrides::InitialValue& given, Config& config) {
  const std::string name = CanonicalParameterName(given.name);
  const std::vector<std::string>& names = PhysicalParameterNames(config.analysis_mode);
  const std::string mode(ToString(config.analysis_mode));
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    const std::vector<std::string>& laminar = PhysicalParameterNames(AnalysisMode::kLaminarFlow);
    if (std::find(laminar.begin(), laminar.end(), name) != laminar.end()) {
      throw UsageError(given.origin + " applies to laminar_flow only; the analysis mode is " +
                       mode);
    }
    throw UsageError(given.origin + ": '" + given.name + "' is not a parameter of " + mode +
                     " (expected " + JoinNames(names) + ")");
  }
  Require(std::isfinite(given.value), given.origin, given.value, "must be finite");
  SetInitialValue(config, name, given.value);
}

void ApplyOverrides(const ConfigOverrides& overrides, Config& config) {
  if (overrides.data_file) config.data.file_path = *overrides.data_file;
  if (const auto& iterations = overrides.max_iterations) {
    Require(*iterations > 0, "max_iterations", *iterations, "must be > 0");
    config.nlsq.max_iterations = *iterations;
  }
  if (const auto& tolerance = overrides.tolerance) {
    Require(std::isfinite(*tolerance) && *tolerance > 0.0, "tolerance", *tolerance, "must be > 0");
    config.nlsq.tolerance = *tolerance;
  }
  for (const ConfigOverrides::InitialValue& given : overrides.initial_values) {
    ApplyInitialValue(given, config);
  }

  PerformanceOptions& performance = config.performance;
  if (const auto& threads = overrides.cpu_threads) {
    Require(*threads >= 1, "threads", *threads, "must be >= 1");
    performance.cpu_threads = *threads;
  }
  if (const auto& strategy = overrides.strategy) {
    performance.strategy_override = ParseStrategyKind(*strategy);
    if (!performance.strategy_override) {
      throw UsageError("strategy = '" + *strategy +
                       "': must be one of standard, large, chunked, streaming");
    }
  }
  if (overrides.backend) {
    performance.backend =
        *ParseBackendKind(OneOf("backend", *overrides.backend, {"cpu", "cuda", "auto"}));
  }
  if (overrides.fast_mode) performance.fast_mode = *overrides.fast_mode;
  if (overrides.solver) {
    config.nlsq.solver = *ParseLmSolver(OneOf("solver", *overrides.solver, {"lm", "ceres"}));
  }
  if (overrides.variable_projection) {
    config.nlsq.variable_projection = *overrides.variable_projection;
  }

  StreamingOptions& streaming = config.streaming;
  if (const auto& directory = overrides.checkpoint_dir) {
    Require(!directory->empty(), "checkpoint_dir", "''", "must be a non-empty folder path");
    if (HasNul(*directory)) throw UsageError(NulInPathMessage("checkpoint_dir", *directory));
    streaming.checkpoint_dir = *directory;
  }
  if (overrides.enable_checkpoints) streaming.enable_checkpoints = *overrides.enable_checkpoints;
  if (const auto& frequency = overrides.checkpoint_frequency) {
    Require(*frequency > 0, "checkpoint_frequency", *frequency, "must be > 0");
    streaming.checkpoint_frequency = *frequency;
  }
  if (const auto& seconds = overrides.checkpoint_min_interval_seconds) {
    Require(std::isfinite(*seconds) && *seconds >= 0.0, "checkpoint_min_interval", *seconds,
            "must be >= 0 (seconds)");
    streaming.checkpoint_min_interval_seconds = *seconds;
  }
  if (overrides.resume_from_checkpoint) {
    streaming.resume_from_checkpoint = *overrides.resume_from_checkpoint;
  }
  if (overrides.memory_limit_gb) {
    performance.memory_limit_gb = *overrides.memory_limit_gb;
    performance.memory_limit_from_command_line = true;
  }
}

// The method the global phase runs and why (GlobalSearchOptions::method, method_reason): the
// command line's (`command_line` as the user wrote it; "" = not given), else the config's method
// when it set one other than auto, else cmaes.enable (first, as the reference), else
// multi_start.enable, else auto. The command line's spellings, case as written: auto, off,
// multi-start (or multi_start), cmaes; any other throws ConfigError naming the flag.
void SettleGlobalSearchMethod(const std::string& command_line, NlsqOptions& nlsq) {
  GlobalSearchOptions& global = nlsq.global_search;
  if (!command_line.empty()) {
    // The config's spelling with '-' for '_', in its case only (the config's ignores case).
    std::string spelling = command_line;
    std::replace(spelling.begin(), spelling.end(), '-', '_');
    const std::optional<GlobalSearchMethod> flag = ParseGlobalSearchMethod(spelling);
    if (!flag || ToString(*flag) != spelling) {
      throw ConfigError("--global-search " + command_line +
                        ": must be one of auto, off, multi-start, cmaes");
    }
    global.method = *flag;
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

}  // namespace

ConfigSource ReadConfigFile(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::exists(path, error)) {
    throw InputError(path + ": config file not found");
  }
  if (std::filesystem::is_directory(path, error)) {
    throw InputError(path + ": is a folder, not a config file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open the config file for reading");
  std::ostringstream text;
  text << in.rdbuf();
  return ConfigSource{text.str(), path, path};
}

Config ResolveConfig(const ConfigSource& source, const ConfigOverrides& overrides) {
  Config config =
      config_internal::ParseConfigText(source.yaml_text, source.name, overrides.analysis_mode);
  config.source_path = source.path;
  ApplyOverrides(overrides, config);
  SettleGlobalSearchMethod(overrides.global_search.value_or(""), config.nlsq);
  return config;
}

Config LoadConfig(const std::string& path) { return ResolveConfig(ReadConfigFile(path)); }

Config ParseConfig(const std::string& yaml_text, const std::string& source_name) {
  return ResolveConfig(ConfigSource{yaml_text, source_name, ""});
}

}  // namespace homodyne
