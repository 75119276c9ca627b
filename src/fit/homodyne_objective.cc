// BatchedObjective and PackedDataObjective (include/homodyne/objective.h): chi2 and normal
// equations as passes over a fixed batch list, chunk by chunk, OpenMP over the batches of a
// chunk, per-batch sums reduced in batch order.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "homodyne/objective.h"
#include "pass_kernel.h"

namespace homodyne {

std::vector<RowBatch> SplitIntoBatches(int n_times, int64_t batch_points) {
  if (batch_points < 1) {
    throw std::invalid_argument("batch_points = " + std::to_string(batch_points) +
                                ": must be >= 1");
  }
  std::vector<RowBatch> batches;
  int row_begin = 0;
  while (row_begin < n_times - 1) {
    RowBatch batch{row_begin, row_begin, UpperTriangleRowOffset(n_times, row_begin), 0};
    while (batch.row_end < n_times - 1 && batch.points < batch_points) {
      batch.points += n_times - 1 - batch.row_end;
      ++batch.row_end;
    }
    batches.push_back(batch);
    row_begin = batch.row_end;
  }
  return batches;
}

void InMemoryPassData::Fetch(std::span<const RowBatch> batches, int first, int last, int num_angles,
                             std::vector<const float*>& pointers) {
  pointers.clear();
  for (int b = first; b < last; ++b) {
    for (int k = 0; k < num_angles; ++k) {
      pointers.push_back(data_[static_cast<size_t>(k)].data() +
                         batches[static_cast<size_t>(b)].offset);
    }
  }
}

BatchedObjective::BatchedObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                   double sigma, std::unique_ptr<PassData> data,
                                   PassOptions options)
    : model_(std::move(model)),
      phi_degrees_(std::move(phi_degrees)),
      sigma_(sigma),
      data_(std::move(data)),
      options_(std::move(options)),
      num_physical_(model_.num_physical()) {
  if (!(sigma_ > 0.0) || !std::isfinite(sigma_)) {
    throw std::invalid_argument("objective: sigma = " + std::to_string(sigma_) +
                                ": must be finite and > 0");
  }
  if (phi_degrees_.empty()) throw std::invalid_argument("objective: no angle");
  if (data_ == nullptr) throw std::invalid_argument("objective: no data");
  if (options_.chunk_batches < 0) {
    throw std::invalid_argument(
        "objective: chunk_batches = " + std::to_string(options_.chunk_batches) + ": must be >= 0");
  }
  const int n = model_.num_times();
  batches_ = SplitIntoBatches(n, options_.batch_points);
  num_points_ = UpperTriangleSize(n) * num_angles();
  num_finite_points_ = num_points_;  // until a pass or the data say otherwise
}

void BatchedObjective::CheckTheta(const Eigen::VectorXd& theta) const {
  if (theta.size() != num_parameters()) {
    throw std::invalid_argument("objective: theta has " + std::to_string(theta.size()) +
                                " values, expected " + std::to_string(num_parameters()));
  }
}

int BatchedObjective::ChunkBatches() const {
  return options_.chunk_batches > 0 ? options_.chunk_batches : 1024;
}

void BatchedObjective::BeginPass(const Eigen::VectorXd& theta, bool full_pass) {
  ++passes_;
  if (resume_pass_ && resume_pass_->full_pass == full_pass &&
      resume_pass_->theta.size() == theta.size() &&
      (resume_pass_->theta.array() == theta.array()).all()) {
    pass_ = std::move(*resume_pass_);
    resume_pass_.reset();
    return;
  }
  const int p_total = num_parameters();
  pass_ = PassState{};
  pass_.theta = theta;
  pass_.full_pass = full_pass;
  if (full_pass) {
    pass_.jtj = Eigen::MatrixXd::Zero(p_total, p_total);
    pass_.jtr = Eigen::VectorXd::Zero(p_total);
  }
}

