// The device passes' host side (docs/design.md section 5; docs/backends.md): what the CUDA
// backend and its host emulation share. The per-point arithmetic is each mode's (its device
// traits, src/model/device/device_modes.h) and the schedule src/model/device/device_schedule.h;
// this header turns a PassPoint and a call's batches into their plain inputs, and the launch's
// block sums into the per-batch sums of the PassBackend interface.
//
// Backends built on it:
//   - the host emulation (MakeEmulatedPassBackend, emulated_pass_backend.h): runs the device
//     schedule sequentially on the host, the same blocks, threads, per-thread point order,
//     reduction tree and block order as a kernel launch. For tests only (docs/backends.md): it is
//     compiled into the test library homodyne_testing, not into homodyne_objective.
//   - the CUDA backend (MakeCudaPassBackend, cuda_pass_backend.cc): the kernels of
//     cuda/pass_kernels.cu.
// Modes: those of src/model/device/device_modes.h (DeviceModes; each its own kernel
// instantiation), with no per-mode code here or in the backends; Prepare throws NotCompiledError
// for another mode (the self-check, backend_self_check.h, then falls back to the CPU under backend
// auto).
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "homodyne/errors.h"
#include "model/device/device_modes.h"
#include "objective/pass_backend.h"

namespace homodyne {

// The plain inputs of the device passes at one point, every mode's: the mode (its index in
// device_pass::DeviceModes), the tables' scalars and one array (owned here, in the layout of the
// mode's TablesAt), the angles' terms as bytes (the mode's Angle, trivially copyable), and the
// loss. Made by the mode's MakeInputs (src/model/device/device_modes.h).
struct DevicePassInputs {
  int mode = -1;      // index into device_pass::DeviceModes
  int gram_size = 0;  // M + 1: the mode's Shape::kGramSize
  device_pass::TableScalars scalars;
  std::vector<double> tables;
  std::vector<unsigned char> angles;  // angle_count values of the mode's Angle
  int angle_count = 0;
  device_pass::LossTerms loss;
  // The mode's per-row sums where its full pass goes through per-frame sums at this point
  // (device_pass::DeviceInputs::row_sums: the static mode under the linear loss, where the CPU's
  // pass does); host only, never copied to a device. Empty: the point-by-point Gram.
  std::vector<double> row_sums;
  bool per_frame() const { return !row_sums.empty(); }
  int num_angles() const { return angle_count; }
  // The angles' terms as the mode's Angle (Mode::Angle, the type they were made as).
  template <class Angle>
  std::vector<Angle> AnglesAs() const {
    HOMODYNE_CHECK(angles.size() == static_cast<size_t>(angle_count) * sizeof(Angle));
    std::vector<Angle> typed(static_cast<size_t>(angle_count));
    if (!angles.empty()) std::memcpy(typed.data(), angles.data(), angles.size());
    return typed;
  }
};

// The inputs at point: the mode's MakeInputs (its tables computed by the same arithmetic as the
// CPU's, the angles' coefficients as the CPU kernel's). Throws NotCompiledError naming the mode
// when it is none of device_pass::DeviceModes.
DevicePassInputs MakeDevicePassInputs(const PassPoint& point);

// The jobs of a call: job i * num_angles + k is batch i's angle k (the PreparedPass layout).
std::vector<device_pass::PassJob> MakePassJobs(int num_times, std::span<const RowBatch> batches,
                                               std::span<const float* const> data, int num_angles);

// Block sums of a full pass, job after job, block after block, each TriangleEntries(gram_size) + 1
// doubles (device_schedule.h ThreadGramPartial), into the jobs' Gram matrices (lower triangle and
// diagonal, the upper triangle zero) and finite counts, adding each job's blocks in block order.
void GramsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int gram_size,
                        std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points);

// Block sums of a full pass through per-frame sums (inputs.per_frame(); device_schedule.h
// ThreadDataPartial: DataSums(mode) doubles per block, job after job, block after block) into the
// jobs' Gram matrices and finite counts: each job's blocks added in block order, then the mode's
// GramFromDataSums adds the data-free part from inputs.row_sums, subtracting the terms of the
// job's non-finite points, which it finds in host_data[job] (the job's values on the host).
void GramsFromDataSums(const DevicePassInputs& inputs, std::span<const device_pass::PassJob> jobs,
                       std::span<const float* const> host_data, std::span<const double> block_sums,
                       int blocks_per_job, std::span<Eigen::MatrixXd> grams,
                       std::span<int64_t> finite_points);

