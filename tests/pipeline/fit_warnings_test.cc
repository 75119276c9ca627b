// How Fit (homodyne/fit.h) reports parameters the data do not determine: with beta held at 0,
// gamma_dot_t0 * t^0 + gamma_dot_t_offset is one shear rate, so the two columns of J are equal
// and J^T J is singular. The fit must say so and give both parameters uncertainties that are
// lower bounds (large), not the small pseudo-inverse values of a determined fit, while every
// other parameter keeps its ordinary estimate. With beta held away from 0 the two are separated
// and no such warning appears. The quality flag (docs/results.md, Quality flag) says the same, and
// also marks a fit stopped at max_iterations or with a physical parameter held on a bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/fit.h"
#include "homodyne/model.h"
#include "laminar_data.h"

namespace homodyne {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

const ParameterEstimate& Physical(const FitResult& result, const std::string& name) {
  const auto found = std::find_if(result.physical.begin(), result.physical.end(),
                                  [&](const ParameterEstimate& p) { return p.name == name; });
  EXPECT_NE(found, result.physical.end()) << name;
  return *found;
}

// Laminar-flow data for `truth` at two angles (laminar_data.h), fitted from the truth with the
// global phase off and beta held at its start value.
FitResult FitWithBetaHeld(const std::vector<double>& truth) {
  const std::vector<double> phi = {0.0, 60.0};
  const std::vector<double> c2 = test::LaminarC2(truth, phi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, phi));
  Config config = ParseConfig(
      std::string(test::kLaminarConfig) + "initial_parameters: {fixed_parameters: [beta]}\n",
      "fit_warnings_test");
  config.initial.values = truth;
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;  // as --global-search off
  return Fit(config, *source).result;
}

TEST(FitWarningsTest, SingularShearPairIsReportedWithLowerBoundUncertainties) {
  // D0, alpha, D_offset, gamma_dot_t0, beta, gamma_dot_t_offset, phi0.
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.0, 1e-4, 4.0};
  const FitResult result = FitWithBetaHeld(truth);

  EXPECT_THAT(result.warnings,
              Contains(HasSubstr("the data do not determine gamma_dot_t0, gamma_dot_t_offset "
                                 "(J^T J is singular along a combination of them")));
  EXPECT_NE(result.quality_flag, "good");
  EXPECT_THAT(result.quality_reasons,
              Contains("the data do not determine gamma_dot_t0, gamma_dot_t_offset"));
  // Their sum is the shear rate the data see; each alone is undetermined: the lower-bound
  // uncertainty dwarfs the sum itself (a pseudo-inverse without the bound gave about 1e-6).
  const double shear =
      Physical(result, "gamma_dot_t0").value + Physical(result, "gamma_dot_t_offset").value;
  EXPECT_NEAR(shear, 3e-4, 3e-5);
  EXPECT_GT(Physical(result, "gamma_dot_t0").uncertainty, 100.0 * shear);
  EXPECT_GT(Physical(result, "gamma_dot_t_offset").uncertainty, 100.0 * shear);
  // The determined parameters keep ordinary estimates near the truth.
  for (const std::string name : {"D0", "alpha", "phi0"}) {
    const ParameterEstimate& p = Physical(result, name);
    const double expected = name == "D0" ? 1500.0 : name == "alpha" ? -0.6 : 4.0;
    EXPECT_GT(p.uncertainty, 0.0) << name;
    EXPECT_LT(std::abs(p.value - expected), 5.0 * p.uncertainty) << name;
    EXPECT_LT(p.uncertainty, 0.1 * std::abs(expected)) << name;
  }
}

TEST(FitWarningsTest, SeparatedShearPairHasNoUndeterminedWarning) {
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};
  const FitResult result = FitWithBetaHeld(truth);
  EXPECT_THAT(result.warnings, Not(Contains(HasSubstr("the data do not determine"))));
  const ParameterEstimate& rate = Physical(result, "gamma_dot_t0");
  EXPECT_LT(rate.uncertainty, rate.value);
}

// The separated fit above, from the truth, is clean: noise of sigma gives a reduced chi2 near 1,
// it converges, and nothing is on a bound.
TEST(FitQualityFlagTest, CleanFitIsGood) {
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};
  const FitResult result = FitWithBetaHeld(truth);
  EXPECT_EQ(result.convergence_status, "converged");
  EXPECT_EQ(result.quality_flag, "good");
  EXPECT_THAT(result.quality_reasons, ::testing::IsEmpty());
}

