// The CUDA kernels of the device passes and their runner (src/objective/cuda_pass_runner.h;
// docs/design.md section 5). The arithmetic and the schedule are src/model/device/ (shared with
// the host emulation, which the tests compare with the CPU backend on every machine); this file
// adds only what a device needs: one CUDA thread per schedule thread, the block's reduction tree in
// shared memory, and the buffers and transfers. Compiled with --fmad=false (device_point.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "homodyne/errors.h"
#include "model/device/device_modes.h"
#include "objective/cuda_pass_runner.h"

namespace homodyne::cuda {
namespace {

using device_pass::LaunchGeometry;
using device_pass::LossTerms;
using device_pass::PassJob;
using device_pass::TableScalars;

// Every CUDA call is checked (docs/conventions.md habit 8): a failure throws Error naming the call
// and the runtime's text.
void Check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw Error(std::string("CUDA pass kernels: ") + call + ": " + cudaGetErrorString(status));
  }
}

// Where a CudaArray's memory comes from: the device (cudaMalloc) or page-locked host memory
// (cudaMallocHost: asynchronous copies).
struct DeviceMemory {
  static cudaError_t Allocate(void** data, size_t bytes) { return cudaMalloc(data, bytes); }
  static cudaError_t Free(void* data) { return cudaFree(data); }
  static constexpr const char* kAllocate = "cudaMalloc";
  static constexpr const char* kFree = "cudaFree";
};
struct PinnedHostMemory {
  static cudaError_t Allocate(void** data, size_t bytes) { return cudaMallocHost(data, bytes); }
  static cudaError_t Free(void* data) { return cudaFreeHost(data); }
  static constexpr const char* kAllocate = "cudaMallocHost";
  static constexpr const char* kFree = "cudaFreeHost";
};

// Memory of T from Memory, grown on demand (never shrunk), freed on destruction.
template <typename T, typename Memory>
class CudaArray {
 public:
  CudaArray() = default;
  CudaArray(const CudaArray&) = delete;
  CudaArray& operator=(const CudaArray&) = delete;
  ~CudaArray() {
    if (data_ != nullptr) Memory::Free(data_);
  }
  void Reserve(size_t count) {
    if (count <= capacity_) return;
    if (data_ != nullptr) Check(Memory::Free(data_), Memory::kFree);
    data_ = nullptr;
    capacity_ = 0;
    Check(Memory::Allocate(reinterpret_cast<void**>(&data_), count * sizeof(T)), Memory::kAllocate);
    capacity_ = count;
  }
  T* data() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};
template <typename T>
using DeviceArray = CudaArray<T, DeviceMemory>;
template <typename T>
using PinnedArray = CudaArray<T, PinnedHostMemory>;

