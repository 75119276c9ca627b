// Tests of the standard strategy (src/optimize/ceres_standard_fit.h) on data simulated in memory:
// recovery of the truth, agreement with the LM core on the same objective
// (docs/design.md section 3: within 1e-3 standard errors), the chi2 convention, bounds, static
// mode, a reduced map.
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "objective/batched_objective.h"
#include "optimize/ceres_standard_fit.h"
#include "optimize/ceres_termination.h"
#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"
#include "optimize/reparametrized_problem.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

constexpr double kNoiseSigma = 0.01;
const std::vector<double> kAngles = {0.0, 45.0, 90.0};
const std::vector<double> kContrasts = {0.30, 0.25, 0.20};
const std::vector<double> kOffsets = {1.00, 1.02, 0.98};

// A simulated data set: c2 of the model at the truth on the CLI's fitted grid t_k = k dt
// (k = 1..n_times, dt = 0.1 s) plus Gaussian noise of kNoiseSigma (seeded), packed per angle.
struct SimulatedData {
  HomodyneModel model;
  PackedDataObjective::PackedData data;
  Eigen::VectorXd truth;  // full layout (batched_objective.h)
};

SimulatedData Simulate(AnalysisMode mode, int n_times, unsigned seed) {
  ScatteringGeometry geometry;
  geometry.q_inv_angstrom = 0.0054;
  geometry.gap_angstrom = 2.0e6;
  geometry.dt_seconds = 0.1;
  std::vector<double> times;
  for (int k = 1; k <= n_times; ++k) times.push_back(k * geometry.dt_seconds);
  SimulatedData simulated{HomodyneModel(mode, geometry, times), {}, {}};
  const std::vector<double> physical =
      mode == AnalysisMode::kLaminarFlow
          ? std::vector<double>{3000.0, -0.5, 10.0, 2.0e-4, 0.3, 1.0e-5, 5.0}
          : std::vector<double>{3000.0, -0.5, 10.0};
  const int p_phys = simulated.model.num_physical();
  const int n = static_cast<int>(kAngles.size());
  simulated.truth.resize(p_phys + 2 * n);
  for (int a = 0; a < p_phys; ++a) simulated.truth[a] = physical[static_cast<size_t>(a)];
  for (int k = 0; k < n; ++k) {
    simulated.truth[p_phys + k] = kContrasts[static_cast<size_t>(k)];
    simulated.truth[p_phys + n + k] = kOffsets[static_cast<size_t>(k)];
  }

  const ModelEvaluation evaluation(simulated.model, physical);
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> noise(0.0, kNoiseSigma);
  std::vector<double> c2(static_cast<size_t>(UpperTriangleSize(n_times)));
  for (int k = 0; k < n; ++k) {
    const size_t angle = static_cast<size_t>(k);
    evaluation.EvaluateUpperTriangleRows(kAngles[angle], kContrasts[angle], kOffsets[angle], 0,
                                         n_times, c2, {});
    std::vector<float> packed(c2.size());
    for (size_t i = 0; i < c2.size(); ++i) packed[i] = static_cast<float>(c2[i] + noise(generator));
    simulated.data.push_back(std::move(packed));
  }
  return simulated;
}

ScalingMap IdentityMap(int num_full) {
  ScalingMap map;
  map.matrix = Eigen::MatrixXd::Identity(num_full, num_full);
  map.shift = Eigen::VectorXd::Zero(num_full);
  return map;
}

// The bounds of the fit tests (full layout): physical as the other fit tests'
// (tests/support/simulated_data_fixture.h, BoundedOptions), contrast [0, 1], offset [0.5, 1.5].
LevenbergMarquardtOptions BoundedOptions(int num_physical, int num_angles) {
  const std::vector<std::pair<double, double>> physical_bounds = {
      {1e2, 1e5}, {-2.0, 2.0}, {-1e5, 1e5}, {1e-6, 0.5}, {-2.0, 2.0}, {-0.1, 0.1}, {-10.0, 10.0}};
  const int p = num_physical + 2 * num_angles;
  LevenbergMarquardtOptions options;
  options.lower_bounds.resize(p);
  options.upper_bounds.resize(p);
  for (int a = 0; a < num_physical; ++a) {
    options.lower_bounds[a] = physical_bounds[static_cast<size_t>(a)].first;
    options.upper_bounds[a] = physical_bounds[static_cast<size_t>(a)].second;
  }
  for (int k = 0; k < num_angles; ++k) {
    options.lower_bounds[num_physical + k] = 0.0;
    options.upper_bounds[num_physical + k] = 1.0;
    options.lower_bounds[num_physical + num_angles + k] = 0.5;
    options.upper_bounds[num_physical + num_angles + k] = 1.5;
  }
  return options;
}

