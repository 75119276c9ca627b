// The device backends' common part (device_pass_backend.h): the resident data of each device,
// the split of a call's batches over the devices, and the block sums into per-batch sums.
#include "objective/device_pass_backend.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "homodyne/errors.h"

namespace homodyne {
namespace {

using device_pass::LaunchGeometry;
using device_pass::PassJob;

constexpr double kMiB = 1024.0 * 1024.0;

// A serial no earlier prepared pass of this process had: what a device compares to know whether
// it holds a pass's point.
uint64_t NewPointSerial() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

}  // namespace

ResidentDataCache::~ResidentDataCache() { FreeAll(); }

void ResidentDataCache::FreeAll() {
  for (float* allocation : allocations_) device_.FreeResident(allocation);
  allocations_.clear();
  arrays_.clear();
  resident_bytes_ = 0;
}

void ResidentDataCache::Resolve(uint64_t stable_data_id, std::span<PassJob> jobs,
                                std::vector<uint8_t>& resident) {
  resident.assign(jobs.size(), 0);
  if (stable_data_id == 0) return;  // reused buffers: copied for each launch
  if (stable_data_id != id_) {      // other data: the previous data's arrays are never used again
    FreeAll();
    id_ = stable_data_id;
    full_ = false;
  }
  std::vector<size_t> missing;
  int64_t missing_values = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto found = arrays_.find({jobs[i].data, jobs[i].points});
    if (found != arrays_.end()) {
      jobs[i].data = found->second;
      resident[i] = 1;
    } else if (jobs[i].points > 0) {
      missing.push_back(i);
      missing_values += jobs[i].points;
    }
  }
  if (missing.empty() || full_) return;
  const int64_t bytes = missing_values * static_cast<int64_t>(sizeof(float));
  const int64_t free_bytes = device_.FreeResidentBytes();
  float* allocation = nullptr;
  if (bytes <= free_bytes) {
    try {
      allocation = device_.AllocateResident(missing_values);
    } catch (const Error& error) {
      spdlog::debug("{}: resident data: {}", device_.description(), error.what());
    }
  }
  if (allocation == nullptr) {
    full_ = true;
    spdlog::warn(
        "{}: device memory cannot hold the fit's data resident ({:.1f} MiB resident, {:.1f} MiB "
        "more needed by this chunk, {:.1f} MiB free for them): the batches not yet on the device "
        "are copied to the device on every pass",
        device_.description(), static_cast<double>(resident_bytes_) / kMiB,
        static_cast<double>(bytes) / kMiB,
        static_cast<double>(std::max<int64_t>(free_bytes, 0)) / kMiB);
    return;
  }
  allocations_.push_back(allocation);
  resident_bytes_ += bytes;
  std::vector<PassDevice::Upload> uploads;
  uploads.reserve(missing.size());
  int64_t at = 0;
  for (const size_t i : missing) {
    uploads.push_back({allocation + at, jobs[i].data, jobs[i].points});
    at += jobs[i].points;
  }
  device_.UploadResident(uploads);
  for (size_t u = 0; u < missing.size(); ++u) {
    PassJob& job = jobs[missing[u]];
    arrays_.emplace(std::pair{job.data, job.points}, uploads[u].device_values);
    job.data = uploads[u].device_values;
    resident[missing[u]] = 1;
  }
}

std::vector<int> DeviceShareBounds(std::span<const RowBatch> batches, int num_devices) {
  HOMODYNE_CHECK(num_devices >= 1);
  int64_t total = 0;
  for (const RowBatch& batch : batches) total += batch.points;
  std::vector<int> bounds(static_cast<size_t>(num_devices) + 1, static_cast<int>(batches.size()));
  bounds[0] = 0;
  // Device d starts at the first batch whose preceding points reach d / num_devices of the total.
  int64_t before = 0;
  int device = 1;
  for (size_t b = 0; b < batches.size() && device < num_devices; ++b) {
    while (device < num_devices && before * num_devices >= total * device) {
      bounds[static_cast<size_t>(device++)] = static_cast<int>(b);
    }
    before += batches[b].points;
  }
  return bounds;
}