// Block sums of a cost pass (one double per block, job after job) into the batches' sums: each
// job's blocks in block order, then a batch's angles in angle order.
void CostsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int num_angles,
                        std::span<double> squared_residuals);

// What a device pass computes in one launch: the full pass (Gram matrices point by point), the
// full pass through per-frame sums (the points' data terms: DevicePassInputs::per_frame()) or the
// cost pass.
enum class DevicePassKind { kGrams, kDataSums, kCosts };

// One device of a device backend: the CUDA device of cuda_pass_backend.cc, or its host emulation
// (emulated_pass_backend.cc). Used by one thread at a time (a call's shares run on one thread per
// device).
class PassDevice {
 public:
  virtual ~PassDevice() = default;

  // "device K: NAME (X GiB), sm_XY" (or the emulation's), for the log.
  virtual const std::string& description() const = 0;

  // Resident data (ResidentDataCache). Bytes the device can give resident data now: CUDA:
  // cudaMemGetInfo's free memory less kCudaResidentReserveBytes; the emulation: its configured
  // memory less what it holds.
  virtual int64_t FreeResidentBytes() = 0;
  // A device array of `values` floats (values >= 1); throws Error when the device cannot
  // allocate it.
  virtual float* AllocateResident(int64_t values) = 0;
  // One array's upload: `values` floats from `host` to `device_values` (inside an
  // AllocateResident array).
  struct Upload {
    float* device_values = nullptr;
    const float* host = nullptr;
    int64_t values = 0;
  };
  // The uploads, complete on return (later launches read them).
  virtual void UploadResident(std::span<const Upload> uploads) = 0;
  // Frees an array of AllocateResident. Does not throw (a failure is logged).
  virtual void FreeResident(float* device_array) = 0;

  // The `kind` kernel over `jobs` (never empty) at the point `inputs`, whose tables the device
  // uploads when point_serial differs from the last launch's (a serial is never reused).
  // jobs[i].data is the device address of resident data when resident[i] != 0, else a host
  // address whose values the device copies for this launch (the pinned double-buffered path of
  // cuda_pass_runner.h). block_sums receives what GramsFromBlockSums (kGrams), GramsFromDataSums
  // (kDataSums) or CostsFromBlockSums (kCosts) read, for these jobs.
  virtual void Launch(DevicePassKind kind, const DevicePassInputs& inputs, uint64_t point_serial,
                      std::span<const device_pass::PassJob> jobs, std::span<const uint8_t> resident,
                      const device_pass::LaunchGeometry& geometry,
                      std::vector<double>& block_sums) = 0;
};

// The resident data of one device: device copies of stable data (pass_backend.h
// PassPoint::stable_data_id), uploaded the first time a call uses them and read by every later
// call in place of a copy. The contract:
//   - An array is cached under the key (stable data id, host pointer, points). The id is unique
//     in the process and never reused (NewStableDataId), and data whose values change take a new
//     id (InMemoryPassData::KeepOnly), so an array of other data at a reused address, or replaced
//     values, can never be mistaken for a cached array; within one id the values behind a pointer
//     never change (the PassData contract).
//   - One id at a time: a call on another nonzero id first frees every array of the previous one
//     (the global phase's subsample, then the strategy's data, one after the other).
//   - Memory: the arrays a call lacks are uploaded together, in one allocation, when they fit in
//     FreeResidentBytes(). When they do not, these data get no further uploads on this device:
//     their arrays not yet resident are copied for every launch from then on, and one warning
//     says so ("... copied to the device on every pass"). The arrays already resident stay.
//   - id 0 (buffers reused from call to call: streaming): nothing is cached or freed; every array
//     is copied for each launch.
// The sums do not depend on where the values come from (the same floats), so a pass gives bitwise
// the same result with and without the cache.
class ResidentDataCache {
 public:
  explicit ResidentDataCache(PassDevice& device) : device_(device) {}
  ResidentDataCache(const ResidentDataCache&) = delete;
  ResidentDataCache& operator=(const ResidentDataCache&) = delete;
  ~ResidentDataCache();  // frees the device arrays