// The start of the recovery tests: physical values 20-30% off the truth, contrast 0.25, offset 1.
Eigen::VectorXd Start(AnalysisMode mode) {
  const std::vector<double> physical =
      mode == AnalysisMode::kLaminarFlow
          ? std::vector<double>{3900.0, -0.4, 13.0, 2.6e-4, 0.24, 1.3e-5, 6.5}
          : std::vector<double>{3900.0, -0.4, 13.0};
  const int p_phys = static_cast<int>(physical.size());
  const int n = static_cast<int>(kAngles.size());
  Eigen::VectorXd start(p_phys + 2 * n);
  for (int a = 0; a < p_phys; ++a) start[a] = physical[static_cast<size_t>(a)];
  for (int k = 0; k < n; ++k) {
    start[p_phys + k] = 0.25;
    start[p_phys + n + k] = 1.0;
  }
  return start;
}

LevenbergMarquardtSummary FitWithCeres(const SimulatedData& simulated,
                                       const LevenbergMarquardtOptions& options,
                                       const ScalingMap& map, const Eigen::VectorXd& start) {
  const LevenbergMarquardtSummary summary = FitStandardWithCeres(
      options, simulated.model, kAngles, kNoiseSigma, simulated.data, map, start);
  std::printf("Ceres: %s (%s)\n", summary.BriefReport().c_str(), summary.reason.c_str());
  return summary;
}

// Every parameter within 3 standard errors of the truth, reduced chi2 within 1 +- 0.05. The fit
// counts every upper-triangle point twice (batched_objective.h), as a fit of the full symmetric
// matrix, while the noise here is drawn once per upper-triangle point: the true standard errors are
// then sqrt(2) times the reported uncertainties.
void ExpectRecovery(const LevenbergMarquardtSummary& summary, const Eigen::VectorXd& truth) {
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_FALSE(summary.covariance_pseudo_inverse);
  EXPECT_TRUE(summary.parameters_at_bound.empty());
  EXPECT_NEAR(summary.reduced_chi2, 1.0, 0.05);
  ASSERT_EQ(summary.theta.size(), truth.size());
  for (int a = 0; a < truth.size(); ++a) {
    const double standard_error = std::numbers::sqrt2 * summary.uncertainties[a];
    std::printf("  theta[%d] = %.6g +- %.3g (truth %.6g, %.2f SE)\n", a, summary.theta[a],
                standard_error, truth[a], (summary.theta[a] - truth[a]) / standard_error);
    EXPECT_GT(standard_error, 0.0) << a;
    EXPECT_LE(std::abs(summary.theta[a] - truth[a]), 3.0 * standard_error) << a;
  }
}

// The same optimum as the LM core within 1e-3 of the core's standard errors, chi2 within 1e-6
// (relative), the same uncertainties within 1e-3 (relative) and the same dof. Both must have run
// with AgreementOptions: at the default tolerances each stops where one more step would lower chi2
// by less than ftol = 1e-8 (relative), which leaves each up to a few 1e-2 standard errors from
// the optimum, in different directions.
void ExpectAgreement(const LevenbergMarquardtSummary& ceres,
                     const LevenbergMarquardtSummary& core) {
  ASSERT_TRUE(ceres.IsConverged()) << ceres.reason;
  ASSERT_TRUE(core.IsConverged()) << core.reason;
  EXPECT_EQ(ceres.dof, core.dof);
  EXPECT_NEAR(ceres.final_chi2, core.final_chi2, 1e-6 * core.final_chi2);
  ASSERT_EQ(ceres.theta.size(), core.theta.size());
  for (int a = 0; a < core.theta.size(); ++a) {
    if (core.uncertainties[a] == 0.0) {  // held by its bounds
      EXPECT_EQ(ceres.theta[a], core.theta[a]) << a;
      EXPECT_EQ(ceres.uncertainties[a], 0.0) << a;
      continue;
    }
    const double standard_errors = (ceres.theta[a] - core.theta[a]) / core.uncertainties[a];
    std::printf("  theta[%d]: Ceres %.10g, core %.10g, difference %.2e standard errors\n", a,
                ceres.theta[a], core.theta[a], standard_errors);
    EXPECT_LE(std::abs(standard_errors), 1e-3) << a;
    EXPECT_NEAR(ceres.uncertainties[a], core.uncertainties[a], 1e-3 * core.uncertainties[a]) << a;
  }
}

// Bounded options with tolerances tight enough that both optimizers stop within 1e-4 standard
// errors of the optimum (and still above the rounding of chi2, about 1e-15 relative here).
LevenbergMarquardtOptions AgreementOptions(int num_physical, int num_angles) {
  LevenbergMarquardtOptions options = BoundedOptions(num_physical, num_angles);
  options.ftol = 1e-12;
  options.xtol = 1e-12;
  options.gtol = 1e-12;
  return options;
}

