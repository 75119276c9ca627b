// Tests of the CUDA backend's kernels on a device (ctest label gpu; skipped, with the reason,
// without CUDA or a device): the comparisons the host emulation passes on every machine
// (emulated_pass_backend_test.cc, emulated_devices_test.cc), run on the device. docs/backends.md,
// Running the GPU tests.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "device_pass_comparison.h"
#include "homodyne/errors.h"
#include "model/two_component/two_component_point.h"
#include "objective/batched_objective.h"
#include "objective/cuda_device_query.h"
#include "objective/device_pass_backend.h"
#include "objective/emulated_pass_backend.h"
#include "optimize/levenberg_marquardt.h"
#include "support/simulated_data_fixture.h"

namespace homodyne {
namespace {

using device_pass::LaunchGeometry;
using device_pass_testing::ComparisonCases;
using device_pass_testing::ComputeAllSums;
using device_pass_testing::ComputeSums;
using device_pass_testing::LargestError;
using device_pass_testing::PassCase;
using device_pass_testing::PassSums;

constexpr double kTolerance = 1e-12;  // docs/backends.md, Verified where

// Why the device tests cannot run here, or "" when they can.
std::string WhyNoDevice() {
  if (!cuda::BuiltWithCuda()) return "built without CUDA (HOMODYNE_WITH_CUDA is off)";
  const cuda::DeviceQuery devices = cuda::QueryDevices();
  if (devices.device_count == 0) return "no CUDA device: " + devices.error;
  return "";
}

#define SKIP_WITHOUT_DEVICE()              \
  do {                                     \
    const std::string why = WhyNoDevice(); \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (false)

const std::vector<LaunchGeometry> kGeometries = {{1, 1}, {4, 128}, {3, 32}, {1, 1024}, {7, 64}};

TEST(CudaPassBackendTest, EverySumAgreesWithTheCpuAndTheEmulationOnEveryCaseAndGeometry) {
  SKIP_WITHOUT_DEVICE();
  const std::shared_ptr<PassBackend> cpu = MakeCpuPassBackend();
  for (const PassCase& pass_case : ComparisonCases()) {
    const PassSums expected = ComputeAllSums(*cpu, pass_case);
    for (const LaunchGeometry& geometry : kGeometries) {
      SCOPED_TRACE(pass_case.name + ", " + std::to_string(geometry.blocks_per_job) + " x " +
                   std::to_string(geometry.threads_per_block));
      const PassSums device = ComputeAllSums(*MakeCudaPassBackend({0}, geometry), pass_case);
      const PassSums emulated = ComputeAllSums(*MakeEmulatedPassBackend(geometry), pass_case);
      std::string where;
      EXPECT_LE(LargestError(device, expected, &where), kTolerance) << "vs CPU: " << where;
      // Same schedule and roundings: only exp, sin and cos differ (device_point.h).
      EXPECT_LE(LargestError(device, emulated, &where), kTolerance) << "vs emulation: " << where;
      EXPECT_EQ(device.finite, expected.finite);
    }
  }
}

// Resident data and several devices (docs/backends.md): the sums of data copied for each pass on
// device 0, bitwise again from data resident on device 0 (uploaded by the first call, read in
// place by the second) and on every visible device (the batches split over them).
TEST(CudaPassBackendTest, ResidentDataAndEveryDeviceGiveBitwiseTheCopiedSums) {
  SKIP_WITHOUT_DEVICE();
  std::vector<int> all;
  for (int d = 0; d < cuda::QueryDevices().device_count; ++d) all.push_back(d);
  for (const PassCase& pass_case : ComparisonCases()) {
    SCOPED_TRACE(pass_case.name);
    const PassSums copied = ComputeAllSums(*MakeCudaPassBackend({0}), pass_case);
    const std::shared_ptr<PassBackend> resident = MakeCudaPassBackend({0});
    const uint64_t id = NewStableDataId();
    for (int call = 0; call < 2; ++call) {
      EXPECT_TRUE(device_pass_testing::BitwiseEqual(
          ComputeAllSums(*resident, pass_case, PassLoss(), id), copied))
          << "call " << call;
    }
    const std::shared_ptr<PassBackend> every = MakeCudaPassBackend(all);
    EXPECT_TRUE(device_pass_testing::BitwiseEqual(ComputeAllSums(*every, pass_case), copied));
    EXPECT_TRUE(device_pass_testing::BitwiseEqual(
        ComputeAllSums(*every, pass_case, PassLoss(), NewStableDataId()), copied));
  }
}

TEST(CudaPassBackendTest, RobustLossesAgreeWithTheCpuBackend) {
  SKIP_WITHOUT_DEVICE();
  const std::shared_ptr<PassBackend> cpu = MakeCpuPassBackend();
  const std::shared_ptr<PassBackend> device = MakeCudaPassBackend({0});
  for (AnalysisMode mode :
       {AnalysisMode::kStatic, AnalysisMode::kLaminarFlow, AnalysisMode::kTwoComponent}) {
    const PassCase pass_case = device_pass_testing::MakeCase("robust", mode, 80, 700, 3);
    for (LossFunction function : {LossFunction::kSoftL1, LossFunction::kHuber,
                                  LossFunction::kCauchy, LossFunction::kArctan}) {
      SCOPED_TRACE(std::string(ToString(mode)) + " loss " +
                   std::to_string(static_cast<int>(function)));
      const PassLoss loss{function, 0.02};
      std::string where;
      EXPECT_LE(LargestError(ComputeAllSums(*device, pass_case, loss),
                             ComputeAllSums(*cpu, pass_case, loss), &where),
                kTolerance)
          << where;
    }
  }
}

TEST(CudaPassBackendTest, SumsOfABatchDoNotDependOnTheChunking) {
  SKIP_WITHOUT_DEVICE();
  const std::shared_ptr<PassBackend> device = MakeCudaPassBackend({0});
  const PassCase pass_case =
      device_pass_testing::MakeCase("chunking", AnalysisMode::kLaminarFlow, 120, 400, 4);
  const int num_batches = static_cast<int>(pass_case.batches.size());
  const PassSums whole = ComputeAllSums(*device, pass_case);
  const size_t n = pass_case.phi.size();
  for (const auto& [first, last] : {std::pair{0, 1}, std::pair{1, 4}, std::pair{4, num_batches}}) {
    const PassSums part = ComputeSums(*device, pass_case, PassLoss(), first, last);
    for (size_t slot = 0; slot < part.grams.size(); ++slot) {
      const Eigen::MatrixXd& expected = whole.grams[static_cast<size_t>(first) * n + slot];
      for (int a = 0; a < expected.rows(); ++a) {
        for (int c = 0; c <= a; ++c) EXPECT_EQ(part.grams[slot](a, c), expected(a, c)) << slot;
      }
    }
    for (size_t b = 0; b < part.costs.size(); ++b) {
      EXPECT_EQ(part.costs[b], whole.costs[static_cast<size_t>(first) + b]);
    }
  }
}

class CudaFitTest : public SimulatedDataTest {};

// As the emulation's fit test (emulated_pass_backend_test.cc, whose comment says why
// two_component's set differs and four of its parameters are held).
TEST_F(CudaFitTest, FitEqualsTheCpuFit) {
  SKIP_WITHOUT_DEVICE();
  for (AnalysisMode mode :
       {AnalysisMode::kStatic, AnalysisMode::kLaminarFlow, AnalysisMode::kTwoComponent}) {
    SCOPED_TRACE(std::string(ToString(mode)));
    const bool two_component = mode == AnalysisMode::kTwoComponent;
    Config config = SimulationConfig(mode, 40);
    if (two_component) {
      config.simulation.physical_parameters = {2.0e4, 0.3, 100.0, 5.0e4, -0.5, 0.0, 20.0,
                                               0.5,   1.0, 0.3,   0.5,   0.5,  0.2, 2.0};
    }
    std::unique_ptr<BatchSource> source = SimulateAndOpen(config);
    const PackedDataObjective::PackedData data = PackedDataObjective::LoadPackedData(*source);
    PassOptions options;
    options.batch_points = 170;
    PackedDataObjective cpu(ModelOf(config, *source), AnglesOf(*source), 0.01, data, options,
                            MakeCpuPassBackend());
    PackedDataObjective device(ModelOf(config, *source), AnglesOf(*source), 0.01, data, options,
                               MakeCudaPassBackend({0}));
    Eigen::VectorXd start = Truth(config);
    for (int a = 0; a < cpu.num_physical(); ++a) {
      start[a] *= a % 2 == 0 ? (two_component ? 1.02 : 1.2) : (two_component ? 0.98 : 0.9);
    }
    LevenbergMarquardtOptions lm = BoundedOptions(cpu);
    if (two_component) {
      for (int held : {two_component::kDOffsetRef, two_component::kDOffsetSample,
                       two_component::kVOffset, two_component::kF2}) {
        start[held] = Truth(config)[held];
        lm.lower_bounds[held] = start[held];
        lm.upper_bounds[held] = start[held];
      }
    }
    const LevenbergMarquardtSummary expected = Minimize(lm, cpu, start);
    const LevenbergMarquardtSummary actual = Minimize(lm, device, start);
    ASSERT_TRUE(actual.IsConverged()) << actual.reason;
    for (int a = 0; a < cpu.num_parameters(); ++a) {
      EXPECT_NEAR(actual.theta[a], expected.theta[a], 1e-10 * std::abs(expected.theta[a])) << a;
    }
  }
}

}  // namespace
}  // namespace homodyne
