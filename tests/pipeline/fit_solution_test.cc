// The quality flag of a fit's solution (src/pipeline/fit_solution.h; docs/results.md, Quality
// flag): the reduced chi2's level, lowered once per kind of problem, each with its reason.
#include "pipeline/fit_solution.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/errors.h"

namespace homodyne {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A converged fit with a reduced chi2 of 1 and no problem: good.
FitQualityInputs Clean() {
  FitQualityInputs inputs;
  inputs.reduced_chi_squared = 1.0;
  inputs.degrees_of_freedom = 1000;
  inputs.convergence_status = "converged";
  return inputs;
}

TEST(FitQualityTest, CleanFitIsGoodWithoutReasons) {
  const FitQuality quality = AssessFitQuality(Clean());
  EXPECT_EQ(quality.flag, "good");
  EXPECT_THAT(quality.reasons, IsEmpty());
}

TEST(FitQualityTest, ReducedChiSquaredSetsTheStartingLevel) {
  FitQualityInputs inputs = Clean();
  inputs.reduced_chi_squared = 2.0;
  FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "marginal");
  EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("reduced chi2 2 is at least 1.5")));

  inputs.reduced_chi_squared = 3.0;
  quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("reduced chi2 3 is at least 3.0")));

  inputs.reduced_chi_squared = 0.3;  // the lower side: sigma overestimated
  quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "marginal");
  EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("reduced chi2 0.3 is below 0.5")));

  inputs.reduced_chi_squared = std::nan("");
  quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_THAT(quality.reasons, ElementsAre("the reduced chi2 is not finite"));
}

TEST(FitQualityTest, NoDegreesOfFreedomIsPoor) {
  FitQualityInputs inputs = Clean();
  inputs.degrees_of_freedom = 0;
  const FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("no degrees of freedom (dof = 0)")));
}

TEST(FitQualityTest, ParametersOnBoundsLowerOneLevelAndEachIsNamed) {
  FitQualityInputs inputs = Clean();
  inputs.at_lower_bound = {"gamma_dot_t0", "D0"};
  inputs.at_upper_bound = {"beta"};
  const FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "marginal");  // one level for the kind, not one per parameter
  EXPECT_THAT(quality.reasons,
              ElementsAre("gamma_dot_t0 ended on its lower bound", "D0 ended on its lower bound",
                          "beta ended on its upper bound"));
}

TEST(FitQualityTest, UndeterminedParametersLowerOneLevel) {
  FitQualityInputs inputs = Clean();
  inputs.undetermined = {"gamma_dot_t0", "gamma_dot_t_offset"};
  const FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "marginal");
  EXPECT_THAT(quality.reasons,
              ElementsAre("the data do not determine gamma_dot_t0, gamma_dot_t_offset"));
}

TEST(FitQualityTest, UnboundedIntervalsAndDisagreeingMethodsEachLowerOneLevel) {
  FitQualityInputs inputs = Clean();
  inputs.unbounded_intervals = {"D_offset"};
  FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "marginal");
  EXPECT_THAT(quality.reasons,
              ElementsAre("the profile intervals of D_offset reach a bound or could not be "
                          "computed"));
  inputs.methods_disagree = {"D0", "alpha"};
  quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_THAT(quality.reasons[1], HasSubstr("uncertainties of D0, alpha lie below the standard"));
}

TEST(FitQualityTest, StopAtMaxIterationsLowersOneLevel) {
  FitQualityInputs inputs = Clean();
  inputs.convergence_status = "max_iterations";
  const FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "marginal");
  EXPECT_THAT(quality.reasons, ElementsAre("stopped at max_iterations before converging"));
}

TEST(FitQualityTest, FailedFitIsPoor) {
  FitQualityInputs inputs = Clean();
  inputs.convergence_status = "failed";
  const FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("did not converge (failed)")));
}

TEST(FitQualityTest, ProblemsAccumulateDownToPoor) {
  // A good chi2 with a bound and a stop at max_iterations: two levels down.
  FitQualityInputs inputs = Clean();
  inputs.at_lower_bound = {"gamma_dot_t0"};
  inputs.convergence_status = "max_iterations";
  FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_EQ(quality.reasons.size(), 2u);
  // A marginal chi2 with every problem: poor, the lowest level, with every reason.
  inputs.reduced_chi_squared = 2.0;
  inputs.undetermined = {"beta"};
  quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_EQ(quality.reasons.size(), 4u);
}

TEST(FitQualityTest, EveryFailureStatusIsPoorWithItsReason) {
  for (const char* status : {"failed", "failed_non_finite_objective", "no_progress"}) {
    FitQualityInputs inputs = Clean();
    inputs.convergence_status = status;
    const FitQuality quality = AssessFitQuality(inputs);
    EXPECT_EQ(quality.flag, "poor") << status;
    EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("(" + std::string(status) + ")")));
  }
}