class CeresStandardFitTest : public ::testing::Test {
 protected:
  // The laminar-flow data set of most tests: 3 angles, 300 times (134550 points), built once.
  static void SetUpTestSuite() {
    laminar_ = new SimulatedData(Simulate(AnalysisMode::kLaminarFlow, 300, 11));
  }
  static void TearDownTestSuite() {
    delete laminar_;
    laminar_ = nullptr;
  }
  static const SimulatedData& laminar() { return *laminar_; }

 private:
  static SimulatedData* laminar_;
};
SimulatedData* CeresStandardFitTest::laminar_ = nullptr;

TEST_F(CeresStandardFitTest, RecoversLaminarFlowParameters) {
  const SimulatedData& simulated = laminar();
  const int p = static_cast<int>(simulated.truth.size());

  const LevenbergMarquardtSummary summary = FitWithCeres(
      simulated, BoundedOptions(7, 3), IdentityMap(p), Start(AnalysisMode::kLaminarFlow));

  ExpectRecovery(summary, simulated.truth);
  EXPECT_EQ(summary.dof, 2 * 3 * UpperTriangleSize(300) - p);
  EXPECT_TRUE(summary.warnings.empty());
  EXPECT_GT(summary.iterations, 0);
  EXPECT_EQ(summary.iterations, summary.accepted_steps + summary.rejected_steps);
  EXPECT_EQ(static_cast<int>(summary.chi2_history.size()), summary.iterations + 1);
  EXPECT_GT(summary.passes, 1);
  EXPECT_LT(summary.final_chi2, summary.initial_chi2);
  EXPECT_GT(summary.final_damping, 0.0);
  EXPECT_TRUE(summary.covariance.isApprox(summary.covariance.transpose()));
}

TEST_F(CeresStandardFitTest, AgreesWithLevenbergMarquardtCore) {
  const SimulatedData& simulated = laminar();
  const int p = static_cast<int>(simulated.truth.size());
  const LevenbergMarquardtOptions options = AgreementOptions(7, 3);
  const Eigen::VectorXd start = Start(AnalysisMode::kLaminarFlow);
  PackedDataObjective objective(simulated.model, kAngles, kNoiseSigma, simulated.data);

  const LevenbergMarquardtSummary ceres = FitWithCeres(simulated, options, IdentityMap(p), start);
  const LevenbergMarquardtSummary core = Minimize(options, objective, start);
  std::printf("core:  %s\n", core.BriefReport().c_str());

  ExpectAgreement(ceres, core);
}

TEST_F(CeresStandardFitTest, ChiSquareEqualsPackedObjectiveCost) {
  // Non-finite points in two angles: both skip them and count the same residuals.
  SimulatedData simulated = Simulate(AnalysisMode::kLaminarFlow, 120, 5);
  simulated.data[0][17] = std::numeric_limits<float>::quiet_NaN();
  simulated.data[0][5000] = std::numeric_limits<float>::infinity();
  simulated.data[2][UpperTriangleSize(120) - 1] = -std::numeric_limits<float>::infinity();
  const int p = static_cast<int>(simulated.truth.size());
  PackedDataObjective objective(simulated.model, kAngles, kNoiseSigma, simulated.data);
  LevenbergMarquardtOptions options = BoundedOptions(7, 3);
  const Eigen::VectorXd start = Start(AnalysisMode::kLaminarFlow);

  const LevenbergMarquardtSummary summary = FitWithCeres(simulated, options, IdentityMap(p), start);

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_EQ(summary.dof, objective.num_residuals() - p);
  EXPECT_EQ(summary.dof, 2 * (3 * UpperTriangleSize(120) - 3) - p);
  const double cost_at_result = objective.Cost(summary.theta);
  EXPECT_NEAR(summary.final_chi2, cost_at_result, 1e-9 * cost_at_result);
  const double cost_at_start = objective.Cost(start);
  EXPECT_NEAR(summary.initial_chi2, cost_at_start, 1e-9 * cost_at_start);
  EXPECT_NEAR(summary.chi2_history.front(), cost_at_start, 1e-9 * cost_at_start);
  EXPECT_NEAR(summary.chi2_history.back(), cost_at_result, 1e-9 * cost_at_result);
}