NormalEquations BatchedObjective::Accumulate(const Eigen::VectorXd& theta) {
  CheckTheta(theta);
  BeginPass(theta, /*full_pass=*/true);
  const int n_angles = num_angles();
  const std::vector<double> contrast(theta.data() + ContrastIndex(0),
                                     theta.data() + ContrastIndex(0) + n_angles);
  const std::vector<double> offset(theta.data() + OffsetIndex(0),
                                   theta.data() + OffsetIndex(0) + n_angles);
  const ModelEvaluation evaluation(
      model_, std::span<const double>(theta.data(), static_cast<size_t>(num_physical_)));
  const PassKernel kernel(evaluation, phi_degrees_, contrast, offset);
  const int g = kernel.gram_size();  // M + 1, M = P_phys + 2
  const int m = g - 1;
  const int num_batches = static_cast<int>(batches_.size());
  const int chunk = std::min(ChunkBatches(), std::max(num_batches, 1));

  // Per batch and angle of a chunk: the Gram matrix of [J | e] and the finite point count.
  std::vector<Eigen::MatrixXd> grams(static_cast<size_t>(chunk) * n_angles, Eigen::MatrixXd(g, g));
  std::vector<int64_t> finite(static_cast<size_t>(chunk) * n_angles);
  std::vector<const float*> pointers;
  std::vector<int> index(static_cast<size_t>(m));
  for (int a = 0; a < num_physical_; ++a) index[static_cast<size_t>(a)] = a;
  const double scale = 2.0 / (sigma_ * sigma_);  // r = e / sigma, every point counts twice

  while (pass_.next_batch < num_batches) {
    const int first = pass_.next_batch;
    const int last = std::min(first + chunk, num_batches);
    data_->Fetch(batches_, first, last, n_angles, pointers);
    for (auto& gram : grams) gram.setZero();
    std::fill(finite.begin(), finite.end(), 0);
#pragma omp parallel
    {
      PassKernel::Workspace workspace(g);
#pragma omp for schedule(dynamic)
      for (int b = first; b < last; ++b) {
        const size_t slot = static_cast<size_t>(b - first) * n_angles;
        const RowBatch& batch = batches_[static_cast<size_t>(b)];
        kernel.AccumulateRows(
            batch.row_begin, batch.row_end,
            std::span<const float* const>(pointers.data() + slot, static_cast<size_t>(n_angles)),
            std::span<Eigen::MatrixXd>(grams.data() + slot, static_cast<size_t>(n_angles)),
            std::span<int64_t>(finite.data() + slot, static_cast<size_t>(n_angles)), workspace);
      }
    }
    // Scatter in batch order, then angle order, into the lower triangle of J^T J. The block
    // index maps monotonically to the global one, so (a >= c) stays in the lower triangle.
    for (int b = first; b < last; ++b) {
      for (int k = 0; k < n_angles; ++k) {
        const size_t slot = static_cast<size_t>(b - first) * n_angles + k;
        const Eigen::MatrixXd& gram = grams[slot];
        index[static_cast<size_t>(m - 2)] = ContrastIndex(k);
        index[static_cast<size_t>(m - 1)] = OffsetIndex(k);
        for (int c = 0; c < m; ++c) {
          const int gc = index[static_cast<size_t>(c)];
          for (int a = c; a < m; ++a) {
            pass_.jtj(index[static_cast<size_t>(a)], gc) += scale * gram(a, c);
          }
          pass_.jtr[gc] -= scale * gram(m, c);  // J_r = -J_model / sigma
        }
        pass_.chi2 += scale * gram(m, m);
        pass_.finite_points += finite[slot];
      }
    }
    pass_.next_batch = last;
    if (options_.on_chunk) {
      options_.on_chunk({passes_, true, last, num_batches, last - first, &pass_});
    }
  }
  NormalEquations result;
  result.jtj = pass_.jtj;
  const int p_total = num_parameters();
  for (int c = 0; c < p_total; ++c) {
    for (int a = c + 1; a < p_total; ++a) result.jtj(c, a) = result.jtj(a, c);
  }
  result.jtr = pass_.jtr;
  result.chi2 = pass_.chi2;
  num_finite_points_ = pass_.finite_points;
  result.num_points = 2 * pass_.finite_points;
  return result;
}