TEST(FitQualityTest, ANegligibleReducedChiSquaredIsPoorAndNamesSigma) {
  for (const double reduced : {0.0, 1e-16}) {
    FitQualityInputs inputs = Clean();
    inputs.reduced_chi_squared = reduced;
    const FitQuality quality = AssessFitQuality(inputs);
    EXPECT_EQ(quality.flag, "poor") << reduced;
    EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("optimization.nlsq.sigma")));
  }
  // Small but not negligible: marginal, as before.
  FitQualityInputs inputs = Clean();
  inputs.reduced_chi_squared = 1e-3;
  EXPECT_EQ(AssessFitQuality(inputs).flag, "marginal");
}

TEST(FitQualityTest, NothingFreeIsPoor) {
  FitQualityInputs inputs = Clean();
  inputs.nothing_free = true;
  const FitQuality quality = AssessFitQuality(inputs);
  EXPECT_EQ(quality.flag, "poor");
  EXPECT_THAT(quality.reasons, ElementsAre(HasSubstr("no fitted parameter was free to move")));
}

// The status and the flag agree (docs/results.md, Quality flag): over every combination of
// reduced chi2, dof, status and problem, a flag below good always has its reasons, a failure is
// poor and a stop at max_iterations is never good.
TEST(FitQualityTest, TheFlagAgreesWithTheStatusAndAlwaysSaysWhy) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const double reduced : {0.0, 1e-13, 0.3, 1.0, 2.0, 5.0, 1e80, nan}) {
    for (const int64_t dof : {int64_t{0}, int64_t{1000}}) {
      for (const char* status : {"converged", "max_iterations", "failed",
                                 "failed_non_finite_objective", "no_progress"}) {
        for (int problems = 0; problems < 8; ++problems) {
          FitQualityInputs inputs = Clean();
          inputs.reduced_chi_squared = reduced;
          inputs.degrees_of_freedom = dof;
          inputs.convergence_status = status;
          if (problems & 1) inputs.at_lower_bound = {"D0"};
          if (problems & 2) inputs.undetermined = {"alpha"};
          inputs.nothing_free = (problems & 4) != 0;
          const FitQuality quality = AssessFitQuality(inputs);
          const std::string where = std::string(status) + ", reduced chi2 " +
                                    std::to_string(reduced) + ", dof " + std::to_string(dof) +
                                    ", problems " + std::to_string(problems);
          EXPECT_EQ(quality.flag == "good", quality.reasons.empty()) << where;
          if (FitExitCode(status) != kExitSuccess) {
            EXPECT_EQ(quality.flag, "poor") << where;
          }
          if (std::string(status) == "max_iterations") {
            EXPECT_NE(quality.flag, "good") << where;
          }
        }
      }
    }
  }
}

// ConvergenceStatusOf (docs/results.md, Convergence status) from the final fit's summary.
LevenbergMarquardtSummary Summary(LevenbergMarquardtStatus status, double initial_chi2,
                                  double final_chi2, int accepted_steps) {
  LevenbergMarquardtSummary summary;
  summary.status = status;
  summary.reason = "the optimiser's reason";
  summary.passes = 3;
  summary.iterations = 2;
  summary.accepted_steps = accepted_steps;
  summary.initial_chi2 = initial_chi2;
  summary.final_chi2 = final_chi2;
  return summary;
}

TEST(ConvergenceStatusTest, FinishedFitsKeepTheOptimisersStatusAndReason) {
  using Status = LevenbergMarquardtStatus;
  ConvergenceOutcome outcome =
      ConvergenceStatusOf(Summary(Status::kConvergedFtol, 2e4, 1e4, 5), 1e4, 1.0, 0.01);
  EXPECT_EQ(outcome.status, "converged");
  EXPECT_EQ(outcome.reason, "the optimiser's reason");
  outcome = ConvergenceStatusOf(Summary(Status::kMaxIterations, 2e4, 1e4, 5), 1e4, 1.0, 0.01);
  EXPECT_EQ(outcome.status, "max_iterations");
  for (const Status failed : {Status::kFailedDamping, Status::kFailedRejections,
                              Status::kStoppedByCallback, Status::kNotRun}) {
    EXPECT_EQ(ConvergenceStatusOf(Summary(failed, 2e4, 2e4, 0), 2e4, 2.0, 0.01).status, "failed");
  }
  EXPECT_EQ(FitExitCode("converged"), kExitSuccess);
  EXPECT_EQ(FitExitCode("max_iterations"), kExitSuccess);
  for (const char* status : {"failed", "failed_non_finite_objective", "no_progress", "not_run"}) {
    EXPECT_EQ(FitExitCode(status), kExitFailure) << status;
  }
}

