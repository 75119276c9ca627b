// Variable projection (src/optimize/variable_projection.h): the boxed quadratic solver, the
// projected chi2 and its Kaufman normal equations, and fits that reach the full problem's optimum
// with every per-angle mode.
#include "optimize/variable_projection.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "optimize/levenberg_marquardt.h"
#include "optimize/per_angle_mode.h"
#include "optimize/reparametrized_problem.h"
#include "support/simulated_data_fixture.h"

namespace homodyne {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double QuadraticValue(const Eigen::MatrixXd& a, const Eigen::VectorXd& b,
                      const Eigen::VectorXd& x) {
  return 0.5 * x.dot(a * x) - b.dot(x);
}

// KKT conditions of min 0.5 x^T A x - b^T x on the box: inside it, zero gradient on free
// variables, gradient pointing out of the box on held ones.
void ExpectKkt(const Eigen::MatrixXd& a, const Eigen::VectorXd& b, const Eigen::VectorXd& lower,
               const Eigen::VectorXd& upper, const Eigen::VectorXd& x) {
  const Eigen::VectorXd gradient = a * x - b;
  const double tolerance = 1e-9 * (1.0 + b.cwiseAbs().maxCoeff());
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    ASSERT_GE(x[i], lower[i]);
    ASSERT_LE(x[i], upper[i]);
    if (x[i] == lower[i]) {
      EXPECT_GE(gradient[i], -tolerance) << i;
    } else if (x[i] == upper[i]) {
      EXPECT_LE(gradient[i], tolerance) << i;
    } else {
      EXPECT_NEAR(gradient[i], 0.0, tolerance) << i;
    }
  }
}

TEST(SolveBoxedQuadraticTest, InteriorMinimumIsTheUnconstrainedSolution) {
  Eigen::MatrixXd a(2, 2);
  a << 4.0, 1.0, 1.0, 3.0;
  const Eigen::VectorXd b = Eigen::Vector2d(1.0, 2.0);
  const Eigen::VectorXd x = SolveBoxedQuadratic(a, b, Eigen::Vector2d(-kInf, -kInf),
                                                Eigen::Vector2d(kInf, kInf), Eigen::Vector2d(5, 5));
  EXPECT_TRUE(x.isApprox(a.ldlt().solve(b), 1e-12));
}

TEST(SolveBoxedQuadraticTest, RandomBoxesMeetKktAndBeatRandomFeasiblePoints) {
  std::mt19937_64 generator(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  int held = 0;
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 2 + trial % 7;
    Eigen::MatrixXd factor(n + 2, n);
    for (Eigen::Index i = 0; i < factor.size(); ++i) factor.data()[i] = normal(generator);
    const Eigen::MatrixXd a = factor.transpose() * factor;
    Eigen::VectorXd b(n), lower(n), upper(n), start(n);
    for (int i = 0; i < n; ++i) {
      b[i] = 3.0 * normal(generator);
      lower[i] = -uniform(generator);
      upper[i] = uniform(generator);
      start[i] = normal(generator);
    }
    const Eigen::VectorXd x = SolveBoxedQuadratic(a, b, lower, upper, start);
    ExpectKkt(a, b, lower, upper, x);
    held +=
        static_cast<int>(((x.array() == lower.array()) || (x.array() == upper.array())).count());
    for (int sample = 0; sample < 200; ++sample) {
      Eigen::VectorXd y(n);
      for (int i = 0; i < n; ++i) y[i] = lower[i] + (upper[i] - lower[i]) * uniform(generator);
      EXPECT_LE(QuadraticValue(a, b, x), QuadraticValue(a, b, y) + 1e-12);
    }
  }
  EXPECT_GT(held, 50);  // the boxes were active, not only interior solutions
}

