// Starting points in the unit cube and the unit-cube <-> parameter-box map (start_sampling.h).
#include "optimize/start_sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace homodyne {
namespace {

constexpr SamplingStrategy kAllStrategies[] = {SamplingStrategy::kLatinHypercube,
                                               SamplingStrategy::kSobol, SamplingStrategy::kRandom};

bool Identical(const std::vector<Eigen::VectorXd>& a, const std::vector<Eigen::VectorXd>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || a[i] != b[i]) return false;
  }
  return true;
}

TEST(SamplingStrategyTest, NamesRoundTripCaseInsensitively) {
  for (SamplingStrategy strategy : kAllStrategies) {
    EXPECT_EQ(ParseSamplingStrategy(ToString(strategy)), strategy);
  }
  EXPECT_EQ(ToString(SamplingStrategy::kLatinHypercube), "latin_hypercube");
  EXPECT_EQ(ParseSamplingStrategy("Latin_Hypercube"), SamplingStrategy::kLatinHypercube);
  EXPECT_EQ(ParseSamplingStrategy("SOBOL"), SamplingStrategy::kSobol);
  EXPECT_EQ(ParseSamplingStrategy("lhs"), std::nullopt);
  EXPECT_EQ(ParseSamplingStrategy(""), std::nullopt);
  EXPECT_EQ(ParseSamplingStrategy("sobol "), std::nullopt);
}

TEST(SampleUnitCubeTest, EveryStrategyGivesNPointsInTheCube) {
  for (SamplingStrategy strategy : kAllStrategies) {
    const auto points = SampleUnitCube(strategy, 37, 4, 7);
    ASSERT_EQ(points.size(), 37u) << ToString(strategy);
    for (const auto& point : points) {
      ASSERT_EQ(point.size(), 4);
      EXPECT_TRUE((point.array() >= 0.0).all() && (point.array() <= 1.0).all())
          << ToString(strategy) << ": " << point.transpose();
    }
  }
}

TEST(SampleUnitCubeTest, LatinHypercubeHasOnePointPerStratumPerDimension) {
  for (int n : {1, 2, 10, 97}) {
    const auto points = SampleUnitCube(SamplingStrategy::kLatinHypercube, n, 5, 123);
    for (int j = 0; j < 5; ++j) {
      std::vector<int> count(n, 0);
      for (const auto& point : points) {
        const int stratum = std::min(n - 1, static_cast<int>(std::floor(point(j) * n)));
        ++count[stratum];
      }
      EXPECT_TRUE(std::all_of(count.begin(), count.end(), [](int c) { return c == 1; }))
          << "n = " << n << ", dimension " << j;
    }
  }
}

TEST(SampleUnitCubeTest, LatinHypercubeDimensionsAreNotTheSamePermutation) {
  const auto points = SampleUnitCube(SamplingStrategy::kLatinHypercube, 50, 2, 5);
  int same_stratum = 0;
  for (const auto& point : points) {
    same_stratum +=
        static_cast<int>(std::floor(point(0) * 50)) == static_cast<int>(std::floor(point(1) * 50));
  }
  EXPECT_LT(same_stratum, 10);  // independent permutations: about 1 expected
}

TEST(SampleUnitCubeTest, SobolFirstPointsAreJoeKuos) {
  // Joe and Kuo's sequence (as scipy.stats.qmc.Sobol(d=3, scramble=False)) after its zero point.
  const double expected[][3] = {{0.5, 0.5, 0.5},       {0.75, 0.25, 0.25},
                                {0.25, 0.75, 0.75},    {0.375, 0.375, 0.625},
                                {0.875, 0.875, 0.125}, {0.625, 0.125, 0.875},
                                {0.125, 0.625, 0.375}, {0.1875, 0.3125, 0.9375}};
  const auto points = SampleUnitCube(SamplingStrategy::kSobol, 8, 3, 0);
  ASSERT_EQ(points.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(points[i](j), expected[i][j]) << i << ", " << j;
  }
}

TEST(SampleUnitCubeTest, SobolIsAPrefixAndIgnoresTheSeed) {
  const auto few = SampleUnitCube(SamplingStrategy::kSobol, 5, 6, 1);
  const auto many = SampleUnitCube(SamplingStrategy::kSobol, 64, 6, 2);
  EXPECT_TRUE(Identical(few, std::vector<Eigen::VectorXd>(many.begin(), many.begin() + 5)));
}

TEST(SampleUnitCubeTest, SameSeedSamePointsOtherSeedOtherPoints) {
  for (SamplingStrategy strategy : {SamplingStrategy::kLatinHypercube, SamplingStrategy::kRandom}) {
    const auto a = SampleUnitCube(strategy, 20, 3, 42);
    const auto b = SampleUnitCube(strategy, 20, 3, 42);
    const auto c = SampleUnitCube(strategy, 20, 3, 43);
    EXPECT_TRUE(Identical(a, b)) << ToString(strategy);
    EXPECT_FALSE(Identical(a, c)) << ToString(strategy);
  }
}

TEST(SampleUnitCubeTest, RandomPointsArePinnedToTheStandardGenerator) {
  // The C++ standard fixes the 10000th output of a default-seeded (5489) std::mt19937_64:
  // 9981545732273789042. Its top 53 bits, scaled by 2^-53, are the 10000th coordinate.
  const auto points = SampleUnitCube(SamplingStrategy::kRandom, 10000, 1, 5489);
  EXPECT_EQ(points.back()(0), static_cast<double>(9981545732273789042ull >> 11) * 0x1.0p-53);
}

