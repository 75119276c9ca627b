// The device passes' host side (docs/design.md section 5; docs/backends.md): what the CUDA
// backend and its host emulation share. The per-point arithmetic and the schedule are
// src/model/device/device_point.h and device_schedule.h; this header turns a PassPoint and a
// call's batches into their plain inputs, and the launch's block sums into the per-batch sums of
// the PassBackend interface.
//
// Backends built on it:
//   - the host emulation (MakeEmulatedPassBackend): runs the device schedule sequentially on the
//     host, the same blocks, threads, per-thread point order, reduction tree and block order as
//     a kernel launch. For tests only (docs/backends.md): no config value selects it.
//   - the CUDA backend (MakeCudaPassBackend, cuda_pass_backend.cc): the kernels of
//     cuda/pass_kernels.cu.
// Modes: static, laminar_flow and two_component (each its own kernel instantiation,
// device_schedule.h HomodyneDeviceMode, TwoComponentDeviceMode); Prepare throws NotCompiledError
// for another mode (the self-check, backend_self_check.h, then falls back to the CPU under
// backend auto).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <Eigen/Dense>

#include "model/device/device_schedule.h"
#include "objective/pass_backend.h"

namespace homodyne {

// The plain inputs of the device passes at one point: the model's tables (owned here), the
// angles' terms and the loss.
struct DevicePassInputs {
  bool laminar = false;
  bool two_component = false;  // then only gram_size, the two_component_* members and loss
  int gram_size = 0;  // M + 1
  double diffusion_prefactor = 0.0;
  std::vector<double> cumulative_diffusion;              // N
  std::vector<double> cumulative_diffusion_derivatives;  // 3 N
  std::vector<double> cumulative_shear;                  // N (laminar_flow)
  std::vector<double> cumulative_shear_derivatives;      // 3 N (laminar_flow)
  std::vector<device_pass::AngleTerms> angles;
  device_pass::LossTerms loss;
  // two_component (device_two_component.h): the tables' one array (TwoComponentTablesAt layout),
  // the model's N and q^2 / 2, and the angles' terms.
  std::vector<double> two_component_arrays;
  int num_times = 0;
  double transport_prefactor = 0.0;
  std::vector<device_pass::TwoComponentAngleTerms> two_component_angles;
  // The tables as the schedule reads them, pointing into this object's vectors.
  device_pass::ModelTables HostTables() const;
  device_pass::TwoComponentTables HostTwoComponentTables() const;
  int num_angles() const {
    return static_cast<int>(two_component ? two_component_angles.size() : angles.size());
  }
};

// The inputs at point: the tables of ModelEvaluation (docs/model.md, The time integrals) computed
// by the same arithmetic as the CPU's, the angles' coefficients as the CPU kernel's (two_component:
// those of TwoComponentPoint, two_component_point.cc). Throws NotCompiledError naming the mode when
// it is none of static, laminar_flow and two_component.
DevicePassInputs MakeDevicePassInputs(const PassPoint& point);

// The jobs of a call: job i * num_angles + k is batch i's angle k (the PreparedPass layout).
std::vector<device_pass::PassJob> MakePassJobs(int num_times, std::span<const RowBatch> batches,
                                               std::span<const float* const> data, int num_angles);

// Block sums of a full pass, job after job, block after block, each TriangleEntries(gram_size) + 1
// doubles (device_schedule.h ThreadGramPartial), into the jobs' Gram matrices (lower triangle and
// diagonal, the upper triangle zero) and finite counts, adding each job's blocks in block order.
void GramsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int gram_size,
                        std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points);

// Block sums of a cost pass (one double per block, job after job) into the batches' sums: each
// job's blocks in block order, then a batch's angles in angle order.
void CostsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int num_angles,
                        std::span<double> squared_residuals);

// What a device backend's PreparedPass shares: the inputs at the point, the jobs of a call
// (MakePassJobs), and the launch's block sums reduced in block order (GramsFromBlockSums,
// CostsFromBlockSums). A backend supplies the two launches: the CUDA kernels or their emulation.
class DevicePreparedPass : public PreparedPass {
 public:
  DevicePreparedPass(const PassPoint& point, device_pass::LaunchGeometry geometry);

  int gram_size() const override { return inputs_.gram_size; }
  void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                    std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override;
  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override;

 protected:
  // The block sums of a full pass (resp. a cost pass) over `jobs` (never empty) into block_sums,
  // in the layout GramsFromBlockSums (resp. CostsFromBlockSums) reads.
  virtual void LaunchGrams(std::span<const device_pass::PassJob> jobs,
                           std::vector<double>& block_sums) = 0;
  virtual void LaunchCosts(std::span<const device_pass::PassJob> jobs,
                           std::vector<double>& block_sums) = 0;

  const DevicePassInputs& inputs() const { return inputs_; }
  const device_pass::LaunchGeometry& geometry() const { return geometry_; }
  int num_angles() const { return inputs_.num_angles(); }

 private:
  const DevicePassInputs inputs_;
  const device_pass::LaunchGeometry geometry_;
  const int num_times_;
  std::vector<double> block_sums_;  // the last launch's output
};

// The host emulation of the CUDA backend at `geometry` (IsValidGeometry; checked). kind() reports
// kCuda: it stands for the CUDA backend wherever a test needs one without a device.
std::shared_ptr<PassBackend> MakeEmulatedPassBackend(
    device_pass::LaunchGeometry geometry = device_pass::LaunchGeometry());

// The default launch geometry of the CUDA backend: 1 block of 128 threads per job (a batch's
// angle): a batch of 1e4 points gives each thread about 78 points, so the block's reduction tree
// (56 entries, 7 steps each) stays a small part of the work (docs/backends.md, Expected speed).
inline constexpr device_pass::LaunchGeometry kCudaLaunchGeometry{1, 128};

// The CUDA backend on device `device` (cuda/pass_kernels.cu through cuda_pass_runner.h): the
// schedule of the host emulation at `geometry`, on the device. kind() is kCuda. Throws Error when
// the device cannot be used, NotCompiledError in a build without CUDA. Used behind its self-check
// (backend_self_check.h; SelectBackend).
std::shared_ptr<PassBackend> MakeCudaPassBackend(
    int device, device_pass::LaunchGeometry geometry = kCudaLaunchGeometry);

}  // namespace homodyne