TEST_F(CeresStandardFitTest, ClipsStartOutsideBoundsWithWarning) {
  const SimulatedData simulated = Simulate(AnalysisMode::kLaminarFlow, 80, 3);
  const int p = static_cast<int>(simulated.truth.size());
  LevenbergMarquardtOptions options = BoundedOptions(7, 3);
  options.parameter_names = {
      "D0",       "alpha",       "D_offset",    "gamma_dot_t0", "beta",      "gamma_dot_t_offset",
      "phi0",     "contrast[0]", "contrast[1]", "contrast[2]",  "offset[0]", "offset[1]",
      "offset[2]"};
  Eigen::VectorXd start = Start(AnalysisMode::kLaminarFlow);
  start[0] = 2e5;   // above D0's upper bound 1e5
  start[7] = -0.1;  // below contrast[0]'s lower bound 0
  Eigen::VectorXd clipped = start;
  clipped[0] = 1e5;
  clipped[7] = 0.0;
  PackedDataObjective objective(simulated.model, kAngles, kNoiseSigma, simulated.data);

  const LevenbergMarquardtSummary summary = FitWithCeres(simulated, options, IdentityMap(p), start);

  ASSERT_EQ(summary.warnings.size(), 2u);
  EXPECT_THAT(summary.warnings[0],
              HasSubstr("initial value of D0 = 200000 is above its upper bound 100000"));
  EXPECT_THAT(summary.warnings[1],
              HasSubstr("initial value of contrast[0] = -0.1 is below its lower bound 0"));
  const double cost_at_clipped = objective.Cost(clipped);
  EXPECT_NEAR(summary.initial_chi2, cost_at_clipped, 1e-9 * cost_at_clipped);
  for (int a = 0; a < p; ++a) {
    EXPECT_GE(summary.theta[a], options.lower_bounds[a]) << a;
    EXPECT_LE(summary.theta[a], options.upper_bounds[a]) << a;
  }
  EXPECT_LT(summary.final_chi2, summary.initial_chi2);
}

TEST_F(CeresStandardFitTest, RecoversStaticParametersAndAgreesWithCore) {
  const SimulatedData simulated = Simulate(AnalysisMode::kStatic, 300, 13);
  const int p = static_cast<int>(simulated.truth.size());
  ASSERT_EQ(p, 9);
  const LevenbergMarquardtOptions options = AgreementOptions(3, 3);
  const Eigen::VectorXd start = Start(AnalysisMode::kStatic);
  PackedDataObjective objective(simulated.model, kAngles, kNoiseSigma, simulated.data);

  const LevenbergMarquardtSummary ceres = FitWithCeres(simulated, options, IdentityMap(p), start);
  const LevenbergMarquardtSummary core = Minimize(options, objective, start);
  std::printf("core:  %s\n", core.BriefReport().c_str());

  ExpectRecovery(ceres, simulated.truth);
  ExpectAgreement(ceres, core);
}

TEST_F(CeresStandardFitTest, FitsReducedParametersOfAMapWithShift) {
  // Reduced layout [physical (7), contrast_0..2]; the offsets are frozen at the truth in `shift`.
  const SimulatedData& simulated = laminar();
  const int p_full = static_cast<int>(simulated.truth.size());
  const int p = 10;
  ScalingMap map;
  map.matrix = Eigen::MatrixXd::Zero(p_full, p);
  map.matrix.topLeftCorner(p, p).setIdentity();
  map.shift = Eigen::VectorXd::Zero(p_full);
  map.shift.tail(3) = simulated.truth.tail(3);
  LevenbergMarquardtOptions options = AgreementOptions(7, 3);
  options.lower_bounds = options.lower_bounds.head(p).eval();
  options.upper_bounds = options.upper_bounds.head(p).eval();
  const Eigen::VectorXd start = Start(AnalysisMode::kLaminarFlow).head(p);
  PackedDataObjective objective(simulated.model, kAngles, kNoiseSigma, simulated.data);
  ReparametrizedProblem problem(objective, map);

  const LevenbergMarquardtSummary ceres = FitWithCeres(simulated, options, map, start);
  const LevenbergMarquardtSummary core = Minimize(options, problem, start);
  std::printf("core:  %s\n", core.BriefReport().c_str());

  ExpectRecovery(ceres, simulated.truth.head(p));
  ExpectAgreement(ceres, core);
  EXPECT_NEAR(ceres.final_chi2, objective.Cost(map.Expand(ceres.theta)), 1e-9 * ceres.final_chi2);
}

