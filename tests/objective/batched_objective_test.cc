// Tests of PackedDataObjective (src/objective/batched_objective.h) on simulated data sets.
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "homodyne/simulate.h"
#include "objective/batched_objective.h"
#include "optimize/levenberg_marquardt.h"
#include "support/simulated_data_fixture.h"

namespace homodyne {
namespace {

class ObjectiveTest : public SimulatedDataTest {};

TEST_F(ObjectiveTest, GradientMatchesFiniteDifferencesOfCost) {
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 40);
  std::unique_ptr<PackedDataObjective> objective = MakeObjective(config, 100);
  EXPECT_EQ(objective->num_points(), 3 * 39 * 38 / 2);
  EXPECT_EQ(objective->num_residuals(), 3 * 39 * 38);
  EXPECT_EQ(objective->num_nonfinite_points(), 0);
  EXPECT_GT(objective->num_batches(), 3);
  ASSERT_EQ(objective->num_parameters(), 13);

  Eigen::VectorXd theta = Truth(config);
  const Eigen::VectorXd step_from_truth = (Eigen::VectorXd(13) << 300.0, 0.05, 2.0, 2e-5, -0.03,
                                           2e-6, 1.5, 0.01, -0.01, 0.02, 0.005, -0.004, 0.003)
                                              .finished();
  theta += step_from_truth;
  const NormalEquations ne = objective->Accumulate(theta);
  EXPECT_EQ(ne.num_points, objective->num_residuals());
  EXPECT_DOUBLE_EQ(ne.chi2, objective->Cost(theta));
  EXPECT_TRUE(ne.jtj.isApprox(ne.jtj.transpose(), 0.0));

  // chi2 = sum r^2, so d chi2 / d theta = 2 J^T r: compare J^T r with d(chi2/2)/dtheta by central
  // differences with Richardson extrapolation.
  for (int j = 0; j < objective->num_parameters(); ++j) {
    const double h = 1e-4 * std::max(std::abs(theta[j]), 1e-6);
    auto half_cost_difference = [&](double step) {
      Eigen::VectorXd plus = theta;
      Eigen::VectorXd minus = theta;
      plus[j] += step;
      minus[j] -= step;
      return (objective->Cost(plus) - objective->Cost(minus)) / (4.0 * step);
    };
    const double d1 = half_cost_difference(h);
    const double d2 = half_cost_difference(h / 2);
    const double numeric = (4.0 * d2 - d1) / 3.0;
    EXPECT_NEAR(ne.jtr[j], numeric, 1e-5 * std::abs(numeric)) << "parameter " << j;
  }
}

TEST_F(ObjectiveTest, WeightedAngleGramsHoldTheRobustGradientCostAndReweightedCurvature) {
  // The weighted pass of a robust loss (PassWeighting::kIrls; docs/design.md section 4c): per
  // angle, J^T e is the exact gradient J^T (rho' e) that the scipy-rescaled pass (Accumulate)
  // gives too, (e, e) is the robust cost, and J^T J is J^T diag(rho') J, which lies between the
  // scipy model and the plain J^T J. Under the linear loss the weighted pass is the plain one.
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 40);
  std::unique_ptr<PackedDataObjective> plain = MakeObjective(config, 100);
  PassOptions options;
  options.batch_points = 100;
  options.loss = LossOptions{LossFunction::kCauchy, 1.5};
  PackedDataObjective robust(plain->model(), config.simulation.phi_angles_degrees, plain->sigma(),
                             plain->data(), options);
  Eigen::VectorXd theta = Truth(config);
  theta[0] *= 1.2;  // residuals of several sigma: the loss bites
  theta[plain->OffsetIndex(1)] += 0.03;
  const AngleGrams weighted = robust.AccumulateAngleGrams(theta, /*weighted=*/true);
  const AngleGrams unweighted = robust.AccumulateAngleGrams(theta);
  const NormalEquations scipy = robust.Accumulate(theta);
  const int n_angles = robust.num_angles();
  const int m = static_cast<int>(weighted.grams.front().rows()) - 1;
  const double scale = 2.0 / (plain->sigma() * plain->sigma());
  double cost = 0.0;
  Eigen::VectorXd gradient = Eigen::VectorXd::Zero(robust.num_parameters());
  for (int k = 0; k < n_angles; ++k) {
    const Eigen::MatrixXd& g = weighted.grams[static_cast<size_t>(k)];
    const Eigen::MatrixXd& p = unweighted.grams[static_cast<size_t>(k)];
    cost += scale * g(m, m);
    for (int c = 0; c < m; ++c) {
      const int index = c < robust.num_physical() ? c
                        : c == m - 2              ? robust.ContrastIndex(k)
                                                  : robust.OffsetIndex(k);
      gradient[index] -= scale * g(m, c);
      // rho' <= 1: the reweighted curvature is below the plain one on the diagonal.
      EXPECT_LE(g(c, c), p(c, c) * (1 + 1e-12)) << k << " " << c;
    }
  }
  EXPECT_LT(cost, 0.9 * plain->Cost(theta));  // the loss bites at this point
  EXPECT_NEAR(cost, scipy.chi2, 1e-12 * scipy.chi2);
  EXPECT_NEAR(cost, robust.Cost(theta), 1e-12 * cost);
  for (int j = 0; j < robust.num_parameters(); ++j) {
    EXPECT_NEAR(gradient[j], scipy.jtr[j], 1e-9 * scipy.jtr.cwiseAbs().maxCoeff()) << j;
  }
  // Under the linear loss the weighted pass is bitwise the plain one.
  const AngleGrams linear_weighted = plain->AccumulateAngleGrams(theta, /*weighted=*/true);
  const AngleGrams linear_plain = plain->AccumulateAngleGrams(theta);
  for (int k = 0; k < n_angles; ++k) {
    EXPECT_TRUE((linear_weighted.grams[static_cast<size_t>(k)].array() ==
                 linear_plain.grams[static_cast<size_t>(k)].array())
                    .all());
  }
}