struct DevicePassBackend::Devices {
  struct Slot {
    std::unique_ptr<PassDevice> device;
    std::unique_ptr<ResidentDataCache> cache;  // destroyed before the device
  };
  std::vector<std::shared_ptr<Slot>> slots;  // shared with the single-device views (OnDevice)
};

namespace {

// A device backend's pass at one point: the inputs at the point, the jobs of a call split over
// the devices, the block sums reduced in block order.
class DevicePreparedPass final : public PreparedPass {
 public:
  DevicePreparedPass(const PassPoint& point, LaunchGeometry geometry,
                     std::shared_ptr<DevicePassBackend::Devices> devices)
      : inputs_(MakeDevicePassInputs(point)),
        geometry_(geometry),
        num_times_(point.evaluation->model().num_times()),
        stable_data_id_(point.stable_data_id),
        point_serial_(NewPointSerial()),
        devices_(std::move(devices)),
        shares_(devices_->slots.size()) {}

  int gram_size() const override { return inputs_.gram_size; }

  void ComputeGrams(std::span<const RowBatch> batches, std::span<const float* const> data,
                    std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) override {
    std::vector<PassJob> jobs = MakePassJobs(num_times_, batches, data, inputs_.num_angles());
    HOMODYNE_CHECK(grams.size() == jobs.size() && finite_points.size() == jobs.size());
    if (jobs.empty()) return;
    // Through per-frame sums where the mode's inputs hold them (the static mode under the linear
    // loss where the CPU's pass does: docs/design.md section 2), else point by point.
    if (inputs_.per_frame()) {
      Run(DevicePassKind::kDataSums, batches, jobs);
      GramsFromDataSums(inputs_, jobs, data, block_sums_, geometry_.blocks_per_job, grams,
                        finite_points);
      return;
    }
    Run(DevicePassKind::kGrams, batches, jobs);
    GramsFromBlockSums(block_sums_, geometry_.blocks_per_job, inputs_.gram_size, grams,
                       finite_points);
  }

  void ComputeSquaredResiduals(std::span<const RowBatch> batches,
                               std::span<const float* const> data,
                               std::span<double> squared_residuals) override {
    std::vector<PassJob> jobs = MakePassJobs(num_times_, batches, data, inputs_.num_angles());
    HOMODYNE_CHECK(squared_residuals.size() == batches.size());
    if (jobs.empty()) return;
    Run(DevicePassKind::kCosts, batches, jobs);
    CostsFromBlockSums(block_sums_, geometry_.blocks_per_job, inputs_.num_angles(),
                       squared_residuals);
  }

 private:
  // What one device computes of a call: its jobs' resident flags and block sums.
  struct Share {
    std::vector<uint8_t> resident;
    std::vector<double> block_sums;
  };

  // The block sums of every job into block_sums_, in job order: each device's share of the
  // batches (DeviceShareBounds) on its own thread when several devices have one.
  void Run(DevicePassKind kind, std::span<const RowBatch> batches, std::vector<PassJob>& jobs) {
    const int num_devices = static_cast<int>(devices_->slots.size());
    const size_t angles = static_cast<size_t>(inputs_.num_angles());
    size_t per_block = 1;  // kCosts
    if (kind == DevicePassKind::kGrams) {
      per_block = static_cast<size_t>(device_pass::TriangleEntries(inputs_.gram_size)) + 1;
    } else if (kind == DevicePassKind::kDataSums) {
      per_block = static_cast<size_t>(device_pass::DeviceModes::DataSums(inputs_.mode));
    }
    const size_t per_job = static_cast<size_t>(geometry_.blocks_per_job) * per_block;
    block_sums_.assign(jobs.size() * per_job, 0.0);
    const std::vector<int> bounds = DeviceShareBounds(batches, num_devices);
    auto run_share = [&](int d) {
      const size_t first = static_cast<size_t>(bounds[static_cast<size_t>(d)]) * angles;
      const size_t count = static_cast<size_t>(bounds[static_cast<size_t>(d) + 1]) * angles - first;
      DevicePassBackend::Devices::Slot& slot = *devices_->slots[static_cast<size_t>(d)];
      Share& share = shares_[static_cast<size_t>(d)];
      const std::span<PassJob> share_jobs(jobs.data() + first, count);
      slot.cache->Resolve(stable_data_id_, share_jobs, share.resident);
      slot.device->Launch(kind, inputs_, point_serial_, share_jobs, share.resident, geometry_,
                          share.block_sums);
      HOMODYNE_CHECK(share.block_sums.size() == count * per_job);
      std::copy(share.block_sums.begin(), share.block_sums.end(),
                block_sums_.begin() + static_cast<std::ptrdiff_t>(first * per_job));
    };
    std::vector<int> active;
    for (int d = 0; d < num_devices; ++d) {
      if (bounds[static_cast<size_t>(d) + 1] > bounds[static_cast<size_t>(d)]) active.push_back(d);
    }
    if (active.size() == 1) {
      run_share(active.front());
      return;
    }
    std::vector<std::exception_ptr> errors(active.size());
    std::vector<std::thread> threads;
    for (size_t a = 1; a < active.size(); ++a) {
      threads.emplace_back([&, a] {
        try {
          run_share(active[a]);
        } catch (...) {
          errors[a] = std::current_exception();
        }
      });
    }
    try {
      run_share(active.front());
    } catch (...) {
      errors[0] = std::current_exception();
    }
    for (std::thread& thread : threads) thread.join();
    for (const std::exception_ptr& error : errors) {  // the first device's in device order
      if (error) std::rethrow_exception(error);
    }
  }

