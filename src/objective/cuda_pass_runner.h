// The core's door to the CUDA kernels of the device passes (docs/design.md section 5): plain C++,
// no CUDA types, as cuda_device_query.h. Defined by cuda/pass_kernels.cu in a build with CUDA
// (HOMODYNE_WITH_CUDA) and by cuda_pass_runner_stub.cc otherwise.
//
// A runner owns one device's buffers (RAII; every CUDA call checked, docs/conventions.md habit
// 8): the point's tables and angles, uploaded by SetPoint; two pinned host staging buffers and two
// device data buffers, through which a launch's streamed data go in parts (the next part's copy
// overlaps the current part's kernel, on two streams); and the block sums. One launch per part of
// a call's jobs; the block sums come back in job order (device_schedule.h). Data resident on the
// device (AllocateResident, UploadResident; kept by the caller's ResidentDataCache) are read in
// place and take no part's room: a call on resident data only is one launch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/device/device_schedule.h"

namespace homodyne::cuda {

class PassRunner {
 public:
  virtual ~PassRunner() = default;

  // Uploads a point: its mode (an index into device_pass::DeviceModes,
  // src/model/device/device_modes.h), its tables (their scalars and one array of table_doubles
  // values, in the layout of the mode's TablesAt), its angles (num_angles values of the mode's
  // Angle, angle_bytes bytes in all) and its loss. Later runs use them (the mode's kernels).
  virtual void SetPoint(int mode, const device_pass::TableScalars& scalars, const double* tables,
                        int64_t table_doubles, const void* angles, int num_angles,
                        size_t angle_bytes, const device_pass::LossTerms& loss) = 0;

  // The full-pass kernel over jobs[0, num_jobs): block_sums receives, job after job, block after
  // block, TriangleEntries(gram size) + 1 doubles per block (device_schedule.h). A job whose
  // resident[i] is nonzero reads its data where its pointer says, on the device (an array of
  // UploadResident); the others' pointers are host pointers, whose values the runner copies to
  // the device through the pinned staging buffers (the parts count only those values).
  virtual void RunGrams(const device_pass::PassJob* jobs, const unsigned char* resident,
                        int num_jobs, const device_pass::LaunchGeometry& geometry,
                        std::vector<double>& block_sums) = 0;

  // The kernel of the full pass through per-frame sums over jobs[0, num_jobs) (a mode with
  // kDataSums, device_modes.h): block_sums receives, job after job, block after block, the mode's
  // DataSums doubles per block (device_schedule.h ThreadDataPartial); resident as RunGrams.
  virtual void RunDataSums(const device_pass::PassJob* jobs, const unsigned char* resident,
                           int num_jobs, const device_pass::LaunchGeometry& geometry,
                           std::vector<double>& block_sums) = 0;

  // The cost kernel over jobs[0, num_jobs): one double per block, job after job.
  virtual void RunCosts(const device_pass::PassJob* jobs, const unsigned char* resident,
                        int num_jobs, const device_pass::LaunchGeometry& geometry,
                        std::vector<double>& block_sums) = 0;

  // Resident data (device_pass_backend.h ResidentDataCache). The device's free memory
  // (cudaMemGetInfo), in bytes.
  virtual int64_t FreeMemoryBytes() = 0;
  // cudaMalloc of `values` floats; throws Error naming the call when it fails.
  virtual float* AllocateResident(int64_t values) = 0;
  // Copies count arrays: values[i] floats from hosts[i] to devices[i] (inside AllocateResident
  // arrays); complete on return (the device synchronised, as SetPoint).
  virtual void UploadResident(float* const* devices, const float* const* hosts,
                              const int64_t* values, int count) = 0;
  // cudaFree of an AllocateResident array. Does not throw: a failure is written to stderr.
  virtual void FreeResident(float* array) = 0;

  // "NAME (X GiB), sm_XY" of the runner's device.
  virtual const std::string& device_description() const = 0;
};

// A runner on CUDA device `device`. Throws Error naming the CUDA call and the runtime's text when
// the device cannot be used; the stub (a build without CUDA) throws NotCompiledError.
std::unique_ptr<PassRunner> MakePassRunner(int device);

}  // namespace homodyne::cuda