TEST_F(ObjectiveTest, BitwiseIndependentOfThreadsAndCalls) {
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 40);
  std::unique_ptr<PackedDataObjective> objective = MakeObjective(config, 60);
  Eigen::VectorXd theta = Truth(config);
  theta[0] *= 1.1;
  theta[3] *= 0.9;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const NormalEquations one = objective->Accumulate(theta);
  const double cost_one = objective->Cost(theta);
  omp_set_num_threads(2);
  const NormalEquations two = objective->Accumulate(theta);
  const NormalEquations again = objective->Accumulate(theta);
  const double cost_two = objective->Cost(theta);
  omp_set_num_threads(threads);
  for (const NormalEquations* other : {&two, &again}) {
    EXPECT_EQ(one.chi2, other->chi2);
    EXPECT_EQ(one.num_points, other->num_points);
    EXPECT_TRUE((one.jtj.array() == other->jtj.array()).all());
    EXPECT_TRUE((one.jtr.array() == other->jtr.array()).all());
  }
  EXPECT_EQ(cost_one, cost_two);
  // Equal to rounding, not bitwise: the full pass sums each angle's e^2 in the lanes of its Gram
  // over a batch, the cost pass per tile (src/model/gram_block.h), and Cost adds a batch's angles
  // before scaling by 2 / sigma^2 where Accumulate scales each angle's Gram entry
  // (batched_objective.cc).
  EXPECT_DOUBLE_EQ(cost_one, one.chi2);
}

// The scaling pass (PassColumns::kScaling): per angle the 3 x 3 Gram of the contrast, offset
// and e columns, equal to the full pass's sub-block to 1e-12 (relative to the diagonal scales)
// with the same finite count, NaN points skipped; bitwise the same on 1 and 2 threads and for
// any chunking of the batches.
TEST_F(ObjectiveTest, ScalingAngleGramsAreTheFullGramsSubBlocksBitwiseForAnyThreadsAndChunks) {
  for (AnalysisMode mode : {AnalysisMode::kLaminarFlow, AnalysisMode::kStatic}) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const Config config = SimulationConfig(mode, 40);
    std::unique_ptr<PackedDataObjective> reference = MakeObjective(config, 60);
    PackedDataObjective::PackedData data = reference->data();
    data[0][17] = std::numeric_limits<float>::quiet_NaN();
    data[1][400] = std::numeric_limits<float>::infinity();
    Eigen::VectorXd theta = Truth(config);
    theta[0] *= 1.1;
    theta[reference->OffsetIndex(1)] += 0.02;
    auto objective_with_chunks = [&](int chunk_batches) {
      PassOptions options;
      options.batch_points = 60;
      options.chunk_batches = chunk_batches;
      return std::make_unique<PackedDataObjective>(reference->model(),
                                                   config.simulation.phi_angles_degrees,
                                                   reference->sigma(), data, options);
    };
    std::unique_ptr<PackedDataObjective> objective = objective_with_chunks(0);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const AngleGrams full = objective->AccumulateAngleGrams(theta);
    const AngleGrams one =
        objective->AccumulateAngleGrams(theta, /*weighted=*/false, PassColumns::kScaling);
    omp_set_num_threads(2);
    const AngleGrams two =
        objective->AccumulateAngleGrams(theta, /*weighted=*/false, PassColumns::kScaling);
    const AngleGrams by_one_batch = objective_with_chunks(1)->AccumulateAngleGrams(
        theta, /*weighted=*/false, PassColumns::kScaling);
    const AngleGrams by_three_batches = objective_with_chunks(3)->AccumulateAngleGrams(
        theta, /*weighted=*/false, PassColumns::kScaling);
    omp_set_num_threads(threads);
    EXPECT_EQ(one.finite_points, full.finite_points);
    EXPECT_EQ(one.finite_points, 3 * UpperTriangleSize(reference->model().num_times()) - 2);
    for (size_t k = 0; k < full.grams.size(); ++k) {
      const Eigen::MatrixXd expected = full.grams[k].bottomRightCorner(3, 3);
      ASSERT_EQ(one.grams[k].rows(), 3);
      for (int a = 0; a < 3; ++a) {
        for (int c = 0; c < 3; ++c) {
          const double scale = std::sqrt(expected(a, a) * expected(c, c));
          EXPECT_NEAR(one.grams[k](a, c) / scale, expected(a, c) / scale, 1e-12)
              << "angle " << k << " (" << a << ", " << c << ")";
        }
      }
      for (const AngleGrams* other : {&two, &by_one_batch, &by_three_batches}) {
        EXPECT_TRUE((one.grams[k].array() == other->grams[k].array()).all()) << "angle " << k;
        EXPECT_EQ(one.finite_points, other->finite_points);
      }
    }
  }
}

