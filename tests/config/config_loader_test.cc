// ParseConfig / LoadConfig: defaults, aliases, fallbacks, key locations, unknown-key warnings,
// malformed YAML and missing files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "config_test_util.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using testing::JoinWarnings;
using ::testing::Not;

TEST(ConfigDefaultsTest, MinimalLaminarConfigGetsDocumentedDefaults) {
  const Config config = ParseConfig("analysis_mode: laminar_flow\n", "min.yaml");

  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  EXPECT_EQ(config.analysis_mode, AnalysisMode::kLaminarFlow);
  EXPECT_EQ(config.source_path, "");
  EXPECT_DOUBLE_EQ(config.data.dt_seconds, 0.001);
  EXPECT_DOUBLE_EQ(config.geometry.dt_seconds, 0.001);
  EXPECT_DOUBLE_EQ(config.data.wavevector_q_target, 0.0054);
  EXPECT_DOUBLE_EQ(config.geometry.gap_angstrom, 2.0e6);
  EXPECT_EQ(config.data.start_frame, 1);
  EXPECT_EQ(config.data.end_frame, -1);
  EXPECT_DOUBLE_EQ(config.data.q_tolerance_fraction, 0.1);
  EXPECT_FALSE(config.data.phi_filtering_enabled);
  EXPECT_EQ(config.nlsq.max_iterations, 100);
  EXPECT_DOUBLE_EQ(config.nlsq.tolerance, 1e-8);
  EXPECT_DOUBLE_EQ(config.nlsq.xtol, 1e-8);
  EXPECT_DOUBLE_EQ(config.nlsq.gtol, 1e-8);
  EXPECT_DOUBLE_EQ(config.nlsq.sigma, 0.01);
  EXPECT_EQ(config.nlsq.per_angle_mode, PerAngleModeRequest::kIndividual);
  EXPECT_FALSE(config.nlsq.per_angle_mode_from_config);
  EXPECT_TRUE(config.streaming.enable_checkpoints);
  EXPECT_EQ(config.streaming.checkpoint_dir, "./checkpoints");
  EXPECT_EQ(config.streaming.checkpoint_frequency, 10);
  EXPECT_EQ(config.streaming.keep_last_checkpoints, 3);
  EXPECT_DOUBLE_EQ(config.streaming.checkpoint_min_interval_seconds, 5.0);
  EXPECT_EQ(config.streaming.max_retries_per_batch, 2);
  EXPECT_FALSE(config.streaming.batch_size.has_value());
  EXPECT_FALSE(config.performance.strategy_override.has_value());
  EXPECT_FALSE(config.performance.memory_limit_gb.has_value());
  EXPECT_FALSE(config.performance.cpu_threads.has_value());
  EXPECT_EQ(config.performance.backend, BackendKind::kCpu);
  EXPECT_FALSE(config.performance.fast_mode);
  EXPECT_FALSE(config.simulation.present);
}

TEST(ConfigDefaultsTest, BoundsDefaultToReferenceSection22InModelOrder) {
  const Config config = ParseConfig("analysis_mode: laminar_flow\n", "min.yaml");

  ASSERT_EQ(config.bounds.size(), 9u);
  EXPECT_EQ(config.bounds[0].name, "D0");
  EXPECT_EQ(config.bounds[6].name, "phi0");
  EXPECT_EQ(config.bounds[7].name, "contrast");
  EXPECT_EQ(config.bounds[8].name, "offset");
  EXPECT_DOUBLE_EQ(config.BoundOf("D0").min, 1e2);
  EXPECT_DOUBLE_EQ(config.BoundOf("D0").max, 1e5);
  EXPECT_DOUBLE_EQ(config.BoundOf("gamma_dot_t0").min, 1e-6);
  EXPECT_DOUBLE_EQ(config.BoundOf("gamma_dot_t_offset").max, 0.1);
  EXPECT_DOUBLE_EQ(config.BoundOf("offset").min, 0.5);
  EXPECT_DOUBLE_EQ(config.BoundOf("phi_0").max, 10.0);  // alias
  EXPECT_THROW(config.BoundOf("nonsense"), ConfigError);
}

TEST(ConfigDefaultsTest, StaticModeHasFiveBoundsAndThreeInitialNames) {
  const Config config = ParseConfig("analysis_mode: static_isotropic\n", "s.yaml");

  EXPECT_EQ(config.analysis_mode, AnalysisMode::kStatic);
  EXPECT_EQ(config.bounds.size(), 5u);
  EXPECT_EQ(config.initial.parameter_names, (std::vector<std::string>{"D0", "alpha", "D_offset"}));
  EXPECT_FALSE(config.initial.values.has_value());
}

TEST(ConfigDefaultsTest, MissingAnalysisModeWarnsAndUsesLaminarFlow) {
  const Config config = ParseConfig("analyzer_parameters: {dt: 0.5}\n", "m.yaml");

  EXPECT_EQ(config.analysis_mode, AnalysisMode::kLaminarFlow);
  EXPECT_THAT(JoinWarnings(config), HasSubstr("analysis_mode"));
}

TEST(ConfigDefaultsTest, EmptyDocumentGivesDefaults) {
  const Config config = ParseConfig("", "empty.yaml");
  EXPECT_EQ(config.analysis_mode, AnalysisMode::kLaminarFlow);
}

TEST(ConfigAliasTest, ParameterAliasesMapToCanonicalNames) {
  EXPECT_EQ(CanonicalParameterName("gamma_dot_0"), "gamma_dot_t0");
  EXPECT_EQ(CanonicalParameterName("gamma_dot_t_0"), "gamma_dot_t0");
  EXPECT_EQ(CanonicalParameterName("gamma_dot_offset"), "gamma_dot_t_offset");
  EXPECT_EQ(CanonicalParameterName("phi_0"), "phi0");
  EXPECT_EQ(CanonicalParameterName("D0"), "D0");
}

TEST(ConfigAliasTest, BoundsAndInitialValuesAcceptAliases) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
initial_parameters:
  parameter_names: [D0, alpha, D_offset, gamma_dot_0, beta, gamma_dot_offset, phi_0, contrast]
  values: [1000, -0.5, 10, 0.001, 0, 0, 2, 0.4]
