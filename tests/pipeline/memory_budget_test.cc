// Memory budgets, batch sizing, strategy selection and per-angle mode resolution.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "homodyne/errors.h"
#include "optimize/per_angle_mode.h"
#include "pipeline/memory_budget.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kGb = 1024.0 * 1024.0 * 1024.0;

ProblemSize LaminarProblem(int64_t fit_points) {
  ProblemSize size;
  size.fit_points = fit_points;
  size.num_parameters = 13;
  size.num_times = 2000;
  size.num_angles = 3;
  size.bytes_per_value = 4;
  size.batch_points = 100000;
  size.threads = 2;
  return size;
}

TEST(AutomaticBatchSizeTest, FollowsTheTenPercentRuleClampedAndRounded) {
  // 1 GB, 9 parameters: 0.1 GB / 80 B = 1.34e6 -> clamped to 100000.
  EXPECT_EQ(AutomaticBatchSize(1.0 * kGb, 9), 100000);
  // 10 MB, 9 parameters: 1048576 / 80 = 13107 -> 13000.
  EXPECT_EQ(AutomaticBatchSize(10.0 * 1024 * 1024, 9), 13000);
  // Tiny memory: the lower clamp.
  EXPECT_EQ(AutomaticBatchSize(1e5, 9), 1000);
}

ProblemSize CeresProblem(int64_t fit_points) {
  ProblemSize size = LaminarProblem(fit_points);
  size.full_jacobian = true;
  return size;
}

