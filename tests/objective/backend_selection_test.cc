// Tests of the backend selection (SelectBackend, src/objective/backend_selection.cc): each case
// this build and machine can reach. Which one that is depends on the build (HOMODYNE_WITH_CUDA) and
// on the CUDA runtime's answer, read through the same query the selection uses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "homodyne/backend.h"
#include "homodyne/config.h"
#include "homodyne/errors.h"
#include "objective/backend_selection.h"
#include "objective/cuda_device_query.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// What SelectBackend must give as the reason CUDA cannot run here; empty when it can (a CUDA
// build on a machine with a device: cuda_device_test.cc, label gpu, checks that case).
std::string ExpectedWhyNotCuda() {
  if (!cuda::BuiltWithCuda()) return "built without CUDA";
  const cuda::DeviceQuery devices = cuda::QueryDevices();
  if (devices.device_count == 0) return "no CUDA device (" + devices.error + ")";
  return "";
}

TEST(BackendSelectionTest, CpuIsTheCpuBackend) {
  const BackendChoice choice = SelectBackend(BackendKind::kCpu);
  ASSERT_NE(choice.backend, nullptr);
  EXPECT_EQ(choice.backend->kind(), BackendKind::kCpu);
  EXPECT_EQ(choice.reason, "backend cpu");
}

TEST(BackendSelectionTest, AutoRunsOnTheCpuAndSaysWhyNotCuda) {
  if (ExpectedWhyNotCuda().empty()) GTEST_SKIP() << "CUDA can run here: cuda_device_test.cc";
  const BackendChoice choice = SelectBackend(BackendKind::kAuto);
  EXPECT_EQ(choice.self_check, nullptr);
  ASSERT_NE(choice.backend, nullptr);
  EXPECT_EQ(choice.backend->kind(), BackendKind::kCpu);
  EXPECT_EQ(choice.reason, "backend auto: cpu (" + ExpectedWhyNotCuda() + ")");
}

TEST(BackendSelectionTest, CudaIsRefusedNamingTheReason) {
  if (ExpectedWhyNotCuda().empty()) GTEST_SKIP() << "CUDA can run here: cuda_device_test.cc";
  std::string message;
  try {
    SelectBackend(BackendKind::kCuda);
  } catch (const ConfigError& error) {
    message = error.what();
  }
  if (!cuda::BuiltWithCuda()) {
    // The text cli.bad_input and the user guide quote.
    EXPECT_EQ(message,
              "backend cuda: this homodyne was built without CUDA (this version has no CUDA "
              "backend); use --backend cpu or auto");
  } else {
    EXPECT_EQ(message, "backend cuda: " + ExpectedWhyNotCuda() + "; use --backend cpu or auto");
  }
}

TEST(BackendSelectionTest, ACudaBuildAsksTheRuntimeAndReportsItsError) {
  if (!cuda::BuiltWithCuda()) {
    EXPECT_THROW(cuda::QueryDevices(), NotCompiledError);
    return;
  }
  const cuda::DeviceQuery devices = cuda::QueryDevices();
  if (devices.device_count == 0) {
    // Without a device the runtime says why (no device, no driver, ...), naming the call.
    EXPECT_THAT(devices.error, StartsWith("cudaGetDeviceCount: "));
    EXPECT_GT(devices.error.size(), std::string("cudaGetDeviceCount: ").size());
  } else {
    EXPECT_EQ(devices.error, "");
    EXPECT_NE(devices.device0, "");
  }
}

TEST(BackendSelectionTest, BuildDescriptionSaysWhetherTheBuildHasCuda) {
  // slurm/homodyne_gpu.sbatch reads "without CUDA" in --version as: do not pass --backend cuda.
  EXPECT_THAT(BackendBuildDescription(), StartsWith("backend cpu; "));
  if (cuda::BuiltWithCuda()) {
    EXPECT_THAT(BackendBuildDescription(),
                HasSubstr("CUDA runtime linked, with CUDA kernels for sm_80 and sm_90"));
    EXPECT_THAT(BackendBuildDescription(), HasSubstr("not yet run on GPU hardware"));
    EXPECT_THAT(BackendBuildDescription(), ::testing::Not(HasSubstr("without CUDA")));
  } else {
    EXPECT_EQ(BackendBuildDescription(), "backend cpu; built without CUDA");
  }
}

TEST(BackendSelectionTest, TheCudaBackendNamesTheCallThatFailsWithoutADevice) {
  if (!cuda::BuiltWithCuda()) {
    EXPECT_THROW(MakeCudaPassBackend({0}), NotCompiledError);
    return;
  }
  if (cuda::QueryDevices().device_count > 0) {
    GTEST_SKIP() << "a CUDA device is present: cuda_pass_backend_test.cc";
  }
  try {
    MakeCudaPassBackend({0});
    ADD_FAILURE() << "the CUDA backend was made without a device";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), StartsWith("CUDA pass kernels: cuda"));
  }
}

TEST(BackendKindTest, NamesRoundTripCaseInsensitively) {
  for (const BackendKind kind : {BackendKind::kAuto, BackendKind::kCpu, BackendKind::kCuda}) {
    EXPECT_EQ(ParseBackendKind(ToString(kind)), kind);
  }
  EXPECT_EQ(ToString(BackendKind::kCuda), "cuda");
  EXPECT_EQ(ParseBackendKind("AUTO"), BackendKind::kAuto);
  EXPECT_EQ(ParseBackendKind("gpu"), std::nullopt);
}

}  // namespace
}  // namespace homodyne
