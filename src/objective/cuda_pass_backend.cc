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

class CudaPreparedPass : public PreparedPass {
 public:
  CudaPreparedPass(std::shared_ptr<CudaDevice> device, const PassPoint& point,
                   LaunchGeometry geometry)
      : device_(std::move(device)),
        inputs_(MakeDevicePassInputs(point)),
        geometry_(geometry),
        num_times_(point.evaluation->model().num_times()) {}

  ~CudaPreparedPass() override {
    if (device_->point_owner == this) device_->point_owner = nullptr;
  }

  int gram_size() const override { return inputs_.gram_size; }

  void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                    std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
    const std::vector<PassJob> jobs = MakePassJobs(num_times_, batches, data, num_angles());
    HOMODYNE_CHECK(grams.size() == jobs.size() && finite_points.size() == jobs.size());
    if (jobs.empty()) return;
    Runner().RunGrams(jobs.data(), static_cast<int>(jobs.size()), geometry_, block_sums_);
    GramsFromBlockSums(block_sums_, geometry_.blocks_per_job, inputs_.gram_size, grams,
                       finite_points);
  }

  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override {
    const std::vector<PassJob> jobs = MakePassJobs(num_times_, batches, data, num_angles());
    HOMODYNE_CHECK(squared_residuals.size() == batches.size());
    if (jobs.empty()) return;
    Runner().RunCosts(jobs.data(), static_cast<int>(jobs.size()), geometry_, block_sums_);
    CostsFromBlockSums(block_sums_, geometry_.blocks_per_job, num_angles(), squared_residuals);
  }

 private:
  int num_angles() const { return inputs_.num_angles(); }

  // The runner, holding this pass's point.
  cuda::PassRunner& Runner() {
    if (device_->point_owner != this) {
      if (inputs_.two_component) {
        device_->runner->SetTwoComponentPoint(
            inputs_.two_component_arrays.data(), inputs_.num_times, inputs_.transport_prefactor,
            inputs_.two_component_angles.data(), num_angles(), inputs_.loss);
      } else {
        device_->runner->SetPoint(inputs_.HostTables(), inputs_.laminar, inputs_.angles.data(),
                                  num_angles(), inputs_.loss);
      }
      device_->point_owner = this;
    }
    return *device_->runner;
  }

  const std::shared_ptr<CudaDevice> device_;
  const DevicePassInputs inputs_;
  const LaunchGeometry geometry_;
  const int num_times_;
  std::vector<double> block_sums_;
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