parameter_space:
  bounds:
    - {name: gamma_dot_0, min: 1.0e-5, max: 0.1}
    - {name: phi_0, min: -5, max: 5}
    - {name: D0, min: 500}
)",
                                    "a.yaml");

  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  EXPECT_EQ(config.initial.parameter_names[3], "gamma_dot_t0");
  EXPECT_EQ(config.initial.parameter_names[5], "gamma_dot_t_offset");
  EXPECT_EQ(config.initial.parameter_names[6], "phi0");
  ASSERT_TRUE(config.initial.values.has_value());
  EXPECT_DOUBLE_EQ((*config.initial.values)[7], 0.4);
  EXPECT_DOUBLE_EQ(config.BoundOf("gamma_dot_t0").min, 1e-5);
  EXPECT_DOUBLE_EQ(config.BoundOf("gamma_dot_t0").max, 0.1);
  EXPECT_DOUBLE_EQ(config.BoundOf("phi0").min, -5.0);
  EXPECT_DOUBLE_EQ(config.BoundOf("D0").min, 500.0);
  EXPECT_DOUBLE_EQ(config.BoundOf("D0").max, 1e5);  // only min overridden
}

TEST(ConfigAliasTest, LaminarNamesInStaticConfigAreDroppedWithWarning) {
  const Config config = ParseConfig(R"(
analysis_mode: static
initial_parameters:
  parameter_names: [D0, alpha, D_offset, phi0]
  values: [1000, -0.5, 10, 2]
parameter_space:
  bounds:
    - {name: phi0, min: -5, max: 5}
)",
                                    "a.yaml");

  EXPECT_EQ(config.initial.parameter_names, (std::vector<std::string>{"D0", "alpha", "D_offset"}));
  EXPECT_EQ(config.initial.values->size(), 3u);
  EXPECT_THAT(JoinWarnings(config), HasSubstr("'phi0', not a parameter of static"));
  EXPECT_EQ(config.bounds.size(), 5u);
}

// "A parameter of another mode" holds between all three modes of the catalog: two_component's
// names in a static config and laminar_flow's in a two_component config are accepted and dropped.
TEST(ConfigAliasTest, OtherModesNamesAreDroppedWithWarningInEveryMode) {
  const Config stat = ParseConfig(R"(
analysis_mode: static
initial_parameters:
  parameter_names: [D0, v0, alpha, D_offset, phi0_het]
  values: [1000, 5, -0.5, 10, 1]
parameter_space:
  bounds:
    - {name: D0_ref, min: 0, max: 10}
simulation:
  parameters: {f1: 0.2, D0: 200}
)",
                                  "s.yaml");
  EXPECT_EQ(stat.initial.parameter_names, (std::vector<std::string>{"D0", "alpha", "D_offset"}));
  EXPECT_EQ(*stat.initial.values, (std::vector<double>{1000, -0.5, 10}));
  EXPECT_EQ(stat.bounds.size(), 5u);
  EXPECT_EQ(stat.simulation.physical_parameters, (std::vector<double>{200.0, 0.5, 10.0}));
  const std::string stat_warnings = JoinWarnings(stat);
  EXPECT_THAT(stat_warnings, HasSubstr("'v0', not a parameter of static mode; ignored"));
  EXPECT_THAT(stat_warnings, HasSubstr("'phi0_het', not a parameter of static mode; ignored"));
  EXPECT_THAT(stat_warnings, HasSubstr("simulation.parameters.f1: not a parameter of static mode"));
  EXPECT_THAT(stat_warnings, Not(HasSubstr("D0_ref")));  // a bounds entry of another mode: silent

  const Config two = ParseConfig(R"(
analysis_mode: heterodyne
initial_parameters:
  parameter_names: [gamma_dot_t0, D0_ref, phi0, f0]
  values: [0.01, 300, 1, 0.25]
parameter_space:
  bounds:
    - {name: phi0, min: -5, max: 5}
    - {name: D0, min: 1, max: 2}
    - {name: f0, min: 0.1, max: 0.9}
    - {name: bogus, min: 0, max: 1}
)",
                                 "t.yaml");
  EXPECT_EQ(two.analysis_mode, AnalysisMode::kTwoComponent);
  EXPECT_EQ(two.initial.parameter_names, (std::vector<std::string>{"D0_ref", "f0"}));
  EXPECT_EQ(*two.initial.values, (std::vector<double>{300, 0.25}));
  ASSERT_EQ(two.bounds.size(), 16u);
  EXPECT_DOUBLE_EQ(two.BoundOf("f0").min, 0.1);
  EXPECT_DOUBLE_EQ(two.BoundOf("f0").max, 0.9);
  const std::string two_warnings = JoinWarnings(two);
  EXPECT_THAT(two_warnings, HasSubstr("'gamma_dot_t0', not a parameter of two_component mode"));
  EXPECT_THAT(two_warnings, HasSubstr("'phi0', not a parameter of two_component mode"));
  EXPECT_THAT(two_warnings, HasSubstr("parameter_space.bounds[3].name = 'bogus': not a parameter"));
  EXPECT_EQ(two.warnings.size(), 3u) << two_warnings;
}

// Without a config entry, two_component's bounds and simulation truth are the mode catalog's
// (the successor's registry).
TEST(ConfigDefaultsTest, TwoComponentDefaultsComeFromTheModeCatalog) {
  const Config config = ParseConfig("analysis_mode: two_component\nsimulation: {}\n", "t.yaml");
  ASSERT_EQ(config.bounds.size(), 16u);
  EXPECT_EQ(config.bounds[0].name, "D0_ref");
  EXPECT_DOUBLE_EQ(config.bounds[0].min, 0.0);
  EXPECT_DOUBLE_EQ(config.bounds[0].max, 1e6);
  EXPECT_EQ(config.bounds[8].name, "v_offset");
  EXPECT_DOUBLE_EQ(config.bounds[8].min, -100.0);
  EXPECT_EQ(config.bounds[15].name, "offset");
  EXPECT_DOUBLE_EQ(config.bounds[15].min, 0.5);
  EXPECT_EQ(config.initial.parameter_names, PhysicalParameterNames(AnalysisMode::kTwoComponent));
  EXPECT_FALSE(config.initial.values.has_value());
  EXPECT_EQ(config.simulation.physical_parameters,
            (std::vector<double>{1e4, 0, 0, 1e4, 0, 0, 1e3, 1, 0, 0.5, 0, 0, 0, 0}));
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
}