TEST(ConvergenceStatusTest, ANonFiniteChiSquaredAtEitherEndIsNeverConverged) {
  using Status = LevenbergMarquardtStatus;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // The optimiser's own failure at the start.
  ConvergenceOutcome outcome =
      ConvergenceStatusOf(Summary(Status::kFailedNonFinite, inf, inf, 0), inf, inf, 1e-155);
  EXPECT_EQ(outcome.status, "failed_non_finite_objective");
  EXPECT_THAT(outcome.reason, HasSubstr("chi2 is not finite at the start (chi2 = inf, "
                                        "optimization.nlsq.sigma = 1e-155)"));
  EXPECT_THAT(outcome.reason, HasSubstr("the optimiser's reason"));
  // A "converged" optimiser whose result, or whose reported (plain) chi2, is not finite.
  outcome = ConvergenceStatusOf(Summary(Status::kConvergedGtol, 1e4, nan, 3), nan, nan, 0.01);
  EXPECT_EQ(outcome.status, "failed_non_finite_objective");
  EXPECT_THAT(outcome.reason, HasSubstr("at the result"));
  outcome = ConvergenceStatusOf(Summary(Status::kConvergedFtol, 1e4, 1e3, 3), inf, inf, 0.01);
  EXPECT_EQ(outcome.status, "failed_non_finite_objective");
  // A start that was not finite, whatever the end.
  outcome = ConvergenceStatusOf(Summary(Status::kConvergedXtol, nan, 1e3, 0), 1e3, 1.0, 0.01);
  EXPECT_EQ(outcome.status, "failed_non_finite_objective");
  EXPECT_THAT(outcome.reason, HasSubstr("at the start"));
}

TEST(ConvergenceStatusTest, AnAstronomicalChiSquaredWithoutAnAcceptedStepIsNoProgress) {
  using Status = LevenbergMarquardtStatus;
  for (const Status status :
       {Status::kConvergedGtol, Status::kConvergedXtol, Status::kMaxIterations}) {
    const ConvergenceOutcome outcome =
        ConvergenceStatusOf(Summary(status, 3e80, 3e80, 0), 3e80, 3e76, 0.01);
    EXPECT_EQ(outcome.status, "no_progress");
    EXPECT_THAT(outcome.reason, HasSubstr("never moved from its start"));
    EXPECT_THAT(outcome.reason, HasSubstr("optimization.nlsq.sigma = 0.01"));
  }
  // One accepted step, or a reduced chi2 at the limit: the optimiser's status stands.
  EXPECT_EQ(
      ConvergenceStatusOf(Summary(Status::kConvergedGtol, 3e80, 3e79, 1), 3e79, 3e75, 0.01).status,
      "converged");
  EXPECT_EQ(
      ConvergenceStatusOf(Summary(Status::kConvergedGtol, 1e10, 1e10, 0), 1e10, 1e6, 0.01).status,
      "converged");
}

// The strongly correlated pairs read the result's covariance, which a fit that failed before its
// covariance leaves empty: no warning, never an out-of-range read.
FitResult ResultWithCovariance(std::vector<double> covariance) {
  FitResult result;
  result.covariance_names = {"D0", "alpha", "contrast[0]"};
  result.covariance = std::move(covariance);
  return result;
}

TEST(StrongCorrelationsTest, PairsBeyondTheLimitAreNamed) {
  // D0 and alpha correlated by -0.995; contrast[0] is not physical.
  const FitResult result =
      ResultWithCovariance({1.0, -0.995, 0.0, -0.995, 1.0, 0.999, 0.0, 0.999, 1.0});
  EXPECT_THAT(StrongCorrelations(result, 2), ElementsAre("D0 and alpha (-0.9950)"));
}

// A jackknife result over `blocks` blocks whose uncertainties are `ratios` times the standard
// errors of independent noise.
FitResult JackknifeResult(int blocks, std::vector<double> ratios) {
  FitResult result;
  result.physical = {{"D0", 1.0, 0.1, ""}, {"alpha", -0.5, 0.01, ""}, {"D_offset", 3.0, 1.0, ""}};
  result.uncertainty_method = "jackknife";
  result.uncertainty_blocks = blocks;
  result.uncertainty_ratio_to_standard = std::move(ratios);
  return result;
}

TEST(UncertaintyDisagreementsTest, OnlyRatiosBelowTheJackknifesScatterAreFlagged) {
  // 64 blocks: scatter 1 / sqrt(126) = 0.089, so ratios below 0.733 are flagged; correlated
  // noise's large ratios are not.
  std::vector<std::string> disagree;
  EXPECT_THAT(UncertaintyDisagreements(JackknifeResult(64, {0.8, 1.0, 40.0}), disagree), IsEmpty());
  EXPECT_THAT(disagree, IsEmpty());
  const std::vector<std::string> warnings =
      UncertaintyDisagreements(JackknifeResult(64, {0.7, 1.0, std::nan("")}), disagree);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("uncertainties of D0 0.7 times the standard errors"));
  EXPECT_THAT(warnings[0], HasSubstr("64 blocks"));
  EXPECT_THAT(disagree, ElementsAre("D0"));
  // 8 blocks scatter more (0.27): 0.5 is chance there (the limit is 0.198).
  disagree.clear();
  EXPECT_THAT(UncertaintyDisagreements(JackknifeResult(8, {0.5, 1.0, 1.0}), disagree), IsEmpty());
  // Another method, or no ratios: nothing to compare.
  FitResult standard = JackknifeResult(64, {0.1, 0.1, 0.1});
  standard.uncertainty_method = "standard";
  EXPECT_THAT(UncertaintyDisagreements(standard, disagree), IsEmpty());
  EXPECT_THAT(UncertaintyDisagreements(JackknifeResult(64, {}), disagree), IsEmpty());
  EXPECT_THAT(disagree, IsEmpty());
}

