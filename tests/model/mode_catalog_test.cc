// The mode catalog's per-parameter search hints and start rule (src/model/mode_catalog.h,
// ParameterSearchHints; docs/design.md sections 2c, 4b): the rules the global phase and the
// override checks apply to a parameter are its catalog entry's, so nothing outside src/model names
// a mode's parameters.
#include "model/mode_catalog.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace homodyne {
namespace {

const ParameterDefinition& Parameter(std::string_view name) {
  const ParameterDefinition* definition = FindParameterDefinition(name);
  EXPECT_NE(definition, nullptr) << name;
  static const ParameterDefinition kNone{};
  return definition != nullptr ? *definition : kNone;
}

TEST(ModeCatalogTest, HomodyneSearchRulesAreHintsOfTheirParameters) {
  // The offsets: symmetric log as wide as their rate's lower bound.
  EXPECT_EQ(Parameter("D_offset").search.width_from, "D0");
  EXPECT_EQ(Parameter("gamma_dot_t_offset").search.width_from, "gamma_dot_t0");
  // gamma_dot_t0 by half decades in the staged grid, phi0 at 5 values over its bounds.
  EXPECT_EQ(Parameter("gamma_dot_t0").search.steps_per_decade, 2);
  EXPECT_EQ(Parameter("phi0").search.spread_values, 5);
  // D0's start must be > 0; no other parameter's.
  for (const ModeDefinition& mode : AllModeDefinitions()) {
    for (const ParameterDefinition& parameter : mode.physical) {
      EXPECT_EQ(parameter.positive_start, parameter.name == "D0") << parameter.name;
    }
  }
  // The rest of the homodyne parameters carry no hint: the bounds alone decide their axes.
  for (std::string_view name : {"D0", "alpha", "beta"}) {
    const ParameterSearchHints& hints = Parameter(name).search;
    EXPECT_EQ(hints.width, 0.0) << name;
    EXPECT_TRUE(hints.width_from.empty()) << name;
    EXPECT_EQ(hints.steps_per_decade, 1) << name;
    EXPECT_EQ(hints.spread_values, 0) << name;
    EXPECT_FALSE(hints.staged_decades) << name;
    EXPECT_TRUE(hints.staged_values.empty()) << name;
  }
}

TEST(ModeCatalogTest, TwoComponentSearchHintsAreKept) {
  EXPECT_EQ(Parameter("D0_ref").search.width, 100.0);
  EXPECT_TRUE(Parameter("D0_ref").search.staged_decades);
  EXPECT_EQ(Parameter("D_offset_sample").search.width, 10.0);
  EXPECT_FALSE(Parameter("D_offset_sample").search.staged_decades);
  EXPECT_EQ(Parameter("v0").search.width, 1.0);
  EXPECT_EQ(Parameter("v_offset").search.width, 0.1);
  EXPECT_EQ(Parameter("v_beta").search.staged_values, (std::vector<double>{0.5, 1.0}));
  EXPECT_EQ(Parameter("f0").search.staged_values, (std::vector<double>{0.5}));
}

// A hint that names a companion names a parameter of the same mode, and the steps and spread
// counts are at least 1 and not negative.
TEST(ModeCatalogTest, EveryHintIsWellFormed) {
  for (const ModeDefinition& mode : AllModeDefinitions()) {
    for (const ParameterDefinition& parameter : mode.physical) {
      const ParameterSearchHints& hints = parameter.search;
      if (!hints.width_from.empty()) {
        EXPECT_TRUE(std::any_of(
            mode.physical.begin(), mode.physical.end(),
            [&hints](const ParameterDefinition& other) { return other.name == hints.width_from; }))
            << mode.name << " " << parameter.name;
        EXPECT_EQ(hints.width, 0.0) << parameter.name;  // one width rule
      }
      EXPECT_GE(hints.steps_per_decade, 1) << parameter.name;
      EXPECT_GE(hints.spread_values, 0) << parameter.name;
      EXPECT_GE(hints.width, 0.0) << parameter.name;
    }
  }
}

}  // namespace
}  // namespace homodyne