TEST(ConfigDataTest, FolderPlusNameWinsOverFilePath) {
  const Config config = ParseConfig(R"(
analysis_mode: static
experimental_data:
  file_path: ./other.hdf
  data_folder_path: ./data/sample
  data_file_name: run.hdf
)",
                                    "d.yaml");
  EXPECT_EQ(config.data.file_path, "./data/sample/run.hdf");
}

TEST(ConfigDataTest, FilePathUsedWithoutFolderAndName) {
  const Config config =
      ParseConfig("analysis_mode: static\nexperimental_data: {file_path: /x/y.h5}\n", "d.yaml");
  EXPECT_EQ(config.data.file_path, "/x/y.h5");
}

TEST(ConfigDataTest, AnalyzerParametersAndPhiFiltering) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
analyzer_parameters:
  dt: 0.1
  start_frame: 10
  end_frame: 500
  scattering: {wavevector_q: 0.0237}
  geometry: {stator_rotor_gap: 1.5e6}
q_tolerance_fraction: 0.05
phi_filtering:
  enabled: true
  target_ranges:
    - {min_angle: -10, max_angle: 10, description: parallel}
    - {min_angle: 170, max_angle: -170}
)",
                                    "d.yaml");

  EXPECT_DOUBLE_EQ(config.data.dt_seconds, 0.1);
  EXPECT_DOUBLE_EQ(config.geometry.dt_seconds, 0.1);
  EXPECT_EQ(config.data.start_frame, 10);
  EXPECT_EQ(config.data.end_frame, 500);
  EXPECT_DOUBLE_EQ(config.data.wavevector_q_target, 0.0237);
  EXPECT_DOUBLE_EQ(config.geometry.q_inv_angstrom, 0.0237);
  EXPECT_DOUBLE_EQ(config.geometry.gap_angstrom, 1.5e6);
  EXPECT_DOUBLE_EQ(config.data.q_tolerance_fraction, 0.05);
  EXPECT_TRUE(config.data.phi_filtering_enabled);
  ASSERT_EQ(config.data.phi_ranges.size(), 2u);
  EXPECT_DOUBLE_EQ(config.data.phi_ranges[1].min_angle_degrees, 170.0);
  EXPECT_DOUBLE_EQ(config.data.phi_ranges[1].max_angle_degrees, -170.0);
}

// analyzer_parameters.scattering.wavevector_q: a list or `all`, q_fit, and data_filtering
// (docs/configuration.md, Several q rings).
TEST(ConfigDataTest, SeveralRingsAndDataFiltering) {
  const Config listed = ParseConfig(R"(
analysis_mode: static
analyzer_parameters:
  scattering: {wavevector_q: [0.006, 0.0054], q_fit: joint}
data_filtering:
  enabled: true
  q_range: {min: 0.001, max: 0.01}
  phi_range: {min: 170, max: -170}
  fallback_on_empty: false
)",
                                    "rings.yaml");
  EXPECT_THAT(listed.data.wavevector_q_list, ::testing::ElementsAre(0.006, 0.0054));
  EXPECT_DOUBLE_EQ(listed.data.wavevector_q_target, 0.006);
  EXPECT_DOUBLE_EQ(listed.geometry.q_inv_angstrom, 0.006);
  EXPECT_FALSE(listed.data.all_q_rings);
  EXPECT_EQ(listed.data.q_fit, QFitMode::kJoint);
  ASSERT_TRUE(listed.data.data_q_range.has_value());
  EXPECT_DOUBLE_EQ(listed.data.data_q_range->second, 0.01);
  ASSERT_TRUE(listed.data.data_phi_range.has_value());
  EXPECT_DOUBLE_EQ(listed.data.data_phi_range->min_angle_degrees, 170.0);
  EXPECT_FALSE(listed.data.data_filtering_fallback_on_empty);
  EXPECT_THAT(BriefReport(listed), HasSubstr("q targets: 0.006, 0.0054 1/A (q_fit: joint)"));

  const Config all = ParseConfig(
      "analysis_mode: static\nanalyzer_parameters: {scattering: {wavevector_q: ALL}}\n"
      "data_filtering: {enabled: false, q_range: {min: 1, max: 2}}\n",
      "all.yaml");
  EXPECT_TRUE(all.data.all_q_rings);
  EXPECT_TRUE(all.data.wavevector_q_list.empty());
  EXPECT_EQ(all.data.q_fit, QFitMode::kIndependent);
  EXPECT_FALSE(all.data.data_q_range.has_value());  // data_filtering not enabled: not read
  // One number: today's single ring, nothing of the rings set.
  const Config one = ParseConfig(
      "analysis_mode: static\nanalyzer_parameters: {scattering: {wavevector_q: 0.0237}}\n",
      "one.yaml");
  EXPECT_DOUBLE_EQ(one.data.wavevector_q_target, 0.0237);
  EXPECT_TRUE(one.data.wavevector_q_list.empty());
  EXPECT_FALSE(one.data.all_q_rings);
  EXPECT_FALSE(one.data.data_phi_range.has_value());
}

TEST(ConfigDataTest, DtAndGapFallbacks) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
experimental_data:
  dt: 0.25
  sample_detector_distance: 3.0e6
)",
                                    "d.yaml");
  EXPECT_DOUBLE_EQ(config.data.dt_seconds, 0.25);
  EXPECT_DOUBLE_EQ(config.geometry.gap_angstrom, 3.0e6);

  const Config config2 = ParseConfig(R"(
analysis_mode: laminar_flow
experimental_data:
  geometry: {stator_rotor_gap: 4.0e6}
  sample_detector_distance: 3.0e6
)",
                                     "d.yaml");
  EXPECT_DOUBLE_EQ(config2.geometry.gap_angstrom, 4.0e6);
}

