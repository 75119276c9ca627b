// Tests of the Levenberg-Marquardt core (docs/design.md section 4) on small problems with
// known answers.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "homodyne/errors.h"
#include "optimize/levenberg_marquardt.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Status = LevenbergMarquardtStatus;

// A problem given by its residual vector and Jacobian (sign convention of
// levenberg_marquardt.h: J = dr/dtheta).
class FunctionProblem : public LeastSquaresProblem {
 public:
  using Residuals = std::function<Eigen::VectorXd(const Eigen::VectorXd&)>;
  using Jacobian = std::function<Eigen::MatrixXd(const Eigen::VectorXd&)>;

  FunctionProblem(int num_parameters, int64_t num_residuals, Residuals residuals, Jacobian jacobian)
      : num_parameters_(num_parameters),
        num_residuals_(num_residuals),
        residuals_(std::move(residuals)),
        jacobian_(std::move(jacobian)) {}

  int num_parameters() const override { return num_parameters_; }
  int64_t num_residuals() const override { return num_residuals_; }
  NormalEquations Accumulate(const Eigen::VectorXd& theta) override {
    ++accumulate_calls;
    const Eigen::VectorXd r = residuals_(theta);
    const Eigen::MatrixXd j = jacobian_(theta);
    NormalEquations equations;
    equations.jtj = j.transpose() * j;
    equations.jtr = j.transpose() * r;
    equations.chi2 = r.squaredNorm();
    equations.num_points = r.size();
    if (!std::isfinite(equations.chi2)) ++non_finite_evaluations;
    return equations;
  }
  double Cost(const Eigen::VectorXd& theta) override {
    ++cost_calls;
    const double chi2 = residuals_(theta).squaredNorm() + cost_bias;
    if (!std::isfinite(chi2)) ++non_finite_evaluations;
    return chi2;
  }

  int accumulate_calls = 0;
  int cost_calls = 0;
  int non_finite_evaluations = 0;
  double cost_bias = 0.0;  // added to Cost only (to make every trial look worse)

 private:
  int num_parameters_;
  int64_t num_residuals_;
  Residuals residuals_;
  Jacobian jacobian_;
};

// y = A exp(-k t) + c on t = 0, 0.1, ..., 4, sigma = 0.01, noise-free; truth (2, 0.7, 0.3).
FunctionProblem ExponentialDecay() {
  constexpr int kPoints = 41;
  constexpr double kSigma = 0.01;
  auto model = [](const Eigen::VectorXd& p, double t) { return p[0] * std::exp(-p[1] * t) + p[2]; };
  Eigen::VectorXd truth(3);
  truth << 2.0, 0.7, 0.3;
  Eigen::VectorXd data(kPoints);
  for (int i = 0; i < kPoints; ++i) data[i] = model(truth, 0.1 * i);
  return FunctionProblem(
      3, kPoints,
      [=](const Eigen::VectorXd& p) {
        Eigen::VectorXd r(kPoints);
        for (int i = 0; i < kPoints; ++i) r[i] = (data[i] - model(p, 0.1 * i)) / kSigma;
        return r;
      },
      [=](const Eigen::VectorXd& p) {
        Eigen::MatrixXd j(kPoints, 3);
        for (int i = 0; i < kPoints; ++i) {
          const double t = 0.1 * i;
          const double e = std::exp(-p[1] * t);
          j(i, 0) = -e / kSigma;
          j(i, 1) = p[0] * t * e / kSigma;
          j(i, 2) = -1.0 / kSigma;
        }
        return j;
      });
}

// As ExponentialDecay on 2000 points t in [0, 4] with a deterministic "noise" of standard
// deviation sigma (sqrt(2) sigma sin(12.9898 i + 0.3)): a fit ends with chi2 ~ dof, so the
// standard errors are those of real data (about 1e-3 in A, k and c).
FunctionProblem NoisyExponentialDecay() {
  constexpr int kPoints = 2000;
  constexpr double kSigma = 0.01;
  constexpr double kDt = 4.0 / (kPoints - 1);
  auto model = [](const Eigen::VectorXd& p, double t) { return p[0] * std::exp(-p[1] * t) + p[2]; };
  Eigen::VectorXd truth(3);
  truth << 2.0, 0.7, 0.3;
  Eigen::VectorXd data(kPoints);
  for (int i = 0; i < kPoints; ++i) {
    data[i] = model(truth, kDt * i) + kSigma * std::sqrt(2.0) * std::sin(12.9898 * i + 0.3);
  }
  return FunctionProblem(
      3, kPoints,
      [=](const Eigen::VectorXd& p) {
        Eigen::VectorXd r(kPoints);
        for (int i = 0; i < kPoints; ++i) r[i] = (data[i] - model(p, kDt * i)) / kSigma;
        return r;
      },
      [=](const Eigen::VectorXd& p) {
        Eigen::MatrixXd j(kPoints, 3);
        for (int i = 0; i < kPoints; ++i) {
          const double t = kDt * i;
          const double e = std::exp(-p[1] * t);
          j(i, 0) = -e / kSigma;
          j(i, 1) = p[0] * t * e / kSigma;
          j(i, 2) = -1.0 / kSigma;
        }
        return j;
      });
}

Eigen::VectorXd Vector(std::initializer_list<double> values) {
  Eigen::VectorXd v(static_cast<Eigen::Index>(values.size()));
  Eigen::Index i = 0;
  for (double value : values) v[i++] = value;
  return v;
}

// Rosenbrock as least squares: r = (10 (x2 - x1^2), 1 - x1); minimum (1, 1) with chi2 = 0.
FunctionProblem Rosenbrock() {
  return FunctionProblem(
      2, 2,
      [](const Eigen::VectorXd& x) {
        return Vector({10.0 * (x[1] - x[0] * x[0]), 1.0 - x[0]});
      },
      [](const Eigen::VectorXd& x) {
        Eigen::MatrixXd j(2, 2);
        j << -20.0 * x[0], 10.0, -1.0, 0.0;
        return j;
      });
}

// Linear least squares r = y - X beta (J = -X) with a deterministic "noise".
struct LinearData {
  Eigen::MatrixXd x;
  Eigen::VectorXd y;
};

LinearData QuadraticDesign(bool duplicate_column) {
  constexpr int kPoints = 20;
  LinearData d;
  d.x.resize(kPoints, 3);
  d.y.resize(kPoints);
  for (int i = 0; i < kPoints; ++i) {
    const double t = 0.1 * i;
    d.x(i, 0) = 1.0;
    d.x(i, 1) = t;
    d.x(i, 2) = duplicate_column ? 2.0 * t : t * t;
    d.y[i] = 1.0 + 2.0 * t - 0.5 * t * t + 0.01 * std::sin(7.0 * i);
  }
  return d;
}

