// CMA-ES with IPOP/BIPOP restarts over the unit cube (cmaes_search.h) on standard test functions.
#include "optimize/cmaes_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "homodyne/errors.h"

namespace homodyne {
namespace {

// Rastrigin on [-5.12, 5.12]^d, x = 10.24 u - 5.12: global minimum 0 at u = 0.5, a local minimum
// near every integer point of x.
double Rastrigin(const Eigen::VectorXd& u) {
  double sum = 10.0 * static_cast<double>(u.size());
  for (Eigen::Index i = 0; i < u.size(); ++i) {
    const double x = 10.24 * u(i) - 5.12;
    sum += x * x - 10.0 * std::cos(2.0 * std::numbers::pi * x);
  }
  return sum;
}

// Rosenbrock on [-2, 2]^d, x = 4 u - 2: minimum 0 at x = 1, u = 0.75, in a curved valley.
double Rosenbrock(const Eigen::VectorXd& u) {
  const Eigen::VectorXd x = (4.0 * u.array() - 2.0).matrix();
  double sum = 0.0;
  for (Eigen::Index i = 0; i + 1 < x.size(); ++i) {
    sum += 100.0 * std::pow(x(i + 1) - x(i) * x(i), 2) + std::pow(1.0 - x(i), 2);
  }
  return sum;
}

// Sphere centred at u = 0.3: quick to solve, for the tests of the machinery.
double Sphere(const Eigen::VectorXd& u) { return (u.array() - 0.3).square().sum(); }

Eigen::VectorXd FarStart(int dimensions) {
  Eigen::VectorXd start(dimensions);
  for (int i = 0; i < dimensions; ++i) start(i) = (i % 2 == 0) ? 0.9 : 0.15;
  return start;
}

// Seeds (of 10) for which the search finds Rastrigin's global minimum to 1e-3 in value.
int RastriginSuccesses(int dimensions, const CmaesOptions& base) {
  int successes = 0;
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    CmaesOptions options = base;
    options.seed = seed;
    const CmaesResult result =
        MinimizeWithCmaes(Rastrigin, dimensions, FarStart(dimensions), options);
    successes += result.best_value < 1e-3;
  }
  return successes;
}

TEST(CmaesSearchTest, BipopFindsTheGlobalMinimumOfRastrigin2D) {
  CmaesOptions options;  // BIPOP, 9 large restarts
  options.max_evaluations = 20000;
  // A single run from this start ends in a local minimum for most seeds (16 of 20).
  EXPECT_GE(RastriginSuccesses(2, options), 9);
}

TEST(CmaesSearchTest, IpopAndBipopFindTheGlobalMinimumOfRastrigin5D) {
  for (CmaesRestartStrategy strategy :
       {CmaesRestartStrategy::kIpop, CmaesRestartStrategy::kBipop}) {
    CmaesOptions options;
    options.restart_strategy = strategy;
    options.max_evaluations = 60000;
    // 20 of 20 seeds with either (17 of 20 for BIPOP with half the budget).
    EXPECT_GE(RastriginSuccesses(5, options), 8) << ToString(strategy);
  }
}

TEST(CmaesSearchTest, RestartsBeatASingleRunOnRastrigin) {
  CmaesOptions single;
  single.restart_strategy = CmaesRestartStrategy::kNone;
  CmaesOptions restarts;
  restarts.max_evaluations = 60000;
  EXPECT_LT(RastriginSuccesses(5, single), RastriginSuccesses(5, restarts));
}

TEST(CmaesSearchTest, SolvesRosenbrock4D) {
  CmaesOptions options;
  options.restart_strategy = CmaesRestartStrategy::kNone;
  const CmaesResult result =
      MinimizeWithCmaes(Rosenbrock, 4, Eigen::VectorXd::Constant(4, 0.2), options);
  EXPECT_LT(result.best_value, 1e-6) << result.BriefReport();
  EXPECT_LT((result.best_unit.array() - 0.75).abs().maxCoeff(), 1e-3);
  ASSERT_EQ(result.runs.size(), 1u);
  EXPECT_TRUE(result.runs[0].converged);
}

TEST(CmaesSearchTest, SameSeedGivesBitwiseTheSameResult) {
  CmaesOptions options;
  options.max_evaluations = 5000;
  options.seed = 7;
  const CmaesResult a = MinimizeWithCmaes(Rastrigin, 3, FarStart(3), options);
  const CmaesResult b = MinimizeWithCmaes(Rastrigin, 3, FarStart(3), options);
  EXPECT_EQ(a.best_unit, b.best_unit);
  EXPECT_EQ(a.best_value, b.best_value);
  EXPECT_EQ(a.evaluations, b.evaluations);
  EXPECT_EQ(a.generations, b.generations);
  ASSERT_EQ(a.runs.size(), b.runs.size());
  for (size_t k = 0; k < a.runs.size(); ++k) {
    EXPECT_EQ(a.runs[k].best_unit, b.runs[k].best_unit) << k;
    EXPECT_EQ(a.runs[k].popsize, b.runs[k].popsize) << k;
    EXPECT_EQ(a.runs[k].sigma, b.runs[k].sigma) << k;
  }
  options.seed = 8;
  const CmaesResult c = MinimizeWithCmaes(Rastrigin, 3, FarStart(3), options);
  EXPECT_NE(a.best_unit, c.best_unit);
}

TEST(CmaesSearchTest, OnGenerationReturningFalseStops) {
  CmaesOptions options;
  options.popsize = 10;
  std::vector<CmaesProgress> seen;
  int64_t calls = 0;
  const CmaesResult result = MinimizeWithCmaes(
      [&calls](const Eigen::VectorXd& u) {
        ++calls;
        return Sphere(u);
      },
      4, Eigen::VectorXd::Constant(4, 0.8), options,
      [&seen](const CmaesProgress& progress) {
        seen.push_back(progress);
        return seen.size() < 3;
      });
  EXPECT_TRUE(result.stopped);
  EXPECT_FALSE(result.budget_exhausted);
  EXPECT_EQ(result.generations, 3);
  EXPECT_EQ(result.restarts, 0);
  EXPECT_EQ(result.evaluations, 1 + 3 * 10);  // the start, then 3 generations of 10
  EXPECT_EQ(calls, result.evaluations);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[2].run, 0);
  EXPECT_EQ(seen[2].generation, 3);
  EXPECT_EQ(seen[2].evaluations, 31);
  EXPECT_LE(seen[2].best_value, seen[0].best_value);
  EXPECT_EQ(seen[2].best_value, result.best_value);
  EXPECT_NE(result.BriefReport().find("stopped"), std::string::npos) << result.BriefReport();
}