double BatchedObjective::Cost(const Eigen::VectorXd& theta) {
  CheckTheta(theta);
  BeginPass(theta, /*full_pass=*/false);
  const int n_angles = num_angles();
  const std::vector<double> contrast(theta.data() + ContrastIndex(0),
                                     theta.data() + ContrastIndex(0) + n_angles);
  const std::vector<double> offset(theta.data() + OffsetIndex(0),
                                   theta.data() + OffsetIndex(0) + n_angles);
  const ModelEvaluation evaluation(
      model_, std::span<const double>(theta.data(), static_cast<size_t>(num_physical_)));
  const PassKernel kernel(evaluation, phi_degrees_, contrast, offset);
  const int num_batches = static_cast<int>(batches_.size());
  const int chunk = std::min(ChunkBatches(), std::max(num_batches, 1));
  std::vector<double> sums(static_cast<size_t>(chunk));
  std::vector<const float*> pointers;
  const double scale = 2.0 / (sigma_ * sigma_);
  while (pass_.next_batch < num_batches) {
    const int first = pass_.next_batch;
    const int last = std::min(first + chunk, num_batches);
    data_->Fetch(batches_, first, last, n_angles, pointers);
#pragma omp parallel
    {
      PassKernel::Workspace workspace(kernel.gram_size());
#pragma omp for schedule(dynamic)
      for (int b = first; b < last; ++b) {
        const RowBatch& batch = batches_[static_cast<size_t>(b)];
        sums[static_cast<size_t>(b - first)] = kernel.SumSquaredResiduals(
            batch.row_begin, batch.row_end,
            std::span<const float* const>(
                pointers.data() + static_cast<size_t>(b - first) * n_angles,
                static_cast<size_t>(n_angles)),
            workspace);
      }
    }
    for (int b = first; b < last; ++b) pass_.chi2 += scale * sums[static_cast<size_t>(b - first)];
    pass_.next_batch = last;
    if (options_.on_chunk) {
      options_.on_chunk({passes_, false, last, num_batches, last - first, &pass_});
    }
  }
  return pass_.chi2;
}

PackedDataObjective::PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                         double sigma, PackedData data, int64_t batch_points)
    : PackedDataObjective(std::move(model), std::move(phi_degrees), sigma, std::move(data),
                          PassOptions{batch_points, 0, {}}) {}

PackedDataObjective::PackedDataObjective(HomodyneModel model, std::vector<double> phi_degrees,
                                         double sigma, PackedData data, PassOptions options)
    : BatchedObjective(std::move(model), std::move(phi_degrees), sigma,
                       std::make_unique<InMemoryPassData>(std::move(data)), std::move(options)),
      data_view_(static_cast<const InMemoryPassData*>(&pass_data())) {
  const PackedData& values = data_view_->data();
  if (values.size() != static_cast<size_t>(num_angles())) {
    throw std::invalid_argument("objective: " + std::to_string(num_angles()) + " angles for " +
                                std::to_string(values.size()) +
                                " data arrays: need the same number");
  }
  const int n = this->model().num_times();
  const int64_t per_angle = UpperTriangleSize(n);
  int64_t finite_points = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    if (static_cast<int64_t>(values[k].size()) != per_angle) {
      throw std::invalid_argument("objective: angle " + std::to_string(k) + " has " +
                                  std::to_string(values[k].size()) + " points, expected " +
                                  std::to_string(per_angle) + " (N = " + std::to_string(n) + ")");
    }
    for (float value : values[k]) {
      if (std::isfinite(value)) ++finite_points;
    }
  }
  set_num_finite_points(finite_points);
}

PackedDataObjective::PackedData PackedDataObjective::LoadPackedData(BatchSource& source,
                                                                    int64_t rows_block_points) {
  const int n = source.info().num_times();
  PackedData data(static_cast<size_t>(source.info().num_angles()));
  const std::vector<RowBatch> blocks = SplitIntoBatches(n, std::max<int64_t>(rows_block_points, 1));
  for (int k = 0; k < source.info().num_angles(); ++k) {
    std::vector<float>& values = data[static_cast<size_t>(k)];
    values.resize(static_cast<size_t>(UpperTriangleSize(n)));
    for (const RowBatch& block : blocks) {
      source.ReadUpperTriangleRows(
          k, block.row_begin, block.row_end,
          std::span<float>(values.data() + block.offset, static_cast<size_t>(block.points)));
    }
  }
  return data;
}

}  // namespace homodyne
