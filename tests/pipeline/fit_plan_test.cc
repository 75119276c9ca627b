// PlanFit's per-angle scaling (src/pipeline/fit_plan.h): the per-angle modes apply to the modes
// whose c2 depends on the angle (the mode catalog's angle_dependent: laminar_flow, two_component)
// with anti_degeneracy.enable; static falls back to individual with a warning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "pipeline/fit_plan.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

// Five angles of a 51-frame window: enough for auto to average (threshold 3).
DatasetInfo FiveAngles() {
  DatasetInfo info;
  info.num_raw_frames = 51;
  info.dt_seconds = 0.1;
  for (double phi : {-10.0, 0.0, 10.0, 85.0, 95.0}) info.angles.push_back({phi, 0.0054, "", false});
  return info;
}

Config AutoScalingConfig(AnalysisMode mode) {
  Config config;
  config.analysis_mode = mode;
  config.nlsq.anti_degeneracy_enabled = true;
  config.nlsq.per_angle_mode = PerAngleModeRequest::kAuto;
  config.performance.memory_limit_gb = 4.0;  // the plan does not depend on the machine's memory
  return config;
}

TEST(FitPlanTest, PerAngleModesApplyToAngleDependentModes) {
  for (AnalysisMode mode : {AnalysisMode::kLaminarFlow, AnalysisMode::kTwoComponent}) {
    const FitPlan plan = PlanFit(AutoScalingConfig(mode), FiveAngles());
    EXPECT_EQ(plan.scaling.mode, PerAngleMode::kAutoAveraged) << ToString(mode);
    EXPECT_EQ(plan.scaling.num_scaling_parameters, 2) << ToString(mode);
    EXPECT_EQ(plan.scaling_warning, "") << ToString(mode);
    EXPECT_EQ(plan.num_parameters, NumPhysicalParameters(mode) + 2) << ToString(mode);
  }
  EXPECT_EQ(PlanFit(AutoScalingConfig(AnalysisMode::kTwoComponent), FiveAngles()).num_physical, 14);
}

TEST(FitPlanTest, StaticAndDisabledAntiDegeneracyFitIndividualWithWarning) {
  const FitPlan stat = PlanFit(AutoScalingConfig(AnalysisMode::kStatic), FiveAngles());
  EXPECT_EQ(stat.scaling.mode, PerAngleMode::kIndividual);
  EXPECT_EQ(stat.scaling.num_scaling_parameters, 10);
  EXPECT_THAT(stat.scaling_warning,
              HasSubstr("per-angle mode auto_averaged applies to laminar_flow and two_component "
                        "with anti_degeneracy.enable"));

  Config disabled = AutoScalingConfig(AnalysisMode::kTwoComponent);
  disabled.nlsq.anti_degeneracy_enabled = false;
  const FitPlan plan = PlanFit(disabled, FiveAngles());
  EXPECT_EQ(plan.scaling.mode, PerAngleMode::kIndividual);
  EXPECT_THAT(plan.scaling_warning, HasSubstr("fitting individual"));
}

}  // namespace
}  // namespace homodyne