FunctionProblem LinearProblem(const LinearData& d) {
  return FunctionProblem(
      static_cast<int>(d.x.cols()), d.x.rows(),
      [d](const Eigen::VectorXd& beta) -> Eigen::VectorXd { return d.y - d.x * beta; },
      [d](const Eigen::VectorXd&) -> Eigen::MatrixXd { return -d.x; });
}

Eigen::VectorXd LinearSolution(const LinearData& d) { return d.x.colPivHouseholderQr().solve(d.y); }

// r = (theta0 - 3, theta1 - 1, 0.5 (theta0 + theta1) - 2): unconstrained optimum (3, 1); with
// theta0 <= 2 the optimum is (2, 1.2) and g_0 = -1.2 there (descent pushes theta0 up, out).
FunctionProblem CoupledLinear() {
  Eigen::MatrixXd x(3, 2);
  x << 1.0, 0.0, 0.0, 1.0, 0.5, 0.5;
  LinearData d{x, Vector({3.0, 1.0, 2.0})};
  return LinearProblem(d);
}

// ---------------------------------------------------------------------------------------------

TEST(NielsenDampingTest, FollowsNielsenUpdate) {
  NielsenDamping damping(1.0);
  damping.OnAccepted(1.0);  // 1 - (2 - 1)^3 = 0 -> factor 1/3
  EXPECT_DOUBLE_EQ(damping.mu(), 1.0 / 3.0);
  damping.OnRejected();
  EXPECT_DOUBLE_EQ(damping.mu(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(damping.nu(), 4.0);
  damping.OnRejected();
  EXPECT_DOUBLE_EQ(damping.mu(), 8.0 / 3.0);
  damping.OnAccepted(0.5);  // factor 1, nu reset
  EXPECT_DOUBLE_EQ(damping.mu(), 8.0 / 3.0);
  EXPECT_DOUBLE_EQ(damping.nu(), 2.0);
}

TEST(LevenbergMarquardtSummaryTest, StartsAsNotRun) {
  const LevenbergMarquardtSummary summary;
  EXPECT_EQ(summary.status, Status::kNotRun);
  EXPECT_EQ(summary.reason, "not run");
  EXPECT_EQ(summary.BriefReport(), "LM: not run");
  EXPECT_FALSE(summary.IsConverged());
  EXPECT_EQ(summary.final_step_standard_errors, -1.0);
}

TEST(LevenbergMarquardtOptionsTest, DefaultsAreValid) {
  std::string error;
  EXPECT_TRUE(LevenbergMarquardtOptions().IsValid(&error)) << error;
}

TEST(LevenbergMarquardtOptionsTest, MessagesNameYamlPathValueAndRule) {
  std::string error;
  LevenbergMarquardtOptions options;
  options.max_iterations = -3;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_EQ(error, "optimization.nlsq.max_iterations = -3: must be > 0");

  options = LevenbergMarquardtOptions();
  options.ftol = 0.0;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_EQ(error, "optimization.nlsq.tolerance = 0: must be > 0");

  options = LevenbergMarquardtOptions();
  options.xtol = -1.0;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_EQ(error, "optimization.nlsq.xtol = -1: must be > 0");

  options = LevenbergMarquardtOptions();
  options.gtol = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_THAT(error, HasSubstr("optimization.nlsq.gtol = nan"));

  options = LevenbergMarquardtOptions();
  options.statistical_tolerance = -1.0;
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_EQ(error,
            "optimization.nlsq.statistical_tolerance = -1: must be finite and >= 0 (0 disables)");
  options.statistical_tolerance = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_THAT(error, HasSubstr("optimization.nlsq.statistical_tolerance = nan"));
  options.statistical_tolerance = 0.0;  // disables the test: valid
  EXPECT_TRUE(options.IsValid(&error)) << error;

  options = LevenbergMarquardtOptions();
  options.parameter_names = {"D0", "alpha"};
  options.lower_bounds = Vector({5.0, -1.0});
  options.upper_bounds = Vector({1.0, 1.0});
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_EQ(error, "parameter_space.bounds[D0]: min 5 > max 1");

  options.parameter_names.clear();
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_EQ(error, "parameter_space.bounds[#0]: min 5 > max 1");

  options.upper_bounds = Vector({6.0});
  EXPECT_FALSE(options.IsValid(&error));
  EXPECT_THAT(error, HasSubstr("2 lower bounds but 1 upper bounds"));
}

TEST(LevenbergMarquardtOptionsTest, MinimizeRejectsInvalidOptions) {
  LevenbergMarquardtOptions options;
  options.max_iterations = 0;
  FunctionProblem problem = Rosenbrock();
  EXPECT_THROW(Minimize(options, problem, Vector({-1.2, 1.0})), ConfigError);
}

TEST(LevenbergMarquardtTest, RecoversExponentialDecayExactly) {
  FunctionProblem problem = ExponentialDecay();

  const LevenbergMarquardtSummary summary =
      Minimize(LevenbergMarquardtOptions(), problem, Vector({1.0, 1.5, 0.0}));

  ASSERT_TRUE(summary.IsConverged()) << summary.BriefReport() << ": " << summary.reason;
  const Eigen::VectorXd truth = Vector({2.0, 0.7, 0.3});
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(summary.theta[i], truth[i], 1e-8 * std::abs(truth[i]));
  EXPECT_LT(summary.final_chi2, 1e-12);
  EXPECT_LT(summary.final_chi2, summary.initial_chi2);
  // Speculative full pass (default): one pass per trial plus the start, no cost passes.
  EXPECT_EQ(summary.passes, summary.iterations + 1);
  EXPECT_EQ(summary.cost_passes, 0);
  EXPECT_EQ(summary.passes, problem.accumulate_calls);
  EXPECT_EQ(summary.accepted_steps + summary.rejected_steps, summary.iterations);
  EXPECT_EQ(summary.dof, 38);
}

TEST(LevenbergMarquardtTest, CostOnlyPassReachesSameAnswerWithCountedPasses) {
  FunctionProblem problem = ExponentialDecay();
  LevenbergMarquardtOptions options;
  options.trial_evaluation = TrialEvaluation::kCostOnlyPass;

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({1.0, 1.5, 0.0}));

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_NEAR(summary.theta[0], 2.0, 2e-8);
  EXPECT_NEAR(summary.theta[1], 0.7, 7e-9);
  EXPECT_NEAR(summary.theta[2], 0.3, 3e-9);
  EXPECT_EQ(summary.passes, summary.accepted_steps + 1);
  EXPECT_EQ(summary.cost_passes, summary.iterations);
  EXPECT_EQ(summary.passes, problem.accumulate_calls);
  EXPECT_EQ(summary.cost_passes, problem.cost_calls);
}

TEST(LevenbergMarquardtTest, LinearProblemConvergesInOneStepWithNegligibleDamping) {
  const LinearData data = QuadraticDesign(/*duplicate_column=*/false);
  FunctionProblem problem = LinearProblem(data);
  LevenbergMarquardtOptions options;
  options.initial_damping = 1e-14;

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({0.0, 0.0, 0.0}));

  EXPECT_EQ(summary.status, Status::kConvergedGtol) << summary.reason;
  EXPECT_EQ(summary.iterations, 1);
  EXPECT_EQ(summary.accepted_steps, 1);
  EXPECT_EQ(summary.passes, 2);
  const Eigen::VectorXd expected = LinearSolution(data);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(summary.theta[i], expected[i], 1e-10);
}

