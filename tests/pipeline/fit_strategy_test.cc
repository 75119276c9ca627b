// The strategies as objects (src/pipeline/fit_strategy.h): each kind is set up with its own
// checkpoint policy and optimiser; every strategy's global-phase data hold the same rows and
// floats (so every strategy searches alike, bitwise), in laminar_flow and two_component; an
// allocation failure while setting up falls back to the next leaner strategy and says so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "base/fault_injection.h"
#include "homodyne/config.h"
#include "homodyne/dataset.h"
#include "homodyne/model.h"
#include "laminar_data.h"
#include "pipeline/fit_strategy.h"
#include "support/listed_faults.h"

namespace homodyne {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The truth of each mode's data (model order).
std::vector<double> TruthOf(AnalysisMode mode) {
  if (mode == AnalysisMode::kTwoComponent) {
    return {1000.0, -0.3, 10.0, 20000.0, -0.5, 0.0, 20.0, 0.5, 1.0, 0.3, 0.01, 0.5, 0.2, 2.0};
  }
  return {1500.0, -0.6, 5.0, 2e-4, 0.3, 0.0, 4.0};
}

class FitStrategyTest : public ::testing::Test {
 protected:
  explicit FitStrategyTest(AnalysisMode mode = AnalysisMode::kLaminarFlow)
      : truth_(TruthOf(mode)),
        c2_(test::SimulatedC2(mode, truth_, phi_)),
        source_(MakeInMemoryBatchSource(test::LaminarData(c2_, phi_))),
        config_(ParseConfig(
            mode == AnalysisMode::kTwoComponent ? test::kTwoComponentConfig : test::kLaminarConfig,
            "fit_strategy_test")),
        model_(mode, ScatteringGeometry{test::kQ, test::kGap, test::kDt},
               source_->info().FittedTimes()) {
    size_.batch_points = 2000;
    size_.threads = 2;
  }

  std::unique_ptr<FitStrategy> SetUp(StrategyKind kind, std::vector<std::string>* actions) {
    const StrategyInputs inputs{
        config_, *source_, model_, phi_, size_, {}, MakeCpuPassBackend(), SingleProcessGroup()};
    return SetUpStrategy(kind, inputs, *actions);
  }

  // The full-layout point of the truth: physical parameters, then contrasts, then offsets.
  Eigen::VectorXd TruthPoint() const {
    Eigen::VectorXd theta(static_cast<Eigen::Index>(truth_.size() + 2 * phi_.size()));
    for (size_t p = 0; p < truth_.size(); ++p) theta[static_cast<Eigen::Index>(p)] = truth_[p];
    const Eigen::Index n = static_cast<Eigen::Index>(truth_.size());
    const Eigen::Index angles = static_cast<Eigen::Index>(phi_.size());
    theta.segment(n, angles).setConstant(0.3);
    theta.segment(n + angles, angles).setConstant(1.0);
    return theta;
  }

