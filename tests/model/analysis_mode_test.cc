// Mode names, aliases and parameter names (docs/model.md, Modes;
// docs/configuration.md, Parameters).
#include <gtest/gtest.h>

#include "homodyne/errors.h"
#include "homodyne/model.h"

namespace homodyne {
namespace {

TEST(AnalysisModeTest, ParsesCanonicalNamesAndAliasesCaseInsensitively) {
  EXPECT_EQ(ParseAnalysisMode("static"), AnalysisMode::kStatic);
  EXPECT_EQ(ParseAnalysisMode("static_isotropic"), AnalysisMode::kStatic);
  EXPECT_EQ(ParseAnalysisMode("static_anisotropic"), AnalysisMode::kStatic);
  EXPECT_EQ(ParseAnalysisMode("Static_Isotropic"), AnalysisMode::kStatic);
  EXPECT_EQ(ParseAnalysisMode("laminar_flow"), AnalysisMode::kLaminarFlow);
  EXPECT_EQ(ParseAnalysisMode("LAMINAR_FLOW"), AnalysisMode::kLaminarFlow);
}

TEST(AnalysisModeTest, RejectsUnknownNamesWithConfigError) {
  EXPECT_THROW(ParseAnalysisMode("laminar"), ConfigError);
  EXPECT_THROW(ParseAnalysisMode(""), ConfigError);
  EXPECT_THROW(ParseAnalysisMode("static "), ConfigError);
  try {
    ParseAnalysisMode("turbulent");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("turbulent"), std::string::npos);
  }
}

TEST(AnalysisModeTest, ToStringRoundTrips) {
  EXPECT_EQ(ToString(AnalysisMode::kStatic), "static");
  EXPECT_EQ(ToString(AnalysisMode::kLaminarFlow), "laminar_flow");
  for (AnalysisMode mode : {AnalysisMode::kStatic, AnalysisMode::kLaminarFlow}) {
    EXPECT_EQ(ParseAnalysisMode(ToString(mode)), mode);
  }
}

TEST(AnalysisModeTest, PhysicalParameterNamesInModelOrder) {
  EXPECT_EQ(NumPhysicalParameters(AnalysisMode::kStatic), 3);
  EXPECT_EQ(NumPhysicalParameters(AnalysisMode::kLaminarFlow), 7);
  EXPECT_EQ(PhysicalParameterNames(AnalysisMode::kStatic),
            (std::vector<std::string>{"D0", "alpha", "D_offset"}));
  const auto& laminar = PhysicalParameterNames(AnalysisMode::kLaminarFlow);
  ASSERT_EQ(laminar.size(), 7u);
  EXPECT_EQ(laminar[kD0], "D0");
  EXPECT_EQ(laminar[kAlpha], "alpha");
  EXPECT_EQ(laminar[kDOffset], "D_offset");
  EXPECT_EQ(laminar[kGammaDot0], "gamma_dot_t0");
  EXPECT_EQ(laminar[kBeta], "beta");
  EXPECT_EQ(laminar[kGammaDotOffset], "gamma_dot_t_offset");
  EXPECT_EQ(laminar[kPhi0], "phi0");
}

}  // namespace
}  // namespace homodyne