TEST(LevenbergMarquardtTest, SolvesRosenbrockFromClassicStart) {
  FunctionProblem problem = Rosenbrock();

  const LevenbergMarquardtSummary summary =
      Minimize(LevenbergMarquardtOptions(), problem, Vector({-1.2, 1.0}));

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_NEAR(summary.theta[0], 1.0, 1e-8);
  EXPECT_NEAR(summary.theta[1], 1.0, 1e-8);
  EXPECT_LT(summary.iterations, 100);
}

TEST(LevenbergMarquardtTest, OptimumOutsideBoundEndsOnBoundWithParameterFrozen) {
  FunctionProblem problem = CoupledLinear();
  LevenbergMarquardtOptions options;
  options.lower_bounds = Vector({0.0, -10.0});
  options.upper_bounds = Vector({2.0, 10.0});

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({0.5, 0.5}));

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_EQ(summary.theta[0], 2.0);
  EXPECT_NEAR(summary.theta[1], 1.2, 1e-7);  // ftol/gtol 1e-8 leave ~1e-8 of the free parameter
  EXPECT_EQ(summary.parameters_at_bound, std::vector<int>{0});
  // Gradient g = J^T r at the result: descent direction -g_0 > 0 points above the upper bound.
  const NormalEquations at_result = problem.Accumulate(summary.theta);
  EXPECT_LT(at_result.jtr[0], 0.0);
  // The covariance releases the bound, as the reference reports it: s^2 (J^T J)^-1 over both
  // parameters, so the parameter held by its bound gets the data's uncertainty, not 0.
  const double s2 = summary.final_chi2 / 1.0;  // dof = 3 - 2
  const Eigen::MatrixXd released = s2 * at_result.jtj.inverse();
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      EXPECT_NEAR(summary.covariance(i, j), released(i, j), 1e-9 * std::abs(released(i, j)))
          << i << "," << j;
    }
  }
  EXPECT_GT(summary.uncertainties[0], 0.0);
  EXPECT_NEAR(summary.uncertainties[0], std::sqrt(released(0, 0)), 1e-9 * summary.uncertainties[0]);
  EXPECT_TRUE(summary.undetermined_parameters.empty());
  EXPECT_THAT(summary.BriefReport(), HasSubstr("1 at bound"));
}

// y = f0 exp(k (t - f2)) + c with noise, as two_component's sample fraction: f0 and f2 enter only
// as f0 exp(-k f2), an exact degeneracy of the model. The best fit needs f0 exp(-k f2) = 0.5
// e^-0.4 with f0 <= 1, so f2 is pushed against its bound [-1, 1] from a start at its upper half.
FunctionProblem ExactlyDegenerateExponential() {
  constexpr int kPoints = 400;
  constexpr double kSigma = 0.01;
  auto model = [](const Eigen::VectorXd& p, double t) {
    return p[0] * std::exp(p[1] * (t - p[2])) + p[3];
  };
  const Eigen::VectorXd truth = Vector({0.5, 0.8, 0.5, 0.2});
  Eigen::VectorXd data(kPoints);
  for (int i = 0; i < kPoints; ++i) {
    data[i] = model(truth, 0.01 * i) + kSigma * std::sqrt(2.0) * std::sin(12.9898 * i + 0.3);
  }
  return FunctionProblem(
      4, kPoints,
      [=](const Eigen::VectorXd& p) {
        Eigen::VectorXd r(kPoints);
        for (int i = 0; i < kPoints; ++i) r[i] = (data[i] - model(p, 0.01 * i)) / kSigma;
        return r;
      },
      [=](const Eigen::VectorXd& p) {
        Eigen::MatrixXd j(kPoints, 4);
        for (int i = 0; i < kPoints; ++i) {
          const double t = 0.01 * i;
          const double e = std::exp(p[1] * (t - p[2]));
          j(i, 0) = -e / kSigma;
          j(i, 1) = -p[0] * (t - p[2]) * e / kSigma;
          j(i, 2) = p[0] * p[1] * e / kSigma;
          j(i, 3) = -1.0 / kSigma;
        }
        return j;
      });
}

// With hold_bound_parameters_on_undetermined_directions, f2 started on its upper bound stays
// there (it is interchangeable with f0) and f0 alone carries the product; the fit reaches the same
// chi2 as without the rule.
TEST(LevenbergMarquardtTest, HoldsABoundParameterOfAnExactDegeneracy) {
  LevenbergMarquardtOptions options;
  options.lower_bounds = Vector({0.0, -5.0, -1.0, -1.0});
  options.upper_bounds = Vector({1.0, 5.0, 1.0, 1.0});
  options.max_iterations = 1000;
  const Eigen::VectorXd start = Vector({0.9, 0.3, 1.0, 0.0});
  options.hold_bound_parameters_on_undetermined_directions = true;
  FunctionProblem held_problem = ExactlyDegenerateExponential();
  const LevenbergMarquardtSummary held = Minimize(options, held_problem, start);
  options.hold_bound_parameters_on_undetermined_directions = false;
  FunctionProblem free_problem = ExactlyDegenerateExponential();
  const LevenbergMarquardtSummary free = Minimize(options, free_problem, start);

  ASSERT_TRUE(held.IsConverged()) << held.reason;
  ASSERT_TRUE(free.IsConverged()) << free.reason;
  EXPECT_EQ(held.theta[2], 1.0);  // held on its bound at every iteration
  EXPECT_NE(free.theta[2], 1.0);  // without the rule the degenerate pair moves together
  // The product the data determine, and the other parameters, at the optimum.
  EXPECT_NEAR(held.theta[0] * std::exp(-held.theta[1] * held.theta[2]), 0.5 * std::exp(-0.4), 2e-3);
  EXPECT_NEAR(held.theta[1], 0.8, 5e-3);
  EXPECT_NEAR(held.theta[3], 0.2, 5e-3);
  EXPECT_NEAR(held.final_chi2, free.final_chi2, 1e-9 * free.final_chi2);
  EXPECT_THAT(held.undetermined_parameters, ::testing::Contains(2));
}

TEST(LevenbergMarquardtTest, StartOutsideBoundsIsClippedWithOneWarningEach) {
  FunctionProblem problem = CoupledLinear();
  LevenbergMarquardtOptions options;
  options.parameter_names = {"D0", "alpha"};
  options.lower_bounds = Vector({0.0, -1.0});
  options.upper_bounds = Vector({2.0, 10.0});

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({5.0, -4.0}));

  ASSERT_EQ(summary.warnings.size(), 2u);
  EXPECT_EQ(summary.warnings[0],
            "initial value of D0 = 5 is above its upper bound 2: clipped to 2");
  EXPECT_EQ(summary.warnings[1],
            "initial value of alpha = -4 is below its lower bound -1: clipped to -1");
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_EQ(summary.theta[0], 2.0);
  EXPECT_NEAR(summary.theta[1], 1.2, 1e-7);
}