TEST(ConfigDataTest, LegacyFlatKeysWorkWithDeprecationWarning) {
  const Config config =
      ParseConfig("analysis_mode: static\ndata_file: a.h5\ndt: 0.5\nstart_frame: 3\n", "l.yaml");
  EXPECT_EQ(config.data.file_path, "a.h5");
  EXPECT_DOUBLE_EQ(config.data.dt_seconds, 0.5);
  EXPECT_EQ(config.data.start_frame, 3);
  EXPECT_THAT(JoinWarnings(config), HasSubstr("'dt' is a deprecated flat key"));
}

TEST(ConfigInitialTest, PerAngleScalingAndFixedParameters) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
initial_parameters:
  per_angle_scaling:
    contrast: [0.3, 0.31, 0.29]
    offset: [1.0, 1.01, 0.99]
  fixed_parameters: [phi_0, beta]
)",
                                    "i.yaml");
  ASSERT_TRUE(config.initial.per_angle_contrast.has_value());
  EXPECT_EQ(config.initial.per_angle_contrast->size(), 3u);
  EXPECT_DOUBLE_EQ((*config.initial.per_angle_offset)[2], 0.99);
  EXPECT_EQ(config.initial.fixed_parameters, (std::vector<std::string>{"phi0", "beta"}));
}

TEST(ConfigNlsqTest, NlsqKeysAndPerAngleMode) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
optimization:
  nlsq:
    max_iterations: 250
    tolerance: 1.0e-6
    xtol: 1.0e-7
    gtol: 1.0e-9
    sigma: 0.02
    anti_degeneracy:
      enable: false
      per_angle_mode: fourier
      constant_scaling_threshold: 4
      fourier_order: 3
)",
                                    "n.yaml");
  EXPECT_EQ(config.nlsq.max_iterations, 250);
  EXPECT_DOUBLE_EQ(config.nlsq.tolerance, 1e-6);
  EXPECT_DOUBLE_EQ(config.nlsq.xtol, 1e-7);
  EXPECT_DOUBLE_EQ(config.nlsq.gtol, 1e-9);
  EXPECT_DOUBLE_EQ(config.nlsq.sigma, 0.02);
  EXPECT_FALSE(config.nlsq.anti_degeneracy_enabled);
  EXPECT_EQ(config.nlsq.per_angle_mode, PerAngleModeRequest::kFourier);
  EXPECT_TRUE(config.nlsq.per_angle_mode_from_config);
  EXPECT_EQ(config.nlsq.constant_scaling_threshold, 4);
  EXPECT_EQ(config.nlsq.fourier_order, 3);
}

// The robust loss (docs/model.md, Robust loss): scipy's names in any case, f_scale, and x_scale in
// the reference's forms; linear with f_scale 1 and x_scale jac by default.
TEST(ConfigNlsqTest, LossFScaleAndXScale) {
  const Config defaults = ParseConfig("analysis_mode: static\n", "d.yaml");
  EXPECT_EQ(defaults.nlsq.loss.function, LossFunction::kLinear);
  EXPECT_EQ(defaults.nlsq.loss.f_scale, 1.0);
  EXPECT_EQ(defaults.nlsq.x_scale, "jac");
  for (const auto& [text, function] :
       {std::pair{"soft_l1", LossFunction::kSoftL1}, std::pair{"Huber", LossFunction::kHuber},
        std::pair{"cauchy", LossFunction::kCauchy}, std::pair{"ARCTAN", LossFunction::kArctan},
        std::pair{"linear", LossFunction::kLinear}}) {
    const Config config = ParseConfig(std::string("analysis_mode: static\noptimization:\n  nlsq:\n"
                                                  "    loss: ") +
                                          text + "\n    f_scale: 2.5\n    x_scale: 0.5\n",
                                      "l.yaml");
    EXPECT_EQ(config.nlsq.loss.function, function) << text;
    EXPECT_EQ(config.nlsq.loss.f_scale, 2.5);
    EXPECT_EQ(config.nlsq.x_scale, "0.5");
    EXPECT_EQ(JoinWarnings(config), "") << text;
  }
  const Config listed =
      ParseConfig("analysis_mode: static\noptimization: {nlsq: {x_scale: [1, 2, 3]}}\n", "x.yaml");
  EXPECT_EQ(listed.nlsq.x_scale, "list");
}

TEST(ConfigNlsqTest, FtolKeyAndReferenceSpellingOfConstant) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
optimization:
  nlsq:
    ftol: 1.0e-5
    anti_degeneracy: {per_angle_mode: fixed_constant}
)",
                                    "n.yaml");
  EXPECT_DOUBLE_EQ(config.nlsq.tolerance, 1e-5);
  EXPECT_EQ(config.nlsq.per_angle_mode, PerAngleModeRequest::kConstant);
}

TEST(ConfigNlsqTest, PerAngleModeInAnyCase) {
  const Config config = ParseConfig(
      "analysis_mode: static\noptimization: {nlsq: {anti_degeneracy: {per_angle_mode: Auto}}}\n",
      "n.yaml");
  EXPECT_EQ(config.nlsq.per_angle_mode, PerAngleModeRequest::kAuto);
  EXPECT_THAT(BriefReport(config), HasSubstr(", per_angle_mode auto\n"));
}

TEST(ConfigNlsqTest, GlobalSearchMethodInAnyCase) {
  const Config defaults = ParseConfig("analysis_mode: static\n", "n.yaml");
  EXPECT_EQ(defaults.nlsq.global_search.method, GlobalSearchMethod::kAuto);
  EXPECT_FALSE(defaults.nlsq.global_search.method_from_config);
  const Config config = ParseConfig(
      "analysis_mode: static\noptimization: {nlsq: {global_search: {method: Multi_Start}}}\n",
      "n.yaml");
  EXPECT_EQ(config.nlsq.global_search.method, GlobalSearchMethod::kMultiStart);
  EXPECT_TRUE(config.nlsq.global_search.method_from_config);
}

