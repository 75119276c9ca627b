// ResolveConfig: the analysis mode of the overrides is settled before anything that depends on it
// is built (bounds, default parameter names, start values), the other overrides are applied
// after, and an override that does not fit is a UsageError naming it as the user wrote it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "config_test_util.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "homodyne/override_checks.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using testing::JoinWarnings;

// A static config as the reference's static template writes one: physical start values, and a
// bound of a laminar_flow parameter the static fit does not use.
const ConfigSource kStaticSource{R"(
analysis_mode: static
initial_parameters:
  parameter_names: [D0, alpha, D_offset]
  values: [2000.0, -0.3, 0.0]
parameter_space:
  bounds:
    - {name: D0, min: 500, max: 50000}
    - {name: gamma_dot_t0, min: 1.0e-5, max: 0.2}
)",
                                 "static.yaml", "static.yaml"};

// A laminar_flow config with start values, bounds and simulation parameters of the shear terms.
const ConfigSource kLaminarSource{R"(
analysis_mode: laminar_flow
initial_parameters:
  parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]
  values: [2000.0, -0.3, 0.0, 1.0e-4, 0.0, 0.0, 0.0]
parameter_space:
  bounds:
    - {name: gamma_dot_t0, min: 1.0e-5, max: 0.2}
    - {name: phi0, min: -5, max: 5}
simulation:
  parameters: {D0: 1000, alpha: -0.5, D_offset: 10, gamma_dot_t0: 0.01, phi0: 0}
)",
                                  "laminar.yaml", "laminar.yaml"};

ConfigOverrides ModeOverride(AnalysisMode mode) {
  ConfigOverrides overrides;
  overrides.analysis_mode = mode;
  return overrides;
}

TEST(ResolveConfigTest, WithoutOverridesEqualsLoadingTheFile) {
  const Config config = ResolveConfig(kStaticSource);

  EXPECT_EQ(config.analysis_mode, AnalysisMode::kStatic);
  EXPECT_EQ(config.source_path, "static.yaml");
  EXPECT_EQ(config.bounds.size(), 5u);
  EXPECT_DOUBLE_EQ(config.BoundOf("D0").min, 500.0);
}

// The review finding: `homodyne --config static.yaml --laminar-flow` failed with "no bounds for
// parameter 'gamma_dot_t0'", the bounds having been built for the file's mode.
TEST(ResolveConfigTest, LaminarFlowOverrideOnStaticConfigBuildsLaminarBounds) {
  const Config config = ResolveConfig(kStaticSource, ModeOverride(AnalysisMode::kLaminarFlow));

  EXPECT_EQ(config.analysis_mode, AnalysisMode::kLaminarFlow);
  ASSERT_EQ(config.bounds.size(), 9u);
  EXPECT_DOUBLE_EQ(config.BoundOf("D0").min, 500.0);
  EXPECT_DOUBLE_EQ(config.BoundOf("gamma_dot_t0").min, 1e-5);  // the file's, used now
  EXPECT_DOUBLE_EQ(config.BoundOf("gamma_dot_t0").max, 0.2);
  EXPECT_DOUBLE_EQ(config.BoundOf("phi0").min, -10.0);  // default (docs/model.md)
  EXPECT_EQ(config.initial.parameter_names, (std::vector<std::string>{"D0", "alpha", "D_offset"}));
}

TEST(ResolveConfigTest, InitialValueOfLaminarParameterAppliesAfterModeOverride) {
  ConfigOverrides overrides = ModeOverride(AnalysisMode::kLaminarFlow);
  overrides.initial_values.push_back({"gamma_dot_0", 0.003, "--initial-gamma-dot-t0"});

  const Config config = ResolveConfig(kStaticSource, overrides);

  ASSERT_TRUE(config.initial.values.has_value());
  EXPECT_EQ(config.initial.parameter_names,
            (std::vector<std::string>{"D0", "alpha", "D_offset", "gamma_dot_t0"}));
  EXPECT_EQ(*config.initial.values, (std::vector<double>{2000.0, -0.3, 0.0, 0.003}));
}