TEST(SampleUnitCubeTest, RejectsBadSizes) {
  EXPECT_TRUE(SampleUnitCube(SamplingStrategy::kLatinHypercube, 0, 3, 1).empty());
  EXPECT_THROW(SampleUnitCube(SamplingStrategy::kRandom, -1, 3, 1), std::invalid_argument);
  EXPECT_THROW(SampleUnitCube(SamplingStrategy::kLatinHypercube, 4, 0, 1), std::invalid_argument);
  EXPECT_THROW(SampleUnitCube(SamplingStrategy::kSobol, 4, 4000, 1), std::invalid_argument);
}

SearchSpace LaminarFlowLikeSpace() {
  // D0 and gamma_dot_t0 span decades (log); alpha, D_offset linear; phi0 fixed.
  Eigen::VectorXd lower(5), upper(5);
  lower << 1e2, -2.0, -1e3, 1e-6, 10.0;
  upper << 1e5, 2.0, 1e3, 0.5, 10.0;
  return SearchSpace::FromBounds(lower, upper);
}

TEST(SearchSpaceTest, LogScaleOnlyForPositiveBoundsSpanningTwoDecades) {
  Eigen::VectorXd lower(5), upper(5);
  lower << 1e2, 1.0, 1.0, 0.0, -1e5;
  upper << 1e5, 100.0, 99.0, 1e5, -1.0;
  const SearchSpace space = SearchSpace::FromBounds(lower, upper);
  EXPECT_EQ(space.log_scale, (std::vector<bool>{true, true, false, false, false}));
  EXPECT_EQ(space.dimensions(), 5);
}

TEST(SearchSpaceTest, LogMidpointIsTheGeometricMean) {
  const SearchSpace space = LaminarFlowLikeSpace();
  const Eigen::VectorXd x = space.FromUnit(Eigen::VectorXd::Constant(5, 0.5));
  EXPECT_NEAR(x(0), std::sqrt(1e2 * 1e5), 1e-9 * 3162.3);  // 3162.28
  EXPECT_NEAR(x(1), 0.0, 1e-15);
  EXPECT_NEAR(x(2), 0.0, 1e-12);
  EXPECT_NEAR(x(3), std::sqrt(1e-6 * 0.5), 1e-15);
  EXPECT_EQ(x(4), 10.0);
}

TEST(SearchSpaceTest, EndpointsMapExactlyAndUnitIsClipped) {
  const SearchSpace space = LaminarFlowLikeSpace();
  EXPECT_EQ(space.FromUnit(Eigen::VectorXd::Zero(5)), space.lower);
  EXPECT_EQ(space.FromUnit(Eigen::VectorXd::Ones(5)), space.upper);
  EXPECT_EQ(space.FromUnit(Eigen::VectorXd::Constant(5, -3.0)), space.lower);
  EXPECT_EQ(space.FromUnit(Eigen::VectorXd::Constant(5, 7.0)), space.upper);
  EXPECT_EQ(space.FromUnit(Eigen::VectorXd::Constant(5, std::nan(""))), space.lower);
}

TEST(SearchSpaceTest, RoundTripsThroughUnitCoordinates) {
  const SearchSpace space = LaminarFlowLikeSpace();
  for (const Eigen::VectorXd& unit : SampleUnitCube(SamplingStrategy::kRandom, 50, 5, 3)) {
    const Eigen::VectorXd x = space.FromUnit(unit);
    const Eigen::VectorXd back = space.ToUnit(x);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(back(i), unit(i), 1e-12) << i;
    EXPECT_EQ(back(4), 0.5);  // fixed: any unit value maps to 10
    const Eigen::VectorXd again = space.FromUnit(back);
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(again(i), x(i), 1e-12 * std::abs(x(i))) << i;
  }
}

TEST(SearchSpaceTest, ToUnitClipsToTheBox) {
  const SearchSpace space = LaminarFlowLikeSpace();
  Eigen::VectorXd x(5);
  x << 1e7, -5.0, 0.0, 0.0, 3.0;  // above, below, inside, below a log range, off a fixed value
  const Eigen::VectorXd unit = space.ToUnit(x);
  EXPECT_EQ(unit(0), 1.0);
  EXPECT_EQ(unit(1), 0.0);
  EXPECT_DOUBLE_EQ(unit(2), 0.5);
  EXPECT_EQ(unit(3), 0.0);
  EXPECT_EQ(unit(4), 0.5);
}

TEST(SearchSpaceTest, RejectsNonFiniteOrInvertedBoundsNamingTheIndex) {
  auto message = [](double lower2, double upper2) {
    Eigen::VectorXd lower(3), upper(3);
    lower << 0.0, 1.0, lower2;
    upper << 1.0, 2.0, upper2;
    try {
      SearchSpace::FromBounds(lower, upper);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(3.0, 2.0).find("parameter #2"), std::string::npos) << message(3.0, 2.0);
  EXPECT_NE(message(-std::numeric_limits<double>::infinity(), 2.0).find("#2"), std::string::npos);
  EXPECT_NE(message(0.0, std::nan("")).find("#2"), std::string::npos);
  EXPECT_EQ(message(2.0, 2.0), "no error");  // fixed parameter
  EXPECT_THROW(SearchSpace::FromBounds(Eigen::VectorXd::Zero(2), Eigen::VectorXd::Ones(3)),
               std::invalid_argument);
  const SearchSpace space = LaminarFlowLikeSpace();
  EXPECT_THROW(space.FromUnit(Eigen::VectorXd::Zero(4)), std::invalid_argument);
  EXPECT_THROW(space.ToUnit(Eigen::VectorXd::Zero(6)), std::invalid_argument);
}

}  // namespace
}  // namespace homodyne
