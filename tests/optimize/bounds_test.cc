// Tests of the parameter bounds and the clipped start (src/optimize/bounds.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "optimize/bounds.h"

namespace homodyne {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr double kInf = std::numeric_limits<double>::infinity();

Eigen::VectorXd Vector(std::initializer_list<double> values) {
  Eigen::VectorXd vector(static_cast<Eigen::Index>(values.size()));
  Eigen::Index i = 0;
  for (double value : values) vector[i++] = value;
  return vector;
}

TEST(BoundsOrUnboundedTest, EmptySidesAreInfinite) {
  const ParameterBounds bounds = BoundsOrUnbounded(Eigen::VectorXd(), Eigen::VectorXd(), 3);

  EXPECT_EQ(bounds.lower, Eigen::VectorXd::Constant(3, -kInf));
  EXPECT_EQ(bounds.upper, Eigen::VectorXd::Constant(3, kInf));
}

TEST(BoundsOrUnboundedTest, GivenSidesAreKeptEachOnItsOwn) {
  const Eigen::VectorXd lower = Vector({-1.0, 0.0});
  const Eigen::VectorXd upper = Vector({1.0, 2.0});

  const ParameterBounds only_lower = BoundsOrUnbounded(lower, Eigen::VectorXd(), 2);
  const ParameterBounds both = BoundsOrUnbounded(lower, upper, 2);

  EXPECT_EQ(only_lower.lower, lower);
  EXPECT_EQ(only_lower.upper, Eigen::VectorXd::Constant(2, kInf));
  EXPECT_EQ(both.lower, lower);
  EXPECT_EQ(both.upper, upper);
}

TEST(ParameterNameTest, NameOrNumber) {
  EXPECT_EQ(ParameterName({"D0", "alpha"}, 1), "alpha");
  EXPECT_EQ(ParameterName({}, 12), "#12");
}

TEST(ClipStartIntoBoundsTest, ClipsEachOutsideValueWithOneWarning) {
  Eigen::VectorXd theta = Vector({-2.5, 0.5, 1e16});
  const Eigen::VectorXd lower = Vector({-1.0, 0.0, 0.0});
  const Eigen::VectorXd upper = Vector({1.0, 1.0, 1e3});
  std::vector<std::string> warnings = {"earlier"};

  const std::optional<std::string> failure =
      ClipStartIntoBounds(theta, lower, upper, {"D0", "alpha", "D_offset"}, warnings);

  EXPECT_EQ(failure, std::nullopt);
  EXPECT_EQ(theta, Vector({-1.0, 0.5, 1e3}));
  EXPECT_THAT(warnings,
              ElementsAre("earlier",
                          "initial value of D0 = -2.5 is below its lower bound -1: clipped to -1",
                          "initial value of D_offset = 1e+16 is above its upper bound 1000: "
                          "clipped to 1000"));
}

TEST(ClipStartIntoBoundsTest, InsideTheBoundsNothingChanges) {
  Eigen::VectorXd theta = Vector({-1.0, 1.0, 0.25});
  std::vector<std::string> warnings;

  const std::optional<std::string> failure = ClipStartIntoBounds(
      theta, Vector({-1.0, -kInf, 0.0}), Vector({1.0, 1.0, kInf}), {}, warnings);

  EXPECT_EQ(failure, std::nullopt);
  EXPECT_EQ(theta, Vector({-1.0, 1.0, 0.25}));
  EXPECT_THAT(warnings, IsEmpty());
}

TEST(ClipStartIntoBoundsTest, StopsAtTheFirstNonFiniteValue) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Eigen::VectorXd theta = Vector({5.0, kInf, 7.0});
  std::vector<std::string> warnings;

  const std::optional<std::string> failure =
      ClipStartIntoBounds(theta, Vector({0.0, 0.0, 0.0}), Vector({1.0, 1.0, 1.0}), {}, warnings);
  Eigen::VectorXd theta_nan = Vector({nan});
  std::vector<std::string> no_warnings;
  const std::optional<std::string> nan_failure =
      ClipStartIntoBounds(theta_nan, Vector({0.0}), Vector({1.0}), {"beta"}, no_warnings);

  EXPECT_EQ(failure, "the starting value of #1 is inf");
  EXPECT_EQ(theta[0], 1.0);  // clipped before the stop
  EXPECT_EQ(theta[2], 7.0);  // untouched after it
  EXPECT_THAT(warnings,
              ElementsAre("initial value of #0 = 5 is above its upper bound 1: clipped to 1"));
  EXPECT_EQ(nan_failure, "the starting value of beta is nan");
  EXPECT_THAT(no_warnings, IsEmpty());
}

}  // namespace
}  // namespace homodyne
