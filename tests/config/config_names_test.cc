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

TEST(ConfigNamesTest, PerAngleModeRequest) {
  EXPECT_EQ(ToString(PerAngleModeRequest::kIndividual), "individual");
  EXPECT_EQ(ToString(PerAngleModeRequest::kConstant), "constant");
  EXPECT_EQ(ToString(PerAngleModeRequest::kAuto), "auto");
  EXPECT_EQ(ToString(PerAngleModeRequest::kFourier), "fourier");
  for (const PerAngleModeRequest mode :
       {PerAngleModeRequest::kIndividual, PerAngleModeRequest::kConstant,
        PerAngleModeRequest::kAuto, PerAngleModeRequest::kFourier}) {
    EXPECT_EQ(ParsePerAngleModeRequest(ToString(mode)), mode);
  }
  EXPECT_EQ(ParsePerAngleModeRequest("fixed_constant"), PerAngleModeRequest::kConstant);
  EXPECT_EQ(ParsePerAngleModeRequest("Fixed_Constant"), PerAngleModeRequest::kConstant);
  EXPECT_EQ(ParsePerAngleModeRequest("FOURIER"), PerAngleModeRequest::kFourier);
  EXPECT_EQ(ParsePerAngleModeRequest("auto_averaged"), std::nullopt);
  EXPECT_EQ(ParsePerAngleModeRequest("averaged"), std::nullopt);
  EXPECT_EQ(ParsePerAngleModeRequest("sometimes"), std::nullopt);
}

TEST(ConfigNamesTest, GlobalSearchMethod) {
  EXPECT_EQ(ToString(GlobalSearchMethod::kAuto), "auto");
  EXPECT_EQ(ToString(GlobalSearchMethod::kOff), "off");
  EXPECT_EQ(ToString(GlobalSearchMethod::kMultiStart), "multi_start");
  EXPECT_EQ(ToString(GlobalSearchMethod::kCmaes), "cmaes");
  for (const GlobalSearchMethod method :
       {GlobalSearchMethod::kAuto, GlobalSearchMethod::kOff, GlobalSearchMethod::kMultiStart,
        GlobalSearchMethod::kCmaes}) {
    EXPECT_EQ(ParseGlobalSearchMethod(ToString(method)), method);
  }
  EXPECT_EQ(ParseGlobalSearchMethod("CMAES"), GlobalSearchMethod::kCmaes);
  // The config never took the command line's spelling.
  EXPECT_EQ(ParseGlobalSearchMethod("multi-start"), std::nullopt);
  EXPECT_EQ(ParseGlobalSearchMethod("simplex"), std::nullopt);
}

TEST(ConfigNamesTest, CmaesPreset) {
  EXPECT_EQ(ToString(CmaesPreset::kCmaesFast), "cmaes-fast");
  EXPECT_EQ(ToString(CmaesPreset::kCmaes), "cmaes");
  EXPECT_EQ(ToString(CmaesPreset::kCmaesGlobal), "cmaes-global");
  EXPECT_EQ(ToString(CmaesPreset::kCmaesHpc), "cmaes-hpc");
  for (const CmaesPreset preset : {CmaesPreset::kCmaesFast, CmaesPreset::kCmaes,
                                   CmaesPreset::kCmaesGlobal, CmaesPreset::kCmaesHpc}) {
    EXPECT_EQ(ParseCmaesPreset(ToString(preset)), preset);
  }
  EXPECT_EQ(ParseCmaesPreset("CMAES-Fast"), CmaesPreset::kCmaesFast);
  EXPECT_EQ(ParseCmaesPreset("cmaes_fast"), std::nullopt);
  EXPECT_EQ(ParseCmaesPreset("fast"), std::nullopt);
}

}  // namespace
}  // namespace homodyne