// Laminar-flow data for `truth` at two angles, fitted from `start` with the global phase and
// variable projection off, beta held; extra_yaml is appended to the config.
FitResult FitFrom(const std::vector<double>& truth, const std::vector<double>& start,
                  const std::string& extra_yaml, int max_iterations) {
  const std::vector<double> phi = {0.0, 60.0};
  const std::vector<double> c2 = test::LaminarC2(truth, phi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, phi));
  Config config = ParseConfig(std::string(test::kLaminarConfig) + extra_yaml +
                                  "initial_parameters: {fixed_parameters: [beta]}\n",
                              "fit_warnings_test");
  config.initial.values = start;
  config.nlsq.global_search.method = GlobalSearchMethod::kOff;
  config.nlsq.variable_projection = false;
  config.nlsq.max_iterations = max_iterations;
  return Fit(config, *source).result;
}

// gamma_dot_t0's upper bound lies below the truth: the fit ends on it, and the flag says so
// although the fit finished.
TEST(FitQualityFlagTest, PhysicalParameterOnBoundIsNotGood) {
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};
  const FitResult result = FitFrom(
      truth, {1500.0, -0.6, 5.0, 4e-5, 0.5, 1e-4, 4.0},
      "parameter_space:\n  bounds: [{name: gamma_dot_t0, min: 1.0e-6, max: 5.0e-5}]\n", 100);
  EXPECT_NE(result.quality_flag, "good");
  EXPECT_THAT(result.quality_reasons, Contains("gamma_dot_t0 ended on its upper bound"));
  // Marked, and with the uncertainty the data give it with the bound released (the reference's
  // covariance), never 0. Every mark matches a quality reason (D0 may follow it onto its own
  // bound), and no per-angle value is marked.
  const ParameterEstimate& rate = Physical(result, "gamma_dot_t0");
  EXPECT_EQ(rate.value, 5.0e-5);
  EXPECT_EQ(rate.at_bound, "upper");
  EXPECT_GT(rate.uncertainty, 0.0);
  EXPECT_TRUE(std::isfinite(rate.uncertainty));
  for (const ParameterEstimate& p : result.physical) {
    if (p.at_bound.empty()) continue;
    EXPECT_THAT(result.quality_reasons,
                Contains(p.name + " ended on its " + p.at_bound + " bound"));
    EXPECT_GT(p.uncertainty, 0.0) << p.name;
  }
  for (const AngleScaling& angle : result.per_angle) {
    EXPECT_EQ(angle.contrast.at_bound, "");
    EXPECT_EQ(angle.offset.at_bound, "");
  }
}

// A start outside its bounds is clipped with a warning that names it and its value, whatever
// path the fit takes (global phase, variable projection): not only in the LM core's own clip.
TEST(FitWarningsTest, StartOutsideBoundsIsAWarningOnEveryPath) {
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};
  const std::vector<double> phi = {0.0, 60.0};
  const std::vector<double> c2 = test::LaminarC2(truth, phi);
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, phi));
  for (const GlobalSearchMethod method : {GlobalSearchMethod::kOff, GlobalSearchMethod::kAuto}) {
    Config config = ParseConfig(
        std::string(test::kLaminarConfig) + "initial_parameters: {fixed_parameters: [beta]}\n",
        "fit_warnings_test");
    config.initial.values = {200000.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};
    config.nlsq.global_search.method = method;
    const FitResult result = Fit(config, *source).result;
    EXPECT_THAT(result.warnings,
                Contains("initial value of D0 = 200000 is above its upper bound 100000: clipped "
                         "to 100000"));
  }
}

// A fit stopped at max_iterations far from the optimum is not good, with the reason given.
TEST(FitQualityFlagTest, StopAtMaxIterationsIsNotGood) {
  const std::vector<double> truth = {1500.0, -0.6, 5.0, 2e-4, 0.5, 1e-4, 4.0};
  const FitResult result = FitFrom(truth, {800.0, -0.2, 5.0, 2e-4, 0.5, 1e-4, 4.0}, "", 2);
  EXPECT_EQ(result.convergence_status, "max_iterations");
  EXPECT_NE(result.quality_flag, "good");
  EXPECT_THAT(result.quality_reasons, Contains("stopped at max_iterations before converging"));
}

}  // namespace
}  // namespace homodyne