TEST(ResolveConfigTest, InitialValueWithoutConfigValuesStartsOthersAtBoundMidpoints) {
  ConfigOverrides overrides = ModeOverride(AnalysisMode::kLaminarFlow);
  overrides.initial_values.push_back({"D0", 1234.0, "--initial-d0"});

  const Config config =
      ResolveConfig(ConfigSource{"analysis_mode: static\n", "s.yaml", ""}, overrides);

  ASSERT_TRUE(config.initial.values.has_value());
  ASSERT_EQ(config.initial.values->size(), 7u);
  EXPECT_DOUBLE_EQ((*config.initial.values)[0], 1234.0);
  EXPECT_DOUBLE_EQ((*config.initial.values)[3], 0.5 * (1e-6 + 0.5));  // gamma_dot_t0 midpoint
}

TEST(ResolveConfigTest, StaticOverrideOnLaminarConfigDropsShearTermsWithWarnings) {
  const Config config = ResolveConfig(kLaminarSource, ModeOverride(AnalysisMode::kStatic));

  EXPECT_EQ(config.analysis_mode, AnalysisMode::kStatic);
  EXPECT_EQ(config.bounds.size(), 5u);
  EXPECT_EQ(config.initial.parameter_names, (std::vector<std::string>{"D0", "alpha", "D_offset"}));
  EXPECT_EQ(*config.initial.values, (std::vector<double>{2000.0, -0.3, 0.0}));
  EXPECT_EQ(config.simulation.physical_parameters, (std::vector<double>{1000.0, -0.5, 10.0}));
  const std::string warnings = JoinWarnings(config);
  EXPECT_THAT(warnings, HasSubstr("'gamma_dot_t0', not a parameter of static mode; ignored"));
  EXPECT_THAT(warnings, HasSubstr("simulation.parameters.phi0: not a parameter of static mode"));
}

TEST(ResolveConfigTest, LaminarInitialValueInStaticModeNamesTheFlag) {
  ConfigOverrides overrides = ModeOverride(AnalysisMode::kStatic);
  overrides.initial_values.push_back({"gamma_dot_t_offset", 0.1, "--initial-gamma-dot-offset"});

  try {
    ResolveConfig(kLaminarSource, overrides);
    FAIL() << "no UsageError";
  } catch (const UsageError& error) {
    EXPECT_THAT(error.what(), HasSubstr("--initial-gamma-dot-offset applies to laminar_flow only; "
                                        "the analysis mode is static"));
  }
}

// A start value for a parameter of other modes names the modes that have it.
TEST(ResolveConfigTest, OtherModesInitialValueNamesTheModesThatHaveIt) {
  ConfigOverrides two_component_name = ModeOverride(AnalysisMode::kStatic);
  two_component_name.initial_values.push_back({"v0", 10.0, "initial_params['v0']"});
  try {
    ResolveConfig(kLaminarSource, two_component_name);
    FAIL() << "no UsageError";
  } catch (const UsageError& error) {
    EXPECT_THAT(error.what(), HasSubstr("initial_params['v0'] applies to two_component only; the "
                                        "analysis mode is static"));
  }

  ConfigOverrides homodyne_name = ModeOverride(AnalysisMode::kTwoComponent);
  homodyne_name.initial_values.push_back({"D0", 10.0, "--initial-d0"});
  try {
    ResolveConfig(kLaminarSource, homodyne_name);
    FAIL() << "no UsageError";
  } catch (const UsageError& error) {
    EXPECT_THAT(error.what(), HasSubstr("--initial-d0 applies to static and laminar_flow only; "
                                        "the analysis mode is two_component"));
  }
}

TEST(ResolveConfigTest, TwoComponentInitialValueStartsOthersAtBoundMidpoints) {
  ConfigOverrides overrides = ModeOverride(AnalysisMode::kTwoComponent);
  overrides.initial_values.push_back({"f0", 0.25, "initial_params['f0']"});

  const Config config =
      ResolveConfig(ConfigSource{"analysis_mode: static\n", "s.yaml", ""}, overrides);

  EXPECT_EQ(config.analysis_mode, AnalysisMode::kTwoComponent);
  ASSERT_TRUE(config.initial.values.has_value());
  ASSERT_EQ(config.initial.values->size(), 14u);
  EXPECT_DOUBLE_EQ((*config.initial.values)[0], 5e5);   // D0_ref midpoint of [0, 1e6]
  EXPECT_DOUBLE_EQ((*config.initial.values)[9], 0.25);  // f0
  EXPECT_DOUBLE_EQ((*config.initial.values)[7], 1.0);   // v_beta midpoint of [0, 2]
}

