// The host emulation of the CUDA backend (device_pass_backend.h): the kernels' schedule
// (src/model/device/device_schedule.h) run sequentially, thread after thread of each block, then
// the block's reduction tree step after step, then the blocks in block order. It computes every
// sum in the order a launch does, so it verifies the kernels' arithmetic and schedule on a machine
// without a GPU (docs/backends.md). Compiled with contraction off (device_point.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "homodyne/errors.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

using device_pass::LaunchGeometry;
using device_pass::PassJob;

// One launch of the full-pass kernel over `jobs`, emulated: block_sums receives, job after job and
// block after block, each block's TriangleEntries + 1 sums (device_schedule.h).
template <class Mode>
void EmulateGramLaunch(const typename Mode::Tables& tables,
                       std::span<const typename Mode::Angle> angles,
                       const device_pass::LossTerms& loss, std::span<const PassJob> jobs,
                       const LaunchGeometry& geometry, std::vector<double>& block_sums) {
  constexpr int kStride = Mode::Shape::kTriangle + 1;
  const int threads = geometry.threads_per_block;
  const int blocks = geometry.blocks_per_job;
  const int64_t thread_stride = static_cast<int64_t>(blocks) * threads;
  block_sums.assign(jobs.size() * static_cast<size_t>(blocks) * kStride, 0.0);
  std::vector<double> partials(static_cast<size_t>(threads) * kStride);
  std::vector<double> values(static_cast<size_t>(threads));
  for (size_t job = 0; job < jobs.size(); ++job) {
    const typename Mode::Angle& angle = angles[static_cast<size_t>(jobs[job].angle)];
    for (int block = 0; block < blocks; ++block) {
      std::fill(partials.begin(), partials.end(), 0.0);
      for (int t = 0; t < threads; ++t) {
        device_pass::ThreadGramPartial<Mode>(
            tables, angle, loss, jobs[job], static_cast<int64_t>(block) * threads + t,
            thread_stride, partials.data() + static_cast<size_t>(t) * kStride);
      }
      double* out = block_sums.data() + (job * blocks + static_cast<size_t>(block)) * kStride;
      for (int entry = 0; entry < kStride; ++entry) {
        for (int t = 0; t < threads; ++t) {
          values[static_cast<size_t>(t)] = partials[static_cast<size_t>(t) * kStride + entry];
        }
        for (int stride = threads / 2; stride > 0; stride /= 2) {
          for (int t = 0; t < stride; ++t) device_pass::TreeStep(values.data(), t, stride);
        }
        out[entry] = values[0];
      }
    }
  }
}

// One launch of the cost kernel over `jobs`, emulated: block_sums receives one sum per block, job
// after job.
template <class Mode>
void EmulateCostLaunch(const typename Mode::Tables& tables,
                       std::span<const typename Mode::Angle> angles,
                       const device_pass::LossTerms& loss, std::span<const PassJob> jobs,
                       const LaunchGeometry& geometry, std::vector<double>& block_sums) {
  const int threads = geometry.threads_per_block;
  const int blocks = geometry.blocks_per_job;
  const int64_t thread_stride = static_cast<int64_t>(blocks) * threads;
  block_sums.assign(jobs.size() * static_cast<size_t>(blocks), 0.0);
  std::vector<double> values(static_cast<size_t>(threads));
  for (size_t job = 0; job < jobs.size(); ++job) {
    const typename Mode::Angle& angle = angles[static_cast<size_t>(jobs[job].angle)];
    for (int block = 0; block < blocks; ++block) {
      for (int t = 0; t < threads; ++t) {
        values[static_cast<size_t>(t)] = 0.0;
        device_pass::ThreadCostPartial<Mode>(tables, angle, loss, jobs[job],
                                             static_cast<int64_t>(block) * threads + t,
                                             thread_stride, &values[static_cast<size_t>(t)]);
      }
      for (int stride = threads / 2; stride > 0; stride /= 2) {
        for (int t = 0; t < stride; ++t) device_pass::TreeStep(values.data(), t, stride);
      }
      block_sums[job * blocks + static_cast<size_t>(block)] = values[0];
    }
  }
}

class EmulatedPreparedPass : public DevicePreparedPass {
 public:
  EmulatedPreparedPass(const PassPoint& point, LaunchGeometry geometry)
      : DevicePreparedPass(point, geometry) {}

 protected:
  void LaunchGrams(std::span<const PassJob> jobs, std::vector<double>& block_sums) override {
    const DevicePassInputs& in = inputs();
    if (in.two_component) {
      EmulateGramLaunch<device_pass::TwoComponentDeviceMode>(
          in.HostTwoComponentTables(),
          std::span<const device_pass::TwoComponentAngleTerms>(in.two_component_angles), in.loss,
          jobs, geometry(), block_sums);
    } else if (in.laminar) {
      EmulateGramLaunch<device_pass::HomodyneDeviceMode<true>>(
          in.HostTables(), std::span<const device_pass::AngleTerms>(in.angles), in.loss, jobs,
          geometry(), block_sums);
    } else {
      EmulateGramLaunch<device_pass::HomodyneDeviceMode<false>>(
          in.HostTables(), std::span<const device_pass::AngleTerms>(in.angles), in.loss, jobs,
          geometry(), block_sums);
    }
  }

  void LaunchCosts(std::span<const PassJob> jobs, std::vector<double>& block_sums) override {
    const DevicePassInputs& in = inputs();
    if (in.two_component) {
      EmulateCostLaunch<device_pass::TwoComponentDeviceMode>(
          in.HostTwoComponentTables(),
          std::span<const device_pass::TwoComponentAngleTerms>(in.two_component_angles), in.loss,
          jobs, geometry(), block_sums);
    } else if (in.laminar) {
      EmulateCostLaunch<device_pass::HomodyneDeviceMode<true>>(
          in.HostTables(), std::span<const device_pass::AngleTerms>(in.angles), in.loss, jobs,
          geometry(), block_sums);
    } else {
      EmulateCostLaunch<device_pass::HomodyneDeviceMode<false>>(
          in.HostTables(), std::span<const device_pass::AngleTerms>(in.angles), in.loss, jobs,
          geometry(), block_sums);
    }
  }
};

class EmulatedPassBackend : public PassBackend {
 public:
  explicit EmulatedPassBackend(LaunchGeometry geometry) : geometry_(geometry) {
    HOMODYNE_CHECK(device_pass::IsValidGeometry(geometry));
  }
  BackendKind kind() const override { return BackendKind::kCuda; }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override {
    return std::make_unique<EmulatedPreparedPass>(point, geometry_);
  }

 private:
  const LaunchGeometry geometry_;
};

}  // namespace

std::shared_ptr<PassBackend> MakeEmulatedPassBackend(LaunchGeometry geometry) {
  return std::make_shared<EmulatedPassBackend>(geometry);
}

}  // namespace homodyne