TEST_F(CeresStandardFitTest, HoldsParameterWithEqualBoundsFixedAsCore) {
  // phi0 (index 6) held at 5.5 degrees by lower = upper: it stays there, has zero covariance
  // and is reported at bound, as by the LM core.
  const SimulatedData simulated = Simulate(AnalysisMode::kLaminarFlow, 80, 6);
  const int p = static_cast<int>(simulated.truth.size());
  LevenbergMarquardtOptions options = AgreementOptions(7, 3);
  options.lower_bounds[kPhi0] = 5.5;
  options.upper_bounds[kPhi0] = 5.5;
  const Eigen::VectorXd start = Start(AnalysisMode::kLaminarFlow);
  PackedDataObjective objective(simulated.model, kAngles, kNoiseSigma, simulated.data);

  const LevenbergMarquardtSummary ceres = FitWithCeres(simulated, options, IdentityMap(p), start);
  const LevenbergMarquardtSummary core = Minimize(options, objective, start);
  std::printf("core:  %s\n", core.BriefReport().c_str());

  EXPECT_EQ(ceres.theta[kPhi0], 5.5);
  EXPECT_EQ(ceres.uncertainties[kPhi0], 0.0);
  EXPECT_EQ(ceres.parameters_at_bound, std::vector<int>{kPhi0});
  EXPECT_EQ(ceres.parameters_at_bound, core.parameters_at_bound);
  ExpectAgreement(ceres, core);
}

TEST_F(CeresStandardFitTest, CallbackSeesIterationsAndCanStop) {
  const SimulatedData simulated = Simulate(AnalysisMode::kLaminarFlow, 80, 4);
  const int p = static_cast<int>(simulated.truth.size());
  LevenbergMarquardtOptions options = BoundedOptions(7, 3);
  std::vector<LevenbergMarquardtIteration> reports;
  options.callback = [&reports](const LevenbergMarquardtIteration& iteration) {
    reports.push_back(iteration);
    return iteration.iteration < 2;
  };

  const LevenbergMarquardtSummary summary =
      FitWithCeres(simulated, options, IdentityMap(p), Start(AnalysisMode::kLaminarFlow));

  EXPECT_EQ(summary.status, LevenbergMarquardtStatus::kStoppedByCallback);
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[0].iteration, 0);
  EXPECT_FALSE(reports[0].step_accepted);
  EXPECT_EQ(reports[0].chi2, summary.initial_chi2);
  EXPECT_EQ(reports[0].theta.size(), p);
  EXPECT_EQ(reports[2].iteration, 2);
  EXPECT_GE(reports[2].passes, 1);
  EXPECT_LE(summary.final_chi2, summary.initial_chi2);
  EXPECT_EQ(summary.iterations, 2);
  // The result is the point the last report saw.
  EXPECT_TRUE(summary.theta.isApprox(reports.back().theta, 0.0));
}

// Bitwise equality of everything a resumed fit must reproduce.
void ExpectSameFit(const LevenbergMarquardtSummary& resumed,
                   const LevenbergMarquardtSummary& reference) {
  EXPECT_EQ(resumed.status, reference.status);
  EXPECT_EQ(resumed.iterations, reference.iterations);
  EXPECT_EQ(resumed.accepted_steps, reference.accepted_steps);
  EXPECT_EQ(resumed.rejected_steps, reference.rejected_steps);
  EXPECT_TRUE(resumed.theta.isApprox(reference.theta, 0.0));
  for (int i = 0; i < reference.theta.size(); ++i) {
    EXPECT_EQ(resumed.theta[i], reference.theta[i]) << "parameter " << i;
  }
  EXPECT_EQ(resumed.final_chi2, reference.final_chi2);
  EXPECT_EQ(resumed.covariance, reference.covariance);
  EXPECT_EQ(resumed.initial_chi2, reference.initial_chi2);
  EXPECT_EQ(resumed.chi2_history.size(), reference.chi2_history.size());
}