class Stream {
 public:
  Stream() {
    Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { cudaStreamDestroy(stream_); }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The full-pass kernels (device_schedule.h): block blockIdx.x is block (blockIdx.x mod
// blocks_per_job) of job (blockIdx.x / blocks_per_job); each thread's partial sums, then the
// block's tree in shared memory, entry after entry, then thread 0 writes the block's sums.
// Mode: a device mode of device_modes.h (each mode its own instantiation, sized by its Gram).
// kDataTerms false: the Gram point by point (ThreadGramPartial, TriangleEntries + 1 sums per
// thread); true: the full pass through per-frame sums (ThreadDataPartial, the mode's kDataSums
// sums per thread; the host adds the data-free part, GramsFromDataSums).
template <class Mode, bool kDataTerms>
__global__ void GramKernel(typename Mode::Tables tables, const typename Mode::Angle* angles,
                           LossTerms loss, const PassJob* jobs, int blocks_per_job,
                           double* block_sums) {
  constexpr int kStride =
      kDataTerms ? device_pass::DataSumsOf<Mode>::value : Mode::Shape::kTriangle + 1;
  extern __shared__ double values[];  // blockDim.x
  const int t = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int job_index = static_cast<int>(blockIdx.x) / blocks_per_job;
  const int block = static_cast<int>(blockIdx.x) - job_index * blocks_per_job;
  const PassJob job = jobs[job_index];
  double partial[kStride];
#pragma unroll
  for (int e = 0; e < kStride; ++e) partial[e] = 0.0;
  if constexpr (kDataTerms) {
    device_pass::ThreadDataPartial<Mode>(tables, angles[job.angle], job,
                                         static_cast<int64_t>(block) * threads + t,
                                         static_cast<int64_t>(blocks_per_job) * threads, partial);
  } else {
    device_pass::ThreadGramPartial<Mode>(tables, angles[job.angle], loss, job,
                                         static_cast<int64_t>(block) * threads + t,
                                         static_cast<int64_t>(blocks_per_job) * threads, partial);
  }
  double* out = block_sums + (static_cast<int64_t>(job_index) * blocks_per_job + block) * kStride;
#pragma unroll
  for (int e = 0; e < kStride; ++e) {
    values[t] = partial[e];
    __syncthreads();
    for (int stride = threads / 2; stride > 0; stride /= 2) {
      if (t < stride) device_pass::TreeStep(values, t, stride);
      __syncthreads();
    }
    if (t == 0) out[e] = values[0];
    __syncthreads();
  }
}

// The cost kernel: one partial sum per thread, the same tree, one sum per block.
template <class Mode>
__global__ void CostKernel(typename Mode::Tables tables, const typename Mode::Angle* angles,
                           LossTerms loss, const PassJob* jobs, int blocks_per_job,
                           double* block_sums) {
  extern __shared__ double values[];  // blockDim.x
  const int t = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  const int job_index = static_cast<int>(blockIdx.x) / blocks_per_job;
  const int block = static_cast<int>(blockIdx.x) - job_index * blocks_per_job;
  const PassJob job = jobs[job_index];
  double partial = 0.0;
  device_pass::ThreadCostPartial<Mode>(tables, angles[job.angle], loss, job,
                                       static_cast<int64_t>(block) * threads + t,
                                       static_cast<int64_t>(blocks_per_job) * threads, &partial);
  values[t] = partial;
  __syncthreads();
  for (int stride = threads / 2; stride > 0; stride /= 2) {
    if (t < stride) device_pass::TreeStep(values, t, stride);
    __syncthreads();
  }
  if (t == 0) block_sums[static_cast<int64_t>(job_index) * blocks_per_job + block] = values[0];
}

// Data values copied per part of a launch (64 MiB of float32): what one staging buffer holds. A
// job larger than this is a part of its own; resident jobs copy nothing and take no room.
constexpr size_t kPartValues = size_t{1} << 24;

enum class PassKind { kGrams, kDataSums, kCosts };

// One launch of the kernel of `kind` for the mode it is called with (DeviceModes::Visit), on the
// point's tables and angles in device memory.
struct LaunchKernel {
  PassKind kind;
  unsigned grid;
  unsigned threads;
  size_t shared;
  cudaStream_t stream;
  const TableScalars& scalars;
  const double* tables;
  const void* angles;
  const LossTerms& loss;
  const PassJob* jobs;
  int blocks_per_job;
  double* block_sums;

  template <class Mode>
  void operator()(Mode) const {
    const typename Mode::Tables mode_tables = Mode::TablesAt(scalars, tables);
    const auto* mode_angles = static_cast<const typename Mode::Angle*>(angles);
    if (kind == PassKind::kGrams) {
      GramKernel<Mode, false><<<grid, threads, shared, stream>>>(mode_tables, mode_angles, loss,
                                                                 jobs, blocks_per_job, block_sums);
    } else if (kind == PassKind::kDataSums) {
      if constexpr (device_pass::DataSumsOf<Mode>::value > 0) {
        GramKernel<Mode, true><<<grid, threads, shared, stream>>>(mode_tables, mode_angles, loss,
                                                                  jobs, blocks_per_job, block_sums);
      } else {
        throw Error(std::string("CUDA pass kernels: mode ") + Mode::kName +
                    " has no full pass through per-frame sums");
      }
    } else {
      CostKernel<Mode><<<grid, threads, shared, stream>>>(mode_tables, mode_angles, loss, jobs,
                                                          blocks_per_job, block_sums);
    }
  }
};

class CudaPassRunner final : public PassRunner {
 public:
  explicit CudaPassRunner(int device) : device_(device) {
    Check(cudaSetDevice(device_), "cudaSetDevice");
    cudaDeviceProp properties{};
    Check(cudaGetDeviceProperties(&properties, device_), "cudaGetDeviceProperties");
    char text[512];
    std::snprintf(text, sizeof(text), "%s (%.1f GiB), sm_%d%d", properties.name,
                  static_cast<double>(properties.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                  properties.major, properties.minor);
    description_ = text;
    for (Slot& slot : slots_) slot.stream = std::make_unique<Stream>();
  }

  void SetPoint(int mode, const TableScalars& scalars, const double* tables, int64_t table_doubles,
                const void* angles, int num_angles, size_t angle_bytes,
                const LossTerms& loss) override {
    if (mode < 0 || mode >= device_pass::DeviceModes::kCount || table_doubles < 0 ||
        num_angles < 0) {
      throw Error("CUDA pass kernels: invalid point");
    }
    Check(cudaSetDevice(device_), "cudaSetDevice");
    mode_ = -1;  // until the uploads succeed
    tables_.Reserve(static_cast<size_t>(table_doubles));
    if (table_doubles > 0) {
      Check(cudaMemcpy(tables_.data(), tables, static_cast<size_t>(table_doubles) * sizeof(double),
                       cudaMemcpyHostToDevice),
            "cudaMemcpy tables");
    }
    angles_.Reserve(angle_bytes);
    if (angle_bytes > 0) {
      Check(cudaMemcpy(angles_.data(), angles, angle_bytes, cudaMemcpyHostToDevice),
            "cudaMemcpy angles");
    }
    // A copy from pageable memory may return before its DMA ends, and the kernels run on
    // non-blocking streams that do not wait for the default stream: wait here.
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    scalars_ = scalars;
    loss_ = loss;
    mode_ = mode;
  }

  void RunGrams(const PassJob* jobs, const unsigned char* resident, int num_jobs,
                const LaunchGeometry& geometry, std::vector<double>& block_sums) override {
    Run(PassKind::kGrams, jobs, resident, num_jobs, geometry, block_sums);
  }

  void RunDataSums(const PassJob* jobs, const unsigned char* resident, int num_jobs,
                   const LaunchGeometry& geometry, std::vector<double>& block_sums) override {
    Run(PassKind::kDataSums, jobs, resident, num_jobs, geometry, block_sums);
  }

  void RunCosts(const PassJob* jobs, const unsigned char* resident, int num_jobs,
                const LaunchGeometry& geometry, std::vector<double>& block_sums) override {
    Run(PassKind::kCosts, jobs, resident, num_jobs, geometry, block_sums);
  }

  int64_t FreeMemoryBytes() override {
    Check(cudaSetDevice(device_), "cudaSetDevice");
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    Check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    return static_cast<int64_t>(free_bytes);
  }

  float* AllocateResident(int64_t values) override {
    Check(cudaSetDevice(device_), "cudaSetDevice");
    void* array = nullptr;
    Check(cudaMalloc(&array, static_cast<size_t>(values) * sizeof(float)),
          "cudaMalloc resident data");
    return static_cast<float*>(array);
  }

  void UploadResident(float* const* devices, const float* const* hosts, const int64_t* values,
                      int count) override {
    Check(cudaSetDevice(device_), "cudaSetDevice");
    for (int i = 0; i < count; ++i) {
      Check(cudaMemcpy(devices[i], hosts[i], static_cast<size_t>(values[i]) * sizeof(float),
                       cudaMemcpyHostToDevice),
            "cudaMemcpy resident data");
    }
    // As SetPoint: the kernels' non-blocking streams do not wait for these copies.
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  void FreeResident(float* array) override {
    cudaError_t status = cudaSetDevice(device_);
    if (status == cudaSuccess) status = cudaFree(array);
    if (status != cudaSuccess) {
      std::fprintf(stderr, "CUDA pass kernels: cudaFree resident data: %s\n",
                   cudaGetErrorString(status));
    }
  }

  const std::string& device_description() const override { return description_; }

 private:
  // One of the two buffers sets a launch's parts alternate between: while one part's kernel runs
  // on its stream, the host fills the other's staging buffer and queues its copy.
  struct Slot {
    PinnedArray<float> staging;
    DeviceArray<float> data;
    PinnedArray<PassJob> host_jobs;
    DeviceArray<PassJob> jobs;
    DeviceArray<double> sums;
    PinnedArray<double> host_sums;
    std::unique_ptr<Stream> stream;
    // The part in flight: where its sums go in the caller's vector.
    bool pending = false;
    size_t out_offset = 0;
    size_t out_count = 0;
  };

  // Waits for the slot's part and copies its sums out.
  static void Finish(Slot& slot, std::vector<double>& block_sums) {
    if (!slot.pending) return;
    Check(cudaStreamSynchronize(slot.stream->get()), "cudaStreamSynchronize");
    std::memcpy(block_sums.data() + slot.out_offset, slot.host_sums.data(),
                slot.out_count * sizeof(double));
    slot.pending = false;
  }

  void Run(PassKind kind, const PassJob* jobs, const unsigned char* resident, int num_jobs,
           const LaunchGeometry& geometry, std::vector<double>& block_sums) {
    if (!device_pass::IsValidGeometry(geometry)) {
      throw Error("CUDA pass kernels: invalid launch geometry");
    }
    if (mode_ < 0) throw Error("CUDA pass kernels: no point set");
    Check(cudaSetDevice(device_), "cudaSetDevice");
    const int gram_size = device_pass::DeviceModes::GramSize(mode_);
    size_t per_block = 1;  // kCosts
    if (kind == PassKind::kGrams) {
      per_block = static_cast<size_t>(device_pass::TriangleEntries(gram_size)) + 1;
    } else if (kind == PassKind::kDataSums) {
      per_block = static_cast<size_t>(device_pass::DeviceModes::DataSums(mode_));
      if (per_block == 0) throw Error("CUDA pass kernels: the mode has no data-sum kernel");
    }
    const size_t blocks = static_cast<size_t>(geometry.blocks_per_job);
    block_sums.assign(static_cast<size_t>(num_jobs) * blocks * per_block, 0.0);
    int next = 0;
    int part = 0;
    try {
      while (next < num_jobs) {
        // The part: jobs [next, last) with at most kPartValues values to copy (at least one
        // job; resident jobs copy nothing).
        int last = next;
        size_t values = 0;
        while (last < num_jobs) {
          const size_t copied = resident[last] != 0 ? 0 : static_cast<size_t>(jobs[last].points);
          if (last > next && values + copied > kPartValues) break;
          values += copied;
          ++last;
        }
        Slot& slot = slots_[part % 2];
        Finish(slot, block_sums);  // the slot's previous part (two parts ago)
        const int part_jobs = last - next;
        slot.staging.Reserve(values);
        slot.data.Reserve(values);
        slot.host_jobs.Reserve(static_cast<size_t>(part_jobs));
        slot.jobs.Reserve(static_cast<size_t>(part_jobs));
        const size_t part_sums = static_cast<size_t>(part_jobs) * blocks * per_block;
        slot.sums.Reserve(part_sums);
        slot.host_sums.Reserve(part_sums);
        size_t at = 0;
        for (int job = next; job < last; ++job) {
          PassJob device_job = jobs[job];
          if (resident[job] == 0) {
            const size_t count = static_cast<size_t>(jobs[job].points);
            std::memcpy(slot.staging.data() + at, jobs[job].data, count * sizeof(float));
            device_job.data = slot.data.data() + at;
            at += count;
          }  // else: its pointer is a device address already
          slot.host_jobs.data()[job - next] = device_job;
        }
        const cudaStream_t stream = slot.stream->get();
        if (values > 0) {
          Check(cudaMemcpyAsync(slot.data.data(), slot.staging.data(), values * sizeof(float),
                                cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync data");
        }
        Check(cudaMemcpyAsync(slot.jobs.data(), slot.host_jobs.data(),
                              static_cast<size_t>(part_jobs) * sizeof(PassJob),
                              cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync jobs");
        const unsigned grid = static_cast<unsigned>(static_cast<size_t>(part_jobs) * blocks);
        const unsigned threads = static_cast<unsigned>(geometry.threads_per_block);
        const size_t shared = static_cast<size_t>(threads) * sizeof(double);
        device_pass::DeviceModes::Visit(
            mode_, LaunchKernel{kind, grid, threads, shared, stream, scalars_, tables_.data(),
                                angles_.data(), loss_, slot.jobs.data(), geometry.blocks_per_job,
                                slot.sums.data()});
        Check(cudaGetLastError(), "kernel launch");
        Check(cudaMemcpyAsync(slot.host_sums.data(), slot.sums.data(), part_sums * sizeof(double),
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync block sums");
        slot.pending = true;
        slot.out_offset = static_cast<size_t>(next) * blocks * per_block;
        slot.out_count = part_sums;
        next = last;
        ++part;
      }
      for (Slot& slot : slots_) Finish(slot, block_sums);
    } catch (...) {
      // Leave no copy in flight into buffers a later call may free.
      for (Slot& slot : slots_) {
        if (slot.pending) cudaStreamSynchronize(slot.stream->get());
        slot.pending = false;
      }
      throw;
    }
  }

  const int device_;
  std::string description_;
  // The point (SetPoint): its mode's index in DeviceModes (-1: none), its tables and angles in
  // device memory, its scalars and loss.
  int mode_ = -1;
  DeviceArray<double> tables_;
  DeviceArray<unsigned char> angles_;
  TableScalars scalars_;
  LossTerms loss_;
  Slot slots_[2];
};

}  // namespace

std::unique_ptr<PassRunner> MakePassRunner(int device) {
  return std::make_unique<CudaPassRunner>(device);
}

}  // namespace homodyne::cuda