TEST(StrongCorrelationsTest, AnEmptyOrMismatchedCovarianceGivesNoWarning) {
  EXPECT_THAT(StrongCorrelations(ResultWithCovariance({}), 2), IsEmpty());
  EXPECT_THAT(StrongCorrelations(ResultWithCovariance({1.0, 0.0, 0.0, 1.0}), 2), IsEmpty());
  // More physical parameters than names.
  EXPECT_THAT(StrongCorrelations(ResultWithCovariance(std::vector<double>(9, 1.0)), 4), IsEmpty());
}

TEST(StrongCorrelationsTest, NonFiniteEntriesGiveNoWarning) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(StrongCorrelations(ResultWithCovariance({inf, inf, 0, inf, inf, 0, 0, 0, 1}), 2),
              IsEmpty());
  EXPECT_THAT(StrongCorrelations(ResultWithCovariance({nan, nan, 0, nan, nan, 0, 0, 0, 1}), 2),
              IsEmpty());
}

// A result with two physical parameters (a = 1 +- 0.1, b = 5 +- 1), reduced chi2 1, chosen
// minimum chi2 100 on the search data of half the points.
FitResult ResultWithMinima(std::vector<std::pair<double, std::vector<double>>> others) {
  FitResult result;
  result.physical = {{"a", 1.0, 0.1, ""}, {"b", 5.0, 1.0, ""}};
  result.reduced_chi_squared = 1.0;
  result.global_search.search_points = 500;
  result.global_search.chosen = 0;
  result.global_search.minima.push_back({100.0, {"a", "b"}, {1.0, 5.0}, 0, "converged"});
  for (auto& [chi2, values] : others) {
    result.global_search.minima.push_back({chi2, {"a", "b"}, values, 1, "converged"});
  }
  return result;
}

TEST(OtherMinimumWarningsTest, AMinimumInsideTheContourFarInOneParameterNamesIt) {
  // Delta chi2 on all the data: (107 - 100) * 1000 / 500 = 14 <= 16, so a quadratic surface
  // allows sqrt(14) + 2 = 5.7 SE; a is 20 SE away, b 0.5.
  std::vector<std::string> undetermined;
  const std::vector<std::string> warnings =
      OtherMinimumWarnings(ResultWithMinima({{107.0, {3.0, 5.5}}}), 1000, undetermined);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("the data do not determine a ("));
  EXPECT_THAT(warnings[0], HasSubstr("20 standard errors"));
  EXPECT_THAT(undetermined, ElementsAre("a"));
}

TEST(OtherMinimumWarningsTest, MinimaOutsideTheContourOrCloseByAreNotEvidence) {
  std::vector<std::string> undetermined;
  // 9 above on half the points is 18 above on all of them: outside; the other, 2 above, may be
  // sqrt(2) + 2 = 3.4 SE away, and is 2 (a) and 3 (b).
  EXPECT_THAT(OtherMinimumWarnings(ResultWithMinima({{109.0, {3.0, 9.0}}, {101.0, {1.2, 8.0}}}),
                                   1000, undetermined),
              IsEmpty());
  EXPECT_THAT(undetermined, IsEmpty());
  // No global phase: nothing to compare with.
  FitResult no_search = ResultWithMinima({});
  no_search.global_search.chosen = -1;
  EXPECT_THAT(OtherMinimumWarnings(no_search, 1000, undetermined), IsEmpty());
}

TEST(OtherMinimumWarningsTest, AnEqualMinimumFewStandardErrorsAwayIsEvidence) {
  // 0.1 above on half the points: a quadratic surface allows sqrt(0.2) + 2 = 2.4 SE; b is 3.
  std::vector<std::string> undetermined;
  EXPECT_EQ(
      OtherMinimumWarnings(ResultWithMinima({{100.1, {1.0, 8.0}}}), 1000, undetermined).size(), 1u);
  EXPECT_THAT(undetermined, ElementsAre("b"));
}

TEST(OtherMinimumWarningsTest, AHigherReducedChiSquaredWidensTheContour) {
  // Reduced chi2 2: the contour is 32; 14 above on half the points is 28 on all: inside, and
  // a quadratic surface allows sqrt(28 / 2) + 2 = 5.7 SE; b is 7.
  FitResult result = ResultWithMinima({{114.0, {1.0, 12.0}}});
  result.reduced_chi_squared = 2.0;
  std::vector<std::string> undetermined;
  EXPECT_EQ(OtherMinimumWarnings(result, 1000, undetermined).size(), 1u);
  EXPECT_THAT(undetermined, ElementsAre("b"));
}

TEST(OtherMinimumWarningsTest, UnderARobustLossTheRobustCostSetsTheContour) {
  // The minima's chi2 is 2 cost under a robust loss (docs/design.md section 4c), so the unit is
  // 2 cost / dof = 1.4 here, not the plain reduced chi2 (3) the outliers inflate. 14 above on
  // half the points is 28 on all: outside the robust contour (16 x 1.4 = 22.4), no warning;
  // inside the plain one (48), where sqrt(28 / 3) + 2 = 5.1 SE would make b (6 SE away) evidence.
  FitResult result = ResultWithMinima({{114.0, {1.0, 11.0}}});
  result.reduced_chi_squared = 3.0;
  result.loss = "cauchy";
  result.degrees_of_freedom = 1000;
  result.robust_cost = 700.0;
  std::vector<std::string> undetermined;
  EXPECT_THAT(OtherMinimumWarnings(result, 1000, undetermined), IsEmpty());
  EXPECT_THAT(undetermined, IsEmpty());
  result.loss = "linear";
  EXPECT_EQ(OtherMinimumWarnings(result, 1000, undetermined).size(), 1u);
  EXPECT_THAT(undetermined, ElementsAre("b"));
}

