// The host emulation of the CUDA backend (emulated_pass_backend.h; device_pass_backend.h): the
// kernels' schedule (src/model/device/device_schedule.h), instantiated on each device mode
// (src/model/device/device_modes.h), run sequentially, thread after thread of each block, then the
// block's reduction tree step after step, then the blocks in block order. It computes every sum in
// the order a launch does, so it verifies the kernels' arithmetic and schedule on a machine
// without a GPU (docs/backends.md). Its devices model the CUDA backend's
// data movement (resident arrays, copies per launch) with counters for the tests, and several of
// them model several GPUs. Compiled with contraction off (device_point.h), into the test library
// homodyne_testing only (src/objective/CMakeLists.txt).
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/errors.h"
#include "objective/device_pass_backend.h"
#include "objective/emulated_pass_backend.h"

namespace homodyne {
namespace {

using device_pass::LaunchGeometry;
using device_pass::PassJob;

// One launch of a kernel whose threads keep kStride partial sums each over `jobs`, emulated:
// block_sums receives, job after job and block after block, each block's kStride sums, every
// entry added over the block's threads by the kernels' tree (device_schedule.h).
// thread_partial(angle, job, global_thread, thread_stride, partial) is the kernel's thread.
template <int kStride, class Angle, class ThreadPartial>
void EmulateBlockSumsLaunch(std::span<const Angle> angles, std::span<const PassJob> jobs,
                            const LaunchGeometry& geometry, std::vector<double>& block_sums,
                            ThreadPartial thread_partial) {
  const int threads = geometry.threads_per_block;
  const int blocks = geometry.blocks_per_job;
  const int64_t thread_stride = static_cast<int64_t>(blocks) * threads;
  block_sums.assign(jobs.size() * static_cast<size_t>(blocks) * kStride, 0.0);
  std::vector<double> partials(static_cast<size_t>(threads) * kStride);
  std::vector<double> values(static_cast<size_t>(threads));
  for (size_t job = 0; job < jobs.size(); ++job) {
    const Angle& angle = angles[static_cast<size_t>(jobs[job].angle)];
    for (int block = 0; block < blocks; ++block) {
      std::fill(partials.begin(), partials.end(), 0.0);
      for (int t = 0; t < threads; ++t) {
        thread_partial(angle, jobs[job], static_cast<int64_t>(block) * threads + t, thread_stride,
                       partials.data() + static_cast<size_t>(t) * kStride);
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

// One launch of the full-pass kernel over `jobs`, emulated: each block's TriangleEntries + 1 sums
// (device_schedule.h ThreadGramPartial).
template <class Mode>
void EmulateGramLaunch(const typename Mode::Tables& tables,
                       std::span<const typename Mode::Angle> angles,
                       const device_pass::LossTerms& loss, std::span<const PassJob> jobs,
                       const LaunchGeometry& geometry, std::vector<double>& block_sums) {
  EmulateBlockSumsLaunch<Mode::Shape::kTriangle + 1>(
      angles, jobs, geometry, block_sums,
      [&](const typename Mode::Angle& angle, const PassJob& job, int64_t global_thread,
          int64_t thread_stride, double* partial) {
        device_pass::ThreadGramPartial<Mode>(tables, angle, loss, job, global_thread, thread_stride,
                                             partial);
      });
}

// One launch of the kernel of the full pass through per-frame sums over `jobs`, emulated: each
// block's Mode::kDataSums sums (device_schedule.h ThreadDataPartial).
template <class Mode>
void EmulateDataLaunch(const typename Mode::Tables& tables,
                       std::span<const typename Mode::Angle> angles, std::span<const PassJob> jobs,
                       const LaunchGeometry& geometry, std::vector<double>& block_sums) {
  EmulateBlockSumsLaunch<device_pass::DataSumsOf<Mode>::value>(
      angles, jobs, geometry, block_sums,
      [&](const typename Mode::Angle& angle, const PassJob& job, int64_t global_thread,
          int64_t thread_stride, double* partial) {
        device_pass::ThreadDataPartial<Mode>(tables, angle, job, global_thread, thread_stride,
                                             partial);
      });
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

// One launch of the kernel of `kind` for the mode it is called with (DeviceModes::Visit).
struct EmulateLaunch {
  DevicePassKind kind;
  const DevicePassInputs& inputs;
  std::span<const PassJob> jobs;
  const LaunchGeometry& geometry;
  std::vector<double>& block_sums;

  template <class Mode>
  void operator()(Mode) const {
    const typename Mode::Tables tables = Mode::TablesAt(inputs.scalars, inputs.tables.data());
    const std::vector<typename Mode::Angle> angles = inputs.AnglesAs<typename Mode::Angle>();
    if (kind == DevicePassKind::kGrams) {
      EmulateGramLaunch<Mode>(tables, angles, inputs.loss, jobs, geometry, block_sums);
    } else if (kind == DevicePassKind::kDataSums) {
      if constexpr (device_pass::DataSumsOf<Mode>::value > 0) {
        EmulateDataLaunch<Mode>(tables, angles, jobs, geometry, block_sums);
      } else {
        HOMODYNE_CHECK(false);  // the mode has no full pass through per-frame sums
      }
    } else {
      EmulateCostLaunch<Mode>(tables, angles, inputs.loss, jobs, geometry, block_sums);
    }
  }
};

// An emulated device: the kernels' schedule on the host (above), and device memory modelled as
// memory of its own: resident arrays are copied into it once (UploadResident), the values of the
// other jobs into a staging copy for each launch, as the CUDA runner copies them; the launches
// read only those copies.
class EmulatedPassDevice final : public PassDevice {
 public:
  EmulatedPassDevice(int index, int64_t memory_bytes, bool faulty)
      : description_("emulated device " + std::to_string(index)),
        memory_bytes_(memory_bytes),
        faulty_(faulty) {}

  const std::string& description() const override { return description_; }

  int64_t FreeResidentBytes() override { return std::max<int64_t>(memory_bytes_ - held_bytes_, 0); }

  float* AllocateResident(int64_t values) override {
    HOMODYNE_CHECK(values >= 1);
    const int64_t bytes = values * static_cast<int64_t>(sizeof(float));
    if (bytes > FreeResidentBytes()) {
      throw Error(description_ + ": out of emulated device memory");
    }
    auto array = std::make_unique<float[]>(static_cast<size_t>(values));
    float* device_array = array.get();
    memory_.emplace(device_array, Allocation{std::move(array), values});
    held_bytes_ += bytes;
    return device_array;
  }

  void UploadResident(std::span<const Upload> uploads) override {
    for (const Upload& upload : uploads) {
      HOMODYNE_CHECK(InResidentMemory(upload.device_values, upload.values));
      std::copy(upload.host, upload.host + upload.values, upload.device_values);
      ++counters_.resident_uploads;
    }
  }

  void FreeResident(float* device_array) override {
    const auto found = memory_.find(device_array);
    HOMODYNE_CHECK(found != memory_.end());
    held_bytes_ -= found->second.values * static_cast<int64_t>(sizeof(float));
    memory_.erase(found);
  }

  void Launch(DevicePassKind kind, const DevicePassInputs& inputs, uint64_t /*point_serial*/,
              std::span<const PassJob> jobs, std::span<const uint8_t> resident,
              const LaunchGeometry& geometry, std::vector<double>& block_sums) override {
    HOMODYNE_CHECK(!jobs.empty() && resident.size() == jobs.size());
    ++counters_.launches;
    if (kind == DevicePassKind::kGrams) ++counters_.point_gram_launches;
    if (kind == DevicePassKind::kDataSums) ++counters_.data_sum_launches;
    // The launch's jobs with their data on the "device": resident arrays where they are (checked
    // to lie in this device's memory), the others copied into the staging memory.
    int64_t staged = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (resident[i] == 0) staged += jobs[i].points;
    }
    staging_.resize(static_cast<size_t>(staged));
    launch_jobs_.assign(jobs.begin(), jobs.end());
    int64_t at = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (resident[i] != 0) {
        HOMODYNE_CHECK(InResidentMemory(jobs[i].data, jobs[i].points));
        continue;
      }
      std::copy(jobs[i].data, jobs[i].data + jobs[i].points, staging_.data() + at);
      launch_jobs_[i].data = staging_.data() + at;
      at += jobs[i].points;
      ++counters_.launch_copies;
    }
    const bool launched = device_pass::DeviceModes::Visit(
        inputs.mode, EmulateLaunch{kind, inputs, launch_jobs_, geometry, block_sums});
    HOMODYNE_CHECK(launched);
    if (faulty_) {
      for (double& sum : block_sums) sum *= 1.0 + 1e-6;
    }
  }

  EmulatedDeviceCounters counters() const {
    EmulatedDeviceCounters counters = counters_;
    counters.resident_bytes = held_bytes_;
    return counters;
  }

 private:
  struct Allocation {
    std::unique_ptr<float[]> array;
    int64_t values = 0;
  };

  // Whether [data, data + values) lies inside one resident allocation.
  bool InResidentMemory(const float* data, int64_t values) const {
    auto found = memory_.upper_bound(data);
    if (found == memory_.begin()) return false;
    --found;
    const float* begin = found->first;
    return data >= begin && data + values <= begin + found->second.values;
  }

  const std::string description_;
  const int64_t memory_bytes_;
  const bool faulty_;                          // EmulatedDeviceOptions::faulty_device
  std::map<const float*, Allocation> memory_;  // resident arrays by address
  int64_t held_bytes_ = 0;
  std::vector<float> staging_;        // a launch's copied values
  std::vector<PassJob> launch_jobs_;  // a launch's jobs, data on the device
  EmulatedDeviceCounters counters_;
};

}  // namespace

std::shared_ptr<PassBackend> MakeEmulatedPassBackend(LaunchGeometry geometry,
                                                     EmulatedDeviceOptions options) {
  HOMODYNE_CHECK(device_pass::IsValidGeometry(geometry) && options.num_devices >= 1 &&
                 options.memory_bytes >= 0);
  std::vector<std::unique_ptr<PassDevice>> devices;
  for (int d = 0; d < options.num_devices; ++d) {
    devices.push_back(
        std::make_unique<EmulatedPassDevice>(d, options.memory_bytes, d == options.faulty_device));
  }
  return std::make_shared<DevicePassBackend>(std::move(devices), geometry);
}

std::vector<EmulatedDeviceCounters> EmulatedCounters(const PassBackend& emulated) {
  const auto* backend = dynamic_cast<const DevicePassBackend*>(&emulated);
  HOMODYNE_CHECK(backend != nullptr);
  std::vector<EmulatedDeviceCounters> counters;
  for (int d = 0; d < backend->num_devices(); ++d) {
    const auto* device = dynamic_cast<const EmulatedPassDevice*>(&backend->device(d));
    HOMODYNE_CHECK(device != nullptr);
    counters.push_back(device->counters());
  }
  return counters;
}

}  // namespace homodyne
