// The device passes' host side (device_pass_backend.h): the plain inputs at a point (made by the
// point's device mode, src/model/device/device_modes.h), the jobs of a call, and the block sums
// into per-batch sums. Compiled with contraction off (device_point.h).
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "homodyne/model.h"
#include "model/device/device_modes.h"
#include "objective/device_pass_backend.h"

namespace homodyne {
namespace {

// Makes the inputs of the mode it is called with (DeviceModes::Visit).
struct MakeInputsOfMode {
  const PassPoint& point;
  DevicePassInputs* inputs;

  template <class Mode>
  void operator()(Mode) const {
    using Angle = typename Mode::Angle;
    static_assert(std::is_trivially_copyable_v<Angle>, "copied to a device as bytes");
    device_pass::DeviceInputs<Angle> made;
    const device_pass::DevicePoint device_point{point.evaluation,
                                                point.phi_degrees.data(),
                                                point.contrast.data(),
                                                point.offset.data(),
                                                static_cast<int>(point.phi_degrees.size()),
                                                static_cast<int>(point.loss.function)};
    Mode::MakeInputs(device_point, &made);
    HOMODYNE_CHECK(made.angles.size() == point.phi_degrees.size());
    inputs->gram_size = Mode::Shape::kGramSize;
    inputs->scalars = made.scalars;
    inputs->tables = std::move(made.tables);
    inputs->row_sums = std::move(made.row_sums);
    HOMODYNE_CHECK(inputs->row_sums.empty() || device_pass::DataSumsOf<Mode>::value > 0);
    inputs->angle_count = static_cast<int>(made.angles.size());
    inputs->angles.resize(made.angles.size() * sizeof(Angle));
    if (!made.angles.empty()) {
      std::memcpy(inputs->angles.data(), made.angles.data(), inputs->angles.size());
    }
  }
};

// A job's Gram from its data sums, for the mode it is called with (DeviceModes::Visit).
struct GramsFromDataSumsOfMode {
  const DevicePassInputs& inputs;
  std::span<const device_pass::PassJob> jobs;
  std::span<const float* const> host_data;
  std::span<const double> block_sums;
  int blocks_per_job;
  std::span<Eigen::MatrixXd> grams;
  std::span<int64_t> finite_points;

