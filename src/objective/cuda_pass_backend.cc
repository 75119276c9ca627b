// The CUDA backend (device_pass_backend.h): a DevicePassBackend whose devices are CUDA devices,
// each running the kernels of cuda/pass_kernels.cu through cuda_pass_runner.h; their block sums
// are added in block order on the host as the emulation's are. Compiled with contraction off
// (device_point.h).
#include <algorithm>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "objective/cuda_pass_runner.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

using device_pass::LaunchGeometry;
using device_pass::PassJob;

// One CUDA device: its runner, and which pass's point the runner holds (by the pass's serial).
class CudaPassDevice final : public PassDevice {
 public:
  explicit CudaPassDevice(int device)
      : runner_(cuda::MakePassRunner(device)),
        description_("CUDA device " + std::to_string(device) + ": " +
                     runner_->device_description()) {}

  const std::string& description() const override { return description_; }

  int64_t FreeResidentBytes() override {
    return std::max<int64_t>(runner_->FreeMemoryBytes() - kCudaResidentReserveBytes, 0);
  }
  float* AllocateResident(int64_t values) override { return runner_->AllocateResident(values); }
  void UploadResident(std::span<const Upload> uploads) override {
    std::vector<float*> devices;
    std::vector<const float*> hosts;
    std::vector<int64_t> values;
    for (const Upload& upload : uploads) {
      devices.push_back(upload.device_values);
      hosts.push_back(upload.host);
      values.push_back(upload.values);
    }
    runner_->UploadResident(devices.data(), hosts.data(), values.data(),
                            static_cast<int>(uploads.size()));
  }
  void FreeResident(float* device_array) override { runner_->FreeResident(device_array); }

  void Launch(DevicePassKind kind, const DevicePassInputs& inputs, uint64_t point_serial,
              std::span<const PassJob> jobs, std::span<const uint8_t> resident,
              const LaunchGeometry& geometry, std::vector<double>& block_sums) override {
    HOMODYNE_CHECK(resident.size() == jobs.size());
    if (point_serial != point_serial_) {
      point_serial_ = 0;  // until the upload succeeds
      runner_->SetPoint(inputs.mode, inputs.scalars, inputs.tables.data(),
                        static_cast<int64_t>(inputs.tables.size()), inputs.angles.data(),
                        inputs.num_angles(), inputs.angles.size(), inputs.loss);
      point_serial_ = point_serial;
    }
    const int num_jobs = static_cast<int>(jobs.size());
    if (kind == DevicePassKind::kGrams) {
      runner_->RunGrams(jobs.data(), resident.data(), num_jobs, geometry, block_sums);
    } else if (kind == DevicePassKind::kDataSums) {
      runner_->RunDataSums(jobs.data(), resident.data(), num_jobs, geometry, block_sums);
    } else {
      runner_->RunCosts(jobs.data(), resident.data(), num_jobs, geometry, block_sums);
    }
  }

 private:
  const std::unique_ptr<cuda::PassRunner> runner_;
  const std::string description_;
  uint64_t point_serial_ = 0;  // the point the runner holds (0: none)
};

}  // namespace

std::shared_ptr<PassBackend> MakeCudaPassBackend(std::vector<int> devices,
                                                 LaunchGeometry geometry) {
  HOMODYNE_CHECK(!devices.empty() &&
                 std::set<int>(devices.begin(), devices.end()).size() == devices.size());
  std::vector<std::unique_ptr<PassDevice>> cuda_devices;
  for (const int device : devices) cuda_devices.push_back(std::make_unique<CudaPassDevice>(device));
  return std::make_shared<DevicePassBackend>(std::move(cuda_devices), geometry);
}

}  // namespace homodyne