TEST(ResolveConfigTest, UnknownInitialValueNameIsUsageError) {
  ConfigOverrides overrides;
  overrides.initial_values.push_back({"D1", 1.0, "initial_params['D1']"});

  try {
    ResolveConfig(kStaticSource, overrides);
    FAIL() << "no UsageError";
  } catch (const UsageError& error) {
    EXPECT_THAT(error.what(), HasSubstr("initial_params['D1']: 'D1' is not a parameter of static "
                                        "(expected D0, alpha, D_offset)"));
  }
}

TEST(ResolveConfigTest, OverridesReplaceFileValuesWithStringsParsed) {
  ConfigOverrides overrides;
  overrides.data_file = "other.h5";
  overrides.max_iterations = 7;
  overrides.tolerance = 1e-6;
  overrides.cpu_threads = 3;
  overrides.strategy = "Streaming";
  overrides.backend = "AUTO";
  overrides.solver = "Ceres";
  overrides.fast_mode = true;
  overrides.variable_projection = false;
  overrides.checkpoint_dir = "ck";
  overrides.enable_checkpoints = false;
  overrides.checkpoint_frequency = 4;
  overrides.checkpoint_min_interval_seconds = 0.0;
  overrides.resume_from_checkpoint = false;

  const Config config = ResolveConfig(kStaticSource, overrides);

  EXPECT_EQ(config.data.file_path, "other.h5");
  EXPECT_EQ(config.nlsq.max_iterations, 7);
  EXPECT_DOUBLE_EQ(config.nlsq.tolerance, 1e-6);
  EXPECT_EQ(config.performance.cpu_threads, 3);
  EXPECT_EQ(config.performance.strategy_override, StrategyKind::kStreaming);
  EXPECT_EQ(config.performance.backend, BackendKind::kAuto);
  EXPECT_EQ(config.nlsq.solver, LmSolver::kCeres);
  EXPECT_TRUE(config.performance.fast_mode);
  EXPECT_FALSE(config.nlsq.variable_projection);
  EXPECT_EQ(config.streaming.checkpoint_dir, "ck");
  EXPECT_FALSE(config.streaming.enable_checkpoints);
  EXPECT_EQ(config.streaming.checkpoint_frequency, 4);
  EXPECT_DOUBLE_EQ(config.streaming.checkpoint_min_interval_seconds, 0.0);
  EXPECT_FALSE(config.streaming.resume_from_checkpoint);
}

TEST(ResolveConfigTest, OverrideBreakingARuleIsUsageErrorNamingIt) {
  const std::vector<std::pair<void (*)(ConfigOverrides&), std::string>> cases = {
      {[](ConfigOverrides& o) { o.strategy = "fastest"; },
       "strategy = 'fastest': must be one of standard, large, chunked, streaming"},
      {[](ConfigOverrides& o) { o.backend = "gpu"; }, "backend = 'gpu': must be one of cpu, cuda"},
      {[](ConfigOverrides& o) { o.solver = "scipy"; }, "solver = 'scipy': must be one of lm"},
      {[](ConfigOverrides& o) { o.max_iterations = 0; }, "max_iterations = 0: must be > 0"},
      {[](ConfigOverrides& o) { o.cpu_threads = 0; }, "threads = 0: must be >= 1"},
      {[](ConfigOverrides& o) { o.checkpoint_frequency = -2; },
       "checkpoint_frequency = -2: must be > 0"},
  };
  for (const auto& [set, message] : cases) {
    ConfigOverrides overrides;
    set(overrides);
    try {
      ResolveConfig(kStaticSource, overrides);
      ADD_FAILURE() << "no UsageError for " << message;
    } catch (const UsageError& error) {
      EXPECT_THAT(error.what(), HasSubstr(message));
    }
  }
}