TEST(EstimateMemoryTest, CeresStandardGrowsWithTheJacobianStreamingDoesNot) {
  const MemoryEstimate small = EstimateMemory(StrategyKind::kStandard, CeresProblem(1'000'000));
  const MemoryEstimate big = EstimateMemory(StrategyKind::kStandard, CeresProblem(10'000'000));
  EXPECT_NEAR(static_cast<double>(big.TotalBytes()) / small.TotalBytes(), 10.0, 0.01);
  // Jacobian alone: N * P * 8 bytes.
  EXPECT_GE(small.TotalBytes(), 1'000'000LL * 13 * 8);

  const MemoryEstimate stream_small =
      EstimateMemory(StrategyKind::kStreaming, LaminarProblem(1'000'000));
  const MemoryEstimate stream_big =
      EstimateMemory(StrategyKind::kStreaming, LaminarProblem(1'000'000'000));
  EXPECT_EQ(stream_small.TotalBytes(), stream_big.TotalBytes());
  EXPECT_FALSE(stream_big.items.empty());
}

TEST(EstimateMemoryTest, StandardWithTheLmCoreHoldsNoJacobian) {
  // The LM core sums batches of packed data, as large does: no N x P term.
  const MemoryEstimate standard =
      EstimateMemory(StrategyKind::kStandard, LaminarProblem(1'000'000));
  EXPECT_EQ(standard.TotalBytes(),
            EstimateMemory(StrategyKind::kLarge, LaminarProblem(1'000'000)).TotalBytes());
  for (const MemoryItem& item : standard.items) EXPECT_THAT(item.what, Not(HasSubstr("Jacobian")));
  EXPECT_LT(standard.TotalBytes(), 1'000'000LL * 13 * 8 / 10);
}

TEST(EstimateMemoryTest, LargeKeepsPackedFloat32Data) {
  const MemoryEstimate large = EstimateMemory(StrategyKind::kLarge, LaminarProblem(6'000'000));
  ASSERT_FALSE(large.items.empty());
  EXPECT_THAT(large.items[0].what, HasSubstr("float32"));
  EXPECT_EQ(large.items[0].bytes, 6'000'000LL * 4);
}

TEST(SelectStrategyTest, SizeTiersCountBothTriangles) {
  const double plenty = 1000.0 * kGb;
  EXPECT_EQ(SelectStrategy(LaminarProblem(400'000), plenty, std::nullopt).kind,
            StrategyKind::kStandard);
  EXPECT_EQ(SelectStrategy(LaminarProblem(600'000), plenty, std::nullopt).kind,
            StrategyKind::kLarge);  // 1.2e6 counted points
  EXPECT_EQ(SelectStrategy(LaminarProblem(6'000'000), plenty, std::nullopt).kind,
            StrategyKind::kChunked);
  EXPECT_EQ(SelectStrategy(LaminarProblem(60'000'000), plenty, std::nullopt).kind,
            StrategyKind::kStreaming);
}

TEST(SelectStrategyTest, UpgradesOneTierAtATimeWhenMemoryIsShort) {
  // 4e5 upper points: standard with Ceres needs ~87 MB; with 100 MB available (70 MB usable) ->
  // large.
  const StrategyChoice choice =
      SelectStrategy(CeresProblem(400'000), 100.0 * 1024 * 1024, std::nullopt);
  EXPECT_EQ(choice.kind, StrategyKind::kLarge);
  EXPECT_THAT(choice.reason, HasSubstr("upgraded to large"));
  EXPECT_LE(static_cast<double>(choice.estimate.TotalBytes()), 0.7 * 100.0 * 1024 * 1024);
}

TEST(SelectStrategyTest, ForcedStrategyIsKeptOrRefusedWithAReason) {
  const StrategyChoice forced =
      SelectStrategy(LaminarProblem(400'000), 1000.0 * kGb, StrategyKind::kStreaming);
  EXPECT_EQ(forced.kind, StrategyKind::kStreaming);
  EXPECT_THAT(forced.reason, HasSubstr("forced"));
  try {
    SelectStrategy(CeresProblem(50'000'000), 1.0 * kGb, StrategyKind::kStandard);
    FAIL() << "standard (Ceres) on 1e8 points with 1 GB must be refused";
  } catch (const InputError& error) {
    EXPECT_THAT(error.what(), HasSubstr("strategy standard needs about"));
    EXPECT_THAT(error.what(), HasSubstr("available"));
  }
}

TEST(DetectAvailableMemoryTest, CommandLineThenConfigThenEnvironment) {
  EXPECT_EQ(DetectAvailableMemory(2.0, 3.0).source, "--memory-limit-gb");
  EXPECT_DOUBLE_EQ(DetectAvailableMemory(2.0, 3.0).bytes, 2.0 * kGb);
  EXPECT_EQ(DetectAvailableMemory(std::nullopt, 3.0).source, "performance.memory_limit_gb");
  ::setenv("HOMODYNE_MEMORY_LIMIT", "1.5", 1);
  EXPECT_EQ(DetectAvailableMemory(std::nullopt, std::nullopt).source, "HOMODYNE_MEMORY_LIMIT");
  EXPECT_DOUBLE_EQ(DetectAvailableMemory(std::nullopt, std::nullopt).bytes, 1.5 * kGb);
  ::setenv("HOMODYNE_MEMORY_LIMIT", "lots", 1);
  EXPECT_THROW(DetectAvailableMemory(std::nullopt, std::nullopt), InputError);
  ::unsetenv("HOMODYNE_MEMORY_LIMIT");
  const AvailableMemory system = DetectAvailableMemory(std::nullopt, std::nullopt);
  EXPECT_GT(system.bytes, 0.0);
}

TEST(ResolvePerAngleModeTest, ModesAsTheReference) {
  NlsqOptions nlsq;
  nlsq.per_angle_mode = PerAngleModeRequest::kIndividual;
  EXPECT_EQ(ResolvePerAngleMode(nlsq, 3).num_scaling_parameters, 6);
  nlsq.per_angle_mode = PerAngleModeRequest::kConstant;
  EXPECT_EQ(ResolvePerAngleMode(nlsq, 3).num_scaling_parameters, 0);
  nlsq.per_angle_mode = PerAngleModeRequest::kAuto;
  EXPECT_EQ(ResolvePerAngleMode(nlsq, 3).mode, PerAngleMode::kAutoAveraged);
  EXPECT_EQ(ResolvePerAngleMode(nlsq, 3).num_scaling_parameters, 2);
  EXPECT_EQ(ResolvePerAngleMode(nlsq, 2).mode, PerAngleMode::kIndividual);
  // order 2: 5 coefficients each for contrast and offset
  nlsq.per_angle_mode = PerAngleModeRequest::kFourier;
  EXPECT_EQ(ResolvePerAngleMode(nlsq, 23).num_scaling_parameters, 10);
  EXPECT_EQ(ResolvePerAngleMode(nlsq, 4).mode, PerAngleMode::kIndividual);
}

}  // namespace
}  // namespace homodyne
