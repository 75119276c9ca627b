// Every validation rule of LoadConfig: the ConfigError message names the source, the YAML path,
// the value as written and the rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "config/config_for_data.h"
#include "config_test_util.h"

namespace homodyne {
namespace {

using testing::ConfigErrorOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct RuleCase {
  const char* name;
  const char* yaml;      // appended to "analysis_mode: laminar_flow\n"
  const char* expected;  // substring of the message: "<path> = <value>: <rule>"
};

class ConfigRuleTest : public ::testing::TestWithParam<RuleCase> {};

TEST_P(ConfigRuleTest, MessageNamesPathValueAndRule) {
  const RuleCase& c = GetParam();
  const std::string message = ConfigErrorOf(std::string("analysis_mode: laminar_flow\n") + c.yaml);
  EXPECT_THAT(message, StartsWith("test.yaml: "));
  EXPECT_THAT(message, HasSubstr(c.expected));
}

const RuleCase kRules[] = {
    {"LossUnknown", "optimization: {nlsq: {loss: tukey}}",
     "optimization.nlsq.loss = 'tukey': must be one of linear, soft_l1, huber, cauchy, arctan"},
    {"FScaleZero", "optimization: {nlsq: {f_scale: 0}}",
     "optimization.nlsq.f_scale = 0: must be > 0"},
    {"XScaleText", "optimization: {nlsq: {x_scale: auto}}",
     "optimization.nlsq.x_scale = 'auto': must be 'jac', a number > 0 or a list of numbers > 0"},
    {"XScaleNegativeInList", "optimization: {nlsq: {x_scale: [1, -2]}}",
     "optimization.nlsq.x_scale"},
    {"MaxIterationsNegative", "optimization: {nlsq: {max_iterations: -3}}",
     "optimization.nlsq.max_iterations = -3: must be > 0"},
    {"MaxIterationsNotInteger", "optimization: {nlsq: {max_iterations: 2.5}}",
     "optimization.nlsq.max_iterations = 2.5: must be an integer"},
    {"DtText", "analyzer_parameters: {dt: abc}",
     "analyzer_parameters.dt = 'abc': must be a number"},
    {"DtZero", "analyzer_parameters: {dt: 0}",
     "analyzer_parameters.dt = 0: must be from 1e-9 to 1e5 [s]"},
    {"DtInfinite", "analyzer_parameters: {dt: .inf}",
     "analyzer_parameters.dt = .inf: must be from 1e-9 to 1e5 [s]"},
    {"DtNegativeFallback", "experimental_data: {dt: -1}",
     "experimental_data.dt = -1: must be from 1e-9 to 1e5 [s]"},
    {"QZero", "analyzer_parameters: {scattering: {wavevector_q: 0}}",
     "analyzer_parameters.scattering.wavevector_q = 0: must be a finite number > 0"},
    {"QText", "analyzer_parameters: {scattering: {wavevector_q: some}}",
     "analyzer_parameters.scattering.wavevector_q = 'some': must be a number, a list of numbers "
     "or all"},
    {"QListEmpty", "analyzer_parameters: {scattering: {wavevector_q: []}}",
     "analyzer_parameters.scattering.wavevector_q = []: must list at least one q"},
    {"QListNegative", "analyzer_parameters: {scattering: {wavevector_q: [0.005, -1]}}",
     "analyzer_parameters.scattering.wavevector_q[1] = -1: must be a finite number > 0"},
    {"QFitUnknown", "analyzer_parameters: {scattering: {q_fit: together}}",
     "analyzer_parameters.scattering.q_fit = 'together': must be independent or joint"},
    {"DataFilteringQRangeReversed",
     "data_filtering: {enabled: true, q_range: {min: 0.01, max: 0.001}}",
     "data_filtering.q_range = {min: 0.01, max: 0.001}: must have 0 <= min <= max"},
    {"DataFilteringPhiRangeMissingEnd", "data_filtering: {enabled: true, phi_range: {min: 0}}",
     "data_filtering.phi_range.max = null: is required"},
    {"GapNegative", "analyzer_parameters: {geometry: {stator_rotor_gap: -5}}",
     "analyzer_parameters.geometry.stator_rotor_gap = -5: must be a finite number > 0"},
    {"StartFrameZero", "analyzer_parameters: {start_frame: 0}",
     "analyzer_parameters.start_frame = 0: must be >= 1"},
    {"EndBeforeStart", "analyzer_parameters: {start_frame: 100, end_frame: 50}",
     "analyzer_parameters.end_frame = 50: must be -1 (to the last frame) or >= start_frame (100)"},
    {"EndFrameMinusTwo", "analyzer_parameters: {end_frame: -2}",
     "analyzer_parameters.end_frame = -2"},
    {"BoundsMinNotBelowMax", "parameter_space: {bounds: [{name: D0, min: 500, max: 100}]}",
     "parameter_space.bounds[0].min = 500: must be finite and < max (100) for D0"},
    {"BoundsMinAboveDefaultMax", "parameter_space: {bounds: [{name: D0}, {name: beta, min: 3}]}",
     "parameter_space.bounds[1].min = 3: must be finite and < max (2) for beta"},
    // Bounds outside a parameter's physical domain fitted nonsense with success.
    {"BoundsD0Negative", "parameter_space: {bounds: [{name: D0, min: -100, max: -10}]}",
     "parameter_space.bounds[0].min = -100: D0 must be >= 0 (a diffusion coefficient"},
    {"BoundsContrastAboveOne", "parameter_space: {bounds: [{name: contrast, min: 0.1, max: 1.5}]}",
     "parameter_space.bounds[0].max = 1.5: contrast must be <= 1 (a speckle contrast"},
    {"BoundsOffsetNegative", "parameter_space: {bounds: [{name: offset, min: -1, max: 2}]}",
     "parameter_space.bounds[0].min = -1: offset must be >= 0"},
    {"BoundsShearNegative", "parameter_space: {bounds: [{name: gamma_dot_t0, min: -1}]}",
     "parameter_space.bounds[0].min = -1: gamma_dot_t0 must be >= 0"},
    // Global-phase counts beyond any real run exhausted memory or never ended; a CMA-ES step
    // beyond the unit box was accepted and used.
    {"NStartsHuge", "optimization: {nlsq: {multi_start: {n_starts: 1000000000}}}",
     "optimization.nlsq.multi_start.n_starts = 1000000000: must be <= 100000"},
    {"PopsizeHuge", "optimization: {nlsq: {cmaes: {popsize: 1e9}}}",
     "optimization.nlsq.cmaes.popsize = 1e9: must be <= 100000"},
    {"GenerationsHuge", "optimization: {nlsq: {cmaes: {max_generations: 1e12}}}",
     "optimization.nlsq.cmaes.max_generations = 1e12: must be <= 10000000"},
    {"RestartsHuge", "optimization: {nlsq: {cmaes: {max_restarts: 5000}}}",
     "optimization.nlsq.cmaes.max_restarts = 5000: must be <= 1000"},
    {"CmaesSigmaBeyondBox", "optimization: {nlsq: {cmaes: {sigma: 1e308}}}",
     "optimization.nlsq.cmaes.sigma = 1e308: must be in (0, 1]"},
    {"CmaesWarmSigmaZero", "optimization: {nlsq: {cmaes: {sigma_warmstart: 0}}}",
     "optimization.nlsq.cmaes.sigma_warmstart = 0: must be in (0, 1]"},
    {"BoundsNameMissing", "parameter_space: {bounds: [{min: 0, max: 1}]}",
     "parameter_space.bounds[0].name = null: is required"},
    // A huge Fourier order overflowed the coefficient count (1 + 2 order) in the fit.
    {"FourierOrderHuge", "optimization: {nlsq: {anti_degeneracy: {fourier_order: 1073741824}}}",
     "optimization.nlsq.anti_degeneracy.fourier_order = 1073741824: must be in [1, 1000]"},
    {"FourierOrderZero", "optimization: {nlsq: {anti_degeneracy: {fourier_order: 0}}}",
     "fourier_order = 0: must be in [1, 1000]"},
    // A NaN custom start crashed the correlation warnings; one outside the box was searched.
    {"CustomStartNan",
     "optimization: {nlsq: {multi_start: {custom_starts: [[1000, -0.5, 0, .nan, 0, 0, 0]]}}}",
     "optimization.nlsq.multi_start.custom_starts[0] = [1000, -0.5, 0, .nan, 0, 0, 0]: "
     "gamma_dot_t0 = nan must be finite and inside its bounds"},
    {"CustomStartOutsideBounds",
     "optimization: {nlsq: {multi_start: {custom_starts: [[1e308, -0.5, 0, 1e-4, 0, 0, 0]]}}}",
     "D0 = 1e+308 must be finite and inside its bounds [100, 100000]"},
    {"NWorkersNegative", "optimization: {nlsq: {multi_start: {n_workers: -3}}}",
     "optimization.nlsq.multi_start.n_workers = -3: must be an integer >= 0"},
    {"NWorkersText", "optimization: {nlsq: {multi_start: {n_workers: abc}}}",
     "optimization.nlsq.multi_start.n_workers = 'abc': must be an integer"},
    {"BoundsText", "parameter_space: {bounds: [{name: D0, min: low}]}",
     "parameter_space.bounds[0].min = 'low': must be a number"},
    {"Tolerance", "optimization: {nlsq: {tolerance: 0}}",
     "optimization.nlsq.tolerance = 0: must be > 0"},
    {"Ftol", "optimization: {nlsq: {ftol: -1.0e-8}}",
     "optimization.nlsq.ftol = -1.0e-8: must be > 0"},
    {"Xtol", "optimization: {nlsq: {xtol: -1}}", "optimization.nlsq.xtol = -1: must be > 0"},
    {"Gtol", "optimization: {nlsq: {gtol: 0.0}}", "optimization.nlsq.gtol = 0.0: must be > 0"},
    {"Sigma", "optimization: {nlsq: {sigma: 0}}",
     "optimization.nlsq.sigma = 0: must be from 1e-12 to 1e3"},
    // sigma 1e-155 made chi2 +inf (and the fit crash); 1e300 made it 0 and "converged".
    {"SigmaTiny", "optimization: {nlsq: {sigma: 1e-155}}",
     "optimization.nlsq.sigma = 1e-155: must be from 1e-12 to 1e3"},
    {"SigmaHuge", "optimization: {nlsq: {sigma: 1e300}}",
     "optimization.nlsq.sigma = 1e300: must be from 1e-12 to 1e3"},
    {"DtTiny", "analyzer_parameters: {dt: 1e-300}",
     "analyzer_parameters.dt = 1e-300: must be from 1e-9 to 1e5 [s]"},
    {"DtHuge", "analyzer_parameters: {dt: 1e300}",
     "analyzer_parameters.dt = 1e300: must be from 1e-9 to 1e5 [s]"},
    {"MaxIterationsHuge", "optimization: {nlsq: {max_iterations: 1e12}}",
     "optimization.nlsq.max_iterations = 1e12: must be at most 2147483647"},
    {"IntegerBeyondRange", "optimization: {nlsq: {global_search: {max_points: 1e19}}}",
     "optimization.nlsq.global_search.max_points = 1e19: is beyond the largest integer a config "
     "takes"},
    {"IntegerFraction", "optimization: {nlsq: {max_iterations: 2.5}}",
     "optimization.nlsq.max_iterations = 2.5: must be an integer, not a fraction"},
    {"IntegerInfinite", "optimization: {nlsq: {max_iterations: .inf}}",
     "optimization.nlsq.max_iterations = .inf: must be a finite integer"},
    {"BoundsTwice", "parameter_space: {bounds: [{name: D0, min: 1, max: 2}, {name: D0, min: 3}]}",
     "parameter_space.bounds[1].name = 'D0': D0 already has its bounds in "
     "parameter_space.bounds[0]"},
    {"AliasCycle", "a: &x [*x]\n", "YAML nested deeper than 64 levels"},
    {"AliasBomb",
     "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\nl1: &l1 [*l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, "
     "*l0, *l0]\nl2: &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1]\nl3: &l3 [*l2, *l2, "
     "*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]\nl4: &l4 [*l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, "
     "*l3, *l3]\nl5: &l5 [*l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4, *l4]\nl6: &l6 [*l5, *l5, "
     "*l5, *l5, *l5, *l5, *l5, *l5, *l5, *l5]\nl7: &l7 [*l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, "
     "*l6, *l6]\nl8: &l8 [*l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7, *l7]\n",
     "the YAML tree expands to more than 100000 nodes"},
    {"PerAngleMode", "optimization: {nlsq: {anti_degeneracy: {per_angle_mode: averaged}}}",
     "optimization.nlsq.anti_degeneracy.per_angle_mode = 'averaged': must be one of individual, "
     "constant, auto, fourier"},
    {"Solver", "optimization: {nlsq: {solver: scipy}}",
     "optimization.nlsq.solver = 'scipy': must be one of lm, ceres"},
    {"GlobalSearchMethod", "optimization: {nlsq: {global_search: {method: multi-start}}}",
     "optimization.nlsq.global_search.method = 'multi-start': must be one of auto, off, "
     "multi_start, cmaes"},
    {"SamplingStrategy", "optimization: {nlsq: {multi_start: {sampling_strategy: lhs}}}",
     "optimization.nlsq.multi_start.sampling_strategy = 'lhs': must be one of latin_hypercube, "
     "sobol, random"},
    {"CmaesPreset", "optimization: {nlsq: {cmaes: {preset: cmaes-turbo}}}",
     "optimization.nlsq.cmaes.preset = 'cmaes-turbo': must be one of cmaes-fast, cmaes, "
     "cmaes-global, cmaes-hpc"},
    {"CmaesRestartStrategy", "optimization: {nlsq: {cmaes: {restart_strategy: lpop}}}",
     "optimization.nlsq.cmaes.restart_strategy = 'lpop': must be one of ipop, bipop, none"},
    {"AntiDegeneracyEnableText", "optimization: {nlsq: {anti_degeneracy: {enable: maybe}}}",
     "optimization.nlsq.anti_degeneracy.enable = 'maybe': must be true or false"},
    {"CheckpointFrequency", "optimization: {streaming: {checkpoint_frequency: 0}}",
     "optimization.streaming.checkpoint_frequency = 0: must be > 0"},
    {"CheckpointFrequencyUnderNlsq",
     "optimization: {nlsq: {streaming: {checkpoint_frequency: -1}}}",
     "optimization.nlsq.streaming.checkpoint_frequency = -1: must be > 0"},
    {"CheckpointMinInterval", "optimization: {streaming: {checkpoint_min_interval_seconds: -2}}",
     "optimization.streaming.checkpoint_min_interval_seconds = -2: must be >= 0 (seconds)"},
    {"KeepLastCheckpoints", "optimization: {streaming: {keep_last_checkpoints: 0}}",
     "optimization.streaming.keep_last_checkpoints = 0: must be >= 1"},
    {"MaxRetries", "optimization: {streaming: {max_retries_per_batch: -1}}",
     "optimization.streaming.max_retries_per_batch = -1: must be >= 0"},
    {"BatchSize", "optimization: {streaming: {batch_size: 0}}",
     "optimization.streaming.batch_size = 0: must be >= 1"},
    {"MinSuccessRate", "optimization: {streaming: {min_success_rate: 1.5}}",
     "optimization.streaming.min_success_rate = 1.5: must be in [0, 1]"},
    {"CheckpointDirEmpty", "optimization: {streaming: {checkpoint_dir: ''}}",
     "optimization.streaming.checkpoint_dir = '': must be a non-empty folder path"},
    {"MemoryLimit", "performance: {memory_limit_gb: 0}",
     "performance.memory_limit_gb = 0: must be > 0"},
    {"MemoryLimitText", "performance: {memory_limit_gb: lots}",
     "performance.memory_limit_gb = 'lots': must be a number"},
    {"CpuThreadsZero", "performance: {computation: {cpu_threads: 0}}",
     "performance.computation.cpu_threads = 0: must be an integer >= 1 or 'auto'"},
    {"CpuThreadsText", "performance: {computation: {cpu_threads: many}}",
     "performance.computation.cpu_threads = 'many': must be an integer >= 1 or 'auto'"},
    {"StrategyOverride", "performance: {strategy_override: turbo}",
     "performance.strategy_override = 'turbo': must be one of standard, large, chunked, streaming"},
    {"Backend", "performance: {backend: opencl}",
     "performance.backend = 'opencl': must be one of cpu, cuda, auto"},
    {"FastModeText", "performance: {fast_mode: 3}",
     "performance.fast_mode = 3: must be true or false"},
    {"InitialValuesLength", "initial_parameters: {parameter_names: [D0, alpha], values: [1, 2, 3]}",
     "initial_parameters.values = [1, 2, 3]: must have 2 values, one per "
     "initial_parameters.parameter_names entry"},
    {"InitialValuesDefaultNamesLength", "initial_parameters: {values: [1, 2, 3]}",
     "initial_parameters.values = [1, 2, 3]: must have 7 values"},
    {"InitialUnknownName", "initial_parameters: {parameter_names: [D0, foo], values: [1, 2]}",
     "initial_parameters.parameter_names[1] = 'foo': unknown parameter; expected one of D0"},
    {"InitialDuplicateName", "initial_parameters: {parameter_names: [phi0, phi_0], values: [1, 2]}",
     "initial_parameters.parameter_names[1] = 'phi_0': appears twice"},
    {"PerAngleLengths",
     "initial_parameters: {per_angle_scaling: {contrast: [0.3, 0.3], offset: [1, 1, 1]}}",
     "initial_parameters.per_angle_scaling.offset = [1, 1, 1]: must have as many values as "
     "per_angle_scaling.contrast (2)"},
    {"FixedUnknown", "initial_parameters: {fixed_parameters: [gamma]}",
     "initial_parameters.fixed_parameters[0] = 'gamma': unknown parameter"},
    {"PhiRangeMissingEnd", "phi_filtering: {enabled: true, target_ranges: [{min_angle: 5}]}",
     "phi_filtering.target_ranges[0].max_angle = null: is required"},
    {"SectionNotMapping", "optimization: 5", "optimization = 5: must be a mapping"},
    {"QTolerance", "q_tolerance_fraction: -0.1",
     "q_tolerance_fraction = -0.1: must be a finite number > 0"},
    {"SimulationFrames", "simulation: {frames: 2}",
     "simulation.frames = 2: must be in [3, 1000000]"},
    {"SimulationUnknownParameter", "simulation: {parameters: {D1: 3}}",
     "simulation.parameters.D1 = 3: not a parameter of laminar_flow mode"},
    {"SimulationContrastLength", "simulation: {phi_angles: [0, 90], contrast: [0.1, 0.2, 0.3]}",
     "simulation.contrast = [0.1, 0.2, 0.3]: must be one number or one per angle (2)"},
    {"SimulationNoise", "simulation: {noise_sigma: -0.1}",
     "simulation.noise_sigma = -0.1: must be >= 0"},
    {"SimulationDtype", "simulation: {dtype: int8}",
     "simulation.dtype = 'int8': must be float32 or float64"},
    {"SimulationCompression", "simulation: {compression: zstd}",
     "simulation.compression = 'zstd': must be one of none, gzip, lzf"},
    {"SimulationFormat", "simulation: {format: nexus}",
     "simulation.format = 'nexus': must be aps_u or aps_old"},
    {"PerformanceLogEnabledText", "logging: {performance: {enabled: often}}",
     "logging.performance.enabled = 'often': must be true or false"},
    {"PerformanceLogLevel", "logging: {performance: {level: LOUD}}",
     "logging.performance.level = 'LOUD': must be one of DEBUG, INFO, WARNING"},
    {"PerformanceLogLevelNumber", "logging: {performance: {level: 10}}",
     "logging.performance.level = 10: must be one of DEBUG, INFO, WARNING"},
    {"PerformanceLogThresholdNegative", "logging: {performance: {threshold_seconds: -0.5}}",
     "logging.performance.threshold_seconds = -0.5: must be a finite number >= 0 [s]"},
    {"PerformanceLogThresholdText", "logging: {performance: {threshold_seconds: fast}}",
     "logging.performance.threshold_seconds = 'fast': must be a number"},
    {"PerformanceLogFilenameAbsolute", "logging: {performance: {filename: /tmp/perf.log}}",
     "logging.performance.filename = '/tmp/perf.log': must be a file name or a relative path "
     "inside the output folder"},
    {"PerformanceLogFilenameParent", "logging: {performance: {filename: logs/../../perf.log}}",
     "logging.performance.filename = 'logs/../../perf.log': must be a file name"},
    {"PerformanceLogFilenameEmpty", "logging: {performance: {filename: ''}}",
     "logging.performance.filename = '': must be a file name"},
    {"PerformanceLogFilenameFolder", "logging: {performance: {filename: logs/}}",
     "logging.performance.filename = 'logs/': must be a file name"},
};

INSTANTIATE_TEST_SUITE_P(AllRules, ConfigRuleTest,
                         ::testing::ValuesIn(std::begin(kRules), std::end(kRules)),
                         [](const ::testing::TestParamInfo<RuleCase>& param_info) {
                           return std::string(param_info.param.name);
                         });

TEST(ConfigModeTest, UnknownAnalysisModeNamesPathAndChoices) {
  const std::string message = ConfigErrorOf("analysis_mode: turbulent\n");
  EXPECT_THAT(message, HasSubstr("test.yaml: analysis_mode = 'turbulent': must be one of " +
                                 AnalysisModeNames()));
  // Every mode of the catalog and its aliases is named.
  EXPECT_THAT(message, HasSubstr("static, static_isotropic, static_anisotropic, laminar_flow, "
                                 "two_component, heterodyne"));
}

// The physical domains of the mode catalog hold for two_component's transport coefficients as
// for D0; the message names the bounds entry, the value and the parameter.
TEST(ConfigModeTest, TwoComponentBoundsStayInsideThePhysicalDomain) {
  EXPECT_THAT(ConfigErrorOf("analysis_mode: two_component\n"
                            "parameter_space: {bounds: [{name: v0, min: 0, max: 10}, "
                            "{name: D0_ref, min: -1}]}\n"),
              HasSubstr("test.yaml: parameter_space.bounds[1].min = -1: D0_ref must be >= 0 (a "
                        "transport coefficient; docs/configuration.md, Model and data)"));
  EXPECT_THAT(ConfigErrorOf("analysis_mode: heterodyne\n"
                            "parameter_space: {bounds: [{name: D0_sample, min: -5, max: 10}]}\n"),
              HasSubstr("parameter_space.bounds[0].min = -5: D0_sample must be >= 0"));
  EXPECT_THAT(ConfigErrorOf("analysis_mode: two_component\n"
                            "parameter_space: {bounds: [{name: contrast, min: 0, max: 2}]}\n"),
              HasSubstr("parameter_space.bounds[0].max = 2: contrast must be <= 1"));
}

TEST(ConfigModeTest, TwoComponentBoundsMinBelowMaxNamesTheParameter) {
  EXPECT_THAT(ConfigErrorOf("analysis_mode: two_component\n"
                            "parameter_space: {bounds: [{name: f0, min: 0.9, max: 0.1}]}\n"),
              HasSubstr("parameter_space.bounds[0].min = 0.9: must be finite and < max (0.1) for "
                        "f0"));
}

// Two_component's values are counted against its 14 names; unknown names list every mode's.
TEST(ConfigModeTest, TwoComponentInitialValuesAndUnknownNames) {
  EXPECT_THAT(ConfigErrorOf("analysis_mode: two_component\n"
                            "initial_parameters: {values: [1, 2, 3]}\n"),
              HasSubstr("initial_parameters.values = [1, 2, 3]: must have 14 values"));
  const std::string unknown = ConfigErrorOf(
      "analysis_mode: two_component\ninitial_parameters: {parameter_names: [v0, beta_v]}\n");
  EXPECT_THAT(unknown, HasSubstr("initial_parameters.parameter_names[1] = 'beta_v': unknown "
                                 "parameter; expected one of D0, alpha, D_offset, gamma_dot_t0, "
                                 "beta, gamma_dot_t_offset, phi0, D0_ref, alpha_ref"));
  EXPECT_THAT(unknown, HasSubstr("phi0_het, contrast, offset"));
  EXPECT_THAT(ConfigErrorOf("analysis_mode: two_component\nsimulation: {parameters: {D1: 3}}\n"),
              HasSubstr("simulation.parameters.D1 = 3: not a parameter of two_component mode "
                        "(expected D0_ref, alpha_ref, D_offset_ref, D0_sample"));
}

TEST(ConfigModeTest, AutoAveragedSpellingIsExplained) {
  const std::string message = ConfigErrorOf(
      "analysis_mode: laminar_flow\noptimization: {nlsq: {anti_degeneracy: {per_angle_mode: "
      "auto_averaged}}}\n");
  EXPECT_THAT(message, HasSubstr("auto_averaged is what auto resolves to"));
}

TEST(ConfigModeTest, NonMappingDocumentIsAnError) {
  const std::string message = ConfigErrorOf("- just\n- a list\n");
  EXPECT_THAT(message, HasSubstr("must be a mapping"));
}

// ValidateConfigForData: the checks that need the data set's shape and the planned strategy.
std::string ConfigForDataErrorOf(const std::string& yaml, const FitShape& shape) {
  Config config = ParseConfig(yaml, "test.yaml");
  config.source_path = "fit.yaml";
  try {
    ValidateConfigForData(config, shape);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(ConfigForDataTest, PerAngleListsNeedOneValuePerAngle) {
  const std::string yaml = "analysis_mode: laminar_flow\ninitial_parameters:\n";
  const std::string contrast = yaml + "  per_angle_scaling: {contrast: [0.3, 0.3, 0.3]}\n";
  const std::string offset = yaml + "  per_angle_scaling: {offset: [1.0, 1.0]}\n";
  EXPECT_EQ(ConfigForDataErrorOf(contrast, {2, StrategyKind::kStandard}),
            "fit.yaml: initial_parameters.per_angle_scaling.contrast has 3 values but the data "
            "has 2 angles");
  EXPECT_EQ(ConfigForDataErrorOf(contrast, {3, StrategyKind::kStandard}), "");
  EXPECT_EQ(ConfigForDataErrorOf(offset, {3, StrategyKind::kStandard}),
            "fit.yaml: initial_parameters.per_angle_scaling.offset has 2 values but the data has "
            "3 angles");
  EXPECT_EQ(ConfigForDataErrorOf("analysis_mode: static\n", {5, StrategyKind::kLarge}), "");
}

// The Ceres solver fits the linear loss only (docs/design.md section 4c).
TEST(ConfigForDataTest, CeresRefusesARobustLoss) {
  EXPECT_EQ(ConfigForDataErrorOf("analysis_mode: static\noptimization: {nlsq: {solver: ceres, "
                                 "loss: huber}}\n",
                                 {3, StrategyKind::kStandard}),
            "fit.yaml: optimization.nlsq.loss = huber needs the LM core (the Ceres solver fits "
            "the linear loss only): use optimization.nlsq.solver: lm, or loss: linear");
  EXPECT_EQ(ConfigForDataErrorOf("analysis_mode: static\noptimization: {nlsq: {loss: huber}}\n",
                                 {3, StrategyKind::kStandard}),
            "");
}

TEST(ConfigForDataTest, CeresNeedsTheStandardStrategy) {
  const std::string yaml = "analysis_mode: static\noptimization: {nlsq: {solver: ceres}}\n";
  EXPECT_EQ(ConfigForDataErrorOf(yaml, {3, StrategyKind::kStandard}), "");
  EXPECT_EQ(ConfigForDataErrorOf(yaml, {3, StrategyKind::kChunked}),
            "fit.yaml: optimization.nlsq.solver = ceres needs the standard strategy (this fit "
            "uses chunked): use --strategy standard, or solver lm");
}

}  // namespace
}  // namespace homodyne
