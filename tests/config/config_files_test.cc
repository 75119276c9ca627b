// The ready configs in configs/ and the generated templates load without warnings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iterator>
#include <string>
#include <vector>

#include "config_test_util.h"

namespace homodyne {
namespace {

using testing::JoinWarnings;

std::string ConfigsDir() { return std::string(HOMODYNE_TEST_DATA_DIR) + "/../../configs"; }

class ReadyConfigTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ReadyConfigTest, LoadsWithoutWarnings) {
  const std::string path = ConfigsDir() + "/" + GetParam();
  const Config config = LoadConfig(path);
  EXPECT_EQ(config.source_path, path);
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
}

INSTANTIATE_TEST_SUITE_P(Configs, ReadyConfigTest,
                         ::testing::Values("homodyne_static.yaml", "homodyne_laminar_flow.yaml",
                                           "streaming_cluster.yaml", "gpu.yaml",
                                           "simulate_laminar_flow.yaml", "simulate_static.yaml"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string name = param_info.param;
                           return name.substr(0, name.find('.'));
                         });

TEST(ReadyConfigValuesTest, ReferenceTemplatesCarryTheirDefaults) {
  const Config laminar = LoadConfig(ConfigsDir() + "/homodyne_laminar_flow.yaml");
  EXPECT_EQ(laminar.analysis_mode, AnalysisMode::kLaminarFlow);
  EXPECT_EQ(laminar.data.file_path, "./data/sample/experiment.hdf");
  EXPECT_EQ(laminar.data.end_frame, 2000);
  EXPECT_TRUE(laminar.data.phi_filtering_enabled);
  EXPECT_EQ(laminar.data.phi_ranges.size(), 2u);
  EXPECT_TRUE(laminar.nlsq.anti_degeneracy_enabled);
  EXPECT_EQ(laminar.nlsq.per_angle_mode, PerAngleModeRequest::kAuto);
  EXPECT_FALSE(laminar.initial.values.has_value());

  const Config stat = LoadConfig(ConfigsDir() + "/homodyne_static.yaml");
  EXPECT_EQ(stat.analysis_mode, AnalysisMode::kStatic);
  EXPECT_FALSE(stat.nlsq.anti_degeneracy_enabled);
  EXPECT_DOUBLE_EQ(stat.data.phi_ranges[1].min_angle_degrees, 170.0);
}

// The successor xpcsjax's two_component template (copied verbatim into tests/data/) loads
// unchanged: every key known, bounds as {name, min, max, type, unit} entries, values: null.
TEST(SuccessorTemplateTest, XpcsjaxTwoComponentTemplateLoads) {
  const std::string path = std::string(HOMODYNE_TEST_DATA_DIR) + "/xpcsjax_two_component.yaml";
  const Config config = LoadConfig(path);

  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  EXPECT_EQ(config.analysis_mode, AnalysisMode::kTwoComponent);
  const std::vector<std::string> names = {
      "D0_ref", "alpha_ref", "D_offset_ref", "D0_sample", "alpha_sample", "D_offset_sample",
      "v0",     "v_beta",    "v_offset",     "f0",        "f1",           "f2",
      "f3",     "phi0_het"};
  EXPECT_EQ(PhysicalParameterNames(config.analysis_mode), names);
  EXPECT_EQ(config.initial.parameter_names, names);
  EXPECT_FALSE(config.initial.values.has_value());  // null: midpoints of the bounds

  // The bounds of the file, in the mode's order then contrast and offset.
  struct ExpectedBound {
    const char* name;
    double min;
    double max;
  };
  const ExpectedBound expected[] = {
      {"D0_ref", 0.0, 1e6},    {"alpha_ref", -2.0, 2.0},    {"D_offset_ref", -1e4, 1e4},
      {"D0_sample", 0.0, 1e6}, {"alpha_sample", -2.0, 2.0}, {"D_offset_sample", -1e4, 1e4},
      {"v0", 0.0, 1e6},        {"v_beta", 0.0, 2.0},        {"v_offset", -100.0, 100.0},
      {"f0", 0.0, 1.0},        {"f1", -1.0, 1.0},           {"f2", -1.0, 1.0},
      {"f3", -1.0, 1.0},       {"phi0_het", -10.0, 10.0},   {"contrast", 0.0, 1.0},
      {"offset", 0.5, 1.5}};
  ASSERT_EQ(config.bounds.size(), std::size(expected));
  for (size_t i = 0; i < std::size(expected); ++i) {
    EXPECT_EQ(config.bounds[i].name, expected[i].name);
    EXPECT_DOUBLE_EQ(config.bounds[i].min, expected[i].min) << expected[i].name;
    EXPECT_DOUBLE_EQ(config.bounds[i].max, expected[i].max) << expected[i].name;
  }

  // The sections the engine reads.
  EXPECT_DOUBLE_EQ(config.data.dt_seconds, 0.1);
  EXPECT_EQ(config.data.start_frame, 1);
  EXPECT_EQ(config.data.end_frame, 1000);
  EXPECT_DOUBLE_EQ(config.data.wavevector_q_target, 0.0237);
  EXPECT_DOUBLE_EQ(config.geometry.gap_angstrom, 2e6);
  EXPECT_EQ(config.data.file_path, "./data/sample_heterodyne.hdf");
  EXPECT_TRUE(config.data.phi_filtering_enabled);
  ASSERT_EQ(config.data.phi_ranges.size(), 2u);
  EXPECT_DOUBLE_EQ(config.data.phi_ranges[1].min_angle_degrees, 85.0);
  EXPECT_EQ(config.nlsq.max_iterations, 10000);
  EXPECT_DOUBLE_EQ(config.nlsq.tolerance, 1e-6);
  EXPECT_TRUE(config.nlsq.anti_degeneracy_enabled);
  EXPECT_EQ(config.nlsq.per_angle_mode, PerAngleModeRequest::kAuto);
  EXPECT_EQ(config.nlsq.fourier_order, 2);
  EXPECT_FALSE(config.nlsq.cmaes.enable);
  EXPECT_EQ(config.nlsq.multi_start.n_starts, 15);
  EXPECT_EQ(config.streaming.checkpoint_frequency, 10);
}

TEST(ReadyConfigValuesTest, ClusterAndGpuConfigs) {
  const Config cluster = LoadConfig(ConfigsDir() + "/streaming_cluster.yaml");
  EXPECT_EQ(cluster.performance.strategy_override, StrategyKind::kStreaming);
  EXPECT_DOUBLE_EQ(*cluster.performance.memory_limit_gb, 25.6);
  EXPECT_EQ(cluster.performance.cpu_threads, 16);
  EXPECT_EQ(cluster.streaming.checkpoint_frequency, 20);

  const Config gpu = LoadConfig(ConfigsDir() + "/gpu.yaml");
  EXPECT_EQ(gpu.performance.backend, BackendKind::kCuda);
  EXPECT_EQ(gpu.streaming.batch_size, 100000);
}

TEST(ReadyConfigValuesTest, SimulationConfigPointsExperimentalDataAtItsOutput) {
  for (const char* name : {"simulate_laminar_flow.yaml", "simulate_static.yaml"}) {
    const Config config = LoadConfig(ConfigsDir() + "/" + name);
    EXPECT_TRUE(config.simulation.present) << name;
    EXPECT_EQ(config.simulation.frames, 500) << name;
    EXPECT_EQ(config.simulation.phi_angles_degrees.size(), 3u) << name;
    EXPECT_DOUBLE_EQ(config.data.dt_seconds, 0.1) << name;
    EXPECT_EQ(config.data.file_path, config.simulation.output) << name;
    EXPECT_EQ(config.simulation.physical_parameters.size(),
              static_cast<size_t>(NumPhysicalParameters(config.analysis_mode)))
        << name;
  }
}

class TemplateTest : public ::testing::TestWithParam<AnalysisMode> {};

TEST_P(TemplateTest, RoundTripsWithoutWarnings) {
  const std::string text = ConfigTemplate(GetParam());
  const Config config = ParseConfig(text, "template.yaml");
  EXPECT_TRUE(config.warnings.empty()) << JoinWarnings(config);
  EXPECT_EQ(config.analysis_mode, GetParam());
  EXPECT_EQ(config.bounds.size(), static_cast<size_t>(NumPhysicalParameters(GetParam()) + 2));
  EXPECT_EQ(config.nlsq.max_iterations, 100);
  EXPECT_EQ(config.streaming.checkpoint_frequency, 10);
  EXPECT_EQ(config.data.file_path, "./data/experiment.hdf");
}

TEST_P(TemplateTest, EveryDocumentedKeyHasACommentWithItsDefault) {
  const std::string text = ConfigTemplate(GetParam());
  for (const char* key :
       {"dt:", "wavevector_q:", "stator_rotor_gap:", "max_iterations:", "checkpoint_frequency:",
        "memory_limit_gb:", "cpu_threads:", "strategy_override:", "batch_size:", "sigma:"}) {
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << key;
    const std::string line = text.substr(at, text.find('\n', at) - at);
    EXPECT_NE(line.find('#'), std::string::npos) << line;
  }
}

// The template of a mode lists its parameters with the mode catalog's default bounds.
TEST_P(TemplateTest, BoundsAreTheModeDefaults) {
  const Config config = ParseConfig(ConfigTemplate(GetParam()), "template.yaml");
  const Config defaults =
      ParseConfig("analysis_mode: " + std::string(ToString(GetParam())) + "\n", "defaults.yaml");
  ASSERT_EQ(config.bounds.size(), defaults.bounds.size());
  for (size_t i = 0; i < config.bounds.size(); ++i) {
    EXPECT_EQ(config.bounds[i].name, defaults.bounds[i].name);
    EXPECT_EQ(config.bounds[i].min, defaults.bounds[i].min) << config.bounds[i].name;
    EXPECT_EQ(config.bounds[i].max, defaults.bounds[i].max) << config.bounds[i].name;
  }
  EXPECT_EQ(config.initial.parameter_names, PhysicalParameterNames(GetParam()));
  EXPECT_FALSE(config.initial.values.has_value());  // midpoints of the bounds
}

INSTANTIATE_TEST_SUITE_P(Modes, TemplateTest,
                         ::testing::Values(AnalysisMode::kStatic, AnalysisMode::kLaminarFlow,
                                           AnalysisMode::kTwoComponent),
                         [](const ::testing::TestParamInfo<AnalysisMode>& param_info) {
                           return std::string(ToString(param_info.param));
                         });

}  // namespace
}  // namespace homodyne