// The contrast and offset solve of variable projection with nothing free: every variable held
// on the bound its minimum lies beyond, held by equal bounds, or none at all. The free block is
// then empty and is never inverted.
TEST(SolveBoxedQuadraticTest, EveryVariableHeldGivesTheBoundsItPushesAgainst) {
  Eigen::MatrixXd a(2, 2);
  a << 2.0, 0.5, 0.5, 1.0;
  const Eigen::VectorXd b = Eigen::Vector2d(20.0, -20.0);  // minimum far outside [0, 1]^2
  Eigen::VectorXd x = SolveBoxedQuadratic(a, b, Eigen::Vector2d(0.0, 0.0),
                                          Eigen::Vector2d(1.0, 1.0), Eigen::Vector2d(1.0, 0.0));
  EXPECT_EQ(x, Eigen::Vector2d(1.0, 0.0));
  ExpectKkt(a, b, Eigen::Vector2d(0.0, 0.0), Eigen::Vector2d(1.0, 1.0), x);
  x = SolveBoxedQuadratic(a, b, Eigen::Vector2d(0.3, 0.4), Eigen::Vector2d(0.3, 0.4),
                          Eigen::Vector2d(5.0, 5.0));
  EXPECT_EQ(x, Eigen::Vector2d(0.3, 0.4));
  x = SolveBoxedQuadratic(a, b, Eigen::Vector2d(0.3, 0.4),
                          Eigen::Vector2d(0.3 + 1e-15, 0.4 + 1e-15), Eigen::Vector2d(0.3, 0.4));
  EXPECT_TRUE(x.allFinite());
  EXPECT_EQ(SolveBoxedQuadratic(Eigen::MatrixXd(0, 0), Eigen::VectorXd(0), Eigen::VectorXd(0),
                                Eigen::VectorXd(0), Eigen::VectorXd(0))
                .size(),
            0);
}

TEST(SolveBoxedQuadraticTest, SingularMatrixGivesAFiniteMinimum) {
  // x0 and x1 enter only through their sum (a flat angle: contrast and offset degenerate).
  Eigen::MatrixXd a(3, 3);
  a << 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 2.0;
  const Eigen::VectorXd b = Eigen::Vector3d(2.0, 2.0, 1.0);
  const Eigen::VectorXd lower = Eigen::Vector3d(0.0, 0.0, -1.0);
  const Eigen::VectorXd upper = Eigen::Vector3d(1.5, 1.5, 1.0);
  const Eigen::VectorXd x = SolveBoxedQuadratic(a, b, lower, upper, Eigen::Vector3d(0.2, 0.3, 0.0));
  ASSERT_TRUE(x.allFinite());
  EXPECT_NEAR(x[0] + x[1], 2.0, 1e-12);
  EXPECT_NEAR(x[2], 0.5, 1e-12);
  ExpectKkt(a, b, lower, upper, x);
}

class VariableProjectionTest : public SimulatedDataTest {
 protected:
  // A 3-angle laminar data set, its objective, and the per-angle mode's map and bounds.
  void SetUpProblem(const std::string& mode, int frames = 60) {
    config_ = SimulationConfig(AnalysisMode::kLaminarFlow, frames);
    if (mode == "auto") {  // averaged: one contrast and offset for every angle, as simulated
      config_.simulation.contrast = {0.25, 0.25, 0.25};
      config_.simulation.offset = {1.0, 1.0, 1.0};
    }
    objective_ = MakeObjective(config_, 2000);
    truth_ = Truth(config_);
    NlsqOptions nlsq;
    nlsq.per_angle_mode = ParsePerAngleModeRequest(mode).value();
    nlsq.fourier_order = 1;
    const ResolvedScaling scaling = ResolvePerAngleMode(nlsq, objective_->num_angles());
    std::vector<ScalingEstimate> starts;
    for (int k = 0; k < objective_->num_angles(); ++k) {
      starts.push_back({truth_[objective_->ContrastIndex(k)], truth_[objective_->OffsetIndex(k)]});
    }
    map_ = BuildScalingMap(scaling, objective_->num_physical(),
                           PhysicalParameterNames(AnalysisMode::kLaminarFlow),
                           config_.simulation.phi_angles_degrees, starts, 1);
    const LevenbergMarquardtOptions full = BoundedOptions(*objective_);
    bounds_ = ReduceBounds(map_, full.lower_bounds, full.upper_bounds);
    reduced_truth_ = ReduceStartingPoint(map_, truth_);
  }