// ResultWithMinima with Student intervals of the standard error (a: [0.9, 1.1] and [0.8, 1.2];
// b: [4, 6] and [3, 7]) whose curvature uncertainties are 1/sqrt(2) of the reported ones, so
// each level's threshold is 2 z^2: 2 (68 %) and 7.68 (95 %) on all the data.
FitResult ResultWithIntervalsAndMinima(std::vector<std::pair<double, std::vector<double>>> others) {
  FitResult result = ResultWithMinima(std::move(others));
  result.uncertainty_method = "standard";
  result.physical[0].interval_68 = {0.9, 1.1};
  result.physical[0].interval_95 = {0.8, 1.2};
  result.physical[1].interval_68 = {4.0, 6.0};
  result.physical[1].interval_95 = {3.0, 7.0};
  return result;
}

Eigen::VectorXd CurvatureOfIntervalsAndMinima() {
  return Eigen::Vector2d(0.1, 1.0) / std::sqrt(2.0);
}

TEST(WidenIntervalsToOtherMinimaTest, AMinimumWithinALevelsThresholdWidensThatLevel) {
  // 0.9 above on half the points is 1.8 on all: inside both levels' regions, so a's intervals
  // reach 3 and b's 9; 1.5 above (3 on all) is inside the 95 % region only.
  FitResult result = ResultWithIntervalsAndMinima({{100.9, {3.0, 9.0}}, {101.5, {-1.0, 5.5}}});
  EXPECT_THAT(WidenIntervalsToOtherMinima(CurvatureOfIntervalsAndMinima(), 1000, result),
              ElementsAre("a", "b"));
  EXPECT_THAT(result.physical[0].interval_68, ElementsAre(0.9, 3.0));
  EXPECT_THAT(result.physical[0].interval_95, ElementsAre(-1.0, 3.0));
  EXPECT_THAT(result.physical[1].interval_68, ElementsAre(4.0, 9.0));
  EXPECT_THAT(result.physical[1].interval_95, ElementsAre(3.0, 9.0));
  EXPECT_THAT(result.physical[0].interval_note, HasSubstr("68 % widened to 3"));
  EXPECT_THAT(result.physical[0].interval_note, HasSubstr("95 % widened to -1"));
}

TEST(WidenIntervalsToOtherMinimaTest, MinimaOutsideTheRegionsOrInsideTheIntervalsChangeNothing) {
  // 9 above on all (beyond 7.68), and a minimum already inside every interval.
  FitResult result = ResultWithIntervalsAndMinima({{104.5, {3.0, 9.0}}, {100.1, {1.05, 5.2}}});
  EXPECT_THAT(WidenIntervalsToOtherMinima(CurvatureOfIntervalsAndMinima(), 1000, result),
              IsEmpty());
  EXPECT_THAT(result.physical[0].interval_68, ElementsAre(0.9, 1.1));
  EXPECT_THAT(result.physical[1].interval_95, ElementsAre(3.0, 7.0));
  EXPECT_EQ(result.physical[0].interval_note, "");
  // The curvature's own scale (u = c) halves the thresholds: 1.8 on all is then beyond the 68 %
  // region (1) and inside the 95 % one (3.84).
  FitResult curvature_scale = ResultWithIntervalsAndMinima({{100.9, {3.0, 9.0}}});
  EXPECT_THAT(WidenIntervalsToOtherMinima(Eigen::Vector2d(0.1, 1.0), 1000, curvature_scale),
              ElementsAre("a", "b"));
  EXPECT_THAT(curvature_scale.physical[0].interval_68, ElementsAre(0.9, 1.1));
  EXPECT_THAT(curvature_scale.physical[0].interval_95, ElementsAre(0.8, 3.0));
  // No intervals (curvature reports none) or no global phase: nothing to widen.
  FitResult no_intervals = ResultWithMinima({{100.9, {3.0, 9.0}}});
  EXPECT_THAT(WidenIntervalsToOtherMinima(CurvatureOfIntervalsAndMinima(), 1000, no_intervals),
              IsEmpty());
  FitResult no_search = ResultWithIntervalsAndMinima({});
  no_search.global_search.chosen = -1;
  EXPECT_THAT(WidenIntervalsToOtherMinima(CurvatureOfIntervalsAndMinima(), 1000, no_search),
              IsEmpty());
}

// A result with three physical parameters: a = 1 +- 0.1 and b = 5 +- 1 correlated by `ab`, c =
// 0 +- 2 uncorrelated; chi2 1000, reduced chi2 1.
FitResult ResultWithCorrelation(double ab) {
  FitResult result;
  result.physical = {{"a", 1.0, 0.1, ""}, {"b", 5.0, 1.0, ""}, {"c", 0.0, 2.0, ""}};
  result.covariance_names = {"a", "b", "c"};
  result.covariance = {0.01, ab * 0.1, 0.0, ab * 0.1, 1.0, 0.0, 0.0, 0.0, 4.0};
  result.chi_squared = 1000.0;
  result.reduced_chi_squared = 1.0;
  return result;
}

