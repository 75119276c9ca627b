// The names of the config's enums (include/homodyne/config.h): ToString gives the spelling the
// config, the result files and the checkpoint identity use, and Parse... reads it back in any
// case (and the aliases the loader accepts), std::nullopt for anything else.
#include <gtest/gtest.h>

#include <optional>

#include "homodyne/config.h"

namespace homodyne {
namespace {

TEST(ConfigNamesTest, LmSolver) {
  EXPECT_EQ(ToString(LmSolver::kLmCore), "lm");
  EXPECT_EQ(ToString(LmSolver::kCeres), "ceres");
  for (const LmSolver solver : {LmSolver::kLmCore, LmSolver::kCeres}) {
    EXPECT_EQ(ParseLmSolver(ToString(solver)), solver);
  }
  EXPECT_EQ(ParseLmSolver("Ceres"), LmSolver::kCeres);
  EXPECT_EQ(ParseLmSolver("LM"), LmSolver::kLmCore);
  EXPECT_EQ(ParseLmSolver("scipy"), std::nullopt);
  EXPECT_EQ(ParseLmSolver(""), std::nullopt);
}

}  // namespace
}  // namespace homodyne