  // Options of the reduced problem, with its bounds.
  LevenbergMarquardtOptions ReducedOptions() const {
    LevenbergMarquardtOptions options;
    options.lower_bounds = bounds_.lower;
    options.upper_bounds = bounds_.upper;
    return options;
  }

  Config config_;
  std::unique_ptr<PackedDataObjective> objective_;
  Eigen::VectorXd truth_;
  ScalingMap map_;
  BoundBox bounds_;
  Eigen::VectorXd reduced_truth_;
};

TEST_F(VariableProjectionTest, ProjectedChi2IsTheMinimumOverTheScaling) {
  SetUpProblem("individual");
  VariableProjectionProblem projected(*objective_, map_, bounds_, reduced_truth_);
  ASSERT_EQ(projected.num_parameters(), 7);
  ASSERT_EQ(projected.linear_indices().size(), 6u);
  // A physical point away from the truth; its best scaling from the full problem with the
  // physical parameters held (equal bounds).
  Eigen::VectorXd n = projected.NonlinearPart(reduced_truth_);
  n[0] *= 1.3;
  n[3] *= 0.7;
  n[6] += 1.0;
  const double chi2 = projected.Cost(n);
  const Eigen::VectorXd reduced_point = projected.ReducedPoint(n);
  LevenbergMarquardtOptions held = ReducedOptions();
  for (int j : projected.nonlinear_indices()) {
    held.lower_bounds[j] = held.upper_bounds[j] = reduced_point[j];
  }
  held.ftol = held.xtol = held.gtol = 1e-14;
  ReparametrizedProblem full(*objective_, map_);
  Eigen::VectorXd start = reduced_truth_;
  for (int j : projected.nonlinear_indices()) start[j] = reduced_point[j];
  const LevenbergMarquardtSummary best = Minimize(held, full, start);
  EXPECT_NEAR(chi2, best.final_chi2, 1e-9 * best.final_chi2);
  EXPECT_NEAR(full.Cost(reduced_point), chi2, 1e-9 * chi2);
  EXPECT_LT(chi2, full.Cost(start) * (1 - 1e-6));  // the truth's scaling is not the best here
}

