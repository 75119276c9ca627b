// Tests that need a CUDA device (ctest label gpu): skipped, with the reason, in a build without
// CUDA or on a machine without a device. This version has no CUDA kernels, so what a device can
// check is the runtime query and that asking for the CUDA backend is refused for that reason.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "objective/cuda_device_query.h"
#include "objective/backend_selection.h"
#include "homodyne/errors.h"

namespace homodyne {
namespace {

using ::testing::HasSubstr;

TEST(CudaDeviceTest, RuntimeDescribesTheDeviceAndCudaIsRefusedForLackOfKernels) {
  if (!cuda::BuiltWithCuda()) GTEST_SKIP() << "built without CUDA (HOMODYNE_WITH_CUDA is off)";
  const cuda::DeviceQuery devices = cuda::QueryDevices();
  if (devices.device_count == 0) GTEST_SKIP() << "no CUDA device: " << devices.error;

  EXPECT_EQ(devices.error, "");
  EXPECT_THAT(devices.device0, HasSubstr(" GiB)"));
  try {
    SelectBackend(BackendKind::kCuda);
    ADD_FAILURE() << "SelectBackend(kCuda) returned, but this version has no CUDA kernels";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("this version has no CUDA kernels; found CUDA device 0: " +
                                        devices.device0));
  }
}

}  // namespace
}  // namespace homodyne
