// Tests of the self-check of a device backend (src/objective/backend_self_check.h), without a GPU:
// the host emulation stands for the device, and a backend that corrupts one Gram entry for a
// device that computes wrongly. backend auto falls back to the CPU with the report; backend cuda
// stops with its message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_pass_comparison.h"
#include "homodyne/errors.h"
#include "objective/backend_self_check.h"
#include "objective/batched_objective.h"
#include "objective/device_pass_backend.h"
#include "objective/emulated_pass_backend.h"
#include "objective/pass_backend.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

// The emulated backend with entry (2, 1) of the first Gram of every call changed by `factor`
// relative to its scale (a device whose sums are wrong in one place).
class CorruptingBackend : public PassBackend {
 public:
  explicit CorruptingBackend(double factor) : factor_(factor) {}
  BackendKind kind() const override { return BackendKind::kCuda; }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override {
    return std::make_unique<Pass>(emulated_->Prepare(point), factor_);
  }

 private:
  class Pass : public PreparedPass {
   public:
    Pass(std::unique_ptr<PreparedPass> inner, double factor)
        : inner_(std::move(inner)), factor_(factor) {}
    int gram_size() const override { return inner_->gram_size(); }
    void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                      std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
      inner_->ComputeGrams(batches, data, grams, finite_points);
      Eigen::MatrixXd& gram = grams[0];
      gram(2, 1) += factor_ * std::sqrt(gram(2, 2) * gram(1, 1));
    }
    void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                                 std::span<const float* const> data,
                                 std::span<double> squared_residuals) override {
      inner_->ComputeSquaredResiduals(batches, data, squared_residuals);
    }

   private:
    std::unique_ptr<PreparedPass> inner_;
    double factor_;
  };

  const std::shared_ptr<PassBackend> emulated_ = MakeEmulatedPassBackend({2, 64});
  const double factor_;
};

// A device backend that cannot compute the point's mode: Prepare throws NotCompiledError, as
// MakeDevicePassInputs does for a mode without device kernels.
class RefusingBackend : public PassBackend {
 public:
  BackendKind kind() const override { return BackendKind::kCuda; }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint&) override {
    throw NotCompiledError("the device passes do not compute this mode");
  }
};

class BackendSelfCheckTest : public ::testing::Test {
 protected:
  BackendSelfCheckTest()
      : case_(device_pass_testing::MakeCase("self-check", AnalysisMode::kLaminarFlow, 150, 3000,
                                            3)) {}

  // A full pass on `backend`, then a cost pass, through the objective's interface.
  device_pass_testing::PassSums Passes(PassBackend& backend) {
    return device_pass_testing::ComputeAllSums(backend, case_);
  }

  std::shared_ptr<PassBackend> Checked(std::shared_ptr<PassBackend> device,
                                       SelfCheckPolicy policy) {
    return MakeSelfCheckingBackend(
        std::move(device), MakeCpuPassBackend(), policy,
        [this](const SelfCheckReport& report) { reports_.push_back(report); });
  }

  device_pass_testing::PassCase case_;
  std::vector<SelfCheckReport> reports_;
};

TEST_F(BackendSelfCheckTest, PoliciesOfTheRequestedBackends) {
  EXPECT_EQ(SelfCheckPolicyFor(BackendKind::kAuto), SelfCheckPolicy::kFallBack);
  EXPECT_EQ(SelfCheckPolicyFor(BackendKind::kCuda), SelfCheckPolicy::kStop);
}

TEST_F(BackendSelfCheckTest, AnAgreeingDeviceComputesAfterTheCheck) {
  const std::shared_ptr<PassBackend> emulated = MakeEmulatedPassBackend({2, 64});
  const std::shared_ptr<PassBackend> checked = Checked(emulated, SelfCheckPolicy::kStop);

  const device_pass_testing::PassSums sums = Passes(*checked);

  ASSERT_EQ(reports_.size(), 1u);  // once, not per pass
  const SelfCheckReport& report = reports_[0];
  EXPECT_TRUE(report.ran);
  EXPECT_TRUE(report.passed) << report.Describe();
  EXPECT_LE(report.largest_difference, 1e-12);
  EXPECT_GT(report.points, 0);
  EXPECT_LE(report.points, kSelfCheckPoints);
  EXPECT_GE(report.seconds, 0.0);
  EXPECT_THAT(report.Describe(), HasSubstr("backend self-check passed"));
  EXPECT_EQ(checked->kind(), BackendKind::kCuda);
  EXPECT_TRUE(device_pass_testing::BitwiseEqual(sums, Passes(*emulated)));
}

TEST_F(BackendSelfCheckTest, AutoFallsBackToTheCpuWhenOneGramEntryIsWrong) {
  const std::shared_ptr<PassBackend> checked =
      Checked(std::make_shared<CorruptingBackend>(1e-8), SelfCheckPolicy::kFallBack);

  const device_pass_testing::PassSums sums = Passes(*checked);

  ASSERT_EQ(reports_.size(), 1u);
  const SelfCheckReport& report = reports_[0];
  EXPECT_FALSE(report.passed);
  EXPECT_NEAR(report.largest_difference, 1e-8, 1e-10);
  EXPECT_EQ(report.where, "batch 0 angle 0 Gram entry (2, 1)");
  EXPECT_THAT(report.Describe(), HasSubstr("backend self-check failed"));
  EXPECT_THAT(report.Describe(), HasSubstr("Gram entry (2, 1)"));
  EXPECT_EQ(checked->kind(), BackendKind::kCpu);
  // Every pass, the first included, is the CPU's.
  EXPECT_TRUE(device_pass_testing::BitwiseEqual(sums, Passes(*MakeCpuPassBackend())));
}