// Stopped by the callback after `stop_after` iterations, then resumed from the last state the
// callback saw: the same fit as without the stop. Includes stops right after rejected steps,
// whose state is that of the last accepted step (the resumed run repeats the rejected trials).
TEST_F(CeresStandardFitTest, ResumedFitEqualsUninterruptedFitBitwise) {
  const SimulatedData simulated = Simulate(AnalysisMode::kLaminarFlow, 150, 5);
  const int p = static_cast<int>(simulated.truth.size());
  LevenbergMarquardtOptions options = AgreementOptions(7, 3);
  std::vector<LevenbergMarquardtIteration> reports;
  options.callback = [&reports](const LevenbergMarquardtIteration& iteration) {
    reports.push_back(iteration);
    return true;
  };
  // A poor start (D0 x 10, shear rate x 20, alpha off by 0.7): rejected steps on the way.
  Eigen::VectorXd start = Start(AnalysisMode::kLaminarFlow);
  start[0] = 30000.0;
  start[1] = 0.2;
  start[3] = 4e-3;
  const LevenbergMarquardtSummary reference =
      FitWithCeres(simulated, options, IdentityMap(p), start);
  ASSERT_TRUE(reference.IsConverged()) << reference.reason;
  ASSERT_GE(reference.iterations, 6);
  int first_rejected = -1;
  for (const LevenbergMarquardtIteration& report : reports) {
    EXPECT_GT(report.state.trust_region_radius, 0.0);
    EXPECT_EQ(report.state.theta.size(), p);
    if (first_rejected < 0 && report.iteration > 0 && !report.step_accepted) {
      first_rejected = report.iteration;
    }
  }

  ASSERT_GT(first_rejected, 0) << "no rejected step to stop after";
  const std::vector<int> stops = {first_rejected, first_rejected + 1, reference.iterations / 2,
                                  reference.iterations - 1};
  for (const int stop_after : stops) {
    SCOPED_TRACE("stopped after iteration " + std::to_string(stop_after));
    std::optional<LevenbergMarquardtState> saved;
    LevenbergMarquardtOptions interrupted = options;
    interrupted.callback = [&saved, stop_after](const LevenbergMarquardtIteration& iteration) {
      saved = iteration.state;
      return iteration.iteration < stop_after;
    };
    const LevenbergMarquardtSummary stopped =
        FitWithCeres(simulated, interrupted, IdentityMap(p), start);
    ASSERT_EQ(stopped.status, LevenbergMarquardtStatus::kStoppedByCallback);
    ASSERT_TRUE(saved.has_value());
    EXPECT_LE(saved->iterations, stop_after);

    LevenbergMarquardtOptions resume = options;
    resume.callback = nullptr;
    resume.resume_state = saved;
    ExpectSameFit(FitWithCeres(simulated, resume, IdentityMap(p), start), reference);
  }
}

// The first words of Ceres' message (summary.reason) for each status; the status itself comes
// from Ceres' termination type and summary fields, never the message.
std::string CeresMessageStart(LevenbergMarquardtStatus status) {
  switch (status) {
    case LevenbergMarquardtStatus::kConvergedFtol:
      return "Ceres: Function tolerance reached";
    case LevenbergMarquardtStatus::kConvergedXtol:
      return "Ceres: Parameter tolerance reached";
    case LevenbergMarquardtStatus::kConvergedGtol:
      return "Ceres: Gradient tolerance reached";
    case LevenbergMarquardtStatus::kFailedDamping:
      return "Ceres: Minimum trust region radius reached";
    case LevenbergMarquardtStatus::kMaxIterations:
      return "Ceres: Maximum number of iterations reached";
    case LevenbergMarquardtStatus::kFailedNonFinite:
      return "Ceres: Residual and Jacobian evaluation failed";
    default:
      return "(no Ceres message for " + std::string(ToString(status)) + ")";
  }
}

TEST_F(CeresStandardFitTest, StatusFollowsCeresTerminationForEachStoppingRule) {
  const SimulatedData simulated = Simulate(AnalysisMode::kStatic, 60, 5);
  const int p = static_cast<int>(simulated.truth.size());
  const Eigen::VectorXd start = Start(AnalysisMode::kStatic);
  // Far from the optimum (D0 30 times the truth, alpha at its lower bound): early steps fail.
  Eigen::VectorXd far = start;
  far[0] = 9e4;
  far[1] = -2.0;
  struct Case {
    const char* name;
    LevenbergMarquardtOptions options;
    Eigen::VectorXd start;
    LevenbergMarquardtStatus expected;
  };
  std::vector<Case> cases;
  auto add = [&](const char* name, bool bounded, auto set, LevenbergMarquardtStatus expected,
                 const Eigen::VectorXd& from) {
    LevenbergMarquardtOptions options =
        bounded ? BoundedOptions(simulated.model.num_physical(), 3) : LevenbergMarquardtOptions();
    set(options);
    cases.push_back({name, options, from, expected});
  };
  using Status = LevenbergMarquardtStatus;
  add(
      "ftol", true, [](auto& o) { o.ftol = 1e-3; }, Status::kConvergedFtol, start);
  add(
      "xtol", true,
      [](auto& o) {
        o.xtol = 1e-2;
        o.ftol = 1e-15;
      },
      Status::kConvergedXtol, start);
  add(
      "xtol, no bounds", false,
      [](auto& o) {
        o.xtol = 1e-2;
        o.ftol = 1e-15;
      },
      Status::kConvergedXtol, start);
  add(
      "ftol after rejections", true, [](auto& o) { o.ftol = o.xtol = o.gtol = 1e-300; },
      Status::kConvergedFtol, start);
  add(
      "gtol", true, [](auto& o) { o.gtol = 1e30; }, Status::kConvergedGtol, start);
  add(
      "max_iterations", true, [](auto& o) { o.max_iterations = 2; }, Status::kMaxIterations, start);
  add(
      "minimum radius", true,
      [](auto& o) {  // minimum radius 1 / max_damping = 500, half the initial radius
        o.ftol = o.xtol = o.gtol = 1e-300;
        o.max_damping = 2.0 * o.initial_damping;
      },
      Status::kFailedDamping, far);
  for (const Case& each : cases) {
    SCOPED_TRACE(each.name);
    const LevenbergMarquardtSummary summary =
        FitWithCeres(simulated, each.options, IdentityMap(p), each.start);
    EXPECT_EQ(summary.status, each.expected) << ToString(summary.status);
    EXPECT_THAT(summary.reason, ::testing::StartsWith(CeresMessageStart(summary.status)));
  }

  // A start where the model overflows (D0 t^alpha with alpha = 900): Ceres' first evaluation
  // fails, as a non-finite start does in the LM core.
  Eigen::VectorXd overflowing = start;
  overflowing[1] = 900.0;
  const LevenbergMarquardtSummary failed =
      FitWithCeres(simulated, LevenbergMarquardtOptions(), IdentityMap(p), overflowing);
  EXPECT_EQ(failed.status, LevenbergMarquardtStatus::kFailedNonFinite) << ToString(failed.status);
  EXPECT_THAT(failed.reason, ::testing::StartsWith(CeresMessageStart(failed.status)));
}