// Cost takes a scaling pass (PassColumns::kScaling) under the linear loss, Accumulate a full one:
// from the same linear estimate both solve the same boxed quadratic, so they give the same chi2
// and leave the same next estimate (to the rounding of the passes' other sums), in every
// per-angle mode, with the scaling free and with bounds that bind on it.
TEST_F(VariableProjectionTest, CostAndAccumulateGiveTheSameChi2AndLinearEstimate) {
  for (const char* mode : {"individual", "fourier", "constant", "auto"}) {
    for (bool binding : {false, true}) {
      SCOPED_TRACE(std::string(mode) + (binding ? ", bounds that bind" : ", free scaling"));
      SetUpProblem(mode);
      BoundBox bounds = bounds_;
      const Eigen::VectorXd estimate = reduced_truth_;
      if (binding) {
        // Contrast-like coefficients held below the truth's, offset-like ones above it.
        for (int j = 0; j < map_.num_reduced(); ++j) {
          const std::string& name = map_.reduced_names[static_cast<size_t>(j)];
          if (name.find("contrast") != std::string::npos) {
            bounds.upper[j] = reduced_truth_[j] - 0.2 * std::abs(reduced_truth_[j]) - 1e-3;
            bounds.lower[j] = std::min(bounds.lower[j], bounds.upper[j] - 1.0);
          } else if (name.find("offset") != std::string::npos) {
            bounds.lower[j] = reduced_truth_[j] + 0.01 * std::abs(reduced_truth_[j]) + 1e-3;
            bounds.upper[j] = std::max(bounds.upper[j], bounds.lower[j] + 1.0);
          }
        }
      }
      VariableProjectionProblem projected(*objective_, map_, bounds, estimate);
      Eigen::VectorXd n = projected.NonlinearPart(reduced_truth_);
      n[0] *= 1.2;
      n[3] *= 0.8;
      const Eigen::VectorXd start_estimate = projected.linear_estimate();
      const int64_t passes_before = objective_->passes();
      const double cost = projected.Cost(n);
      EXPECT_EQ(objective_->passes(), passes_before + 1);
      const Eigen::VectorXd cost_estimate = projected.linear_estimate();
      projected.set_linear_estimate(start_estimate);
      const NormalEquations equations = projected.Accumulate(n);
      const Eigen::VectorXd accumulate_estimate = projected.linear_estimate();
      EXPECT_NEAR(cost, equations.chi2, 1e-12 * equations.chi2);
      ASSERT_EQ(cost_estimate.size(), accumulate_estimate.size());
      // constant: no linear parameters (the scaling is frozen in the map).
      if (std::string(mode) == "constant") {
        EXPECT_EQ(cost_estimate.size(), 0);
        continue;
      }
      ASSERT_GT(cost_estimate.size(), 0);
      const double estimate_scale = accumulate_estimate.cwiseAbs().maxCoeff();
      int held = 0;
      for (Eigen::Index i = 0; i < accumulate_estimate.size(); ++i) {
        EXPECT_NEAR(cost_estimate[i], accumulate_estimate[i], 1e-12 * estimate_scale) << i;
        const int j = projected.linear_indices()[static_cast<size_t>(i)];
        if (cost_estimate[i] == bounds.lower[j] || cost_estimate[i] == bounds.upper[j]) ++held;
      }
      EXPECT_TRUE((cost_estimate.array() != start_estimate.array()).any());  // it moved
      if (binding) {
        EXPECT_GT(held, 0);
      } else {
        EXPECT_EQ(held, 0);
      }
    }
  }
}

TEST_F(VariableProjectionTest, GradientIsHalfTheProjectedChi2Gradient) {
  SetUpProblem("individual");
  VariableProjectionProblem projected(*objective_, map_, bounds_, reduced_truth_);
  Eigen::VectorXd n = projected.NonlinearPart(reduced_truth_);
  n[0] *= 1.2;
  n[3] *= 1.5;
  n[4] -= 0.1;
  const NormalEquations equations = projected.Accumulate(n);
  EXPECT_TRUE(equations.jtj.isApprox(equations.jtj.transpose(), 1e-14));
  for (int j = 0; j < projected.num_parameters(); ++j) {
    auto half_difference = [&](double step) {
      Eigen::VectorXd plus = n, minus = n;
      plus[j] += step;
      minus[j] -= step;
      return (projected.Cost(plus) - projected.Cost(minus)) / (4.0 * step);
    };
    const double h = 1e-5 * (std::abs(n[j]) + 1e-3);
    const double numeric = (4.0 * half_difference(h / 2) - half_difference(h)) / 3.0;
    EXPECT_NEAR(equations.jtr[j], numeric, 1e-5 * std::abs(numeric) + 1e-6) << j;
  }
}

// The projected fit from a poor start, refined on the full problem, ends where the full fit from
// the truth ends, with the same covariance; for each per-angle mode.
class VariableProjectionModeTest : public VariableProjectionTest,
                                   public ::testing::WithParamInterface<const char*> {};