TEST(LevenbergMarquardtTest, NonFiniteTrialsAreRejectedAndTheFitStillConverges) {
  // r = (theta^2 - 4, 0.1 (theta - 2)), NaN for theta > 3; the first Gauss-Newton step from
  // 0.5 lands near 4.2, in the NaN region.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  FunctionProblem problem(
      1, 2,
      [nan](const Eigen::VectorXd& p) {
        if (p[0] > 3.0) return Vector({nan, nan});
        return Vector({p[0] * p[0] - 4.0, 0.1 * (p[0] - 2.0)});
      },
      [nan](const Eigen::VectorXd& p) {
        Eigen::MatrixXd j(2, 1);
        if (p[0] > 3.0) {
          j << nan, nan;
        } else {
          j << 2.0 * p[0], 0.1;
        }
        return j;
      });
  std::vector<double> accepted_chi2;
  LevenbergMarquardtOptions options;
  options.callback = [&accepted_chi2](const LevenbergMarquardtIteration& iteration) {
    if (iteration.step_accepted) accepted_chi2.push_back(iteration.chi2);
    return true;
  };

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({0.5}));

  EXPECT_GT(problem.non_finite_evaluations, 0);
  EXPECT_GT(summary.rejected_steps, 0);
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_NEAR(summary.theta[0], 2.0, 1e-8);
  ASSERT_FALSE(accepted_chi2.empty());
  for (double chi2 : accepted_chi2) EXPECT_TRUE(std::isfinite(chi2));
  EXPECT_TRUE(std::isfinite(summary.final_chi2));
}

TEST(LevenbergMarquardtTest, FastModeStillRejectsNonFiniteTrials) {
  // As above with validate_numerics off (fast mode, docs/design.md section 7): chi2 is
  // still checked.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  FunctionProblem problem(
      1, 2,
      [nan](const Eigen::VectorXd& p) {
        if (p[0] > 3.0) return Vector({nan, nan});
        return Vector({p[0] * p[0] - 4.0, 0.1 * (p[0] - 2.0)});
      },
      [](const Eigen::VectorXd& p) {
        Eigen::MatrixXd j(2, 1);
        j << 2.0 * p[0], 0.1;
        return j;
      });
  LevenbergMarquardtOptions options;
  options.validate_numerics = false;

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({0.5}));

  EXPECT_GT(problem.non_finite_evaluations, 0);
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_NEAR(summary.theta[0], 2.0, 1e-8);
}

TEST(LevenbergMarquardtTest, NonFiniteStartFails) {
  FunctionProblem problem(
      1, 2,
      [](const Eigen::VectorXd&) {
        return Vector({std::nan(""), 1.0});
      },
      [](const Eigen::VectorXd&) { return Eigen::MatrixXd::Ones(2, 1); });

  const LevenbergMarquardtSummary summary =
      Minimize(LevenbergMarquardtOptions(), problem, Vector({0.5}));
  EXPECT_EQ(summary.status, Status::kFailedNonFinite);
  EXPECT_EQ(summary.iterations, 0);

  const LevenbergMarquardtSummary nan_start =
      Minimize(LevenbergMarquardtOptions(), problem, Vector({std::nan("")}));
  EXPECT_EQ(nan_start.status, Status::kFailedNonFinite);
  EXPECT_EQ(nan_start.passes, 0);
  EXPECT_THAT(nan_start.reason, HasSubstr("#0"));
  EXPECT_EQ(summary.final_step_standard_errors, -1.0);  // chi2 not finite at theta
  EXPECT_EQ(nan_start.final_step_standard_errors, -1.0);
}

TEST(LevenbergMarquardtTest, StopsAtMaxIterations) {
  FunctionProblem problem = Rosenbrock();
  LevenbergMarquardtOptions options;
  options.max_iterations = 3;

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({-1.2, 1.0}));

  EXPECT_EQ(summary.status, Status::kMaxIterations);
  EXPECT_EQ(summary.iterations, 3);
  EXPECT_FALSE(summary.IsConverged());
  EXPECT_THAT(summary.reason, HasSubstr("max_iterations = 3"));
}

TEST(LevenbergMarquardtTest, CovarianceOfLinearProblemIsS2TimesInverseNormalMatrix) {
  const LinearData data = QuadraticDesign(/*duplicate_column=*/false);
  FunctionProblem problem = LinearProblem(data);

  const LevenbergMarquardtSummary summary =
      Minimize(LevenbergMarquardtOptions(), problem, Vector({0.0, 0.0, 0.0}));

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  const Eigen::VectorXd beta = LinearSolution(data);
  const double s2 = (data.y - data.x * beta).squaredNorm() / (20.0 - 3.0);
  const Eigen::MatrixXd expected = s2 * (data.x.transpose() * data.x).inverse();
  EXPECT_FALSE(summary.covariance_pseudo_inverse);
  EXPECT_EQ(summary.dof, 17);
  EXPECT_NEAR(summary.reduced_chi2, s2, 1e-12 * s2);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(summary.uncertainties[i], std::sqrt(expected(i, i)),
                1e-9 * std::sqrt(expected(i, i)));
    for (int j = 0; j < 3; ++j) {
      const double scale = std::sqrt(expected(i, i) * expected(j, j));
      EXPECT_NEAR(summary.covariance(i, j), expected(i, j), 1e-9 * scale);
    }
  }
}