TEST(ConfigNlsqTest, ProfileCheckIsTheModesDefaultUnlessSet) {
  // Absent or null: the mode decides (docs/results.md, What the uncertainties mean).
  EXPECT_FALSE(ParseConfig("analysis_mode: static\n", "p.yaml").nlsq.profile_check.has_value());
  EXPECT_FALSE(ParseConfig("optimization: {nlsq: {profile_check: null}}\n", "p.yaml")
                   .nlsq.profile_check.has_value());
  EXPECT_EQ(
      ParseConfig("optimization: {nlsq: {profile_check: true}}\n", "p.yaml").nlsq.profile_check,
      std::optional<bool>(true));
  EXPECT_EQ(
      ParseConfig("optimization: {nlsq: {profile_check: false}}\n", "p.yaml").nlsq.profile_check,
      std::optional<bool>(false));
  try {
    ParseConfig("optimization: {nlsq: {profile_check: sometimes}}\n", "p.yaml");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("optimization.nlsq.profile_check"));
    EXPECT_THAT(error.what(), HasSubstr("sometimes"));
  }
}

TEST(ConfigNlsqTest, GlobalSearchSectionsNamesInAnyCase) {
  const Config defaults = ParseConfig("analysis_mode: static\n", "n.yaml");
  EXPECT_EQ(defaults.nlsq.multi_start.sampling_strategy, SamplingStrategy::kLatinHypercube);
  EXPECT_EQ(defaults.nlsq.cmaes.preset, CmaesPreset::kCmaesGlobal);
  EXPECT_EQ(defaults.nlsq.cmaes.restart_strategy, CmaesRestartStrategy::kBipop);
  const Config config = ParseConfig(R"(
analysis_mode: static
optimization:
  nlsq:
    multi_start: {sampling_strategy: Sobol}
    cmaes: {preset: CMAES-HPC, restart_strategy: IPOP}
)",
                                    "n.yaml");
  EXPECT_EQ(config.nlsq.multi_start.sampling_strategy, SamplingStrategy::kSobol);
  EXPECT_EQ(config.nlsq.cmaes.preset, CmaesPreset::kCmaesHpc);
  EXPECT_EQ(config.nlsq.cmaes.restart_strategy, CmaesRestartStrategy::kIpop);
}

TEST(ConfigNlsqTest, SolverInAnyCase) {
  EXPECT_EQ(ParseConfig("analysis_mode: static\n", "n.yaml").nlsq.solver, LmSolver::kLmCore);
  const Config config =
      ParseConfig("analysis_mode: static\noptimization: {nlsq: {solver: Ceres}}\n", "n.yaml");
  EXPECT_EQ(config.nlsq.solver, LmSolver::kCeres);
}

TEST(ConfigStreamingTest, OptimizationStreamingKeys) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
optimization:
  streaming:
    batch_size: 20000
    checkpoint_dir: /scratch/ck
    checkpoint_frequency: 50
    checkpoint_min_interval_seconds: 0.5
    keep_last_checkpoints: 5
    resume_from_checkpoint: false
    enable_checkpoints: false
    enable_fault_tolerance: false
    max_retries_per_batch: 0
    min_success_rate: 0.9
    enable_compression: false
)",
                                    "s.yaml");
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  const StreamingOptions& s = config.streaming;
  EXPECT_EQ(s.batch_size, 20000);
  EXPECT_EQ(s.checkpoint_dir, "/scratch/ck");
  EXPECT_EQ(s.checkpoint_frequency, 50);
  EXPECT_DOUBLE_EQ(s.checkpoint_min_interval_seconds, 0.5);
  EXPECT_EQ(s.keep_last_checkpoints, 5);
  EXPECT_FALSE(s.resume_from_checkpoint);
  EXPECT_FALSE(s.enable_checkpoints);
  EXPECT_FALSE(s.enable_fault_tolerance);
  EXPECT_EQ(s.max_retries_per_batch, 0);
  EXPECT_DOUBLE_EQ(s.min_success_rate, 0.9);
  EXPECT_FALSE(s.enable_compression);
}

TEST(ConfigStreamingTest, NlsqStreamingAcceptedAndOptimizationStreamingWins) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
optimization:
  streaming:
    checkpoint_frequency: 20
  nlsq:
    streaming:
      checkpoint_frequency: 5
      keep_last_checkpoints: 7
)",
                                    "s.yaml");
  EXPECT_EQ(config.streaming.checkpoint_frequency, 20);
  EXPECT_EQ(config.streaming.keep_last_checkpoints, 7);
  const std::string warnings = JoinWarnings(config);
  EXPECT_THAT(warnings, HasSubstr("optimization.nlsq.streaming.checkpoint_frequency = 5"));
  EXPECT_THAT(warnings, HasSubstr("using optimization.streaming.checkpoint_frequency"));
}

TEST(ConfigPerformanceTest, PerformanceKeys) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
performance:
  strategy_override: Streaming
  memory_limit_gb: 8.5
  fast_mode: true
  backend: CUDA
  enable_progress: false
  computation: {cpu_threads: 16}
)",
                                    "p.yaml");
  EXPECT_EQ(config.performance.strategy_override, StrategyKind::kStreaming);
  EXPECT_DOUBLE_EQ(*config.performance.memory_limit_gb, 8.5);
  EXPECT_TRUE(config.performance.fast_mode);
  EXPECT_EQ(config.performance.backend, BackendKind::kCuda);
  EXPECT_FALSE(config.performance.enable_progress);
  EXPECT_EQ(config.performance.cpu_threads, 16);
}

TEST(ConfigPerformanceTest, GpuDevicesIsAListOfDistinctIndicesOrEveryVisibleDevice) {
  EXPECT_TRUE(ParseConfig("analysis_mode: static\n", "g.yaml").performance.gpu_devices.empty());
  EXPECT_TRUE(
      ParseConfig("performance: {gpu_devices: null}\n", "g.yaml").performance.gpu_devices.empty());
  EXPECT_EQ(ParseConfig("performance: {gpu_devices: [2, 0]}\n", "g.yaml").performance.gpu_devices,
            (std::vector<int>{2, 0}));
  for (const char* bad : {"1", "[]", "[-1]", "[0, 0]", "[1.5]", "[gpu0]", "{a: 1}", "[[0]]"}) {
    SCOPED_TRACE(bad);
    try {
      ParseConfig(std::string("performance: {gpu_devices: ") + bad + "}\n", "g.yaml");
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr("g.yaml: performance.gpu_devices = "));
      EXPECT_THAT(error.what(), HasSubstr("must be a list of distinct CUDA device indices "
                                          "(integers >= 0), e.g. [0, 1], or null for every "
                                          "visible device"));
    }
  }
}