TEST_P(VariableProjectionModeTest, ReachesTheFullProblemsOptimum) {
  SetUpProblem(GetParam(), 80);
  ReparametrizedProblem full(*objective_, map_);
  LevenbergMarquardtOptions reference_options = ReducedOptions();
  reference_options.max_iterations = 200;
  const LevenbergMarquardtSummary reference = Minimize(reference_options, full, reduced_truth_);
  ASSERT_TRUE(reference.IsConverged()) << reference.reason;

  Eigen::VectorXd start = reduced_truth_;
  VariableProjectionProblem projected(*objective_, map_, bounds_, start);
  const std::vector<int>& nonlinear = projected.nonlinear_indices();
  const double physical_start[7] = {900.0, -0.2, 0.0, 1.0e-3, 0.0, 0.0, 0.0};
  for (size_t i = 0; i < nonlinear.size(); ++i) start[nonlinear[i]] = physical_start[i];
  for (int j : projected.linear_indices()) start[j] = 0.5 * (start[j] + bounds_.lower[j]);

  LevenbergMarquardtOptions options;
  const BoundBox nonlinear_bounds = projected.NonlinearBounds();
  options.lower_bounds = nonlinear_bounds.lower;
  options.upper_bounds = nonlinear_bounds.upper;
  options.max_iterations = 200;
  const LevenbergMarquardtSummary vp = Minimize(options, projected, projected.NonlinearPart(start));
  ASSERT_TRUE(vp.IsConverged()) << vp.reason;

  const LevenbergMarquardtSummary refined =
      Minimize(ReducedOptions(), full, projected.ReducedPoint(vp.theta));
  ASSERT_TRUE(refined.IsConverged()) << refined.reason;
  EXPECT_NEAR(vp.final_chi2, reference.final_chi2, 1e-6 * reference.final_chi2);
  EXPECT_NEAR(refined.final_chi2, reference.final_chi2, 1e-8 * reference.final_chi2);
  EXPECT_LE(refined.iterations, 10);
  for (int j = 0; j < full.num_parameters(); ++j) {
    if (reference.uncertainties[j] == 0.0) continue;
    EXPECT_NEAR(refined.theta[j], reference.theta[j], 1e-2 * reference.uncertainties[j])
        << map_.reduced_names[static_cast<size_t>(j)];
    EXPECT_NEAR(refined.uncertainties[j], reference.uncertainties[j],
                1e-3 * reference.uncertainties[j]);
  }
}

INSTANTIATE_TEST_SUITE_P(PerAngleModes, VariableProjectionModeTest,
                         ::testing::Values("individual", "auto", "constant", "fourier"));

// The two-component mode at 8 angles (VariableProjectionProblem::SumsPhysicalBlock): a full pass
// at the scaling the last Cost solved at the same point takes the physical block summed over the
// angles (PassColumns::kSummedPhysical; docs/design.md section 2, The two-component physical
// block summed over the angles), and local fits judge trials by Cost.
class SummedVariableProjectionTest : public VariableProjectionTest {
 protected:
  void SetUpTwoComponent(int frames) {
    config_ = SimulationConfig(AnalysisMode::kTwoComponent, frames);
    config_.simulation.phi_angles_degrees = {0.0, 22.5, 45.0, 67.5, 90.0, 112.5, 135.0, 157.5};
    config_.simulation.contrast = {0.30, 0.29, 0.28, 0.26, 0.24, 0.22, 0.21, 0.20};
    config_.simulation.offset = {1.00, 1.01, 1.02, 0.99, 0.98, 1.00, 1.01, 0.99};
    objective_ = MakeObjective(config_, 2000);
    truth_ = Truth(config_);
    NlsqOptions nlsq;
    const ResolvedScaling scaling = ResolvePerAngleMode(nlsq, objective_->num_angles());
    std::vector<ScalingEstimate> starts;
    for (int k = 0; k < objective_->num_angles(); ++k) {
      starts.push_back({truth_[objective_->ContrastIndex(k)], truth_[objective_->OffsetIndex(k)]});
    }
    map_ = BuildScalingMap(scaling, objective_->num_physical(),
                           PhysicalParameterNames(AnalysisMode::kTwoComponent),
                           config_.simulation.phi_angles_degrees, starts, 1);
    const LevenbergMarquardtOptions full = BoundedOptions(*objective_);
    bounds_ = ReduceBounds(map_, full.lower_bounds, full.upper_bounds);
    reduced_truth_ = ReduceStartingPoint(map_, truth_);
  }
};