TEST(CmaesSearchTest, MaxEvaluationsIsNeverExceeded) {
  for (int64_t budget : {1, 5, 100, 777, 3000}) {
    CmaesOptions options;
    options.max_evaluations = budget;
    int64_t calls = 0;
    const CmaesResult result = MinimizeWithCmaes(
        [&calls](const Eigen::VectorXd& u) {
          ++calls;
          return Rastrigin(u);
        },
        3, FarStart(3), options);
    EXPECT_EQ(calls, result.evaluations);
    EXPECT_LE(calls, budget);
    EXPECT_TRUE(result.budget_exhausted) << budget;
    EXPECT_GE(calls, 1);
    // The budget ends the search only when the next generation does not fit.
    if (budget > 100) {
      EXPECT_GT(calls, budget - 64 * 8) << budget;
    }
  }
}

TEST(CmaesSearchTest, RestartPopulationsFollowIpopAndBipop) {
  CmaesOptions options;
  options.max_restarts = 6;
  options.max_generations = 20;  // short runs: this tests the schedule, not the answers
  options.restart_strategy = CmaesRestartStrategy::kIpop;
  const CmaesResult ipop = MinimizeWithCmaes(Rastrigin, 5, FarStart(5), options);
  ASSERT_EQ(ipop.runs.size(), 7u);
  EXPECT_EQ(ipop.restarts, 6);
  for (int k = 0; k < 7; ++k) {
    EXPECT_EQ(ipop.runs[k].popsize, 8 << k) << k;  // lambda_0 = 4 + floor(3 ln 5) = 8
    EXPECT_EQ(ipop.runs[k].sigma, 0.5);
  }

  options.restart_strategy = CmaesRestartStrategy::kBipop;
  const CmaesResult bipop = MinimizeWithCmaes(Rastrigin, 5, FarStart(5), options);
  EXPECT_EQ(bipop.restarts, static_cast<int>(bipop.runs.size()) - 1);
  EXPECT_EQ(bipop.runs[0].popsize, 8);
  ASSERT_GE(bipop.runs.size(), 2u);
  EXPECT_TRUE(bipop.runs[1].large_population);  // nothing spent on restarts yet: large
  EXPECT_EQ(bipop.runs[1].popsize, 16);
  EXPECT_TRUE(bipop.runs.back().large_population);  // the search ends on its last large restart
  int small = 0;
  int large = 0;
  int64_t small_evaluations = 0;
  int64_t large_evaluations = 0;
  for (size_t k = 1; k < bipop.runs.size(); ++k) {
    const CmaesRunResult& run = bipop.runs[k];
    if (run.large_population) {
      // Chosen only when the small restarts have used at least as many evaluations.
      EXPECT_GE(small_evaluations, large_evaluations) << k;
      EXPECT_EQ(run.popsize, 8 << ++large) << k;
      EXPECT_EQ(run.sigma, 0.5) << k;
      large_evaluations += int64_t{run.popsize} * run.generations;
    } else {
      ++small;
      EXPECT_LT(small_evaluations, large_evaluations) << k;
      // lambda_0 (lambda_l / (2 lambda_0))^(U^2), lambda_l = lambda_0 2^(large + 1)
      EXPECT_GE(run.popsize, 8) << k;
      EXPECT_LT(run.popsize, 8 << large) << k;
      EXPECT_LE(run.sigma, 0.5) << k;
      EXPECT_GT(run.sigma, 0.005) << k;
      small_evaluations += int64_t{run.popsize} * run.generations;
    }
  }
  EXPECT_EQ(large, 6);  // max_restarts counts the large restarts
  EXPECT_GE(small, 3);

  options.restart_strategy = CmaesRestartStrategy::kNone;
  EXPECT_EQ(MinimizeWithCmaes(Rastrigin, 5, FarStart(5), options).runs.size(), 1u);
}