TEST(LevenbergMarquardtTest, SingularNormalMatrixUsesPseudoInverse) {
  const LinearData data = QuadraticDesign(/*duplicate_column=*/true);  // column 2 = 2 * column 1
  FunctionProblem problem = LinearProblem(data);

  const LevenbergMarquardtSummary summary =
      Minimize(LevenbergMarquardtOptions(), problem, Vector({0.0, 0.0, 0.0}));

  EXPECT_TRUE(summary.covariance_pseudo_inverse);
  EXPECT_TRUE(summary.covariance.allFinite());
  EXPECT_TRUE(summary.uncertainties.allFinite());
  EXPECT_THAT(summary.BriefReport(), HasSubstr("pseudo-inverse (2 undetermined)"));
  // theta1 and theta2 trade off along n = (0, 2, -1): undetermined, each with an uncertainty that
  // is a lower bound far above what a fit of either alone would give (a plain pseudo-inverse
  // gave them the small uncertainties of a determined fit). theta0 keeps its estimate.
  EXPECT_EQ(summary.undetermined_parameters, std::vector<int>({1, 2}));
  const double s2 = summary.reduced_chi2;
  for (int i : {1, 2}) {
    const double single_parameter_error = std::sqrt(s2 / data.x.col(i).squaredNorm());
    EXPECT_GT(summary.uncertainties[i], 1e4 * single_parameter_error) << i;
  }
  // What the data determine keeps its variance: theta0 and theta1 + 2 theta2 as in the reduced
  // design (columns 0 and 1). The combination cancels entries about 1e11 times its variance, so
  // only the digits above that rounding (1e-16 * 1e11) are compared.
  const Eigen::MatrixXd reduced = data.x.leftCols(2);
  const Eigen::Matrix2d reduced_covariance = s2 * (reduced.transpose() * reduced).inverse();
  const Eigen::Vector3d combination(0.0, 1.0, 2.0);
  EXPECT_NEAR(combination.dot(summary.covariance * combination), reduced_covariance(1, 1),
              1e-3 * reduced_covariance(1, 1));
  EXPECT_NEAR(summary.covariance(0, 0), reduced_covariance(0, 0), 1e-6 * reduced_covariance(0, 0));
  // The step in standard errors comes from the same pseudo-inverse: finite and small, not the
  // 1 / (zero eigenvalue) a plain solve would give.
  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_GE(summary.final_step_standard_errors, 0.0);
  EXPECT_LE(summary.final_step_standard_errors, 1e-3);
  // The fitted curve is still the least-squares one (theta1 + 2 theta2 is determined).
  const Eigen::VectorXd residual = data.y - data.x * summary.theta;
  const Eigen::VectorXd best =
      data.y - data.x * data.x.completeOrthogonalDecomposition().solve(data.y);
  EXPECT_NEAR(residual.squaredNorm(), best.squaredNorm(), 1e-10);
}

TEST(LevenbergMarquardtTest, FullRankCovarianceHasNoUndeterminedParameters) {
  const LinearData data = QuadraticDesign(/*duplicate_column=*/false);
  FunctionProblem problem = LinearProblem(data);
  const LevenbergMarquardtSummary summary =
      Minimize(LevenbergMarquardtOptions(), problem, Vector({0.0, 0.0, 0.0}));
  EXPECT_TRUE(summary.undetermined_parameters.empty());
  EXPECT_THAT(summary.BriefReport(), Not(HasSubstr("undetermined")));
}

TEST(LevenbergMarquardtTest, FitFromTheOptimumStaysThere) {
  const LinearData data = QuadraticDesign(/*duplicate_column=*/false);
  FunctionProblem problem = LinearProblem(data);
  const Eigen::VectorXd optimum = LinearSolution(data);

  const LevenbergMarquardtSummary summary = Minimize(LevenbergMarquardtOptions(), problem, optimum);

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_LE(summary.iterations, 1);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(summary.theta[i], optimum[i], 1e-12);
}

TEST(LevenbergMarquardtTest, TwoRunsAreBitwiseIdentical) {
  FunctionProblem first_problem = ExponentialDecay();
  FunctionProblem second_problem = ExponentialDecay();

  const LevenbergMarquardtSummary first =
      Minimize(LevenbergMarquardtOptions(), first_problem, Vector({1.0, 1.5, 0.0}));
  const LevenbergMarquardtSummary second =
      Minimize(LevenbergMarquardtOptions(), second_problem, Vector({1.0, 1.5, 0.0}));

  EXPECT_EQ(first.status, second.status);
  EXPECT_EQ(first.iterations, second.iterations);
  EXPECT_EQ(first.final_chi2, second.final_chi2);
  EXPECT_TRUE(first.theta == second.theta);
  EXPECT_TRUE(first.covariance == second.covariance);
  EXPECT_EQ(first.final_damping, second.final_damping);
}

TEST(LevenbergMarquardtTest, TooManyRejectionsFails) {
  FunctionProblem problem = Rosenbrock();
  problem.cost_bias = 1e6;  // every trial looks worse than the current point
  LevenbergMarquardtOptions options;
  options.trial_evaluation = TrialEvaluation::kCostOnlyPass;
  options.max_consecutive_rejections = 3;

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({-1.2, 1.0}));

  EXPECT_EQ(summary.status, Status::kFailedRejections) << summary.reason;
  EXPECT_EQ(summary.rejected_steps, 3);
  EXPECT_EQ(summary.theta, Vector({-1.2, 1.0}));
}

TEST(LevenbergMarquardtTest, ExplodingDampingFails) {
  FunctionProblem problem = Rosenbrock();
  problem.cost_bias = 1e6;
  LevenbergMarquardtOptions options;
  options.trial_evaluation = TrialEvaluation::kCostOnlyPass;
  options.max_damping = 1.0;  // 1e-3 * 2 * 4 * 8 * 16 > 1 after 4 rejections

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({-1.2, 1.0}));

  EXPECT_EQ(summary.status, Status::kFailedDamping) << summary.reason;
  EXPECT_EQ(summary.rejected_steps, 4);
}

TEST(LevenbergMarquardtTest, CallbackSeesEveryIterationAndCanStop) {
  FunctionProblem problem = Rosenbrock();
  std::vector<int> seen;
  LevenbergMarquardtOptions options;
  options.callback = [&seen](const LevenbergMarquardtIteration& iteration) {
    seen.push_back(iteration.iteration);
    EXPECT_EQ(iteration.theta.size(), 2);
    EXPECT_GE(iteration.seconds, 0.0);
    return iteration.iteration < 2;
  };

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({-1.2, 1.0}));

  EXPECT_EQ(summary.status, Status::kStoppedByCallback);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(summary.iterations, 2);
}

// Statistical stopping test (docs/design.md section 4)
// ----------------------------------------------

// Mahalanobis distance sqrt(dx^T C^-1 dx) of theta from the reference fit, C its covariance.
double StandardErrorsFrom(const Eigen::VectorXd& theta,
                          const LevenbergMarquardtSummary& reference) {
  const Eigen::VectorXd difference = theta - reference.theta;
  return std::sqrt(difference.dot(reference.covariance.ldlt().solve(difference)));
}

LevenbergMarquardtSummary TightFit(LeastSquaresProblem& problem, const Eigen::VectorXd& start) {
  LevenbergMarquardtOptions options;
  options.ftol = 1e-15;
  options.xtol = 1e-15;
  options.gtol = 1e-15;
  options.statistical_tolerance = 0.0;
  options.max_iterations = 1000;
  return Minimize(options, problem, start);
}