// After Cost(n), Accumulate(n) takes one summed pass; its normal equations equal those of the
// per-angle pass at the same evaluated point (the estimate set again, which forgets where it was
// solved) within 1e-12 relative to the diagonal scales, and its chi2 and next estimate too.
TEST_F(SummedVariableProjectionTest, SummedPassGivesThePerAngleNormalEquations) {
  SetUpTwoComponent(120);
  VariableProjectionProblem summed(*objective_, map_, bounds_, reduced_truth_);
  ASSERT_TRUE(summed.SumsPhysicalBlock());
  Eigen::VectorXd n = summed.NonlinearPart(reduced_truth_);
  n[0] *= 1.3;   // D0_ref
  n[3] *= 0.8;   // D0_sample
  n[6] *= 1.05;  // v0
  n[13] += 0.5;  // phi0_het
  summed.Cost(n);
  const Eigen::VectorXd solved = summed.linear_estimate();
  const int64_t passes_before = objective_->passes();
  const NormalEquations fast = summed.Accumulate(n);
  EXPECT_EQ(objective_->passes(), passes_before + 1);  // one summed pass, no second one

  VariableProjectionProblem per_angle(*objective_, map_, bounds_, reduced_truth_);
  per_angle.set_linear_estimate(solved);
  const NormalEquations reference = per_angle.Accumulate(n);
  ASSERT_EQ(fast.jtj.rows(), reference.jtj.rows());
  for (int a = 0; a < reference.jtj.rows(); ++a) {
    const double gradient_scale = std::sqrt(reference.jtj(a, a) * reference.chi2);
    EXPECT_NEAR(fast.jtr[a] / gradient_scale, reference.jtr[a] / gradient_scale, 1e-12) << a;
    for (int c = 0; c <= a; ++c) {
      const double scale = std::sqrt(reference.jtj(a, a) * reference.jtj(c, c));
      EXPECT_NEAR(fast.jtj(a, c) / scale, reference.jtj(a, c) / scale, 1e-12)
          << "(" << a << ", " << c << ")";
    }
  }
  EXPECT_NEAR(fast.chi2, reference.chi2, 1e-12 * reference.chi2);
  for (Eigen::Index i = 0; i < solved.size(); ++i) {
    EXPECT_NEAR(summed.linear_estimate()[i], per_angle.linear_estimate()[i],
                1e-12 * std::abs(per_angle.linear_estimate()[i]));
  }
}

// A projected fit with LocalFitOptions (trials by Cost, accepted points by summed passes) ends at
// the optimum of the fit that judges every trial by a per-angle full pass: chi2 within 1e-9
// relative, every parameter within 1e-6 of its standard error.
TEST_F(SummedVariableProjectionTest, ProjectedFitReachesThePerAngleFitsOptimum) {
  SetUpTwoComponent(100);
  Eigen::VectorXd start = reduced_truth_;
  VariableProjectionProblem summed(*objective_, map_, bounds_, start);
  const std::vector<int>& nonlinear = summed.nonlinear_indices();
  // Away from the truth in the transports, the velocity and phi0.
  start[nonlinear[0]] *= 1.2;
  start[nonlinear[3]] *= 0.9;
  start[nonlinear[6]] *= 1.02;
  start[nonlinear[13]] += 0.5;
  LevenbergMarquardtOptions base;
  base.max_iterations = 200;
  base.statistical_tolerance = 0.0;  // as the global phase's local fits
  base.hold_bound_parameters_on_undetermined_directions = true;
  const LevenbergMarquardtOptions options = summed.LocalFitOptions(base);
  EXPECT_EQ(options.trial_evaluation, TrialEvaluation::kCostOnlyPass);
  const LevenbergMarquardtSummary fast = Minimize(options, summed, summed.NonlinearPart(start));
  ASSERT_TRUE(fast.IsConverged()) << fast.reason;

  VariableProjectionProblem per_angle(*objective_, map_, bounds_, start);
  LevenbergMarquardtOptions speculative = per_angle.LocalFitOptions(base);
  speculative.trial_evaluation = TrialEvaluation::kSpeculativeFullPass;  // every pass per angle
  const LevenbergMarquardtSummary reference =
      Minimize(speculative, per_angle, per_angle.NonlinearPart(start));
  ASSERT_TRUE(reference.IsConverged()) << reference.reason;
  EXPECT_GT(fast.cost_passes, 0);
  std::cout << "summed: " << fast.iterations << " iterations, " << fast.passes << " + "
            << fast.cost_passes << " passes; per angle: " << reference.iterations << ", "
            << reference.passes << "\n";
  EXPECT_NEAR(fast.final_chi2, reference.final_chi2, 1e-9 * reference.final_chi2);
  for (int j = 0; j < summed.num_parameters(); ++j) {
    if (!(reference.uncertainties[j] > 0.0)) continue;
    EXPECT_NEAR(fast.theta[j], reference.theta[j], 1e-6 * reference.uncertainties[j])
        << summed.NonlinearNames()[static_cast<size_t>(j)];
  }
}