TEST(CmaesSearchTest, RunsEndedByAToleranceBeforeTheirFirstGenerationStillEnd) {
  // tol_x far above any step: every run ends before its first generation, spending nothing.
  for (CmaesRestartStrategy strategy :
       {CmaesRestartStrategy::kIpop, CmaesRestartStrategy::kBipop}) {
    CmaesOptions options;
    options.tol_x = 100.0;
    options.restart_strategy = strategy;
    const CmaesResult result =
        MinimizeWithCmaes(Sphere, 3, Eigen::VectorXd::Constant(3, 0.5), options);
    EXPECT_EQ(result.evaluations, 1) << ToString(strategy);  // the start only
    EXPECT_EQ(result.generations, 0);
    EXPECT_EQ(result.restarts, 9);
    EXPECT_TRUE(result.runs.front().converged);
  }
  // tol_x between the steps of the large runs (sigma 0.5) and those of most small ones: small
  // runs that end at once are charged lambda in the BIPOP balance (else only the rare small run
  // with a large step would tip it) and the search ends on a large restart.
  CmaesOptions options;
  options.tol_x = 0.2;
  const CmaesResult result =
      MinimizeWithCmaes(Sphere, 3, Eigen::VectorXd::Constant(3, 0.9), options);
  int idle_small_runs = 0;
  for (const CmaesRunResult& run : result.runs) {
    idle_small_runs += !run.large_population && run.generations == 0;
  }
  EXPECT_GT(idle_small_runs, 0);
  EXPECT_TRUE(result.runs.back().large_population);
}