TEST(LevenbergMarquardtStatisticalToleranceTest, LooseFtolStopsOnlyWithinToleranceOfTheOptimum) {
  // ftol = 1e-3 on chi2 ~ 2000 accepts a last step that lowered chi2 by up to 2: the fit stops
  // with the remaining Gauss-Newton step still 0.05 standard errors long unless the statistical
  // test holds it for one more step.
  const Eigen::VectorXd start = Vector({1.0, 1.5, 0.0});
  FunctionProblem reference_problem = NoisyExponentialDecay();
  const LevenbergMarquardtSummary reference = TightFit(reference_problem, start);
  ASSERT_TRUE(reference.IsConverged()) << reference.reason;
  EXPECT_NEAR(reference.reduced_chi2, 1.0, 0.01);
  EXPECT_LT(reference.final_step_standard_errors, 1e-9);
  LevenbergMarquardtOptions options;
  options.ftol = 1e-3;
  options.statistical_tolerance = 0.0;
  FunctionProblem unchecked_problem = NoisyExponentialDecay();
  FunctionProblem checked_problem = NoisyExponentialDecay();

  const LevenbergMarquardtSummary unchecked = Minimize(options, unchecked_problem, start);
  options.statistical_tolerance = LevenbergMarquardtOptions().statistical_tolerance;
  const LevenbergMarquardtSummary checked = Minimize(options, checked_problem, start);

  EXPECT_EQ(unchecked.status, Status::kConvergedFtol) << unchecked.reason;
  EXPECT_GT(unchecked.final_step_standard_errors, 1e-2);
  EXPECT_EQ(checked.status, Status::kConvergedFtol) << checked.reason;
  EXPECT_GE(checked.final_step_standard_errors, 0.0);
  EXPECT_LE(checked.final_step_standard_errors, 1e-3);
  EXPECT_GT(checked.iterations, unchecked.iterations);
  EXPECT_THAT(checked.reason, HasSubstr("Gauss-Newton step"));
  EXPECT_THAT(checked.BriefReport(), HasSubstr(" SE"));
  // d is the distance still to go: each fit is about d standard errors from the optimum, and the
  // checked one is closer.
  const double unchecked_distance = StandardErrorsFrom(unchecked.theta, reference);
  const double checked_distance = StandardErrorsFrom(checked.theta, reference);
  EXPECT_NEAR(unchecked_distance, unchecked.final_step_standard_errors,
              0.1 * unchecked.final_step_standard_errors);
  EXPECT_LE(checked_distance, 2e-3);
  EXPECT_LT(checked_distance, 0.1 * unchecked_distance);
  EXPECT_LT(checked.final_chi2, unchecked.final_chi2);
}

TEST(LevenbergMarquardtStatisticalToleranceTest, LooseXtolStopsOnlyWithinToleranceOfTheOptimum) {
  const Eigen::VectorXd start = Vector({1.0, 1.5, 0.0});
  FunctionProblem reference_problem = NoisyExponentialDecay();
  const LevenbergMarquardtSummary reference = TightFit(reference_problem, start);
  LevenbergMarquardtOptions options;
  options.xtol = 1e-2;
  options.statistical_tolerance = 0.0;
  FunctionProblem unchecked_problem = NoisyExponentialDecay();
  FunctionProblem checked_problem = NoisyExponentialDecay();

  const LevenbergMarquardtSummary unchecked = Minimize(options, unchecked_problem, start);
  options.statistical_tolerance = 1e-3;
  const LevenbergMarquardtSummary checked = Minimize(options, checked_problem, start);

  EXPECT_EQ(unchecked.status, Status::kConvergedXtol) << unchecked.reason;
  EXPECT_GT(unchecked.final_step_standard_errors, 1e-2);
  ASSERT_TRUE(checked.IsConverged()) << checked.reason;
  EXPECT_LE(checked.final_step_standard_errors, 1e-3);
  EXPECT_LE(StandardErrorsFrom(checked.theta, reference), 2e-3);
  EXPECT_LT(StandardErrorsFrom(checked.theta, reference),
            StandardErrorsFrom(unchecked.theta, reference));
}

TEST(LevenbergMarquardtStatisticalToleranceTest, ReportedForConvergedFitsAndEveryIteration) {
  FunctionProblem problem = NoisyExponentialDecay();
  std::vector<double> reported;
  LevenbergMarquardtOptions options;
  options.callback = [&reported](const LevenbergMarquardtIteration& iteration) {
    reported.push_back(iteration.step_standard_errors);
    return true;
  };

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({1.0, 1.5, 0.0}));

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_GE(summary.final_step_standard_errors, 0.0);
  EXPECT_LE(summary.final_step_standard_errors, 1e-3);
  ASSERT_EQ(reported.size(), static_cast<size_t>(summary.iterations + 1));
  for (double d : reported) EXPECT_GE(d, 0.0);
  EXPECT_GT(reported.front(), 1.0);  // the start is far from the optimum
  // The last iteration's value is the summary's, computed the same way at the same point.
  EXPECT_EQ(reported.back(), summary.final_step_standard_errors);
}

TEST(LevenbergMarquardtStatisticalToleranceTest, MatchesTheLinearGaussNewtonStep) {
  // Linear problem at a point off the optimum: the Gauss-Newton step goes straight to the
  // least-squares solution, so d = sqrt(dx^T C^-1 dx) with C = s^2 (X^T X)^-1 at that point.
  const LinearData data = QuadraticDesign(/*duplicate_column=*/false);
  FunctionProblem problem = LinearProblem(data);
  const Eigen::VectorXd optimum = LinearSolution(data);
  const Eigen::VectorXd start = optimum + Vector({1e-3, -2e-3, 1e-3});
  LevenbergMarquardtOptions options;
  options.max_iterations = 1;
  options.callback = [](const LevenbergMarquardtIteration& iteration) {
    return iteration.iteration < 0;  // stop after iteration 0: the summary is at the start
  };

  const LevenbergMarquardtSummary summary = Minimize(options, problem, start);

  ASSERT_EQ(summary.status, Status::kStoppedByCallback);
  const Eigen::VectorXd step = optimum - start;
  const Eigen::MatrixXd xtx = data.x.transpose() * data.x;
  const double s2 = (data.y - data.x * start).squaredNorm() / 17.0;
  const double expected = std::sqrt(step.dot(xtx * step) / s2);
  EXPECT_NEAR(summary.final_step_standard_errors, expected, 1e-9 * expected);
}

TEST(LevenbergMarquardtStatisticalToleranceTest, FrozenParametersDoNotCount) {
  // At (2, 1.2) with theta0 <= 2 the only free parameter is at its optimum: d ~ 0 although the
  // unconstrained Gauss-Newton step (to theta0 = 3) is large.
  FunctionProblem problem = CoupledLinear();
  LevenbergMarquardtOptions options;
  options.lower_bounds = Vector({0.0, -10.0});
  options.upper_bounds = Vector({2.0, 10.0});

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({0.5, 0.5}));

  ASSERT_TRUE(summary.IsConverged()) << summary.reason;
  EXPECT_EQ(summary.parameters_at_bound, std::vector<int>{0});
  EXPECT_GE(summary.final_step_standard_errors, 0.0);
  EXPECT_LE(summary.final_step_standard_errors, 1e-3);
}

