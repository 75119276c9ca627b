// The convergence status of a whole fit (src/pipeline/fit_solution.h ConvergenceStatusOf;
// docs/results.md, Convergence status) on data that no model describes: a chi2 that is not finite
// is failed_non_finite_objective, a fit that never moved with an astronomical reduced chi2 is
// no_progress, both exit 1 with a reason and a poor quality flag, and neither crashes on the
// covariance it never computed. A sigma far above the data's scatter and a fit with nothing
// free converge with a warning that says so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/fit.h"
#include "laminar_data.h"

namespace homodyne {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

const std::vector<double> kPhi = {0.0, 60.0};
const std::vector<double> kStaticTruth = {3000.0, -0.5, 10.0};

// Static data at kStaticTruth (contrast 0.3, offset 1, noise 0.01), each value plus `shift`.
std::vector<double> StaticC2(double shift = 0.0) {
  std::vector<double> c2 = test::SimulatedC2(AnalysisMode::kStatic, kStaticTruth, kPhi);
  for (double& value : c2) value += shift;
  return c2;
}

FitOutcome FitStatic(const std::vector<double>& c2, const std::string& extra_yaml,
                     GlobalSearchMethod method, double sigma = 0.01,
                     bool variable_projection = true) {
  const auto source = MakeInMemoryBatchSource(test::LaminarData(c2, kPhi));
  Config config = ParseConfig(std::string(test::kStaticConfig) + extra_yaml, "fit_status_test");
  config.nlsq.global_search.method = method;
  config.nlsq.sigma = sigma;  // also values the loader's range check would refuse
  config.nlsq.variable_projection = variable_projection;
  return Fit(config, *source);
}

void ExpectFailure(const FitOutcome& outcome, const std::string& status) {
  const FitResult& result = outcome.result;
  EXPECT_EQ(result.convergence_status, status) << result.termination_reason;
  EXPECT_EQ(outcome.exit_code, kExitFailure);
  EXPECT_EQ(result.quality_flag, "poor");
  EXPECT_THAT(result.quality_reasons, Contains(HasSubstr("(" + status + ")")));
}

// A sigma of 1e-155 makes every squared residual overflow: chi2 is +inf at the start. The fit
// used to end in a SIGSEGV in the correlation warnings (an empty covariance read as n x n).
// (Data values cannot do it alone: beyond +-3.4e38 they are excluded.)
TEST(FitStatusTest, AnOverflowingChiSquaredIsAFailedNonFiniteObjective) {
  for (const GlobalSearchMethod method : {GlobalSearchMethod::kOff, GlobalSearchMethod::kAuto}) {
    const FitOutcome outcome = FitStatic(StaticC2(), "", method, 1e-155);
    ExpectFailure(outcome, "failed_non_finite_objective");
    EXPECT_THAT(outcome.result.termination_reason, HasSubstr("chi2 is not finite at the start"));
    EXPECT_THAT(outcome.result.termination_reason, HasSubstr("optimization.nlsq.sigma = 1e-155"));
    EXPECT_TRUE(outcome.result.covariance.empty());
    // No covariance: the uncertainties are unknown, not 0.
    for (const ParameterEstimate& estimate : outcome.result.physical) {
      EXPECT_TRUE(std::isnan(estimate.uncertainty)) << estimate.name;
    }
  }
}

// c2 50 above the model everywhere while contrast and offset start on the upper bounds they
// push against and the physical parameters are fixed: nothing can move, reduced chi2 ~2.5e7.
// The gradient test passes at the start (every parameter held), yet nothing was fitted.
TEST(FitStatusTest, AnAstronomicalChiSquaredWithoutAStepIsNoProgress) {
  const FitOutcome outcome =
      FitStatic(StaticC2(50.0),
                "initial_parameters:\n  values: [3000.0, -0.5, 10.0]\n"
                "  fixed_parameters: [D0, alpha, D_offset]\n"
                "  per_angle_scaling: {contrast: [1.0, 1.0], offset: [1.5, 1.5]}\n",
                GlobalSearchMethod::kOff, 0.01, /*variable_projection=*/false);
  ExpectFailure(outcome, "no_progress");
  EXPECT_EQ(outcome.result.iterations, 0);
  EXPECT_GT(outcome.result.reduced_chi_squared, 1e6);
  EXPECT_THAT(outcome.result.termination_reason, HasSubstr("never moved from its start"));
  EXPECT_THAT(outcome.result.termination_reason, HasSubstr("every parameter is at a bound"));
}

// Random bytes read as float32 (values up to 3e38, a few NaN and inf): whatever stops the fit,
// it is not converged and exits 1.
TEST(FitStatusTest, RandomBytesNeverConverge) {
  std::vector<double> c2(kPhi.size() * test::kTimes * test::kTimes);
  for (const unsigned seed : {1u, 2u, 3u}) {
    std::mt19937 random(seed);
    for (double& value : c2) {
      const uint32_t bits = static_cast<uint32_t>(random());
      float single = 0.0f;
      std::memcpy(&single, &bits, sizeof(single));
      value = single;
    }
    for (const GlobalSearchMethod method : {GlobalSearchMethod::kOff, GlobalSearchMethod::kAuto}) {
      const FitOutcome outcome = FitStatic(c2, "", method);
      EXPECT_NE(outcome.result.convergence_status, "converged")
          << seed << ": " << outcome.result.termination_reason;
      EXPECT_EQ(outcome.exit_code, kExitFailure) << seed;
      EXPECT_EQ(outcome.result.quality_flag, "poor") << seed;
    }
  }
}

// sigma 1e6 on noise of 0.01: reduced chi2 ~1e-16. The fit converges (its parameters do not
// depend on sigma), and the result says that chi2 measures nothing, naming sigma.
TEST(FitStatusTest, ANegligibleReducedChiSquaredNamesSigma) {
  const FitOutcome outcome = FitStatic(StaticC2(), "", GlobalSearchMethod::kOff, 1e6);
  const FitResult& result = outcome.result;
  EXPECT_EQ(result.convergence_status, "converged") << result.termination_reason;
  EXPECT_EQ(outcome.exit_code, kExitSuccess);
  EXPECT_LT(result.reduced_chi_squared, 1e-12);
  EXPECT_THAT(result.warnings,
              Contains(HasSubstr("optimization.nlsq.sigma = 1e+06 is far larger")));
  EXPECT_EQ(result.quality_flag, "poor");
  EXPECT_THAT(result.quality_reasons, Contains(HasSubstr("optimization.nlsq.sigma")));
}

// Every fitted parameter held on a bound at an ordinary chi2: the bounded problem's optimum,
// converged (exit 0), with a warning and a poor flag that say nothing was free.
// A sigma ten times below the data's noise (0.01): reduced chi2 about 100, and a warning naming
// the sigma that would make it 1 (sigma x sqrt(reduced chi2), about the noise).
TEST(FitStatusTest, AReducedChiSquaredFarFromOneNamesTheSigmaThatMakesItOne) {
  const FitOutcome outcome = FitStatic(StaticC2(), "", GlobalSearchMethod::kOff, 0.001);
  ASSERT_EQ(outcome.result.convergence_status, "converged");
  EXPECT_GT(outcome.result.reduced_chi_squared, 50.0);
  std::string advice;
  for (const std::string& warning : outcome.result.warnings) {
    if (warning.find("would make it 1") != std::string::npos) advice = warning;
  }
  ASSERT_FALSE(advice.empty());
  const size_t at = advice.find("optimization.nlsq.sigma = ");
  ASSERT_NE(at, std::string::npos);
  const double suggested = std::stod(advice.substr(at + std::strlen("optimization.nlsq.sigma = ")));
  EXPECT_NEAR(suggested, 0.01, 0.002) << advice;

  // The noise's own sigma: no such warning.
  const FitOutcome right = FitStatic(StaticC2(), "", GlobalSearchMethod::kOff, 0.01);
  for (const std::string& warning : right.result.warnings) {
    EXPECT_THAT(warning, ::testing::Not(HasSubstr("would make it 1")));
  }
}

TEST(FitStatusTest, NothingFreeConvergesWithAWarning) {
  const FitOutcome outcome =
      FitStatic(StaticC2(),
                "initial_parameters:\n  values: [3000.0, -0.5, 10.0]\n"
                "  fixed_parameters: [D0, alpha, D_offset]\n"
                "  per_angle_scaling: {contrast: [0.5, 0.5], offset: [1.2, 1.2]}\n"
                "parameter_space:\n  bounds: [{name: contrast, min: 0.5, max: 0.6},\n"
                "                           {name: offset, min: 1.2, max: 1.5}]\n",
                GlobalSearchMethod::kOff, 0.01, /*variable_projection=*/false);
  const FitResult& result = outcome.result;
  EXPECT_EQ(result.convergence_status, "converged") << result.termination_reason;
  EXPECT_EQ(outcome.exit_code, kExitSuccess);
  EXPECT_THAT(result.termination_reason, HasSubstr("every parameter is at a bound"));
  EXPECT_THAT(result.warnings, Contains(HasSubstr("no fitted parameter was free to move")));
  EXPECT_EQ(result.quality_flag, "poor");
  EXPECT_THAT(result.quality_reasons, Contains(HasSubstr("no fitted parameter was free")));
  for (const AngleScaling& angle : result.per_angle) {
    EXPECT_EQ(angle.contrast.at_bound, "lower");
    EXPECT_EQ(angle.offset.at_bound, "lower");
  }
}

}  // namespace
}  // namespace homodyne
