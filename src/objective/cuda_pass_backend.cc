// The CUDA backend (device_pass_backend.h): the device passes' inputs and jobs
// (device_pass_inputs.cc) run by the kernels of cuda/pass_kernels.cu through cuda_pass_runner.h,
// their block sums added in block order on the host as the emulation adds them. Compiled with
// contraction off (device_point.h).
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "objective/cuda_pass_runner.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

using device_pass::LaunchGeometry;
using device_pass::PassJob;

// The device's state, shared by the backend's passes (one at a time: PreparedPass): the runner
// and which pass's point it holds.
struct CudaDevice {
  std::unique_ptr<cuda::PassRunner> runner;
  const void* point_owner = nullptr;  // the CudaPreparedPass whose point SetPoint uploaded
};

class CudaPreparedPass : public DevicePreparedPass {
 public:
  CudaPreparedPass(std::shared_ptr<CudaDevice> device, const PassPoint& point,
                   LaunchGeometry geometry)
      : DevicePreparedPass(point, geometry), device_(std::move(device)) {}

  ~CudaPreparedPass() override {
    if (device_->point_owner == this) device_->point_owner = nullptr;
  }

 protected:
  void LaunchGrams(std::span<const PassJob> jobs, std::vector<double>& block_sums) override {
    Runner().RunGrams(jobs.data(), static_cast<int>(jobs.size()), geometry(), block_sums);
  }
  void LaunchCosts(std::span<const PassJob> jobs, std::vector<double>& block_sums) override {
    Runner().RunCosts(jobs.data(), static_cast<int>(jobs.size()), geometry(), block_sums);
  }

 private:
  // The runner, holding this pass's point.
  cuda::PassRunner& Runner() {
    if (device_->point_owner != this) {
      const DevicePassInputs& in = inputs();
      if (in.two_component) {
        device_->runner->SetTwoComponentPoint(in.two_component_arrays.data(), in.num_times,
                                              in.transport_prefactor,
                                              in.two_component_angles.data(), num_angles(),
                                              in.loss);
      } else {
        device_->runner->SetPoint(in.HostTables(), in.laminar, in.angles.data(), num_angles(),
                                  in.loss);
      }
      device_->point_owner = this;
    }
    return *device_->runner;
  }

  const std::shared_ptr<CudaDevice> device_;
};

class CudaPassBackend : public PassBackend {
 public:
  CudaPassBackend(int device, LaunchGeometry geometry)
      : device_(std::make_shared<CudaDevice>()), geometry_(geometry) {
    HOMODYNE_CHECK(device_pass::IsValidGeometry(geometry));
    device_->runner = cuda::MakePassRunner(device);
  }
  BackendKind kind() const override { return BackendKind::kCuda; }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override {
    return std::make_unique<CudaPreparedPass>(device_, point, geometry_);
  }

 private:
  const std::shared_ptr<CudaDevice> device_;
  const LaunchGeometry geometry_;
};

}  // namespace

std::shared_ptr<PassBackend> MakeCudaPassBackend(int device, LaunchGeometry geometry) {
  return std::make_shared<CudaPassBackend>(device, geometry);
}

}  // namespace homodyne
