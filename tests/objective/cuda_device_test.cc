// Tests that need a CUDA device (ctest label gpu): skipped, with the reason, in a build without
// CUDA or on a machine without a device. What a device checks here: the runtime query, and that
// asking for the CUDA backend gives it behind its self-check, which passes on the first pass.
// The kernels' sums against the CPU's: cuda_pass_backend_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "device_pass_comparison.h"
#include "homodyne/errors.h"
#include "objective/backend_selection.h"
#include "objective/cuda_device_query.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

TEST(CudaDeviceTest, RuntimeDescribesTheDeviceAndCudaIsSelectedBehindItsSelfCheck) {
  if (!cuda::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA (HOMODYNE_WITH_CUDA is off)";
  const cuda::DeviceQuery devices = cuda::QueryDevices();
  if (devices.device_count == 0) GTEST_SKIP() << "no CUDA device: " << devices.error;

  EXPECT_EQ(devices.error, "");
  EXPECT_THAT(devices.device0, HasSubstr(" GiB)"));
  for (BackendKind requested : {BackendKind::kCuda, BackendKind::kAuto}) {
    SCOPED_TRACE(std::string(ToString(requested)));
    const BackendChoice choice = SelectBackend(requested, {0});
    EXPECT_THAT(choice.reason, HasSubstr("cuda on device 0: " + devices.device0));
    ASSERT_NE(choice.self_check, nullptr);
    EXPECT_EQ(choice.backend->kind(), BackendKind::kCuda);
    // The first pass runs the self-check; on a working device it passes and CUDA computes.
    const device_pass_testing::PassCase pass_case =
        device_pass_testing::MakeCase("selection", AnalysisMode::kLaminarFlow, 120, 2000, 3);
    device_pass_testing::ComputeAllSums(*choice.backend, pass_case);
    EXPECT_TRUE(choice.self_check->ran);
    EXPECT_TRUE(choice.self_check->passed) << choice.self_check->Describe();
    EXPECT_EQ(choice.backend->kind(), BackendKind::kCuda);
  }
}

}  // namespace
}  // namespace homodyne