TEST(LevenbergMarquardtStatisticalToleranceTest, ZeroResidualProblemStillTerminates) {
  // Without noise s^2 shrinks with chi2, so d stays ~ sqrt(dof) and never meets the tolerance:
  // the fit goes on to the rounding floor, where a trial no longer lowers chi2, and stops there
  // (xtol on the rejected trial, or chi2 = 0: gtol) within a few more iterations.
  FunctionProblem checked_problem = ExponentialDecay();
  FunctionProblem unchecked_problem = ExponentialDecay();
  LevenbergMarquardtOptions unchecked_options;
  unchecked_options.statistical_tolerance = 0.0;

  const LevenbergMarquardtSummary checked =
      Minimize(LevenbergMarquardtOptions(), checked_problem, Vector({1.0, 1.5, 0.0}));
  const LevenbergMarquardtSummary unchecked =
      Minimize(unchecked_options, unchecked_problem, Vector({1.0, 1.5, 0.0}));

  ASSERT_TRUE(checked.IsConverged()) << checked.reason;
  ASSERT_TRUE(unchecked.IsConverged()) << unchecked.reason;
  EXPECT_LE(checked.iterations, unchecked.iterations + 10);
  EXPECT_LE(checked.final_chi2, unchecked.final_chi2);
}

TEST(LevenbergMarquardtStatisticalToleranceTest, MaxIterationsStillBoundsTheRun) {
  // With max_iterations at the iteration where ftol alone stops the fit, the held fit runs out
  // of trials: max_iterations, not a convergence, and the reason says why.
  FunctionProblem unchecked_problem = NoisyExponentialDecay();
  LevenbergMarquardtOptions options;
  options.ftol = 1e-3;
  options.statistical_tolerance = 0.0;
  const LevenbergMarquardtSummary unchecked =
      Minimize(options, unchecked_problem, Vector({1.0, 1.5, 0.0}));
  ASSERT_EQ(unchecked.status, Status::kConvergedFtol) << unchecked.reason;
  FunctionProblem problem = NoisyExponentialDecay();
  options.statistical_tolerance = 1e-3;
  options.max_iterations = unchecked.iterations;

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({1.0, 1.5, 0.0}));

  EXPECT_EQ(summary.status, Status::kMaxIterations) << summary.reason;
  EXPECT_EQ(summary.iterations, unchecked.iterations);
  EXPECT_TRUE(summary.theta == unchecked.theta);  // the same trials up to there
  EXPECT_EQ(summary.final_step_standard_errors, unchecked.final_step_standard_errors);
  EXPECT_THAT(summary.reason, HasSubstr("above statistical_tolerance"));
}

// Resume (docs/design.md section 6): stopping after any iteration and continuing from the state
// the callback saw returns bitwise the uninterrupted result (Rosenbrock: rejected and accepted
// steps).
TEST(LevenbergMarquardtResumeTest, ResumingAfterAnyIterationIsBitwiseIdentical) {
  FunctionProblem problem = Rosenbrock();
  std::vector<LevenbergMarquardtState> states;
  LevenbergMarquardtOptions options;
  options.callback = [&states](const LevenbergMarquardtIteration& iteration) {
    states.push_back(iteration.state);
    return true;
  };
  const LevenbergMarquardtSummary uninterrupted = Minimize(options, problem, Vector({-1.2, 1.0}));
  ASSERT_TRUE(uninterrupted.IsConverged());
  ASSERT_GT(uninterrupted.rejected_steps, 0);
  ASSERT_EQ(states.size(), static_cast<size_t>(uninterrupted.iterations + 1));

  for (size_t stop = 0; stop + 1 < states.size(); ++stop) {
    LevenbergMarquardtOptions resumed_options;
    resumed_options.resume_state = states[stop];
    FunctionProblem fresh = Rosenbrock();
    const LevenbergMarquardtSummary resumed =
        Minimize(resumed_options, fresh, Vector({100.0, 100.0}));  // theta0 is ignored
    EXPECT_TRUE(resumed.resumed);
    EXPECT_EQ(resumed.status, uninterrupted.status) << "after iteration " << stop;
    EXPECT_EQ(resumed.iterations, uninterrupted.iterations) << stop;
    EXPECT_EQ(resumed.passes, uninterrupted.passes) << stop;
    EXPECT_EQ(resumed.final_chi2, uninterrupted.final_chi2) << stop;
    EXPECT_TRUE(resumed.theta == uninterrupted.theta) << stop;
    EXPECT_TRUE(resumed.covariance == uninterrupted.covariance) << stop;
    EXPECT_TRUE(resumed.chi2_history == uninterrupted.chi2_history) << stop;
    EXPECT_EQ(resumed.final_step_standard_errors, uninterrupted.final_step_standard_errors) << stop;
  }
}

// The iteration that ended the fit is flagged (ended_fit), and only it: its state is the one that
// a resume cannot continue bitwise (the loop above stops before it), so checkpoints skip it
// (src/pipeline/fit_checkpoints.cc).
TEST(LevenbergMarquardtResumeTest, OnlyTheIterationThatEndedTheFitIsFlagged) {
  FunctionProblem problem = Rosenbrock();
  std::vector<bool> ended;
  LevenbergMarquardtOptions options;
  options.callback = [&ended](const LevenbergMarquardtIteration& iteration) {
    ended.push_back(iteration.ended_fit);
    return true;
  };

  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({-1.2, 1.0}));

  ASSERT_TRUE(summary.IsConverged());
  ASSERT_GE(ended.size(), 2u);
  EXPECT_TRUE(ended.back());
  EXPECT_EQ(std::count(ended.begin(), ended.end(), true), 1);
}

// The statistical test needs no state of its own: d is recomputed from the saved point, so a
// resume in the iterations it adds (loose ftol) is still bitwise.
TEST(LevenbergMarquardtResumeTest, ResumingWhileTheStatisticalTestHoldsIsBitwiseIdentical) {
  FunctionProblem problem = NoisyExponentialDecay();
  std::vector<LevenbergMarquardtState> states;
  LevenbergMarquardtOptions options;
  options.ftol = 1e-3;
  options.callback = [&states](const LevenbergMarquardtIteration& iteration) {
    states.push_back(iteration.state);
    return true;
  };
  const LevenbergMarquardtSummary uninterrupted =
      Minimize(options, problem, Vector({1.0, 1.5, 0.0}));
  ASSERT_TRUE(uninterrupted.IsConverged());
  ASSERT_GE(states.size(), 3u);

  for (size_t stop = states.size() - 3; stop + 1 < states.size(); ++stop) {
    LevenbergMarquardtOptions resumed_options;
    resumed_options.ftol = 1e-3;
    resumed_options.resume_state = states[stop];
    FunctionProblem fresh = NoisyExponentialDecay();
    const LevenbergMarquardtSummary resumed = Minimize(resumed_options, fresh, Vector({0, 0, 0}));
    EXPECT_EQ(resumed.status, uninterrupted.status) << stop;
    EXPECT_EQ(resumed.iterations, uninterrupted.iterations) << stop;
    EXPECT_TRUE(resumed.theta == uninterrupted.theta) << stop;
    EXPECT_EQ(resumed.final_step_standard_errors, uninterrupted.final_step_standard_errors) << stop;
  }
}