TEST(ConfigPerformanceTest, TopLevelFastModeAliasAndAutoThreads) {
  const Config config = ParseConfig(
      "analysis_mode: static\nfast_mode: true\nperformance: {computation: {cpu_threads: auto}}\n",
      "p.yaml");
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  EXPECT_TRUE(config.performance.fast_mode);
  EXPECT_FALSE(config.performance.cpu_threads.has_value());
}

TEST(ConfigLoggingTest, PerformanceLogDefaults) {
  const Config config = ParseConfig("analysis_mode: static\n", "l.yaml");
  const PerformanceLogOptions& log = config.logging.performance;
  EXPECT_FALSE(log.enabled);
  EXPECT_EQ(log.level, PerformanceLogLevel::kInfo);
  EXPECT_EQ(log.filename, "performance.log");
  EXPECT_DOUBLE_EQ(log.threshold_seconds, 0.1);
  EXPECT_THAT(BriefReport(config), ::testing::Not(HasSubstr("performance log")));
}

TEST(ConfigLoggingTest, PerformanceLogKeys) {
  const Config config = ParseConfig(R"(
analysis_mode: static
logging:
  enabled: true
  level: INFO
  performance:
    enabled: true
    level: debug
    filename: logs/perf.log
    threshold_seconds: 0
)",
                                    "l.yaml");
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  const PerformanceLogOptions& log = config.logging.performance;
  EXPECT_TRUE(log.enabled);
  EXPECT_EQ(log.level, PerformanceLogLevel::kDebug);
  EXPECT_EQ(log.filename, "logs/perf.log");
  EXPECT_DOUBLE_EQ(log.threshold_seconds, 0.0);
  EXPECT_THAT(BriefReport(config),
              HasSubstr("performance log: logs/perf.log in the output folder, level DEBUG"));
  EXPECT_EQ(
      ParseConfig("logging: {performance: {level: WARNING}}\n", "l.yaml").logging.performance.level,
      PerformanceLogLevel::kWarning);
}

TEST(ConfigSimulationTest, SimulationSection) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
simulation:
  output: out.h5
  format: aps_old
  frames: 200
  phi_angles: [0, 30, 60, 90]
  parameters: {D0: 2000, gamma_dot_0: 0.002, phi_0: 4}
  contrast: [0.2, 0.25, 0.3, 0.35]
  offset: 1.02
  noise_sigma: 0.005
  seed: 9
  dtype: float64
  compression: lzf
)",
                                    "sim.yaml");
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  const SimulationOptions& sim = config.simulation;
  EXPECT_TRUE(sim.present);
  EXPECT_EQ(sim.output, "out.h5");
  EXPECT_EQ(sim.format, FileLayout::kApsOld);
  EXPECT_EQ(sim.frames, 200);
  EXPECT_EQ(sim.phi_angles_degrees.size(), 4u);
  ASSERT_EQ(sim.physical_parameters.size(), 7u);
  EXPECT_DOUBLE_EQ(sim.physical_parameters[kD0], 2000.0);
  EXPECT_DOUBLE_EQ(sim.physical_parameters[kAlpha], 0.5);  // registry default
  EXPECT_DOUBLE_EQ(sim.physical_parameters[kGammaDot0], 0.002);
  EXPECT_DOUBLE_EQ(sim.physical_parameters[kPhi0], 4.0);
  EXPECT_EQ(sim.contrast.size(), 4u);
  EXPECT_EQ(sim.offset, std::vector<double>{1.02});
  EXPECT_DOUBLE_EQ(sim.noise_sigma, 0.005);
  EXPECT_EQ(sim.seed, 9u);
  EXPECT_EQ(sim.dtype, "float64");
  EXPECT_EQ(sim.compression, "lzf");
}

TEST(ConfigUnknownKeyTest, WarnsWithFullPathAndClosestKey) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
optimization:
  nlsq:
    max_iteration: 50
performance:
  memory_limt_gb: 4
parameter_space:
  bounds:
    - {name: D0, min: 1, max: 2, mn: 3}
)",
                                    "u.yaml");
  const std::string warnings = JoinWarnings(config);
  EXPECT_THAT(warnings, HasSubstr("u.yaml: unknown key 'optimization.nlsq.max_iteration'"));
  EXPECT_THAT(warnings, HasSubstr("did you mean 'optimization.nlsq.max_iterations'"));
  EXPECT_THAT(warnings, HasSubstr("'performance.memory_limt_gb'"));
  EXPECT_THAT(warnings, HasSubstr("did you mean 'performance.memory_limit_gb'"));
  EXPECT_THAT(warnings, HasSubstr("'parameter_space.bounds[0].mn'"));
  EXPECT_EQ(config.warnings.size(), 3u);
  EXPECT_EQ(config.nlsq.max_iterations, 100);  // the misspelt key is ignored
}

TEST(ConfigUnknownKeyTest, FreeFormSubtreesAcceptAnything) {
  const Config config = ParseConfig(R"(
analysis_mode: laminar_flow
metadata: {anything: {deep: [1, 2]}}
optimization:
  cmc: {sharding: {whatever: 3}}
  mcmc: {num_samples: 10}
logging: {modules: {homodyne.fit: DEBUG}}
analysis_settings: {model_description: {text: x}}
plotting: {dpi: 150}
)",
                                    "f.yaml");
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
}