TEST(ResolveConfigTest, FileErrorsAreStillConfigErrorsForTheFinalMode) {
  // Custom starts of the file's (static) mode do not fit laminar_flow: the file is at fault.
  const ConfigSource source{R"(
analysis_mode: static
optimization:
  nlsq:
    multi_start:
      custom_starts: [[1000, -0.5, 10]]
)",
                            "starts.yaml", ""};
  EXPECT_NO_THROW(ResolveConfig(source));
  try {
    ResolveConfig(source, ModeOverride(AnalysisMode::kLaminarFlow));
    FAIL() << "no ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("starts.yaml: optimization.nlsq.multi_start."
                                        "custom_starts[0] = [1000, -0.5, 10]: must have 7 values"));
  }
}

TEST(ResolveConfigTest, ModeOverrideSilencesTheMissingModeWarning) {
  const ConfigSource source{"analyzer_parameters: {dt: 0.5}\n", "m.yaml", ""};

  EXPECT_THAT(JoinWarnings(ResolveConfig(source)), HasSubstr("analysis_mode is not set"));
  const Config config = ResolveConfig(source, ModeOverride(AnalysisMode::kStatic));
  EXPECT_EQ(config.analysis_mode, AnalysisMode::kStatic);
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
}

// The global-search method a fit runs and why (GlobalSearchOptions::method, method_reason):
// --global-search, then the config's method, then cmaes.enable, then multi_start.enable.
Config WithGlobalSearch(const std::string& yaml, std::optional<std::string> command_line) {
  ConfigOverrides overrides;
  overrides.global_search = std::move(command_line);
  return ResolveConfig(ConfigSource{"analysis_mode: static\n" + yaml, "gs.yaml", ""}, overrides);
}

TEST(ResolveConfigTest, GlobalSearchCommandLineThenConfigThenEnableKeys) {
  const std::string nlsq = "optimization:\n  nlsq:\n";
  const std::string multi = nlsq + "    multi_start: {enable: true}\n";
  const std::string both = multi + "    cmaes: {enable: true}\n";
  const std::string off = both + "    global_search: {method: 'off'}\n";
  const std::vector<
      std::tuple<std::string, std::optional<std::string>, GlobalSearchMethod, std::string>>
      cases = {
          {"", std::nullopt, GlobalSearchMethod::kAuto,
           "default (optimization.nlsq.global_search.method = auto)"},
          {"", std::string(""), GlobalSearchMethod::kAuto,
           "default (optimization.nlsq.global_search.method = auto)"},
          {multi, std::nullopt, GlobalSearchMethod::kMultiStart,
           "optimization.nlsq.multi_start.enable = true"},
          // CMA-ES first, as the reference.
          {both, std::nullopt, GlobalSearchMethod::kCmaes, "optimization.nlsq.cmaes.enable = true"},
          {off, std::nullopt, GlobalSearchMethod::kOff,
           "optimization.nlsq.global_search.method = off"},
          {off, std::string("multi-start"), GlobalSearchMethod::kMultiStart,
           "--global-search multi-start"},
          {off, std::string("multi_start"), GlobalSearchMethod::kMultiStart,
           "--global-search multi_start"},
          {off, std::string("auto"), GlobalSearchMethod::kAuto, "--global-search auto"},
          {nlsq + "    global_search: {method: cmaes}\n", std::nullopt, GlobalSearchMethod::kCmaes,
           "optimization.nlsq.global_search.method = cmaes"},
      };
  for (const auto& [yaml, command_line, method, reason] : cases) {
    SCOPED_TRACE(yaml + " / " + command_line.value_or("(none)"));
    const Config config = WithGlobalSearch(yaml, command_line);
    EXPECT_EQ(config.nlsq.global_search.method, method);
    EXPECT_EQ(config.nlsq.global_search.method_reason, reason);
  }
}

