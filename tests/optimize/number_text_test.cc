// Tests of the number text of messages (src/optimize/number_text.h).
#include <gtest/gtest.h>

#include <limits>

#include "optimize/number_text.h"

namespace homodyne {
namespace {

TEST(FormatNumberTest, SixSignificantDigitsWithoutTrailingZeros) {
  EXPECT_EQ(FormatNumber(2.0), "2");
  EXPECT_EQ(FormatNumber(0.5), "0.5");
  EXPECT_EQ(FormatNumber(-0.001), "-0.001");
  EXPECT_EQ(FormatNumber(123456.7), "123457");
  EXPECT_EQ(FormatNumber(1.0 / 3.0), "0.333333");
  EXPECT_EQ(FormatNumber(0.0), "0");
}

TEST(FormatNumberTest, ScientificBelowExponentMinusFourAndAboveFive) {
  EXPECT_EQ(FormatNumber(0.0001), "0.0001");
  EXPECT_EQ(FormatNumber(0.00001), "1e-05");
  EXPECT_EQ(FormatNumber(1e-8), "1e-08");
  EXPECT_EQ(FormatNumber(1234567.0), "1.23457e+06");
  EXPECT_EQ(FormatNumber(1e16), "1e+16");
}

TEST(FormatNumberTest, NonFiniteValues) {
  EXPECT_EQ(FormatNumber(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(FormatNumber(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(FormatNumber(-std::numeric_limits<double>::infinity()), "-inf");
}

}  // namespace
}  // namespace homodyne