// A probe of a chi2 surface that rises by rise(name) * (d / 4 SE)^2 from the result, recording
// each call.
struct RecordingProbe {
  std::vector<std::string> calls;
  std::function<double(const std::string&)> rise;
  ProfileProbe Probe(const FitResult& result) {
    return [this, &result](const std::string& name, double value, double enough) {
      calls.push_back(name + "@" + std::to_string(value));
      for (const ParameterEstimate& estimate : result.physical) {
        if (estimate.name != name) continue;
        const double d = (value - estimate.value) / (4.0 * estimate.uncertainty);
        EXPECT_DOUBLE_EQ(enough, result.chi_squared + kProfileRise);
        return result.chi_squared + rise(name) * d * d;
      }
      return std::nan("");
    };
  }
};

TEST(ProfileWarningsTest, AFlatterProfileOfACorrelatedParameterNamesIt) {
  // a and b correlated by 0.95: both are held 4 SE away (a at 0.6 and 1.4); a's profile rises
  // by 9, b's by 16 as a quadratic surface would. c (uncorrelated) is not probed.
  const FitResult result = ResultWithCorrelation(0.95);
  RecordingProbe probe;
  probe.rise = [](const std::string& name) { return name == "a" ? 9.0 : 16.0; };
  std::vector<std::string> undetermined;
  const std::vector<std::string> warnings =
      ProfileWarnings(result, probe.Probe(result), undetermined);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("the data do not determine a ("));
  EXPECT_THAT(warnings[0], HasSubstr("a held at 0.6"));
  EXPECT_THAT(undetermined, ElementsAre("a"));
  // a stops at its first flagged side; b is probed on both sides.
  EXPECT_EQ(probe.calls.size(), 3u);
}

TEST(ProfileWarningsTest, OnlyParametersCorrelatedBetweenTheLimitsAreProbed) {
  std::vector<std::string> undetermined;
  for (const double ab : {0.5}) {  // below 0.9
    const FitResult result = ResultWithCorrelation(ab);
    RecordingProbe probe;
    probe.rise = [](const std::string&) { return 1.0; };
    EXPECT_THAT(ProfileWarnings(result, probe.Probe(result), undetermined), IsEmpty()) << ab;
    EXPECT_THAT(probe.calls, IsEmpty()) << ab;
  }
  // Parameters already named undetermined, on a bound, or held are skipped too.
  FitResult result = ResultWithCorrelation(0.95);
  result.physical[1].at_bound = "lower";
  undetermined = {"a"};
  RecordingProbe probe;
  probe.rise = [](const std::string&) { return 1.0; };
  EXPECT_THAT(ProfileWarnings(result, probe.Probe(result), undetermined), IsEmpty());
  EXPECT_THAT(probe.calls, IsEmpty());
}

TEST(ProfileWarningsTest, PairsBeyond099AreProbedToo) {
  // Correlated by 0.995 (a pair the log lists as information): the profile, not the
  // correlation, says whether the data determine the parameter.
  const FitResult result = ResultWithCorrelation(0.995);
  RecordingProbe probe;
  probe.rise = [](const std::string& name) { return name == "a" ? 9.0 : 16.0; };
  std::vector<std::string> undetermined;
  EXPECT_EQ(ProfileWarnings(result, probe.Probe(result), undetermined).size(), 1u);
  EXPECT_THAT(undetermined, ElementsAre("a"));
}

TEST(ProfileWarningsTest, NoProfilePointOrAQuadraticRiseIsNoEvidence) {
  const FitResult result = ResultWithCorrelation(-0.95);
  std::vector<std::string> undetermined;
  // A profile point that cannot be computed (NaN: outside the bounds, a failed fit) on each side.
  const ProfileProbe none = [](const std::string&, double, double) { return std::nan(""); };
  EXPECT_THAT(ProfileWarnings(result, none, undetermined), IsEmpty());
  // A rise of 12.5 (above kProfileRise, 12): within what a nearly quadratic surface gives.
  RecordingProbe probe;
  probe.rise = [](const std::string&) { return 12.5; };
  EXPECT_THAT(ProfileWarnings(result, probe.Probe(result), undetermined), IsEmpty());
  EXPECT_EQ(probe.calls.size(), 4u);
  // No probe (the mode does not ask for the check): nothing.
  EXPECT_THAT(ProfileWarnings(result, nullptr, undetermined), IsEmpty());
  EXPECT_THAT(undetermined, IsEmpty());
}