TEST_F(BackendSelfCheckTest, CudaStopsWithTheDifferenceWhenOneGramEntryIsWrong) {
  const std::shared_ptr<PassBackend> checked =
      Checked(std::make_shared<CorruptingBackend>(1e-8), SelfCheckPolicy::kStop);
  try {
    Passes(*checked);
    ADD_FAILURE() << "the passes ran on a device that failed its self-check";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("backend cuda: self-check failed: "));
    EXPECT_THAT(error.what(), HasSubstr("batch 0 angle 0 Gram entry (2, 1)"));
    EXPECT_THAT(error.what(), HasSubstr("use --backend cpu"));
  }
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_FALSE(reports_[0].passed);
}

TEST_F(BackendSelfCheckTest, ADifferenceBelowTheToleranceIsAccepted) {
  const std::shared_ptr<PassBackend> checked =
      Checked(std::make_shared<CorruptingBackend>(1e-11), SelfCheckPolicy::kStop);
  Passes(*checked);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_TRUE(reports_[0].passed) << reports_[0].Describe();
  EXPECT_EQ(checked->kind(), BackendKind::kCuda);
}

TEST_F(BackendSelfCheckTest, EveryDeviceOfSeveralIsChecked) {
  // Three emulated devices; the last one's sums are off by 1e-6. The subsample is one batch, which
  // a pass would give to device 0 alone: the check runs it on each device.
  for (const SelfCheckPolicy policy : {SelfCheckPolicy::kStop, SelfCheckPolicy::kFallBack}) {
    reports_.clear();
    EmulatedDeviceOptions devices;
    devices.num_devices = 3;
    devices.faulty_device = 2;
    const std::shared_ptr<PassBackend> checked =
        Checked(MakeEmulatedPassBackend({2, 64}, devices), policy);
    if (policy == SelfCheckPolicy::kStop) {
      try {
        Passes(*checked);
        ADD_FAILURE() << "the passes ran on devices one of which failed its self-check";
      } catch (const ConfigError& error) {
        EXPECT_THAT(error.what(), HasSubstr("backend cuda: self-check failed: "));
        EXPECT_THAT(error.what(), HasSubstr("(emulated device 2: batch 0 angle "));
      }
    } else {
      const device_pass_testing::PassSums sums = Passes(*checked);
      EXPECT_EQ(checked->kind(), BackendKind::kCpu);
      EXPECT_TRUE(device_pass_testing::BitwiseEqual(sums, Passes(*MakeCpuPassBackend())));
    }
    ASSERT_EQ(reports_.size(), 1u);
    EXPECT_FALSE(reports_[0].passed);
    EXPECT_NEAR(reports_[0].largest_difference, 1e-6, 1e-7);
    EXPECT_THAT(reports_[0].where, ::testing::StartsWith("emulated device 2: "));
  }
  // Three agreeing devices pass, the report naming the device of the largest difference.
  reports_.clear();
  EmulatedDeviceOptions agreeing;
  agreeing.num_devices = 3;
  const std::shared_ptr<PassBackend> checked =
      Checked(MakeEmulatedPassBackend({2, 64}, agreeing), SelfCheckPolicy::kStop);
  Passes(*checked);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_TRUE(reports_[0].passed) << reports_[0].Describe();
  EXPECT_THAT(reports_[0].where, ::testing::StartsWith("emulated device "));
  EXPECT_EQ(checked->kind(), BackendKind::kCuda);
}

TEST_F(BackendSelfCheckTest, AModeTheDeviceLacksFallsBackOrStops) {
  const std::shared_ptr<PassBackend> automatic =
      Checked(std::make_shared<RefusingBackend>(), SelfCheckPolicy::kFallBack);
  const device_pass_testing::PassSums sums = Passes(*automatic);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_FALSE(reports_[0].passed);
  EXPECT_THAT(reports_[0].failure, HasSubstr("do not compute this mode"));
  EXPECT_EQ(automatic->kind(), BackendKind::kCpu);
  EXPECT_GT(sums.costs[0], 0.0);

  const std::shared_ptr<PassBackend> cuda =
      Checked(std::make_shared<RefusingBackend>(), SelfCheckPolicy::kStop);
  EXPECT_THROW(Passes(*cuda), ConfigError);
}

// two_component has device kernels (src/model/two_component/two_component_device.h): the
// emulation passes the self-check on it and the passes stay on the device backend.
TEST_F(BackendSelfCheckTest, TwoComponentPassesTheSelfCheck) {
  const device_pass_testing::PassCase two_component = device_pass_testing::MakeCase(
      "self-check two_component", AnalysisMode::kTwoComponent, 60, 700, 3);
  const std::shared_ptr<PassBackend> checked =
      Checked(MakeEmulatedPassBackend(), SelfCheckPolicy::kStop);
  const device_pass_testing::PassSums sums =
      device_pass_testing::ComputeAllSums(*checked, two_component);
  ASSERT_EQ(reports_.size(), 1u);
  EXPECT_TRUE(reports_[0].passed) << reports_[0].Describe();
  EXPECT_EQ(checked->kind(), BackendKind::kCuda);
  EXPECT_GT(sums.costs[0], 0.0);
}

}  // namespace
}  // namespace homodyne