TEST(ConfigFileTest, MalformedYamlNamesFileLineAndColumn) {
  try {
    ParseConfig("analysis_mode: static\noptimization:\n  nlsq: [1, 2\n", "broken.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    FAIL() << "expected InputError, not ConfigError: " << e.what();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("broken.yaml"));
    EXPECT_THAT(e.what(), HasSubstr("invalid YAML at line "));
    EXPECT_THAT(e.what(), HasSubstr("column"));
  }
}

TEST(ConfigFileTest, DuplicateKeyNamesItsPathAndBothLines) {
  // yaml-cpp would read the first and ignore the second in silence.
  try {
    ParseConfig(
        "optimization:\n  nlsq:\n    multi_start:\n      n_starts: 5\n"
        "      n_starts: -3\n",
        "dup.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dup.yaml: optimization.nlsq.multi_start.n_starts is given "
                                    "twice (lines 4 and 5)"));
  }
  try {
    ParseConfig("analysis_mode: static\noptimization: {}\nanalysis_mode: static\n", "dup.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("analysis_mode is given twice (lines 1 and 3)"));
  }
  // Inside a list of maps (parameter_space.bounds).
  try {
    ParseConfig("parameter_space:\n  bounds:\n    - {name: D0, min: 1, min: 2, max: 5}\n",
                "dup.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter_space.bounds[0].min is given twice"));
  }
}

TEST(ConfigFileTest, SecondYamlDocumentIsAnError) {
  try {
    ParseConfig("analysis_mode: static\n---\noptimization: {nlsq: {max_iterations: 3}}\n",
                "two.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("two.yaml: a second YAML document starts at line 3"));
  }
  // A trailing "---" with nothing after it is not a second config.
  EXPECT_EQ(ParseConfig("analysis_mode: static\n---\n", "one.yaml").analysis_mode,
            AnalysisMode::kStatic);
}

TEST(ConfigFileTest, MalformedYamlLineNumberIsOneBased) {
  try {
    ParseConfig("a: 1\nb: 2\nc: [\n", "broken.yaml");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("line 4"));
  }
  try {
    ParseConfig("a: 1\n  b: 2\n", "broken.yaml");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("line 2"));
  }
}

TEST(ConfigFileTest, MissingFileNamesThePath) {
  try {
    LoadConfig("/nonexistent/dir/cfg.yaml");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/cfg.yaml"));
    EXPECT_THAT(e.what(), HasSubstr("not found"));
  }
}

TEST(ConfigReportTest, BriefReportMentionsModeFileAndStrategy) {
  const Config config = ParseConfig(R"(
analysis_mode: static
experimental_data: {file_path: /d/x.h5}
performance: {strategy_override: chunked}
)",
                                    "r.yaml");
  const std::string report = BriefReport(config);
  EXPECT_THAT(report, HasSubstr("mode: static"));
  EXPECT_THAT(report, HasSubstr("/d/x.h5"));
  EXPECT_THAT(report, HasSubstr("strategy: chunked"));
}

}  // namespace
}  // namespace homodyne

namespace homodyne {
namespace {

// A config is a few KB; a 22 MB list (under metadata, a key the fit ignores) took 1 GB to parse.
TEST(ConfigLimitsTest, ATextBeyondOneMiBIsRefusedBeforeParsing) {
  std::string text = "analysis_mode: static\nmetadata: [";
  while (text.size() < (size_t{3} << 20)) text += "1234567, ";
  text += "0]\n";
  try {
    ParseConfig(text, "huge.yaml");
    FAIL() << "a 3 MB config was parsed";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("huge.yaml: "));
    EXPECT_THAT(error.what(), HasSubstr("is larger than a config file may be (1048576 bytes"));
  }
}

// A list far longer than a config needs, under the size limit, is refused by the node limit; so
// is a key that is itself a self-referencing alias (printing it for a message never ended).
TEST(ConfigLimitsTest, ATreeOfMoreThanAHundredThousandNodesIsRefused) {
  std::string text = "analysis_mode: static\nmetadata: [";
  for (int i = 0; i < 120000; ++i) text += "1, ";
  text += "0]\n";
  try {
    ParseConfig(text, "long.yaml");
    FAIL() << "a 120000-node config was parsed";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("expands to more than 100000 nodes (reached at metadata["));
  }
}

TEST(ConfigLimitsTest, ACyclicKeyIsRefused) {
  try {
    ParseConfig("analysis_mode: static\n? &k [*k]\n: 1\n", "key.yaml");
    FAIL() << "a cyclic key was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("key.yaml: YAML nested deeper than 64 levels"));
  }
}

}  // namespace
}  // namespace homodyne

namespace homodyne {
namespace {

// A misspelt section: its keys are lost, the warning says so and suggests the key of the same
// level (the whole-path distance suggested a key of another section).
TEST(ConfigUnknownSectionTest, AMisspeltSectionIsNamedWithItsSiblingAndRecorded) {
  const Config config = ParseConfig(
      "analysis_mode: static\nanalyzer_parameters:\n  scatering: {wavevector_q: 0.01}\n",
      "typo.yaml");
  EXPECT_THAT(JoinWarnings(config),
              HasSubstr("unknown section 'analyzer_parameters.scatering' (did you mean "
                        "'analyzer_parameters.scattering'?); ignored with every key in it"));
  ASSERT_EQ(config.unknown_sections.size(), 1u);
  EXPECT_EQ(config.unknown_sections.front(), "analyzer_parameters.scatering");
  // A misspelt leaf stays an unknown key, not a section.
  const Config leaf =
      ParseConfig("analysis_mode: static\noptimization: {nlsq: {max_iteration: 5}}\n", "leaf.yaml");
  EXPECT_THAT(JoinWarnings(leaf), HasSubstr("unknown key 'optimization.nlsq.max_iteration' (did "
                                            "you mean 'optimization.nlsq.max_iterations'?)"));
  EXPECT_TRUE(leaf.unknown_sections.empty());
}

TEST(ConfigDataFileTest, AFilePathThatThePairOverridesIsWarned) {
  const Config config = ParseConfig(
      "analysis_mode: static\nexperimental_data:\n  file_path: /data/real.h5\n"
      "  data_folder_path: ./data/sample/\n  data_file_name: experiment.hdf\n",
      "pair.yaml");
  EXPECT_EQ(config.data.file_path, "./data/sample/experiment.hdf");
  EXPECT_THAT(JoinWarnings(config),
              HasSubstr("experimental_data.file_path = '/data/real.h5' is ignored: "
                        "data_folder_path + data_file_name name the data file"));
  // The same file twice (the templates): no warning.
  const Config same = ParseConfig(
      "analysis_mode: static\nexperimental_data:\n  file_path: ./data/sample/experiment.hdf\n"
      "  data_folder_path: ./data/sample/\n  data_file_name: experiment.hdf\n",
      "same.yaml");
  EXPECT_TRUE(same.warnings.empty()) << JoinWarnings(same);
}

TEST(ConfigDtSourceTest, TheFrameTimeSaysWhereItCameFrom) {
  const Config given = ParseConfig("analysis_mode: static\nanalyzer_parameters: {dt: 0.5}\n", "a");
  EXPECT_EQ(DtSourceNote(given), "(analyzer_parameters.dt)");
  EXPECT_THAT(BriefReport(given), HasSubstr("dt: 0.5 s (analyzer_parameters.dt)"));
  const Config absent = ParseConfig("analysis_mode: static\n", "b");
  EXPECT_THAT(DtSourceNote(absent), HasSubstr("the default: the config gives no "
                                              "analyzer_parameters.dt, and beamline files carry "
                                              "no frame time"));
}

}  // namespace
}  // namespace homodyne