// --global-search (and Python's global_search=): case as written; any other spelling is a
// UsageError naming the override and its choices (CheckOverrides, as the keyword in ResolveConfig).
TEST(ResolveConfigTest, GlobalSearchCommandLineSpellingIsCheckedWithItsMessage) {
  for (const char* text : {"simplex", "AUTO", "Off", "multi start", "cma-es"}) {
    try {
      WithGlobalSearch("", std::string(text));
      ADD_FAILURE() << "no UsageError for " << text;
    } catch (const UsageError& error) {
      EXPECT_EQ(std::string(error.what()), std::string("global_search = '") + text +
                                               "': must be one of auto, off, multi-start, cmaes");
    }
  }
}

// One check for both shells: the CLI's flags and Python's keywords break the same rules, each
// message naming the override as its shell spells it.
TEST(CheckOverridesTest, SpellsTheOverrideAsItsShell) {
  struct Case {
    void (*set)(ConfigOverrides&);
    std::string command_line;
    std::string keyword;
  };
  const std::vector<Case> cases = {
      {[](ConfigOverrides& o) { o.memory_limit_gb = -1.0; }, "--memory-limit-gb -1: must be > 0",
       "memory_limit_gb = -1: must be > 0"},
      {[](ConfigOverrides& o) { o.cpu_threads = 0; }, "--threads 0: must be >= 1",
       "threads = 0: must be >= 1"},
      {[](ConfigOverrides& o) { o.strategy = "fastest"; },
       "--strategy fastest: must be one of standard, large, chunked, streaming",
       "strategy = 'fastest': must be one of standard, large, chunked, streaming"},
      {[](ConfigOverrides& o) { o.checkpoint_dir = ""; },
       "--checkpoint-dir '': must be a non-empty folder path",
       "checkpoint_dir = '': must be a non-empty folder path"},
      {[](ConfigOverrides& o) {
         o.initial_values.push_back({"D0", -5.0, "--initial-d0"});
       },
       "--initial-d0 -5: must be > 0", "--initial-d0 = -5: must be > 0"},
      {[](ConfigOverrides& o) { o.global_search = "simplex"; },
       "--global-search simplex: must be one of auto, off, multi-start, cmaes",
       "global_search = 'simplex': must be one of auto, off, multi-start, cmaes"},
  };
  for (const Case& each : cases) {
    ConfigOverrides overrides;
    each.set(overrides);
    for (const auto& [spelling, message] :
         {std::pair{OverrideSpelling::kCommandLine, each.command_line},
          std::pair{OverrideSpelling::kKeyword, each.keyword}}) {
      try {
        CheckOverrides(overrides, spelling);
        ADD_FAILURE() << "no UsageError for " << message;
      } catch (const UsageError& error) {
        EXPECT_EQ(std::string(error.what()), message);
      }
    }
    // ResolveConfig runs the same check, spelled as keywords.
    EXPECT_THROW(ResolveConfig(kStaticSource, overrides), UsageError) << each.keyword;
  }
  ConfigOverrides fine;
  fine.memory_limit_gb = 2.5;
  fine.global_search = "multi_start";
  fine.initial_values.push_back({"alpha", -1.0, "--initial-alpha"});
  EXPECT_NO_THROW(CheckOverrides(fine, OverrideSpelling::kCommandLine));
}

// --memory-limit-gb (Python's memory_limit_gb=) replaces the config's limit and is reported as
// the command line's; without it the config's limit is the config's.
TEST(ResolveConfigTest, MemoryLimitOverrideWinsAndIsTheCommandLines) {
  const ConfigSource source{"analysis_mode: static\nperformance: {memory_limit_gb: 3}\n", "m.yaml",
                            ""};
  const Config from_file = ResolveConfig(source);
  EXPECT_EQ(*from_file.performance.memory_limit_gb, 3.0);
  EXPECT_FALSE(from_file.performance.memory_limit_from_command_line);

  ConfigOverrides overrides;
  overrides.memory_limit_gb = 2.0;
  const Config overridden = ResolveConfig(source, overrides);
  EXPECT_EQ(*overridden.performance.memory_limit_gb, 2.0);
  EXPECT_TRUE(overridden.performance.memory_limit_from_command_line);
}

TEST(ReadConfigFileTest, MissingFileIsInputError) {
  EXPECT_THROW(ReadConfigFile("/nonexistent/dir/cfg.yaml"), InputError);
}

}  // namespace
}  // namespace homodyne
