// The paths a fit writes to (src/config/path_checks.h): a NUL in checkpoint_dir, output_dir or
// logging.performance.filename, and a performance log on a result file, are errors naming the key
// (and both paths), from YAML, from overrides and for a whole job (CheckJobPaths).
#include "config/path_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "config_test_util.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"

namespace homodyne {
namespace {

using ::testing::AllOf;
using testing::ConfigErrorOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(PathChecksTest, ANulInTheCheckpointFolderIsAnErrorNamingTheKey) {
  // YAML's "\0" in a double-quoted string is a NUL character in the value.
  const std::string message = ConfigErrorOf(
      "analysis_mode: static\noptimization: {streaming: {checkpoint_dir: \"./ck\\0pt\"}}\n");

  EXPECT_THAT(message, AllOf(HasSubstr("test.yaml: optimization.streaming.checkpoint_dir = "
                                       "'./ck\\0pt': contains a NUL character (\\0) at position 4"),
                             HasSubstr("the file would go elsewhere")));
}

TEST(PathChecksTest, ANulInThePerformanceLogIsAnErrorNamingTheKey) {
  const std::string message =
      ConfigErrorOf("analysis_mode: static\nlogging: {performance: {filename: \"perf\\0.log\"}}\n");

  EXPECT_THAT(message, HasSubstr("logging.performance.filename = 'perf\\0.log': contains a NUL"));
}

TEST(PathChecksTest, APerformanceLogOnAResultFileIsAnErrorNamingBoth) {
  EXPECT_THAT(
      ConfigErrorOf("analysis_mode: static\n"
                    "logging: {performance: {filename: nlsq/parameters.json}}\n"),
      HasSubstr("logging.performance.filename = 'nlsq/parameters.json': the performance log "
                "nlsq/parameters.json would be the result file nlsq/parameters.json in the "
                "output folder"));
  EXPECT_THAT(
      ConfigErrorOf("analysis_mode: static\n"
                    "logging: {performance: {filename: ./nlsq//fitted_data.h5/perf.log}}\n"),
      HasSubstr("would lie inside the result file nlsq/fitted_data.h5"));
  EXPECT_THAT(ConfigErrorOf("analysis_mode: static\nlogging: {performance: {filename: nlsq}}\n"),
              HasSubstr("would be the results folder nlsq"));
}

TEST(PathChecksTest, OtherLogNamesBesideTheResultsAreFine) {
  for (const char* name : {"performance.log", "nlsq/performance.log", "nlsq_parameters.json",
                           "logs/nlsq/parameters.json"}) {
    EXPECT_EQ(PerformanceLogOnResultsMessage(name), std::nullopt) << name;
  }
  const Config config = ParseConfig(
      "analysis_mode: static\nlogging: {performance: {filename: nlsq/performance.log}}\n",
      "t.yaml");
  EXPECT_EQ(config.logging.performance.filename, "nlsq/performance.log");
}

TEST(PathChecksTest, ANulInTheCheckpointFolderOverrideIsAnErrorNamingIt) {
  ConfigOverrides overrides;
  overrides.checkpoint_dir = std::string("ck\0pt", 5);  // fit_nlsq(checkpoint_dir=...) from Python
  try {
    ResolveConfig({"analysis_mode: static\n", "t.yaml", ""}, overrides);
    FAIL() << "expected UsageError";
  } catch (const UsageError& error) {
    EXPECT_THAT(error.what(), HasSubstr("checkpoint_dir = 'ck\\0pt': contains a NUL"));
  }
}

TEST(PathChecksTest, AJobChecksTheOutputFolderAndTheConfigItRuns) {
  Config config = ParseConfig("analysis_mode: static\n", "job.yaml");
  EXPECT_NO_THROW(CheckJobPaths(config, std::string("results")));
  EXPECT_NO_THROW(CheckJobPaths(config, std::nullopt));
  // An empty output folder would put the results in /nlsq/.
  try {
    CheckJobPaths(config, std::string());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("output_dir (--output-dir) = '': an empty path"));
  }

  // output_dir comes from the shell (fit_nlsq's output_dir, a Python str, can hold a NUL).
  try {
    CheckJobPaths(config, std::string("res\0ults", 8));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("output_dir = 'res\\0ults': contains a NUL character (\\0) "
                                        "at position 3"));
  }
  // A config changed in code after the loader: the job checks it again.
  config.streaming.checkpoint_dir = std::string("a\0b", 3);
  try {
    CheckJobPaths(config, std::string("results"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(),
                HasSubstr("optimization.streaming.checkpoint_dir = 'a\\0b': contains"));
  }
  config.streaming.checkpoint_dir = "./checkpoints";
  config.logging.performance.filename = "nlsq/analysis_results_nlsq.json";
  try {
    CheckJobPaths(config, std::string("results"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("logging.performance.filename"),
                                    HasSubstr("result file nlsq/analysis_results_nlsq.json"),
                                    Not(HasSubstr("NUL"))));
  }
}

}  // namespace
}  // namespace homodyne