TEST_F(ObjectiveTest, EveryPassStopsBetweenChunksWhenAStopIsRequested) {
  const Config config = SimulationConfig(AnalysisMode::kStatic, 40);
  std::unique_ptr<PackedDataObjective> reference = MakeObjective(config, 60);
  const Eigen::VectorXd theta = Truth(config);
  int polls = 0;
  int stop_after = 0;  // polls answered false before the first true
  PassOptions options;
  options.batch_points = 60;
  options.chunk_batches = 2;
  options.stop_requested = [&] { return ++polls > stop_after; };
  PackedDataObjective objective(reference->model(), config.simulation.phi_angles_degrees,
                                reference->sigma(), reference->data(), options);
  ASSERT_GT(objective.num_batches(), 6);  // several chunks per pass
  const int chunks = (objective.num_batches() + 1) / 2;

  // Polled between chunks only: a pass that is never stopped polls chunks - 1 times and
  // returns the sums of the objective without the hook.
  stop_after = 1 << 30;
  EXPECT_EQ(objective.Cost(theta), reference->Cost(theta));
  EXPECT_EQ(polls, chunks - 1);
  EXPECT_EQ(objective.SumOfSquares(theta), reference->SumOfSquares(theta));

  // A stop requested at the third poll abandons every kind of pass there.
  for (int kind = 0; kind < 4; ++kind) {
    SCOPED_TRACE("pass kind " + std::to_string(kind));
    polls = 0;
    stop_after = 2;
    EXPECT_THROW(
        {
          switch (kind) {
            case 0:
              objective.Accumulate(theta);
              break;
            case 1:
              objective.Cost(theta);
              break;
            case 2:
              objective.AccumulateAngleGrams(theta);
              break;
            default:
              objective.SumOfSquares(theta);
              break;
          }
        },
        PassInterrupted);
    EXPECT_EQ(polls, 3);
  }
  // And the objective is whole afterwards: the next pass starts from zero.
  stop_after = 1 << 30;
  const NormalEquations again = objective.Accumulate(theta);
  const NormalEquations expected = reference->Accumulate(theta);
  EXPECT_EQ(again.chi2, expected.chi2);
  EXPECT_TRUE((again.jtj.array() == expected.jtj.array()).all());
}

TEST_F(ObjectiveTest, SkipsNonFiniteDataPoints) {
  const std::vector<double> times = {0.1, 0.2, 0.3, 0.4};
  HomodyneModel model(AnalysisMode::kStatic, ScatteringGeometry{}, times);
  PackedDataObjective::PackedData data = {std::vector<float>(6, 1.1f)};
  data[0][2] = std::numeric_limits<float>::quiet_NaN();
  data[0][4] = std::numeric_limits<float>::infinity();
  PackedDataObjective objective(model, {0.0}, 0.01, data, 2);
  EXPECT_EQ(objective.num_points(), 6);
  EXPECT_EQ(objective.num_nonfinite_points(), 2);
  EXPECT_EQ(objective.num_residuals(), 8);
  const Eigen::VectorXd theta = (Eigen::VectorXd(5) << 1000.0, 0.0, 0.0, 0.3, 1.0).finished();
  const NormalEquations ne = objective.Accumulate(theta);
  EXPECT_TRUE(std::isfinite(ne.chi2));
  EXPECT_TRUE(ne.jtj.allFinite());
  EXPECT_EQ(ne.num_points, 8);
  EXPECT_THROW(objective.Cost(Eigen::VectorXd::Zero(4)), std::invalid_argument);
}