TEST(CmaesSearchTest, NonFiniteValuesAreWorstAndCandidatesStayInTheCube) {
  bool outside = false;
  auto f = [&outside](const Eigen::VectorXd& u) {
    outside |= (u.array() < 0.0).any() || (u.array() > 1.0).any();
    if (u(0) > 0.6) return std::numeric_limits<double>::quiet_NaN();
    if (u(1) > 0.6) return std::numeric_limits<double>::infinity();
    return Sphere(u);
  };
  CmaesOptions options;
  options.sigma = 1.0;  // most early candidates land outside the cube or in the NaN/inf region
  options.max_evaluations = 5000;
  const CmaesResult result = MinimizeWithCmaes(f, 3, Eigen::VectorXd::Constant(3, 0.9), options);
  EXPECT_FALSE(outside);
  EXPECT_LT(result.best_value, 1e-8);
  EXPECT_LT((result.best_unit.array() - 0.3).abs().maxCoeff(), 1e-3);
}

TEST(CmaesSearchTest, ObjectiveExceptionsPropagate) {
  int calls = 0;
  auto f = [&calls](const Eigen::VectorXd& u) {
    if (++calls == 20) throw std::runtime_error("objective failed");
    return Sphere(u);
  };
  EXPECT_THROW(MinimizeWithCmaes(f, 2, Eigen::VectorXd::Constant(2, 0.5), CmaesOptions()),
               std::runtime_error);
}

TEST(CmaesSearchTest, RejectsBadArguments) {
  CmaesOptions options;
  options.sigma = -1.0;
  EXPECT_THROW(MinimizeWithCmaes(Sphere, 2, Eigen::VectorXd::Zero(2), options), ConfigError);
  EXPECT_THROW(MinimizeWithCmaes(Sphere, 2, Eigen::VectorXd::Zero(3), CmaesOptions()),
               std::invalid_argument);
  EXPECT_THROW(MinimizeWithCmaes(Sphere, 0, Eigen::VectorXd::Zero(0), CmaesOptions()),
               std::invalid_argument);
}

std::string Invalid(void (*change)(CmaesOptions&)) {
  CmaesOptions options;
  change(options);
  std::string error;
  return options.IsValid(&error) ? "valid" : error;
}

TEST(CmaesOptionsTest, IsValidNamesTheKeyTheValueAndTheRule) {
  std::string error;
  EXPECT_TRUE(CmaesOptions().IsValid(&error));
  EXPECT_TRUE(CmaesOptions().IsValid(nullptr));
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.sigma = -1.0; }),
            "optimization.nlsq.cmaes.sigma = -1: must be > 0");
  EXPECT_EQ(
      Invalid([](CmaesOptions& o) { o.sigma = 2.0; }),
      "optimization.nlsq.cmaes.sigma = 2: must be <= 1 (unit coordinates: the box has width 1)");
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.popsize = 3; }),
            "optimization.nlsq.cmaes.popsize = 3: must be 0 (automatic) or in [5, 1048576]");
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.max_generations = -1; }),
            "optimization.nlsq.cmaes.max_generations = -1: must be 0 (automatic) or >= 1");
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.max_evaluations = -5; }),
            "optimization.nlsq.cmaes.max_evaluations = -5: must be 0 (unlimited) or >= 1");
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.tol_fun = std::nan(""); }),
            "optimization.nlsq.cmaes.tol_fun = nan: must be finite and >= 0");
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.tol_x = -1e-3; }),
            "optimization.nlsq.cmaes.tol_x = -0.001: must be finite and >= 0");
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.max_restarts = -1; }),
            "optimization.nlsq.cmaes.max_restarts = -1: must be >= 0");
  EXPECT_EQ(Invalid([](CmaesOptions& o) { o.popsize = 5; }), "valid");
}

TEST(CmaesRestartStrategyTest, NamesRoundTripCaseInsensitively) {
  for (auto strategy :
       {CmaesRestartStrategy::kNone, CmaesRestartStrategy::kIpop, CmaesRestartStrategy::kBipop}) {
    EXPECT_EQ(ParseCmaesRestartStrategy(ToString(strategy)), strategy);
  }
  EXPECT_EQ(ParseCmaesRestartStrategy("BIPOP"), CmaesRestartStrategy::kBipop);
  EXPECT_EQ(ParseCmaesRestartStrategy("restart"), std::nullopt);
}

TEST(CmaesResultTest, BriefReportSaysNotRunUntilRun) {
  EXPECT_EQ(CmaesResult().BriefReport(), "CMA-ES: not run");
}

}  // namespace
}  // namespace homodyne