// Below 8 angles (the fixture's 3) the pass and the trials stay per angle, as before.
TEST_F(VariableProjectionTest, ThreeTwoComponentAnglesKeepThePerAnglePass) {
  config_ = SimulationConfig(AnalysisMode::kTwoComponent, 40);
  objective_ = MakeObjective(config_, 2000);
  truth_ = Truth(config_);
  const ScalingMap map = BuildScalingMap(
      ResolvePerAngleMode(NlsqOptions(), 3), objective_->num_physical(),
      PhysicalParameterNames(AnalysisMode::kTwoComponent), config_.simulation.phi_angles_degrees,
      {{0.3, 1.0}, {0.25, 1.02}, {0.2, 0.98}}, 1);
  VariableProjectionProblem projected(*objective_, map, BoundBox{},
                                      ReduceStartingPoint(map, truth_));
  EXPECT_FALSE(projected.SumsPhysicalBlock());
  EXPECT_EQ(projected.LocalFitOptions({}).trial_evaluation, TrialEvaluation::kSpeculativeFullPass);
}

// Under a robust loss (docs/design.md section 4c): the fixture's data with outliers (every 97th
// point of each angle's triangle 0.5 above its value, about 50 sigma: hot pixels) and the
// objective of the cauchy loss, f_scale 3.
class RobustVariableProjectionTest : public VariableProjectionTest {
 protected:
  void SetUpRobustProblem(int frames) {
    SetUpProblem("individual", frames);
    PackedDataObjective::PackedData data = objective_->data();
    for (std::vector<float>& angle : data) {
      for (size_t i = 0; i < angle.size(); i += 97) angle[i] += 0.5f;
    }
    PassOptions options;
    options.batch_points = 2000;
    options.loss = LossOptions{LossFunction::kCauchy, 3.0};
    robust_ = std::make_unique<PackedDataObjective>(objective_->model(),
                                                    config_.simulation.phi_angles_degrees,
                                                    objective_->sigma(), std::move(data), options);
  }

  // The full problem's robust optimum over the scaling alone at the physical part of reduced
  // (the physical parameters held by equal bounds), from reduced.
  LevenbergMarquardtSummary BestScalingAt(const VariableProjectionProblem& projected,
                                          const Eigen::VectorXd& reduced) const {
    LevenbergMarquardtOptions held = ReducedOptions();
    for (int j : projected.nonlinear_indices()) {
      held.lower_bounds[j] = held.upper_bounds[j] = reduced[j];
    }
    held.ftol = held.xtol = held.gtol = 1e-14;
    held.max_iterations = 500;
    ReparametrizedProblem full(*robust_, map_);
    return Minimize(held, full, reduced);
  }

  std::unique_ptr<PackedDataObjective> robust_;
};