  template <class Mode>
  void operator()(Mode) const {
    constexpr int kStride = device_pass::DataSumsOf<Mode>::value;
    if constexpr (kStride == 0) {
      HOMODYNE_CHECK(false);  // no full pass through per-frame sums in this mode
    } else {
      using Shape = typename Mode::Shape;
      const typename Mode::Tables tables = Mode::TablesAt(inputs.scalars, inputs.tables.data());
      const std::vector<typename Mode::Angle> angles = inputs.AnglesAs<typename Mode::Angle>();
      const std::size_t job_doubles = static_cast<std::size_t>(blocks_per_job) * kStride;
      HOMODYNE_CHECK(grams.size() == jobs.size() && finite_points.size() == jobs.size() &&
                     host_data.size() == jobs.size() &&
                     block_sums.size() == jobs.size() * job_doubles);
      for (std::size_t job = 0; job < jobs.size(); ++job) {
        const double* sums = block_sums.data() + job * job_doubles;
        double data_sums[kStride];
        for (int m = 0; m < kStride; ++m) {
          data_sums[m] = device_pass::BlockOrderSum(sums + m, blocks_per_job, kStride);
        }
        double triangle[Shape::kTriangle];
        const device_pass::PassJob& pass_job = jobs[job];
        Mode::GramFromDataSums(tables, inputs.row_sums.data(),
                               angles[static_cast<std::size_t>(pass_job.angle)], pass_job.row_begin,
                               pass_job.row_end, host_data[job], data_sums, triangle,
                               &finite_points[job]);
        Eigen::MatrixXd& gram = grams[job];
        gram.setZero(Shape::kGramSize, Shape::kGramSize);
        int entry = 0;
        for (int a = 0; a < Shape::kGramSize; ++a) {
          for (int c = 0; c <= a; ++c, ++entry) gram(a, c) = triangle[entry];
        }
      }
    }
  }
};

}  // namespace

void GramsFromDataSums(const DevicePassInputs& inputs, std::span<const device_pass::PassJob> jobs,
                       std::span<const float* const> host_data, std::span<const double> block_sums,
                       int blocks_per_job, std::span<Eigen::MatrixXd> grams,
                       std::span<int64_t> finite_points) {
  HOMODYNE_CHECK(inputs.per_frame());
  const bool visited = device_pass::DeviceModes::Visit(
      inputs.mode, GramsFromDataSumsOfMode{inputs, jobs, host_data, block_sums, blocks_per_job,
                                           grams, finite_points});
  HOMODYNE_CHECK(visited);
}

DevicePassInputs MakeDevicePassInputs(const PassPoint& point) {
  HOMODYNE_CHECK(point.evaluation != nullptr && point.contrast.size() == point.phi_degrees.size() &&
                 point.offset.size() == point.phi_degrees.size());
  const HomodyneModel& model = point.evaluation->model();
  const std::string mode_name(ToString(model.mode()));
  DevicePassInputs inputs;
  inputs.mode = device_pass::DeviceModes::IndexOf(mode_name.c_str());
  if (inputs.mode < 0) {
    throw NotCompiledError("the device passes compute " + device_pass::DeviceModes::NameList() +
                           " only, not " + mode_name);
  }
  inputs.loss.function = static_cast<int>(point.loss.function);
  inputs.loss.residual_scale = point.loss.residual_scale;
  const bool made = device_pass::DeviceModes::Visit(inputs.mode, MakeInputsOfMode{point, &inputs});
  HOMODYNE_CHECK(made && inputs.gram_size == model.num_point_derivatives() + 1);
  return inputs;
}

std::vector<device_pass::PassJob> MakePassJobs(int num_times, std::span<const RowBatch> batches,
                                               std::span<const float* const> data, int num_angles) {
  HOMODYNE_CHECK(data.size() == batches.size() * static_cast<std::size_t>(num_angles));
  std::vector<device_pass::PassJob> jobs;
  jobs.reserve(data.size());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const RowBatch& batch = batches[b];
    // The device backends take no strided batches (PassBackend::SupportsRowStride).
    HOMODYNE_CHECK(batch.row_stride == 1);
    HOMODYNE_CHECK(batch.points ==
                   UpperTriangleRowsSize(num_times, batch.row_begin, batch.row_end));
    for (int k = 0; k < num_angles; ++k) {
      device_pass::PassJob job;
      job.row_begin = batch.row_begin;
      job.row_end = batch.row_end;
      job.angle = k;
      job.points = batch.points;
      job.data = data[b * static_cast<std::size_t>(num_angles) + static_cast<std::size_t>(k)];
      jobs.push_back(job);
    }
  }
  return jobs;
}

void GramsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int gram_size,
                        std::span<Eigen::MatrixXd> grams, std::span<int64_t> finite_points) {
  const int triangle = device_pass::TriangleEntries(gram_size);
  const int stride = triangle + 1;
  const std::size_t job_doubles = static_cast<std::size_t>(blocks_per_job) * stride;
  HOMODYNE_CHECK(grams.size() == finite_points.size() &&
                 block_sums.size() == grams.size() * job_doubles);
  for (std::size_t job = 0; job < grams.size(); ++job) {
    const double* sums = block_sums.data() + job * job_doubles;
    Eigen::MatrixXd& gram = grams[job];
    gram.setZero(gram_size, gram_size);
    int entry = 0;
    for (int a = 0; a < gram_size; ++a) {
      for (int c = 0; c <= a; ++c, ++entry) {
        gram(a, c) = device_pass::BlockOrderSum(sums + entry, blocks_per_job, stride);
      }
    }
    finite_points[job] =
        static_cast<int64_t>(device_pass::BlockOrderSum(sums + triangle, blocks_per_job, stride));
  }
}

void CostsFromBlockSums(std::span<const double> block_sums, int blocks_per_job, int num_angles,
                        std::span<double> squared_residuals) {
  HOMODYNE_CHECK(block_sums.size() ==
                 squared_residuals.size() * static_cast<std::size_t>(num_angles) * blocks_per_job);
  for (std::size_t b = 0; b < squared_residuals.size(); ++b) {
    double sum = 0.0;
    for (int k = 0; k < num_angles; ++k) {
      const std::size_t job =
          b * static_cast<std::size_t>(num_angles) + static_cast<std::size_t>(k);
      sum +=
          device_pass::BlockOrderSum(block_sums.data() + job * blocks_per_job, blocks_per_job, 1);
    }
    squared_residuals[b] = sum;
  }
}

}  // namespace homodyne