Eigen::VectorXd Pair(double a, double b) {
  Eigen::VectorXd point(2);
  point << a, b;
  return point;
}

// The status from the termination type and the recorded fields alone: a run whose message says
// nothing (empty) still gets its status.
TEST(StatusOfCeresTerminationTest, UsesTerminationTypeAndSummaryFieldsNotTheMessage) {
  using fit_internal::CeresTermination;
  using fit_internal::StatusOfCeresTermination;
  using Status = LevenbergMarquardtStatus;
  CeresTermination converged;
  converged.type = ceres::CONVERGENCE;
  converged.gradient_tolerance = 1e-8;
  converged.parameter_tolerance = 1e-8;
  converged.min_trust_region_radius = 1e-32;
  converged.bounded = true;
  converged.last_iteration = ceres::IterationSummary();
  converged.last_iteration->iteration = 5;
  converged.last_iteration->step_is_successful = true;
  converged.last_iteration->gradient_max_norm = 1e-3;
  converged.last_iteration->trust_region_radius = 1e4;
  converged.result = Pair(3.0, 4.0);  // |x| = 5
  converged.last_evaluated = Pair(3.0, 4.0 + 4e-8);

  // The trial step of the unrecorded iteration: 4e-8 <= 1e-8 (5 + 1e-8) -> xtol; else ftol.
  EXPECT_EQ(StatusOfCeresTermination(converged), Status::kConvergedXtol);
  CeresTermination function = converged;
  function.last_evaluated = Pair(3.0, 4.0 + 6e-8);
  EXPECT_EQ(StatusOfCeresTermination(function), Status::kConvergedFtol);
  // Without bounds Ceres has no |x| before its first accepted step: only ftol can stop it there.
  CeresTermination unbounded = converged;
  unbounded.bounded = false;
  EXPECT_EQ(StatusOfCeresTermination(unbounded), Status::kConvergedFtol);
  unbounded.accepted_step = true;
  EXPECT_EQ(StatusOfCeresTermination(unbounded), Status::kConvergedXtol);
  // Stopped after the recorded iteration: its gradient (successful steps only), then its radius.
  CeresTermination gradient = function;
  gradient.last_iteration->gradient_max_norm = 1e-9;
  EXPECT_EQ(StatusOfCeresTermination(gradient), Status::kConvergedGtol);
  gradient.last_iteration->step_is_successful = false;
  EXPECT_EQ(StatusOfCeresTermination(gradient), Status::kConvergedFtol);
  CeresTermination radius = function;
  radius.last_iteration->trust_region_radius = 1e-33;
  EXPECT_EQ(StatusOfCeresTermination(radius), Status::kFailedDamping);
  CeresTermination nothing = converged;
  nothing.last_iteration.reset();
  EXPECT_EQ(StatusOfCeresTermination(nothing), Status::kConvergedFtol);

  CeresTermination other;
  other.type = ceres::NO_CONVERGENCE;
  EXPECT_EQ(StatusOfCeresTermination(other), Status::kMaxIterations);
  other.type = ceres::FAILURE;
  EXPECT_EQ(StatusOfCeresTermination(other), Status::kFailedRejections);
  other.jacobian_evaluation_failed = true;
  EXPECT_EQ(StatusOfCeresTermination(other), Status::kFailedNonFinite);
  other.type = ceres::USER_SUCCESS;
  EXPECT_EQ(StatusOfCeresTermination(other), Status::kStoppedByCallback);
  other.type = ceres::USER_FAILURE;
  EXPECT_EQ(StatusOfCeresTermination(other), Status::kStoppedByCallback);
}