TEST_F(RobustVariableProjectionTest,
       EvaluationsBoundTheRobustCostAndReachItsMinimumOverTheScaling) {
  SetUpRobustProblem(60);
  VariableProjectionProblem projected(*robust_, map_, bounds_, reduced_truth_);
  Eigen::VectorXd n = projected.NonlinearPart(reduced_truth_);
  n[0] *= 1.3;
  n[3] *= 0.7;
  n[6] += 1.0;
  ReparametrizedProblem full(*robust_, map_);
  // Each evaluation (one pass) is the majorizer of the robust cost at the scaling it leaves (the
  // linear estimate): never below that cost, and never above the evaluation before (reweighting
  // is a majorize-minimize iteration). At fixed physical parameters the evaluations are the
  // iterations of reweighted least squares for the scaling.
  double previous = std::numeric_limits<double>::infinity();
  Eigen::VectorXd reduced = reduced_truth_;
  const int64_t passes_before = projected.passes();
  constexpr int kEvaluations = 30;
  for (int evaluation = 0; evaluation < kEvaluations; ++evaluation) {
    const double value = projected.Cost(n);
    for (size_t i = 0; i < projected.nonlinear_indices().size(); ++i) {
      reduced[projected.nonlinear_indices()[i]] = n[static_cast<Eigen::Index>(i)];
    }
    for (size_t i = 0; i < projected.linear_indices().size(); ++i) {
      reduced[projected.linear_indices()[i]] =
          projected.linear_estimate()[static_cast<Eigen::Index>(i)];
    }
    EXPECT_GE(value, full.Cost(reduced) * (1 - 1e-12)) << evaluation;
    EXPECT_LE(value, previous * (1 + 1e-12)) << evaluation;
    previous = value;
  }
  EXPECT_EQ(projected.passes() - passes_before, kEvaluations);
  // Converged: the robust cost minimised over the scaling by the full problem's own fit.
  const LevenbergMarquardtSummary best = BestScalingAt(projected, reduced);
  EXPECT_NEAR(previous, best.final_chi2, 1e-9 * best.final_chi2);
}

TEST_F(RobustVariableProjectionTest, ProjectedFitReachesTheFullRobustOptimum) {
  // From a poor start, the robust projected fit refined on the full problem ends where the full
  // robust fit from the truth ends.
  SetUpRobustProblem(80);
  ReparametrizedProblem full(*robust_, map_);
  LevenbergMarquardtOptions reference_options = ReducedOptions();
  reference_options.max_iterations = 200;
  const LevenbergMarquardtSummary reference = Minimize(reference_options, full, reduced_truth_);
  ASSERT_TRUE(reference.IsConverged()) << reference.reason;

  Eigen::VectorXd start = reduced_truth_;
  VariableProjectionProblem projected(*robust_, map_, bounds_, start);
  const std::vector<int>& nonlinear = projected.nonlinear_indices();
  const double physical_start[7] = {900.0, -0.2, 0.0, 1.0e-3, 0.0, 0.0, 0.0};
  for (size_t i = 0; i < nonlinear.size(); ++i) start[nonlinear[i]] = physical_start[i];
  for (int j : projected.linear_indices()) start[j] = 0.5 * (start[j] + bounds_.lower[j]);
  projected.set_linear_estimate(start(projected.linear_indices()));

  LevenbergMarquardtOptions options = projected.LocalFitOptions(LevenbergMarquardtOptions{});
  options.max_iterations = 200;
  const LevenbergMarquardtSummary vp = Minimize(options, projected, projected.NonlinearPart(start));
  ASSERT_TRUE(vp.IsConverged()) << vp.reason;
  const LevenbergMarquardtSummary refined =
      Minimize(ReducedOptions(), full, projected.ReducedPoint(vp.theta));
  ASSERT_TRUE(refined.IsConverged()) << refined.reason;
  EXPECT_NEAR(vp.final_chi2, reference.final_chi2, 1e-6 * reference.final_chi2);
  EXPECT_NEAR(refined.final_chi2, reference.final_chi2, 1e-8 * reference.final_chi2);
  for (int j = 0; j < full.num_parameters(); ++j) {
    if (reference.uncertainties[j] == 0.0) continue;
    EXPECT_NEAR(refined.theta[j], reference.theta[j], 1e-2 * reference.uncertainties[j])
        << map_.reduced_names[static_cast<size_t>(j)];
  }
}

}  // namespace
}  // namespace homodyne