TEST(ProfileWarningsTest, AHigherReducedChiSquaredScalesTheRise) {
  // Reduced chi2 2: a rise of 20 in chi2 is 10 reduced units, below 12.
  FitResult result = ResultWithCorrelation(0.95);
  result.reduced_chi_squared = 2.0;
  const ProfileProbe probe = [&result](const std::string& name, double, double enough) {
    EXPECT_DOUBLE_EQ(enough, result.chi_squared + 2.0 * kProfileRise);
    return result.chi_squared + (name == "b" ? 20.0 : 40.0);
  };
  std::vector<std::string> undetermined;
  EXPECT_EQ(ProfileWarnings(result, probe, undetermined).size(), 1u);
  EXPECT_THAT(undetermined, ElementsAre("b"));
}

}  // namespace
}  // namespace homodyne

namespace homodyne {
namespace {

// A parameter held by a bound inside a near +-1 correlation: widening the bound moves the pair
// along its valley, so the warning names the partner and says to fix one (a real file whose
// alpha is near 0 makes D0 and D_offset one constant).
TEST(ResultBoundWarningsTest, ABoundInsideACorrelationNamesThePairToFix) {
  LevenbergMarquardtOptions options;
  options.parameter_names = {"D0", "alpha", "D_offset"};
  options.lower_bounds = Eigen::Vector3d(100.0, -2.0, -1e5);
  options.upper_bounds = Eigen::Vector3d(1e5, 2.0, 1e5);
  LevenbergMarquardtSummary summary;
  summary.theta = Eigen::Vector3d(1e5, 0.001, -9e4);
  summary.parameters_at_bound = {0};
  summary.covariance = Eigen::Matrix3d{{4.0, 0.0, -3.998}, {0.0, 1.0, 0.0}, {-3.998, 0.0, 4.0}};

  const std::vector<std::string> warnings = ResultBoundWarnings(summary, options);

  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings.front(),
              HasSubstr("D0 = 100000 ended at its upper bound inside a correlation of -0.9995 "
                        "with D_offset"));
  EXPECT_THAT(warnings.front(), HasSubstr("hold one of them fixed"));