  // For a call on data of stable_data_id: resident[i] = 1 and jobs[i].data = the device copy for
  // every job whose array is (or now becomes) resident; resident[i] = 0 and jobs[i] unchanged for
  // the others.
  void Resolve(uint64_t stable_data_id, std::span<device_pass::PassJob> jobs,
               std::vector<uint8_t>& resident);

  int64_t resident_arrays() const { return static_cast<int64_t>(arrays_.size()); }
  int64_t resident_bytes() const { return resident_bytes_; }

 private:
  void FreeAll();

  PassDevice& device_;
  uint64_t id_ = 0;    // the data whose arrays are held (0: none)
  bool full_ = false;  // these data's arrays no longer fit: no further uploads
  std::map<std::pair<const float*, int64_t>, const float*> arrays_;  // (host, points) -> device
  std::vector<float*> allocations_;
  int64_t resident_bytes_ = 0;
};

// A device backend on one or several devices (the CUDA backend, its host emulation). Its
// PreparedPass computes a call's batches split into contiguous shares of about equal points,
// one per device in device order (a device with no share takes no part), the shares on one host
// thread per device at once; each device's block sums go to their jobs' places, and the
// batches' sums are added in block order on the host (GramsFromBlockSums, CostsFromBlockSums).
// A job's block sums depend only on the job, so the per-batch sums are bitwise the same for any
// number of devices, and so is every pass the objective reduces from them in batch order.
class DevicePassBackend : public PassBackend {
 public:
  // devices: at least one. geometry: IsValidGeometry (checked).
  DevicePassBackend(std::vector<std::unique_ptr<PassDevice>> devices,
                    device_pass::LaunchGeometry geometry);
  BackendKind kind() const override { return BackendKind::kCuda; }
  std::unique_ptr<PreparedPass> Prepare(const PassPoint& point) override;

  int num_devices() const;
  PassDevice& device(int index) const;
  const ResidentDataCache& cache(int index) const;
  // A backend on device `index` alone, sharing the device and its resident data with this one:
  // what the self-check compares device by device (backend_self_check.h). Used, as this one, one
  // pass at a time.
  std::shared_ptr<PassBackend> OnDevice(int index) const;

  struct Devices;  // the devices and their caches, shared with the passes

 private:
  DevicePassBackend(std::shared_ptr<Devices> devices, device_pass::LaunchGeometry geometry);

  const std::shared_ptr<Devices> devices_;
  const device_pass::LaunchGeometry geometry_;
};

// The shares of a call's batches on `num_devices` devices: device d computes batches
// [bounds[d], bounds[d + 1]) (num_devices + 1 entries, bounds[0] = 0, the last batches.size()),
// contiguous runs of about equal points; depends only on the batches' points and the count.
std::vector<int> DeviceShareBounds(std::span<const RowBatch> batches, int num_devices);

// The default launch geometry of the CUDA backend: 1 block of 128 threads per job (a batch's
// angle): a batch of 1e4 points gives each thread about 78 points, so the block's reduction tree
// (56 entries, 7 steps each) stays a small part of the work (docs/backends.md, Expected speed).
inline constexpr device_pass::LaunchGeometry kCudaLaunchGeometry{1, 128};

// Device memory the CUDA backend leaves to the pass buffers (two 64 MiB parts of data, their
// staging, jobs and block sums) and the runtime when it decides whether resident data fit
// (cudaMemGetInfo's free memory less this).
inline constexpr int64_t kCudaResidentReserveBytes = int64_t{512} << 20;

// The CUDA backend on CUDA devices `devices` (indices, at least one, no repeats;
// cuda/pass_kernels.cu through cuda_pass_runner.h): a DevicePassBackend running the schedule of the
// host emulation at `geometry` on each. kind() is kCuda. Throws Error naming the CUDA call when a
// device cannot be used (SelectBackend names the devices), NotCompiledError in a build without
// CUDA. Used behind its self-check
// (backend_self_check.h; SelectBackend).
std::shared_ptr<PassBackend> MakeCudaPassBackend(
    std::vector<int> devices, device_pass::LaunchGeometry geometry = kCudaLaunchGeometry);

}  // namespace homodyne