namespace homodyne {
namespace {

// Keys that are accepted and have no effect (docs/configuration.md, Accepted but not used) are
// listed in Config::ignored_keys, a section with everything below it as "path.*", in file order;
// the keys that act and the documentation-only keys are not, and IgnoredKeysText names them all
// on one line.
TEST(ConfigIgnoredKeysTest, KeysWithoutEffectAreListedOnce) {
  const Config config = ParseConfig(
      "analysis_mode: laminar_flow\n"
      "metadata: {description: doc only}\n"
      "analyzer_parameters: {dt: 0.1, frame_step: 2}\n"
      "optimization:\n"
      "  nlsq:\n"
      "    max_iterations: 50\n"
      "    anti_degeneracy:\n"
      "      per_angle_mode: individual\n"
      "      hierarchical: {enable: true, max_outer_iterations: 5}\n"
      "      shear_weighting: {enable: true}\n",
      "ignored.yaml");
  EXPECT_THAT(config.ignored_keys,
              ::testing::ElementsAre("analyzer_parameters.frame_step",
                                     "optimization.nlsq.anti_degeneracy.hierarchical.*",
                                     "optimization.nlsq.anti_degeneracy.shear_weighting.*"));
  EXPECT_EQ(IgnoredKeysText(config),
            "accepted and ignored (no effect in homodyne-cpp; docs/configuration.md, Accepted but "
            "not used): analyzer_parameters.frame_step, "
            "optimization.nlsq.anti_degeneracy.{hierarchical.*, shear_weighting.*}");
  EXPECT_THAT(BriefReport(config), HasSubstr(IgnoredKeysText(config) + "\n"));
  // Nothing without effect: no line.
  const Config plain =
      ParseConfig("analysis_mode: static\nanalyzer_parameters: {dt: 0.1}\n", "plain.yaml");
  EXPECT_TRUE(plain.ignored_keys.empty());
  EXPECT_EQ(IgnoredKeysText(plain), "");
  EXPECT_THAT(BriefReport(plain), Not(HasSubstr("accepted and ignored")));
  EXPECT_THAT(BriefReport(plain), Not(HasSubstr("fixed parameters")));
  // Fixed parameters change the objective: --validate names them (BriefReport).
  const Config fixed = ParseConfig(
      "analysis_mode: static\ninitial_parameters: {fixed_parameters: [D_offset]}\n", "fixed.yaml");
  EXPECT_THAT(BriefReport(fixed),
              HasSubstr("fixed parameters: D_offset (initial_parameters.fixed_parameters: held at "
                        "their start values)\n"));
}

}  // namespace
}  // namespace homodyne

namespace homodyne {
namespace {

// experimental_data.apply_diagonal_correction and .diagonal_correction (docs/configuration.md,
// Model and data): read into DataSelection::diagonal_correction; a bad value names its key.
TEST(ConfigDiagonalCorrectionTest, KeysAreReadAndChecked) {
  const Config defaults = ParseConfig("analysis_mode: static\n", "defaults.yaml");
  EXPECT_TRUE(defaults.data.diagonal_correction.apply);
  EXPECT_EQ(defaults.data.diagonal_correction.method, "basic");
  const Config config = ParseConfig(
      "analysis_mode: static\n"
      "experimental_data:\n"
      "  apply_diagonal_correction: true\n"
      "  diagonal_correction: {method: statistical, estimator: trimmed_mean, window: 5,\n"
      "                        trim_fraction: 0.1}\n",
      "diagonal.yaml");
  const DiagonalCorrectionOptions& options = config.data.diagonal_correction;
  EXPECT_EQ(options.method, "statistical");
  EXPECT_EQ(options.estimator, "trimmed_mean");
  EXPECT_EQ(options.window, 5);
  EXPECT_DOUBLE_EQ(options.trim_fraction, 0.1);
  EXPECT_TRUE(config.warnings.empty());
  EXPECT_FALSE(ParseConfig("analysis_mode: static\nexperimental_data: "
                           "{apply_diagonal_correction: false}\n",
                           "off.yaml")
                   .data.diagonal_correction.apply);
  for (const auto& [yaml, message] :
       {std::pair{"{method: smooth}",
                  "experimental_data.diagonal_correction.method = 'smooth': must be basic, "
                  "statistical or interpolation"},
        std::pair{"{estimator: mode}", "experimental_data.diagonal_correction.estimator"},
        std::pair{"{window: 0}", "experimental_data.diagonal_correction.window = 0"},
        std::pair{"{trim_fraction: 0.5}",
                  "experimental_data.diagonal_correction.trim_fraction = 0.5"}}) {
    try {
      ParseConfig(
          std::string("analysis_mode: static\nexperimental_data:\n  diagonal_correction: ") + yaml +
              "\n",
          "bad.yaml");
      FAIL() << yaml << " was accepted";
    } catch (const ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr(message)) << yaml;
    }
  }
}

}  // namespace
}  // namespace homodyne