  const DevicePassInputs inputs_;
  const LaunchGeometry geometry_;
  const int num_times_;
  const uint64_t stable_data_id_;
  const uint64_t point_serial_;
  const std::shared_ptr<DevicePassBackend::Devices> devices_;
  std::vector<Share> shares_;       // one per device
  std::vector<double> block_sums_;  // the last call's, every job's
};

}  // namespace

DevicePassBackend::DevicePassBackend(std::vector<std::unique_ptr<PassDevice>> devices,
                                     LaunchGeometry geometry)
    : devices_(std::make_shared<Devices>()), geometry_(geometry) {
  HOMODYNE_CHECK(!devices.empty() && device_pass::IsValidGeometry(geometry));
  for (std::unique_ptr<PassDevice>& device : devices) {
    HOMODYNE_CHECK(device != nullptr);
    auto slot = std::make_shared<Devices::Slot>();
    slot->cache = std::make_unique<ResidentDataCache>(*device);
    slot->device = std::move(device);
    devices_->slots.push_back(std::move(slot));
  }
}

DevicePassBackend::DevicePassBackend(std::shared_ptr<Devices> devices, LaunchGeometry geometry)
    : devices_(std::move(devices)), geometry_(geometry) {}

std::shared_ptr<PassBackend> DevicePassBackend::OnDevice(int index) const {
  auto one = std::make_shared<Devices>();
  one->slots.push_back(devices_->slots.at(static_cast<size_t>(index)));
  return std::shared_ptr<PassBackend>(new DevicePassBackend(std::move(one), geometry_));
}

std::unique_ptr<PreparedPass> DevicePassBackend::Prepare(const PassPoint& point) {
  if (point.columns == PassColumns::kScaling) {
    // No device kernel of its own for the scaling columns yet: the full pass's sub-blocks
    // (docs/backends.md, What does not exist yet).
    PassPoint full_point = point;
    full_point.columns = PassColumns::kAll;
    return ScalingPassFromFullPass(
        std::make_unique<DevicePreparedPass>(full_point, geometry_, devices_));
  }
  // kSummedPhysical: the device kernels keep each angle's physical block, which meets it
  // (PassColumns, batched_objective.h).
  PassPoint full_point = point;
  full_point.columns = PassColumns::kAll;
  return std::make_unique<DevicePreparedPass>(full_point, geometry_, devices_);
}

int DevicePassBackend::num_devices() const { return static_cast<int>(devices_->slots.size()); }

PassDevice& DevicePassBackend::device(int index) const {
  return *devices_->slots.at(static_cast<size_t>(index))->device;
}

const ResidentDataCache& DevicePassBackend::cache(int index) const {
  return *devices_->slots.at(static_cast<size_t>(index))->cache;
}

}  // namespace homodyne