// ---------------------------------------------------------------------------------------------
// No free parameter: every parameter held on a bound with its gradient pointing out of the box
// (docs/design.md section 4, active set). The free block of J^T J is then empty; a fit that reaches
// such a point is a result (the bounded problem's optimum), never a crash.

namespace empty_free_set {

// CoupledLinear with upper bounds (2, 0.5) below its optimum (3, 1): both parameters end on
// their upper bound, with gradient (-1.375, -0.875) pushing out.
LevenbergMarquardtOptions HoldingBounds() {
  LevenbergMarquardtOptions options;
  options.lower_bounds = Vector({0.0, -10.0});
  options.upper_bounds = Vector({2.0, 0.5});
  options.parameter_names = {"a", "b"};
  return options;
}

void ExpectEveryParameterHeld(const LevenbergMarquardtSummary& summary, bool released) {
  EXPECT_EQ(summary.status, Status::kConvergedGtol) << summary.reason;
  EXPECT_THAT(summary.reason, HasSubstr("every parameter is at a bound"));
  EXPECT_EQ(summary.parameters_at_bound, (std::vector<int>{0, 1}));
  EXPECT_TRUE(std::isfinite(summary.final_chi2));
  EXPECT_EQ(summary.final_step_standard_errors, 0.0);  // no free parameter: no step
  ASSERT_EQ(summary.covariance.rows(), 2);
  ASSERT_EQ(summary.covariance.cols(), 2);
  EXPECT_TRUE(summary.covariance.allFinite());
  for (int i = 0; i < 2; ++i) {
    // Bounds wider than a point are released for the covariance; equal ones give 0.
    if (released) {
      EXPECT_GT(summary.uncertainties[i], 0.0) << i;
    } else {
      EXPECT_EQ(summary.uncertainties[i], 0.0) << i;
    }
  }
}

}  // namespace empty_free_set

TEST(LevenbergMarquardtEmptyFreeSetTest, EveryParameterPushedOntoItsBoundByAStep) {
  for (const TrialEvaluation evaluation :
       {TrialEvaluation::kSpeculativeFullPass, TrialEvaluation::kCostOnlyPass}) {
    for (const bool hold : {false, true}) {
      FunctionProblem problem = CoupledLinear();
      LevenbergMarquardtOptions options = empty_free_set::HoldingBounds();
      options.trial_evaluation = evaluation;
      options.hold_bound_parameters_on_undetermined_directions = hold;
      const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({0.5, 0.0}));
      EXPECT_GE(summary.accepted_steps, 1);
      EXPECT_EQ(summary.theta, Vector({2.0, 0.5}));
      empty_free_set::ExpectEveryParameterHeld(summary, /*released=*/true);
    }
  }
}

TEST(LevenbergMarquardtEmptyFreeSetTest, EveryParameterOnItsBoundAtTheStart) {
  FunctionProblem problem = CoupledLinear();
  const LevenbergMarquardtSummary summary =
      Minimize(empty_free_set::HoldingBounds(), problem, Vector({2.0, 0.5}));
  EXPECT_EQ(summary.iterations, 0);
  empty_free_set::ExpectEveryParameterHeld(summary, /*released=*/true);
}

TEST(LevenbergMarquardtEmptyFreeSetTest, EqualBoundsHoldEveryParameter) {
  FunctionProblem problem = CoupledLinear();
  LevenbergMarquardtOptions options;
  options.lower_bounds = Vector({1.0, 1.0});
  options.upper_bounds = Vector({1.0, 1.0});
  const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({0.0, 5.0}));
  EXPECT_EQ(summary.theta, Vector({1.0, 1.0}));
  empty_free_set::ExpectEveryParameterHeld(summary, /*released=*/false);
}

TEST(LevenbergMarquardtEmptyFreeSetTest, TinyBoxesHoldEveryParameter) {
  // Boxes of a few ulps: the first step leaves the lower bound and is clipped to the upper one.
  for (const double width : {1e-15, 1e-12, 1e-9}) {
    FunctionProblem problem = CoupledLinear();
    LevenbergMarquardtOptions options;
    options.lower_bounds = Vector({1.0, 1.0});
    options.upper_bounds = Vector({1.0 + width, 1.0 + width});
    const LevenbergMarquardtSummary summary = Minimize(options, problem, Vector({1.0, 1.0}));
    EXPECT_TRUE(summary.IsConverged()) << width << ": " << summary.reason;
    EXPECT_TRUE(summary.covariance.allFinite()) << width;
    EXPECT_TRUE(std::isfinite(summary.final_chi2)) << width;
    EXPECT_GE(summary.final_step_standard_errors, 0.0) << width;
  }
}

// A state saved where every parameter was already held resumes (RestoreState measures the
// Gauss-Newton step on the empty free set) to the same result.
TEST(LevenbergMarquardtEmptyFreeSetTest, ResumingWithEveryParameterHeld) {
  FunctionProblem problem = CoupledLinear();
  LevenbergMarquardtOptions options = empty_free_set::HoldingBounds();
  std::vector<LevenbergMarquardtState> states;
  options.callback = [&states](const LevenbergMarquardtIteration& iteration) {
    states.push_back(iteration.state);
    return true;
  };
  const LevenbergMarquardtSummary uninterrupted = Minimize(options, problem, Vector({0.5, 0.0}));
  ASSERT_GE(states.size(), 2u);
  LevenbergMarquardtOptions resumed_options = empty_free_set::HoldingBounds();
  resumed_options.resume_state = states.back();
  FunctionProblem fresh = CoupledLinear();
  const LevenbergMarquardtSummary resumed = Minimize(resumed_options, fresh, Vector({0.0, 0.0}));
  EXPECT_EQ(resumed.theta, uninterrupted.theta);
  EXPECT_EQ(resumed.final_chi2, uninterrupted.final_chi2);
  EXPECT_EQ(resumed.parameters_at_bound, (std::vector<int>{0, 1}));
  EXPECT_TRUE(resumed.covariance.allFinite());
}

// The covariance at a solution where nothing is free (ComputeCovarianceAtSolution, shared with
// the Ceres standard fit): the released block's inverse, and no Gauss-Newton step.
TEST(LevenbergMarquardtEmptyFreeSetTest, CovarianceAtASolutionWithNothingFree) {
  FunctionProblem problem = CoupledLinear();
  const NormalEquations equations = problem.Accumulate(Vector({2.0, 0.5}));
  LevenbergMarquardtSummary summary;
  ComputeCovarianceAtSolution(equations, Vector({2.0, 0.5}), Vector({0.0, -10.0}),
                              Vector({2.0, 0.5}), 1.0, summary);
  EXPECT_EQ(summary.parameters_at_bound, (std::vector<int>{0, 1}));
  EXPECT_EQ(summary.final_step_standard_errors, 0.0);
  EXPECT_TRUE(summary.covariance.isApprox(equations.jtj.inverse(), 1e-12));
}

}  // namespace
}  // namespace homodyne
