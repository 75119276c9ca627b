// PrepareFit (src/pipeline/fit_preparation.h): the steps before the first pass that Fit and the
// dry run (DescribeFitPlan) share. What they resolve (the fitted layout with fixed_parameters,
// the start values outside their bounds) the dry run reports as the fit uses it, and what they
// refuse both refuse with the same message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "laminar_data.h"
#include "pipeline/fit_preparation.h"

namespace homodyne {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0.
const std::vector<double> kTruth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};
const std::vector<double> kPhi = {0.0, 60.0};
constexpr const char* kAllPhysical =
    "[D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]";

Config LaminarConfig(const std::string& extra) {
  return ParseConfig(std::string(test::kLaminarConfig) + extra, "fit_preparation_test");
}

// The message Fit throws as a ConfigError, or "" when it throws none.
std::string FitConfigError(const Config& config, BatchSource& source) {
  try {
    Fit(config, source);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

// The message DescribeFitPlan throws as a ConfigError, or "" when it throws none.
std::string DryRunConfigError(const Config& config, BatchSource& source) {
  try {
    std::ostringstream report;
    DescribeFitPlan(config, source, report);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(FitPreparationTest, FixedParametersLeaveTheFittedLayoutAndTheDryRunCountsThem) {
  const std::vector<double> c2 = test::LaminarC2(kTruth, kPhi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));
  const Config config =
      LaminarConfig("initial_parameters: {fixed_parameters: [phi0, gamma_dot_t_offset]}\n");
  const FitObserver observer;

  const std::unique_ptr<PreparedFit> fit = PrepareFit(config, *source, observer);
  std::ostringstream report;
  DescribeFitPlan(config, *source, report);

  EXPECT_THAT(fit->parameters->map.reduced_names,
              ElementsAre("D0", "alpha", "D_offset", "gamma_dot_t0", "beta", "contrast[0]",
                          "contrast[1]", "offset[0]", "offset[1]"));
  EXPECT_THAT(report.str(), HasSubstr("  parameters        9 fitted: 5 physical + 4 scaling"));
  EXPECT_THAT(report.str(), HasSubstr("  fitted            D0, alpha, D_offset, gamma_dot_t0, "
                                      "beta, contrast[0..1], offset[0..1]\n"));
  EXPECT_THAT(report.str(),
              HasSubstr("  held fixed        gamma_dot_t_offset, phi0 (at their start values)\n"));
}

// With every physical parameter fixed, the global phase and the projected local fit would search
// a space of no dimension (the fit aborted on an internal check with the phase off, and failed in
// the start sampling with it on): a ConfigError of the shared step, the same for Fit and the dry
// run, whatever the method.
TEST(FitPreparationTest, EveryPhysicalParameterFixedIsTheSameConfigErrorForFitAndDryRun) {
  const std::vector<double> c2 = test::LaminarC2(kTruth, kPhi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));
  for (const GlobalSearchMethod method :
       {GlobalSearchMethod::kOff, GlobalSearchMethod::kAuto, GlobalSearchMethod::kMultiStart,
        GlobalSearchMethod::kCmaes}) {
    Config config = LaminarConfig(
        "initial_parameters: {fixed_parameters: " + std::string(kAllPhysical) + "}\n");
    config.nlsq.global_search.method = method;

    const std::string fit_error = FitConfigError(config, *source);
    const std::string dry_run_error = DryRunConfigError(config, *source);

    EXPECT_THAT(fit_error, HasSubstr("initial_parameters.fixed_parameters fixes every physical "
                                     "parameter: nothing left to fit"))
        << ToString(method);
    EXPECT_EQ(dry_run_error, fit_error) << ToString(method);
  }
}

// Nothing searches the physical parameters with the phase and the projection off: contrast and
// offset alone are fitted, from and to sensible values.
TEST(FitPreparationTest, ScalingAloneIsFittedWithoutGlobalPhaseAndProjection) {
  const std::vector<double> c2 = test::LaminarC2(kTruth, kPhi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));
  Config config = LaminarConfig(
      "initial_parameters:\n"
      "  parameter_names: [D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0]\n"
      "  values: [1500, -0.6, 5, 2.0e-4, 0.5, 1.0e-4, 4]\n"
      "  fixed_parameters: " +
      std::string(kAllPhysical) + "\n");
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;
  config.nlsq.variable_projection = false;

  const FitOutcome outcome = Fit(config, *source);

  EXPECT_EQ(outcome.exit_code, kExitSuccess);
  ASSERT_EQ(outcome.result.per_angle.size(), 2u);
  for (const AngleScaling& angle : outcome.result.per_angle) {
    EXPECT_NEAR(angle.contrast.value, 0.3, 0.01);
    EXPECT_NEAR(angle.offset.value, 1.0, 0.01);
  }
}

TEST(FitPreparationTest, StartOutsideItsBoundsIsARemarkWithTheValueItIsClippedTo) {
  const std::vector<double> c2 = test::LaminarC2(kTruth, kPhi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));
  const Config config =
      LaminarConfig("initial_parameters: {parameter_names: [D0, alpha], values: [200000, -3]}\n");
  const FitObserver observer;

  const std::unique_ptr<PreparedFit> fit = PrepareFit(config, *source, observer);
  std::ostringstream report;
  DescribeFitPlan(config, *source, report);

  EXPECT_THAT(
      fit->parameters->start_warnings,
      ElementsAre("initial value of D0 = 200000 is above its upper bound 100000: clipped "
                  "to 100000",
                  "initial value of alpha = -3 is below its lower bound -2: clipped to -2"));
  EXPECT_THAT(report.str(), HasSubstr("  start clipped     initial value of D0 = 200000 is above "
                                      "its upper bound 100000: clipped to 100000\n"));
  // The start values shown are the ones the fit starts from: clipped, next to the remark.
  EXPECT_THAT(report.str(), HasSubstr("D0 100000 in [100, 100000]"));
}

// The plan sets OpenMP's thread count for the fit; the caller's comes back afterwards, also when
// the fit throws, so a fit's threads never carry over to the caller's next fit (the Python
// module's threads= holds for one call on this).
TEST(FitPreparationTest, FitGivesTheCallersThreadCountBack) {
  const std::vector<double> c2 = test::LaminarC2(kTruth, kPhi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));
  Config config = LaminarConfig("");
  config.performance.cpu_threads = 1;
  config.initial.values = kTruth;
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;
  omp_set_num_threads(3);
  const FitOutcome outcome = Fit(config, *source);
  EXPECT_EQ(outcome.result.threads, 1);
  EXPECT_EQ(omp_get_max_threads(), 3);

  Config refused =
      LaminarConfig("initial_parameters: {fixed_parameters: " + std::string(kAllPhysical) + "}\n");
  refused.performance.cpu_threads = 1;
  EXPECT_THROW(Fit(refused, *source), ConfigError);
  EXPECT_EQ(omp_get_max_threads(), 3);
}

}  // namespace
}  // namespace homodyne