struct RecoveryCase {
  AnalysisMode mode;
  std::vector<double> start_physical;
};

void ExpectRecovery(PackedDataObjective& objective, const Eigen::VectorXd& truth,
                    const std::vector<double>& start_physical) {
  const int p_phys = objective.num_physical();
  const int n = objective.num_angles();
  const int p = objective.num_parameters();
  LevenbergMarquardtOptions options = SimulatedDataTest::BoundedOptions(objective);
  Eigen::VectorXd theta0(p);
  for (int a = 0; a < p_phys; ++a) theta0[a] = start_physical[static_cast<size_t>(a)];
  for (int k = 0; k < n; ++k) {
    theta0[objective.ContrastIndex(k)] = 0.25;
    theta0[objective.OffsetIndex(k)] = 1.0;
  }
  const LevenbergMarquardtSummary summary = Minimize(options, objective, theta0);
  std::printf("%s\n", summary.BriefReport().c_str());
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_FALSE(summary.covariance_pseudo_inverse);
  EXPECT_NEAR(summary.reduced_chi2, 1.0, 0.05);
  for (int a = 0; a < p; ++a) {
    std::printf("  theta[%d] = %.6g +- %.3g (truth %.6g, %.2f sigma)\n", a, summary.theta[a],
                summary.uncertainties[a], truth[a],
                (summary.theta[a] - truth[a]) / summary.uncertainties[a]);
    EXPECT_GT(summary.uncertainties[a], 0.0) << a;
    EXPECT_LE(std::abs(summary.theta[a] - truth[a]), 3.0 * summary.uncertainties[a]) << a;
  }
}

TEST_F(ObjectiveTest, RecoversLaminarFlowParameters) {
  const Config config = SimulationConfig(AnalysisMode::kLaminarFlow, 200);
  std::unique_ptr<PackedDataObjective> objective =
      MakeObjective(config, PackedDataObjective::kDefaultBatchPoints);
  ExpectRecovery(*objective, Truth(config), {3900.0, -0.4, 13.0, 2.6e-4, 0.24, 1.3e-5, 6.5});
}

TEST_F(ObjectiveTest, RecoversStaticParameters) {
  const Config config = SimulationConfig(AnalysisMode::kStatic, 200);
  std::unique_ptr<PackedDataObjective> objective =
      MakeObjective(config, PackedDataObjective::kDefaultBatchPoints);
  ExpectRecovery(*objective, Truth(config), {3900.0, -0.4, 13.0});
}

// The count of finite points and their range (PackedDataObjective::CountFiniteValues, in lanes):
// those of a loop over every value, with NaN and +-inf in the lanes' part and in the tail, and an
// extreme value in the tail (3 x 39 x 38 / 2 = 741 values per angle: 46 blocks of 16 and 5 more).
TEST_F(ObjectiveTest, FiniteCountAndRangeSkipNanAndInfinityAnywhere) {
  const Config config = SimulationConfig(AnalysisMode::kStatic, 40);
  std::unique_ptr<PackedDataObjective> reference = MakeObjective(config, 60);
  PackedDataObjective::PackedData data = reference->data();
  const float inf = std::numeric_limits<float>::infinity();
  data[0][3] = std::numeric_limits<float>::quiet_NaN();
  data[0][20] = inf;
  data[1][100] = -inf;
  data[1][data[1].size() - 2] = std::numeric_limits<float>::quiet_NaN();
  data[2][data[2].size() - 1] = -5.0f;  // the minimum, in the tail
  data[2][31] = 7.0f;                   // the maximum, in a lane
  int64_t finite = 0;
  float low = inf, high = -inf;
  for (const std::vector<float>& values : data) {
    ASSERT_EQ(values.size() % 16, 5u);
    for (float value : values) {
      if (!std::isfinite(value)) continue;
      ++finite;
      low = std::min(low, value);
      high = std::max(high, value);
    }
  }
  PackedDataObjective objective(reference->model(), config.simulation.phi_angles_degrees,
                                reference->sigma(), data);
  EXPECT_EQ(objective.num_residuals(), 2 * finite);
  EXPECT_EQ(objective.num_nonfinite_points(), 4);
  EXPECT_EQ(finite, 3 * 741 - 4);
  EXPECT_EQ(objective.finite_value_range().min, -5.0f);
  EXPECT_EQ(objective.finite_value_range().max, 7.0f);
  EXPECT_EQ(low, -5.0f);
  EXPECT_EQ(high, 7.0f);
  EXPECT_TRUE(objective.finite_value_range().complete);
}

}  // namespace
}  // namespace homodyne
