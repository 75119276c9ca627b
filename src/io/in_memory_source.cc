// MakeInMemoryBatchSource (include/homodyne/dataset.h): correlation matrices held in memory.
#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "homodyne/dataset.h"
#include "homodyne/errors.h"
#include "io/dataset_validation.h"

namespace homodyne {
namespace {

class InMemoryBatchSource : public BatchSource {
 public:
  explicit InMemoryBatchSource(InMemoryData data) : data_(std::move(data)) {
    info_.file_path = data_.name;
    info_.layout = FileLayout::kApsU;
    info_.value_type = data_.float32_values.empty() ? "float64" : "float32";
    info_.compression = "none";
    // The fitted grid is the whole array: raw frame 0 is not in it (DatasetInfo's terms).
    info_.frames_in_file = data_.num_times + 1;
    info_.first_frame = 0;
    info_.num_raw_frames = data_.num_times + 1;
    info_.dt_seconds = data_.dt_seconds;
    // One q for every matrix, or each its own (q_per_angle); the data set's q is the first's.
    const double q = data_.q_per_angle.empty() ? data_.q_inv_angstrom : data_.q_per_angle.front();
    info_.q_inv_angstrom = q;
    info_.q_target_inv_angstrom = q;
    for (int k = 0; k < data_.num_angles; ++k) {
      AngleInfo angle;
      angle.phi_degrees = NormalizePhiDegrees(data_.phi_degrees[static_cast<size_t>(k)]);
      angle.q_inv_angstrom =
          data_.q_per_angle.empty() ? q : data_.q_per_angle[static_cast<size_t>(k)];
      angle.dataset_path = data_.name + "[" + std::to_string(k) + "]";
      info_.angles.push_back(std::move(angle));
    }
  }

  const DatasetInfo& info() const override { return info_; }
  DatasetInfo& mutable_info() { return info_; }  // for the checks' warnings

  void ReadUpperTriangleRows(int angle, int row_begin, int row_end,
                             std::span<double> out) override {
    CopyRows(angle, row_begin, row_end, out);
  }
  void ReadUpperTriangleRows(int angle, int row_begin, int row_end, std::span<float> out) override {
    CopyRows(angle, row_begin, row_end, out);
  }

  void ReadCorrectedMatrix(int angle, std::span<double> out) override {
    const int64_t n = data_.num_times;
    CheckAngle(angle);
    if (static_cast<int64_t>(out.size()) != n * n) {
      throw std::invalid_argument("ReadCorrectedMatrix: output of the wrong size");
    }
    const int64_t begin = static_cast<int64_t>(angle) * n * n;
    for (int64_t k = 0; k < n * n; ++k) out[static_cast<size_t>(k)] = Value(begin + k);
  }

 private:
  double Value(int64_t index) const {
    return data_.float32_values.empty()
               ? data_.float64_values[static_cast<size_t>(index)]
               : static_cast<double>(data_.float32_values[static_cast<size_t>(index)]);
  }

  void CheckAngle(int angle) const {
    if (angle < 0 || angle >= data_.num_angles) {
      throw std::invalid_argument("in-memory source: angle " + std::to_string(angle) +
                                  " out of range");
    }
  }

  // Rows [row_begin, row_end), points j > i of each, packed (dataset.h).
  template <typename T>
  void CopyRows(int angle, int row_begin, int row_end, std::span<T> out) const {
    const int64_t n = data_.num_times;
    CheckAngle(angle);
    if (row_begin < 0 || row_begin > row_end || row_end > n ||
        static_cast<int64_t>(out.size()) != UpperTriangleRowsSize(n, row_begin, row_end)) {
      throw std::invalid_argument("in-memory source: rows or output size out of range");
    }
    size_t at = 0;
    for (int64_t i = row_begin; i < row_end; ++i) {
      const int64_t row = (static_cast<int64_t>(angle) * n + i) * n;
      // float32 -> double -> float is exact, so one path serves both outputs.
      for (int64_t j = i + 1; j < n; ++j) out[at++] = static_cast<T>(Value(row + j));
    }
  }

  InMemoryData data_;
  DatasetInfo info_;
};

}  // namespace

std::unique_ptr<BatchSource> MakeInMemoryBatchSource(InMemoryData data) {
  const std::string& name = data.name;
  const bool has32 = !data.float32_values.empty();
  const bool has64 = !data.float64_values.empty();
  if (has32 == has64) {
    throw InputError(name + ": give the correlation values as exactly one of float32 or float64");
  }
  if (data.num_angles < 1 || data.num_times < 2) {
    throw InputError(name + ": needs at least 1 angle and 2 times (got " +
                     std::to_string(data.num_angles) + " angles, " +
                     std::to_string(data.num_times) + " times)");
  }
  const size_t expected = static_cast<size_t>(data.num_angles) *
                          static_cast<size_t>(data.num_times) * static_cast<size_t>(data.num_times);
  const size_t size = has32 ? data.float32_values.size() : data.float64_values.size();
  if (size != expected) {
    throw InputError(name + ": " + std::to_string(size) + " correlation values, expected n_phi x " +
                     "n_t x n_t = " + std::to_string(expected));
  }
  if (data.phi_degrees.size() != static_cast<size_t>(data.num_angles)) {
    throw InputError(name + ": " + std::to_string(data.phi_degrees.size()) + " phi angles for " +
                     std::to_string(data.num_angles) + " matrices");
  }
  if (!data.q_per_angle.empty() &&
      data.q_per_angle.size() != static_cast<size_t>(data.num_angles)) {
    throw InputError(name + ": " + std::to_string(data.q_per_angle.size()) + " q values for " +
                     std::to_string(data.num_angles) + " matrices (give one q, or one per matrix)");
  }
  // phi finite, dt and q finite and > 0, no angle twice: the checks every source passes.
  auto source = std::make_unique<InMemoryBatchSource>(std::move(data));
  io_internal::ValidateDatasetInfo(source->mutable_info());
  return source;
}

}  // namespace homodyne