TEST_F(CeresStandardFitTest, RejectsInvalidOptionsAndInputs) {
  const SimulatedData simulated = Simulate(AnalysisMode::kStatic, 20, 1);
  const int p = static_cast<int>(simulated.truth.size());
  const Eigen::VectorXd start = Start(AnalysisMode::kStatic);
  LevenbergMarquardtOptions options;
  options.max_iterations = -3;
  EXPECT_THROW(FitWithCeres(simulated, options, IdentityMap(p), start), ConfigError);

  options = LevenbergMarquardtOptions();
  options.resume_state = LevenbergMarquardtState();
  EXPECT_THROW(FitWithCeres(simulated, options, IdentityMap(p), start), std::invalid_argument);
  // A state of the LM core (no trust region radius) is not one of Ceres.
  options.resume_state->theta = start;
  EXPECT_THROW(FitWithCeres(simulated, options, IdentityMap(p), start), std::invalid_argument);
  options.resume_state->trust_region_radius = 1.0;
  options.resume_state->iterations = options.max_iterations + 1;
  EXPECT_THROW(FitWithCeres(simulated, options, IdentityMap(p), start), std::invalid_argument);

  options = LevenbergMarquardtOptions();
  EXPECT_THROW(FitWithCeres(simulated, options, IdentityMap(p + 1), Eigen::VectorXd::Zero(p + 1)),
               std::invalid_argument);
  EXPECT_THROW(FitStandardWithCeres(options, simulated.model, kAngles, 0.0, simulated.data,
                                    IdentityMap(p), start),
               std::invalid_argument);

  Eigen::VectorXd non_finite = start;
  non_finite[1] = std::numeric_limits<double>::quiet_NaN();
  const LevenbergMarquardtSummary summary =
      FitWithCeres(simulated, options, IdentityMap(p), non_finite);
  EXPECT_EQ(summary.status, LevenbergMarquardtStatus::kFailedNonFinite);
}

// No free parameter (docs/design.md section 4, active set): every parameter held by equal bounds,
// or in a box of 1e-12 relative width that its optimum lies outside. Ceres and the core end there
// with finite chi2 (at the start too) and covariance, every parameter listed at its bound and no
// Gauss-Newton step, and agree; the covariance's free block is empty (it used to be inverted:
// SIGSEGV in the core).
TEST_F(CeresStandardFitTest, NothingFreeIsAResultAsInTheCore) {
  const SimulatedData simulated = Simulate(AnalysisMode::kStatic, 60, 17);
  const int p = static_cast<int>(simulated.truth.size());
  PackedDataObjective objective(simulated.model, kAngles, kNoiseSigma, simulated.data);
  const Eigen::VectorXd start = Start(AnalysisMode::kStatic);
  for (const double width : {0.0, 1e-12}) {
    LevenbergMarquardtOptions options = BoundedOptions(3, 3);
    options.lower_bounds = start;
    options.upper_bounds = start + width * start.cwiseAbs();
    const LevenbergMarquardtSummary ceres = FitWithCeres(simulated, options, IdentityMap(p), start);
    const LevenbergMarquardtSummary core = Minimize(options, objective, start);
    std::printf("core:  %s (%s)\n", core.BriefReport().c_str(), core.reason.c_str());
    for (const LevenbergMarquardtSummary* summary : {&ceres, &core}) {
      EXPECT_TRUE(summary->IsConverged()) << summary->reason;
      EXPECT_TRUE(std::isfinite(summary->initial_chi2)) << width;
      EXPECT_TRUE(std::isfinite(summary->final_chi2)) << width;
      EXPECT_TRUE((summary->theta.array() >= options.lower_bounds.array()).all()) << width;
      EXPECT_TRUE((summary->theta.array() <= options.upper_bounds.array()).all()) << width;
      ASSERT_EQ(summary->covariance.rows(), p) << width;
      EXPECT_TRUE(summary->covariance.allFinite()) << width;
    }
    EXPECT_NEAR(ceres.final_chi2, core.final_chi2, 1e-9 * core.final_chi2);
    // The core holds every parameter (no step left); Ceres stops on its projected gradient in
    // a box of 1e-12 without moving each one to the bound it pushes against.
    EXPECT_EQ(core.parameters_at_bound.size(), static_cast<size_t>(p)) << width;
    EXPECT_EQ(core.final_step_standard_errors, 0.0) << width;
    if (width == 0.0) {
      EXPECT_EQ(ceres.parameters_at_bound.size(), static_cast<size_t>(p));
      EXPECT_TRUE(ceres.covariance.isZero());  // equal bounds: nothing released
      EXPECT_TRUE(core.covariance.isZero());
    }
  }
}

}  // namespace
}  // namespace homodyne