  // phi_ and truth_ before c2_, source_ and model_, which the constructor makes from them.
  const std::vector<double> phi_ = {0.0, 60.0};
  const std::vector<double> truth_;
  std::vector<double> c2_;
  std::unique_ptr<BatchSource> source_;
  Config config_;
  HomodyneModel model_;
  ProblemSize size_;
};

TEST_F(FitStrategyTest, EachKindHasItsCheckpointPolicyAndSolver) {
  struct Expected {
    StrategyKind kind;
    LmSolver solver;
    StateSolver state_solver;  // the optimiser that writes the strategy's checkpoint states
    bool inside_passes, at_iterations, passes_from_iterations;
  };
  const Expected cases[] = {
      {StrategyKind::kStandard, LmSolver::kLmCore, StateSolver::kLmCore, false, true, false},
      {StrategyKind::kStandard, LmSolver::kCeres, StateSolver::kCeres, false, true, true},
      {StrategyKind::kLarge, LmSolver::kLmCore, StateSolver::kLmCore, false, true, false},
      {StrategyKind::kChunked, LmSolver::kLmCore, StateSolver::kLmCore, true, false, false},
      {StrategyKind::kStreaming, LmSolver::kLmCore, StateSolver::kLmCore, true, false, false},
  };
  for (const Expected& expected : cases) {
    SCOPED_TRACE(std::string(ToString(expected.kind)) + " with solver " +
                 std::string(ToString(expected.solver)));
    config_.nlsq.solver = expected.solver;
    std::vector<std::string> actions;
    const std::unique_ptr<FitStrategy> strategy = SetUp(expected.kind, &actions);
    EXPECT_EQ(strategy->kind(), expected.kind);
    EXPECT_EQ(strategy->solver(), expected.state_solver);
    const CheckpointPolicy policy = strategy->checkpoint_policy();
    EXPECT_EQ(policy.save_inside_passes, expected.inside_passes);
    EXPECT_EQ(policy.save_at_iterations, expected.at_iterations);
    EXPECT_EQ(policy.passes_from_iterations, expected.passes_from_iterations);
    EXPECT_TRUE(actions.empty());
    ASSERT_EQ(strategy->scaling_from_data().size(), phi_.size());
    for (const ScalingEstimate& estimate : strategy->scaling_from_data()) {
      EXPECT_NEAR(estimate.contrast, 0.3, 0.1);
      EXPECT_NEAR(estimate.offset, 1.0, 0.05);
    }
  }
}

// The search-data test once per mode (each with its own pass body).
class FitStrategyByModeTest : public FitStrategyTest,
                              public ::testing::WithParamInterface<AnalysisMode> {
 protected:
  FitStrategyByModeTest() : FitStrategyTest(GetParam()) {}
};

std::string ModeName(const ::testing::TestParamInfo<AnalysisMode>& info) {
  return std::string(ToString(info.param));
}

INSTANTIATE_TEST_SUITE_P(Modes, FitStrategyByModeTest,
                         ::testing::Values(AnalysisMode::kLaminarFlow, AnalysisMode::kTwoComponent),
                         ModeName);

TEST_P(FitStrategyByModeTest, EveryStrategySearchesTheSameRowsBitwise) {
  const Eigen::VectorXd theta = TruthPoint();
  std::vector<std::string> actions;
  const std::unique_ptr<FitStrategy> large = SetUp(StrategyKind::kLarge, &actions);
  ASSERT_EQ(large->objective().num_physical(), NumPhysicalParameters(GetParam()));
  const double in_memory = large->SearchData(3)->Cost(theta);
  for (StrategyKind kind :
       {StrategyKind::kStandard, StrategyKind::kChunked, StrategyKind::kStreaming}) {
    SCOPED_TRACE(ToString(kind));
    const std::unique_ptr<FitStrategy> strategy = SetUp(kind, &actions);
    const std::unique_ptr<BatchedObjective> search = strategy->SearchData(3);
    EXPECT_EQ(search->Cost(theta), in_memory);
    // Every third row: fewer points than the whole data.
    EXPECT_LT(search->num_points(), strategy->objective().num_points());
  }
  // The whole data (stride 1) is the strategy's own objective, point for point.
  const std::unique_ptr<FitStrategy> streaming = SetUp(StrategyKind::kStreaming, &actions);
  EXPECT_EQ(streaming->SearchData(1)->num_points(), streaming->objective().num_points());
}

// The in-memory strategies of one process hand their whole data over to the result files' writer
// (FitStrategy::WholeDataInMemory, FitOutcome::held_data): every angle's packed triangle, the
// floats the source gives; the streaming strategy holds none.
TEST_F(FitStrategyTest, InMemoryStrategiesHandTheirWholeDataOver) {
  const int n = source_->info().num_times();
  for (const StrategyKind kind : {StrategyKind::kStandard, StrategyKind::kLarge,
                                  StrategyKind::kChunked, StrategyKind::kStreaming}) {
    SCOPED_TRACE(std::string(ToString(kind)));
    std::vector<std::string> actions;
    const std::unique_ptr<FitStrategy> strategy = SetUp(kind, &actions);
    const std::vector<std::vector<float>>* held = strategy->WholeDataInMemory();
    if (kind == StrategyKind::kStreaming) {
      EXPECT_EQ(held, nullptr);
      continue;
    }
    ASSERT_NE(held, nullptr);
    ASSERT_EQ(held->size(), phi_.size());
    for (int a = 0; a < static_cast<int>(phi_.size()); ++a) {
      std::vector<float> read(static_cast<size_t>(UpperTriangleSize(n)));
      source_->ReadUpperTriangleRows(a, 0, n, std::span<float>(read));
      EXPECT_EQ((*held)[static_cast<size_t>(a)], read) << a;
    }
  }
}

TEST_F(FitStrategyTest, AllocationFailureWhileSettingUpFallsBackToALeanerStrategy) {
  test::ListedFaults faults;
  faults.failing_allocations = {"standard", "large"};
  std::vector<std::string> actions;
  const std::unique_ptr<FitStrategy> strategy = [&] {
    const ScopedFaultInjector installed(faults);
    return SetUp(StrategyKind::kStandard, &actions);
  }();
  EXPECT_EQ(strategy->kind(), StrategyKind::kStreaming);
  EXPECT_THAT(actions, ElementsAre(HasSubstr("strategy standard ran out of memory while setting "
                                             "up; fell back to large"),
                                   HasSubstr("strategy large ran out of memory while setting "
                                             "up; fell back to streaming")));
  // Streaming is the last: its failure is not caught.
  faults.failing_allocations = {"streaming"};
  const ScopedFaultInjector installed(faults);
  EXPECT_THROW(SetUp(StrategyKind::kStreaming, &actions), std::bad_alloc);
}

}  // namespace
}  // namespace homodyne