  // Uncorrelated: the optimum may lie beyond the bound.
  summary.covariance = Eigen::Matrix3d::Identity();
  EXPECT_THAT(
      ResultBoundWarnings(summary, options),
      ElementsAre(HasSubstr("the optimum may lie beyond it (widen parameter_space.bounds)")));
  // No covariance (a failed fit): the plain warning, no crash.
  summary.covariance.resize(0, 0);
  EXPECT_THAT(ResultBoundWarnings(summary, options), ElementsAre(HasSubstr("widen")));
}

// A parameter the data do not determine (J^T J singular along it) reports a lower-bound u, so
// value +- u claims far too little; its profile takes the largest u / c of the others (the chi2
// scale the reported method found in the data) and follows its valley on that scale.
TEST(AddProfileIntervalsTest, AnUndeterminedParameterTakesTheLargestRatioOfTheOthers) {
  FitResult result;
  // a: u 3 against curvature 1 (ratio 3), b: ratio 2, c: a lower bound u 0.01 = its curvature.
  result.physical = {{"a", 1.0, 3.0, ""}, {"b", 5.0, 2.0, ""}, {"c", 0.0, 0.01, ""}};
  result.chi_squared = 1000.0;
  result.reduced_chi_squared = 1.0;
  const Eigen::Vector3d curvature(1.0, 1.0, 0.01);
  LevenbergMarquardtOptions lm;
  lm.parameter_names = {"a", "b", "c"};
  lm.lower_bounds = Eigen::Vector3d(-100.0, -100.0, -1.0);
  lm.upper_bounds = Eigen::Vector3d(100.0, 100.0, 1.0);
  const std::vector<std::string> undetermined = {"c"};
  EXPECT_DOUBLE_EQ(UndeterminedUncertaintyRatio(result, curvature, undetermined), 3.0);
  EXPECT_TRUE(std::isnan(UndeterminedUncertaintyRatio(result, curvature, {"a", "b", "c"})));

  // c's chi2 rises as its curvature says: (c / 0.01)^2.
  const ProfileProbe probe = [&](const std::string& name, double value, double) {
    return name == "c" ? result.chi_squared + (value / 0.01) * (value / 0.01) : std::nan("");
  };
  FitResult scaled = result;
  AddProfileIntervals(probe, curvature, lm, scaled, nullptr, &undetermined, undetermined);
  const ParameterEstimate& c = scaled.physical[2];
  ASSERT_EQ(c.interval_68.size(), 2u);
  EXPECT_EQ(c.interval_method, "profile");
  // Delta chi2 = 3^2 at 68 %: +-0.03, not the lower bound's +-0.01; 95 %: +-1.96 x 0.03.
  EXPECT_NEAR(c.interval_68[0], -0.03, 3e-4);
  EXPECT_NEAR(c.interval_68[1], 0.03, 3e-4);
  EXPECT_NEAR(c.interval_95[1], 1.96 * 0.03, 6e-4);
  EXPECT_TRUE(scaled.physical[0].interval_68.empty());  // not asked for

  // Not named undetermined: its own ratio 1, +-0.01.
  FitResult own = result;
  AddProfileIntervals(probe, curvature, lm, own, nullptr, &undetermined);
  EXPECT_NEAR(own.physical[2].interval_68[1], 0.01, 1e-4);
}

// A rugged profile (refits at neighbouring values landing in different minima): the 68 % search
// stops at a wall of chi2 that the 95 % search steps over, into another valley whose chi2 is below
// the 68 % level. A profile point's refit bounds the profile from above, so that point lies inside
// the 68 % region: each interval reaches the points below its level, and the 68 % lies inside the
// 95 %.
TEST(AddProfileIntervalsTest, EndsReachThePointsBelowTheirLevelAndNest) {
  FitResult result;
  result.physical = {{"a", 0.0, 1.0, ""}};
  result.chi_squared = 100.0;
  result.reduced_chi_squared = 1.0;
  const Eigen::VectorXd curvature = Eigen::VectorXd::Constant(1, 1.0);
  LevenbergMarquardtOptions lm;
  lm.parameter_names = {"a"};
  lm.lower_bounds = Eigen::VectorXd::Constant(1, -10.0);
  lm.upper_bounds = Eigen::VectorXd::Constant(1, 10.0);
  // Rise a^2, but 50 on (0.5, 1.5) (the 68 % search's first point, 1, is there) and 0.5 on
  // (1.8, 2.2) (the 95 % search's first point, 1.96, is there).
  std::vector<double> held;
  const auto rise = [](double value) {
    if (value > 0.5 && value < 1.5) return 50.0;
    if (value > 1.8 && value < 2.2) return 0.5;
    return value * value;
  };
  const ProfileProbe probe = [&](const std::string&, double value, double) {
    held.push_back(value);
    return result.chi_squared + rise(value);
  };
  AddProfileIntervals(probe, curvature, lm, result);
  const ParameterEstimate& a = result.physical[0];
  ASSERT_EQ(a.interval_68.size(), 2u);
  ASSERT_EQ(a.interval_95.size(), 2u);
  // The quadratic side as before: one step each.
  EXPECT_NEAR(a.interval_68[0], -1.0, 0.01);
  EXPECT_NEAR(a.interval_95[0], -1.96, 0.02);
  // The 68 % search alone ends before the wall; the 95 % search's points in the valley beyond it
  // are below the 68 % level: the farthest of them is the 68 % end.
  double farthest_below = 0.0;
  for (const double value : held) {
    if (value > 0.0 && rise(value) < 1.0) farthest_below = std::max(farthest_below, value);
  }
  EXPECT_GT(farthest_below, 1.8);
  EXPECT_EQ(a.interval_68[1], farthest_below);
  EXPECT_GE(a.interval_95[1], a.interval_68[1]);
  EXPECT_EQ(a.interval_method, "profile");
}

// The profile of a parameter the data do not determine and value +- t u of its lower-bound u:
// its intervals are the hull of both (AddStudentIntervals' widen).
TEST(AddStudentIntervalsTest, UndeterminedParametersGetTheHullOfProfileAndStudent) {
  LevenbergMarquardtOptions lm;
  lm.parameter_names = {"a", "b"};
  lm.lower_bounds = Eigen::Vector2d(0.0, 0.0);
  lm.upper_bounds = Eigen::Vector2d(1.0, 1.0);
  FitResult result;
  result.uncertainty_method = "standard";
  // a: u 0.01, profile [0.2, 0.8] (wider: kept); b: u 0.3, profile [0.45, 0.55] (narrower).
  result.physical = {{"a", 0.5, 0.01, ""}, {"b", 0.5, 0.3, ""}};
  for (ParameterEstimate& estimate : result.physical) {
    estimate.interval_method = "profile";
    estimate.interval_68 =
        estimate.name == "a" ? std::vector<double>{0.2, 0.8} : std::vector<double>{0.45, 0.55};
    estimate.interval_95 = estimate.interval_68;
  }
  AddStudentIntervals(lm, result, {"a", "b"});
  const ParameterEstimate& a = result.physical[0];
  const ParameterEstimate& b = result.physical[1];
  EXPECT_EQ(a.interval_68, std::vector<double>({0.2, 0.8}));
  EXPECT_EQ(a.interval_note, "");
  EXPECT_EQ(a.interval_method, "profile");
  EXPECT_DOUBLE_EQ(b.interval_68[0], 0.2);  // 0.5 -+ 0.3
  EXPECT_DOUBLE_EQ(b.interval_68[1], 0.8);
  EXPECT_EQ(b.interval_95, std::vector<double>({0.0, 1.0}));  // +-1.96 u, clipped
  EXPECT_EQ(b.interval_note, "widened to value +- t u");
  // b's 68 % value +- t u, [0.2, 0.8], does not reach the bounds [0, 1]; with u 0.6 it does.
  EXPECT_FALSE(StudentIntervalSpansBounds(lm, result, "b"));
  result.physical[1].uncertainty = 0.6;
  EXPECT_TRUE(StudentIntervalSpansBounds(lm, result, "b"));
  EXPECT_FALSE(StudentIntervalSpansBounds(lm, result, "held"));  // not in lm
  result.physical[1].uncertainty = 0.3;
  // Not named: a parameter with intervals keeps them.
  FitResult kept = result;
  kept.physical[1].interval_68 = {0.45, 0.55};
  AddStudentIntervals(lm, kept);
  EXPECT_EQ(kept.physical[1].interval_68, std::vector<double>({0.45, 0.55}));
}

}  // namespace
}  // namespace homodyne
